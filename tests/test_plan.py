"""The seed-004 shape change, derived by hand from seed 002's contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakplan.errors import ShapeError
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from tests.support.paths import SHAPES

MIB = 2**20


def plan_of(name: str):  # type: ignore[no-untyped-def]
    return compile_plan(load_shape(SHAPES / name))


def gate(plan, gate_id: str):  # type: ignore[no-untyped-def]
    return next(g for g in plan.gates if g.id == gate_id)


def test_fp8_before_shape() -> None:
    p = plan_of("frank-archon-fp8.yaml")
    # attention 26 KiB per 4-token page at fp8 = 6,656 B/token; block key 3.25 KiB / 4 = 832
    assert p.rate_bytes_per_token == 6_656 + 832 == 7_488
    # pool 3543 MiB - 3 x 110 MiB state - 448 MiB checkpoints = 2765 MiB usable
    usable = (3543 - 3 * 110 - 448) * MIB
    assert usable == 2_899_312_640
    pages = usable // (4 * 7_488)
    assert pages == 96_798
    assert p.tokens_backed == pages * 4 == 387_192
    # seed 004: the fp8 boot ledger reported 386,904 tokens -> within 0.1 %
    assert abs(p.tokens_backed - 386_904) / 386_904 < 0.001
    # contract: 3 x 200,000 x 7,488 + 3 x 110 MiB + 448 MiB, about 5,063 MiB
    assert p.contract_bytes == 3 * 200_000 * 7_488 + 3 * 110 * MIB + 448 * MIB
    assert round(p.contract_bytes / MIB) == 5_063
    pool = gate(p, "pool-contract")
    assert pool.status == "fail" and pool.ok is False
    assert pool.summary == "3,543 MiB < 5,063 MiB"
    assert p.failed


def test_bf16_after_shape() -> None:
    p = plan_of("frank-archon.yaml")
    # attention doubles (13,312), the index key does not (832): 1.89x, not 2x
    assert p.rate_bytes_per_token == 2 * 6_656 + 832 == 14_144
    usable = (6912 - 2 * 110 - 448) * MIB
    assert p.tokens_backed == usable // (4 * 14_144) * 4 == 462_900
    # doubling the whole fp8 rate would claim 437k: the trap the seed names
    assert usable // (4 * 2 * 7_488) * 4 == 437_184
    assert p.sessions_at_window == round(462_900 / 200_000, 4)
    assert p.whole_sessions_at_window == 2
    assert p.pair_bytes == (22_208 + 6_912) * MIB == 29_120 * MIB
    assert p.ceiling_bytes == 29_120 * MIB
    assert p.unclaimed_bytes == 0
    assert gate(p, "pool-contract").summary == "6,912 MiB ≥ 6,064 MiB"
    assert all(g.status == "pass" for g in p.gates), [g.summary for g in p.gates]
    assert not p.failed


def test_predictions_of_the_after_shape() -> None:
    p = plan_of("frank-archon.yaml")
    by_id = {x.id: x for x in p.predictions}
    kv = by_id["kv-tokens"]
    assert (kv.value, kv.low, kv.high) == (462_900, 460_585, 465_215)  # ± 0.5 %
    assert kv.closed_by == "ledger"
    assert by_id["sessions-at-window"].claim == "backs 2 sequences all at 200,000 tokens at once"
    decode = by_id["decode-vs-fp8"]
    # -8 % .. -3 % of 136 t/s
    assert (decode.low, decode.high) == (125.12, 131.92)
    assert decode.closed_by == "probe decode"


def test_spec_rows_gate() -> None:
    p = plan_of("frank-archon.yaml")
    assert gate(p, "spec-rows").summary == "2 x (1 + 2) = 6 ≤ 25"


def test_unknown_ceiling_is_reported_not_passed(tmp_path: Path) -> None:
    text = (
        (SHAPES / "frank-archon.yaml")
        .read_text()
        .replace(
            "ceiling: 29120 MiB        # the measured card ceiling the pair is pinned to\n",
            "",
        )
    )
    (tmp_path / "s.yaml").write_text(text)
    p = compile_plan(load_shape(tmp_path / "s.yaml"))
    g = gate(p, "pair-ceiling")
    assert g.status == "unknown" and g.ok is None
    assert p.ceiling_bytes is None and p.unclaimed_bytes is None
    assert not p.failed


def test_unclaimed_warning(in_root: Path) -> None:
    p = plan_of("example.yaml")
    g = gate(p, "unclaimed")
    # ceiling 22 GiB - (15 GiB + 6 GiB) = 1 GiB > 512 MiB floor: a warning, not a failure
    assert g.status == "warn" and g.ok is True
    assert p.unclaimed_bytes == 2**30
    assert not p.failed


def test_dtype_not_accepted(tmp_path: Path) -> None:
    text = (
        (SHAPES / "frank-archon.yaml")
        .read_text()
        .replace("kv_cache_dtype: bf16", "kv_cache_dtype: fp16")
    )
    (tmp_path / "s.yaml").write_text(text)
    # the contract says the engine takes bf16 and fp8: fp16 is bad input at its line
    with pytest.raises(ShapeError) as info:
        load_shape(tmp_path / "s.yaml")
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "kv_cache_dtype: fp16" in x)
    assert str(info.value) == (
        f"{tmp_path / 's.yaml'}:{line}: serving.kv_cache_dtype: 'fp16' is not a KV dtype this "
        "engine takes: contract.dtypes lists bf16, fp8"
    )


GIB = 2**30
LLAMA8_WEIGHTS = 16_060_522_496  # Llama-3.1-8B's model.safetensors.index.json total_size


def _shape(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def _custom(card: str, weights: str, kv: str, seqs: int, window: int) -> str:
    """A custom engine at 128 KiB a token, 16-token pages, nothing per sequence or fixed."""
    return (
        "name: s\nengine: custom\nmodel: m\n"
        f"card: {{total: {card}}}\nbudget: {{weights: {weights}, kv: {kv}}}\n"
        f"serving: {{max_num_seqs: {seqs}, max_model_len: {window}, kv_cache_dtype: bf16}}\n"
        "contract: {page_tokens: 16, per_token: [{name: attn, per_token: 128 KiB, dtype: bf16}]}\n"
    )


def test_no_fix_grows_the_pool_past_an_80_gb_card(tmp_path: Path) -> None:
    """The issue's case: the contract is 81,920 MiB (4 x 163,840 tokens x 128 KiB) and an
    "80 GB" card is 80 x 10**9 B = 76,294 MiB: no budget.kv can hold it."""
    text = _custom("80 GB", "10 GiB", "20 GiB", seqs=4, window=163_840)
    p = compile_plan(load_shape(_shape(tmp_path, text)))
    assert p.contract_bytes == 4 * 163_840 * 128 * 1024 == 81_920 * MIB
    fix = gate(p, "pool-contract").fix
    assert fix is not None
    assert "81,920 MiB" in fix and "grow budget.kv" not in fix
    assert fix.startswith("the contract (81,920 MiB) alone exceeds the card's 76,294 MiB")
    # one slot's window is 20 GiB: 3 of them (60 GiB) fit in 76,294 MiB, 4 do not
    assert "lower serving.max_num_seqs to 3" in fix
    assert "smaller serving.kv_cache_dtype" in fix and "parallel.tensor" in fix


def test_a_pool_that_fits_only_beside_smaller_weights_says_so(tmp_path: Path) -> None:
    """24 GiB card, 16 GiB weights budget, contract 2 x 40,960 x 128 KiB = 10 GiB:
    16 + 10 > 24, so the pool grows only if 2 GiB come out of budget.weights."""
    text = _custom("24 GiB", "16 GiB", "4 GiB", seqs=2, window=40_960)
    p = compile_plan(load_shape(_shape(tmp_path, text)))
    assert p.contract_bytes == 2 * 40_960 * 128 * 1024 == 10 * GIB
    assert gate(p, "pool-contract").fix == (
        "grow budget.kv to at least 10,240 MiB and take 2,048 MiB out of budget.weights "
        "(the pair must fit in the card's 24,576 MiB (card.total)), or lower "
        "serving.max_num_seqs (the pool backs 0 at the full window), or lower "
        "serving.max_model_len"
    )


def test_the_usual_grow_hint_stays_when_the_card_holds_it(tmp_path: Path) -> None:
    text = _custom("24 GiB", "10 GiB", "4 GiB", seqs=2, window=40_960)
    p = compile_plan(load_shape(_shape(tmp_path, text)))
    assert gate(p, "pool-contract").fix == (
        "grow budget.kv by at least 6,144 MiB (to 10,240 MiB), or lower serving.max_num_seqs "
        "(the pool backs 0 at the full window), or lower serving.max_model_len"
    )


def _llama(card: str, weights: str, kv: str, seqs: int = 1, window: int = 8192) -> str:
    return (
        "name: s\nengine: vllm\nmodel: meta-llama/Llama-3.1-8B-Instruct\n"
        f"card: {{total: {card}}}\nbudget: {{weights: {weights}, kv: {kv}}}\n"
        f"serving: {{max_num_seqs: {seqs}, max_model_len: {window}}}\n"
    )


def test_the_contract_plus_the_weights_that_cannot_fit_are_named(tmp_path: Path) -> None:
    """Llama-3.1-8B: 131,072 B a token; 3 slots x 32,768 = 12 GiB of contract, and the weights
    need 16,060,522,496 B: 12 GiB + 14.96 GiB > 24 GiB, whatever budget.weights says.
    Beside the weights 24 GiB - 16,060,522,496 B = 9,709,281,280 B hold 2 slots of 4 GiB."""
    text = _llama("24 GiB", "16 GiB", "4 GiB", seqs=3, window=32_768)
    p = compile_plan(load_shape(_shape(tmp_path, text)))
    assert p.contract_bytes == 3 * 32_768 * 131_072 == 12 * GIB
    fix = gate(p, "pool-contract").fix
    assert fix is not None and "grow budget.kv" not in fix
    assert fix.startswith(
        "the contract (12,288 MiB) plus the weights per rank (15,317 MiB) exceed the card's "
        "24,576 MiB (card.total)"
    )
    assert "lower serving.max_num_seqs to 2" in fix


def test_weights_fix_never_grows_past_the_card(tmp_path: Path) -> None:
    # 16,060,522,496 B of weights on an 8 GiB card: no weights budget holds them
    small = compile_plan(load_shape(_shape(tmp_path, _llama("8 GiB", "6 GiB", "1 GiB"))))
    assert gate(small, "weights-fit").fix == (
        "the weights per rank (15,317 MiB) exceed the card's 8,192 MiB (card.total): shard "
        "wider (parallel.tensor or parallel.pipeline), quantize them, or serve a smaller "
        "checkpoint"
    )
    # on 24 GiB beside a 10 GiB pool: 16,060,522,496 + 10 GiB - 24 GiB = 1,028,136,960 B
    # (980.5 MiB) must come out of budget.kv, leaving 10,737,418,240 - 1,028,136,960 =
    # 9,709,281,280 B (9,259.5 MiB), still above the contract
    tight = compile_plan(load_shape(_shape(tmp_path, _llama("24 GiB", "14 GiB", "10 GiB"))))
    assert tight.contract_bytes <= 9_709_281_280
    assert gate(tight, "weights-fit").fix == (
        "grow budget.weights to at least 15,317 MiB and take 981 MiB out of budget.kv "
        "(to 9,259 MiB, still the contract; the pair must fit in the card's 24,576 MiB "
        "(card.total)), or shard wider"
    )


def test_a_tiny_pool_does_not_print_as_zero(tmp_path: Path) -> None:
    """1 MiB pool, 1 slot of 304 tokens at 1 KiB = 304 KiB of contract: not "1 MiB ≥ 0 MiB"."""
    text = (
        "name: s\nengine: custom\nmodel: m\ncard: {total: 1 GiB}\n"
        "budget: {weights: 1 MiB, kv: 1 MiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 304, kv_cache_dtype: bf16}\n"
        "contract: {page_tokens: 16, per_token: [{name: attn, per_token: 1 KiB}]}\n"
    )
    p = compile_plan(load_shape(_shape(tmp_path, text)))
    assert p.contract_bytes == 304 * 1024
    assert gate(p, "pool-contract").summary == "1.0 MiB ≥ 0.3 MiB"
