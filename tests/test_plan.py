"""The seed-004 shape change, derived by hand from seed 002's contract."""

from __future__ import annotations

from pathlib import Path

from fakplan.plan import compile_plan
from fakplan.shape import load_shape

from .conftest import SHAPES

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
            "ceiling: 29120 MiB        # the measured card ceiling the pair is pinned to (seed 004)\n",
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
    p = compile_plan(load_shape(tmp_path / "s.yaml"))
    g = gate(p, "kv-dtype")
    assert g.status == "fail"
    assert g.fix == "set serving.kv_cache_dtype to one of bf16, fp8"
