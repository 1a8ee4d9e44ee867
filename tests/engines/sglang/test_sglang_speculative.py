"""A speculative draft's KV on SGLang: a pool of its own beside the target's, with the
target's token count (the draft worker takes the target's memory-pool config and shares
its req_to_token indices; v0.5.23 mem_cache/kv_cache_configurator.py, v0.5.2
model_runner.py draft_runner_cache_size). The boot prints the target's "KV Cache is
allocated" line first, the draft's second.

The public boot (tests/data/public/speculative/sglang-eagle3-llama31-8b-docs.log, SGLang's
documentation CI): Llama-3.1-8B-Instruct in fp16 with a one-layer EAGLE3 head, the pool
capped at 20,480 tokens. Each pool holds its tokens plus one page of rows (page 1):
  target  20,481 x 32 layers x 8 KV heads x 128 x 2 B = 1,342,242,816 B: "K size: 1.25 GB"
  draft   20,481 x  1 layer  x 8 KV heads x 128 x 2 B =    41,945,088 B: "K size: 0.04 GB"
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import kv_breakdown, parse_ledger, printed_pool_tokens
from fakplan.errors import RuleError
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from fakplan.units import GIB, printed_interval
from fakplan.verify import ledger_verdicts
from tests.support.paths import PUBLIC, SHAPES

LLAMA = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
DOCS_BOOT = PUBLIC / "speculative" / "sglang-eagle3-llama31-8b-docs.log"
TARGET_CELL = 32 * 8 * (128 + 128) * 2  # B a token, fp16
DRAFT_CELL = 1 * 8 * (128 + 128) * 2


def _head(tmp_path: Path, layers: int = 1) -> Path:
    """An EAGLE3 head's config for Llama-3.1-8B: the target's attention, ``layers`` layers."""
    config = {**json.loads(LLAMA.read_text()), "num_hidden_layers": layers}
    config["architectures"] = ["LlamaForCausalLMEagle3"]
    folder = tmp_path / "eagle3-head"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _drafted_shape(tmp_path: Path, kv: str, *, seqs: int, method: str) -> Path:
    """Llama-3.1-8B in fp16 on SGLang with the one-layer EAGLE3 head beside it."""
    head = _head(tmp_path)
    shape = tmp_path / "drafted.yaml"
    shape.write_text(
        "\n".join(
            [
                "name: drafted",
                "engine: sglang",
                'engine_version: "0.5.2"',
                f"model: {json.dumps(str(LLAMA))}",
                "card: {total: 80 GiB}",
                f"budget: {{weights: 18 GiB, kv: {kv}}}",
                f"serving: {{max_num_seqs: {seqs}, max_model_len: 8192, dtype: float16, "
                "spec_tokens: 32}",
                f"launch: {{speculative: {{method: {method}, model: {head.name}}}}}",
            ]
        )
        + "\n"
    )
    return shape


def _query(tmp_path: Path, method: str = "eagle3") -> KvQuery:
    return KvQuery(
        geometry=load_geometry(str(LLAMA)),
        engine="sglang",
        engine_version="0.5.2",
        model_dtype="float16",
        max_model_len=8192,
        spec_tokens=32,
        spec_method=method,
        draft=load_geometry(str(_head(tmp_path) / "config.json")),
    )


def test_the_draft_pool_is_its_own_cell_beside_the_target(tmp_path: Path) -> None:
    query = _query(tmp_path)
    breakdown = kv_breakdown(query)
    assert any("budget.weights must hold them" in rule for rule in breakdown.rules)
    parts = {c.kind: c for c in breakdown.components}
    assert parts["full"].page_bytes == TARGET_CELL
    assert parts["draft"].page_bytes == DRAFT_CELL
    # the docs boot printed both pools' K halves for 20,480 tokens (+ one page of rows)
    log = DOCS_BOOT.read_text()
    assert "K size: 1.25 GB, V size: 1.25 GB" in log and "K size: 0.04 GB, V size: 0.04 GB" in log
    assert round(20_481 * TARGET_CELL / 2 / GIB, 2) == 1.25
    assert round(20_481 * DRAFT_CELL / 2 / GIB, 2) == 0.04
    # a two-layer head, counted by the same arithmetic, would have printed 0.08: not this one
    two = replace(
        query,
        draft=load_geometry(str(_head(tmp_path / "two", layers=2) / "config.json")),
    )
    drafted = next(c for c in kv_breakdown(two).components if c.kind == "draft")
    assert round(20_481 * drafted.page_bytes / 2 / GIB, 2) == 0.08


def test_the_printed_pool_is_the_targets_alone(tmp_path: Path) -> None:
    """The ledger reads the target's line (the draft's is a second model's); its 2.50 GiB
    (2.49..2.51 GiB, K and V as printed) hold the 20,480 tokens printed at the target's cell;
    counted with the draft's cell, as a budget is, no more than 19,938."""
    ledger = parse_ledger(DOCS_BOOT, "sglang")
    assert ledger.kv_tokens == 20_480
    k, v = ledger.figure("k_bytes"), ledger.figure("v_bytes")
    assert k is not None and v is not None and k.printed == v.printed == "1.25 GB"
    low, _, high = printed_interval("1.25 GiB")  # K and V alike: SGLang's GB are GiB
    found = printed_pool_tokens(_query(tmp_path), 2 * low, 2 * high)
    assert found.extra["tokens_low"] <= 20_480 <= found.extra["tokens_high"]
    assert 2 * high // (TARGET_CELL + DRAFT_CELL) < 20_480  # the draft's cell counted: outside


def test_a_kv_budget_holds_both_pools(tmp_path: Path) -> None:
    """budget.kv backs tokens at the two cells together, and --max-total-tokens caps the
    target (and so the draft) at that count: 8 GiB // (131,072 + 4,096) B = 63,550."""
    shape = _drafted_shape(tmp_path, "8 GiB", seqs=4, method="eagle3")
    result = CliRunner().invoke(main, ["plan", str(shape), "--json"])
    assert result.exit_code in (0, 1), result.output
    plan = json.loads(result.output)
    tokens = 8 * GIB // (TARGET_CELL + DRAFT_CELL)
    assert tokens == 63_550
    assert plan["tokens_backed"] == tokens
    argv = plan["launch"]["roles"][0]["argv"]
    assert argv[argv.index("--max-total-tokens") + 1] == str(tokens)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "eagle3-head"


def test_an_mtp_draft_is_the_checkpoints_nextn_layers() -> None:
    """NEXTN without a draft path: the checkpoint's own MTP layer, one more MLA latent of
    (512 + 64) x 2 B a token (DeepSeek-V3: num_nextn_predict_layers 1)."""
    query = KvQuery(
        geometry=load_geometry(
            str(PUBLIC / "configs" / "deepseek-ai--DeepSeek-V3" / "config.json")
        ),
        engine="sglang",
        engine_version="0.5.2",
        tp=8,
        spec_tokens=2,
        spec_method="nextn",
    )
    parts = {c.kind: c for c in kv_breakdown(query).components}
    assert parts["mla"].page_bytes == 61 * 576 * 2
    assert parts["draft"].page_bytes == 1 * 576 * 2


@pytest.mark.parametrize(
    ("method", "draft", "said"),
    [("lookahead", True, "not read"), ("eagle3", False, "MTP layers")],
)
def test_what_is_not_read_says_why(tmp_path: Path, method: str, draft: bool, said: str) -> None:
    query = _query(tmp_path, method)
    query = query if draft else replace(query, draft=None)
    with pytest.raises(RuleError, match=said):
        kv_breakdown(query)


def test_the_method_is_read_in_either_case(tmp_path: Path) -> None:
    """SGLang spells its algorithms in capitals (--speculative-algorithm EAGLE3): a shape
    may too, and its draft is resolved and counted the same."""
    query = _query(tmp_path)
    assert any(
        c.kind == "draft" for c in kv_breakdown(replace(query, spec_method="EAGLE3")).components
    )
    head = tmp_path / "eagle3-head"  # made by _query
    spec = json.dumps({"method": "EAGLE3", "model": str(head), "num_speculative_tokens": 3})
    result = CliRunner().invoke(
        main, ["kv", str(LLAMA), "--engine", "sglang", "--speculative-config", spec, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert any(c["kind"] == "draft" for c in json.loads(result.output)["components"])


def test_ngram_keeps_no_draft_pool(tmp_path: Path) -> None:
    parts = [
        c.kind for c in kv_breakdown(replace(_query(tmp_path, "ngram"), draft=None)).components
    ]
    assert "draft" not in parts


def test_an_sglang_shape_resolves_its_draft_as_the_target(tmp_path: Path) -> None:
    """The draft's pool is counted, so its model must resolve: offline and not cached, one
    located line (exit 2), not a plan that leaves the draft's pool out."""
    shape = tmp_path / "s.yaml"
    shape.write_text(
        (SHAPES / "qwen3-32b-sglang.yaml")
        .read_text()
        .replace("serving:\n", "serving:\n  spec_tokens: 3\n", 1)
        .replace(
            "launch:\n",
            "launch:\n  speculative: {method: eagle3, model: nobody/not-cached-eagle3}\n",
            1,
        )
    )
    result = CliRunner().invoke(main, ["--offline", "plan", str(shape), "--json"])
    assert result.exit_code == 2, result.output
    assert "launch.speculative.model" in result.output


def test_a_fraction_with_a_draft_is_not_predicted(tmp_path: Path) -> None:
    """SGLang sizing its own pool charges the draft in release-dependent ways (v0.5.23 at
    the target's per-layer cell, v0.5.2 with a 2 GB reserve and raised counts): fakplan
    says so rather than give the draft-less pool; the draft's cell still shows."""
    head = _head(tmp_path)
    spec = json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 3})
    result = CliRunner().invoke(
        main,
        ["kv", str(LLAMA), "--engine", "sglang", "--engine-version", "0.5.2",
         "--speculative-config", spec, "--mem-fraction-static", "0.85",
         "--card-total", "79.19 GiB", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert "speculative draft" in doc["sizing"]["unknown"]
    assert any(c["kind"] == "draft" for c in doc["components"])


def test_verify_closes_the_token_count_of_a_drafted_boot(tmp_path: Path) -> None:
    """The docs boot as a shape: a KV budget of 20,480 tokens at both cells (2,768,240,640
    B) plans --max-total-tokens 20480, and the boot's ledger (the target's line) holds the
    kv-tokens prediction."""
    budget = 20_480 * (TARGET_CELL + DRAFT_CELL)
    shape = _drafted_shape(tmp_path, f"{budget} B", seqs=128, method="EAGLE3")
    plan = compile_plan(load_shape(shape))
    assert plan.tokens_backed == 20_480
    verdicts = ledger_verdicts(plan, parse_ledger(DOCS_BOOT, "sglang"))
    assert verdicts["kv-tokens"].status == "held"


# SGLang 0.5.23 loads the draft before either pool is sized, so both "Load weight end" lines
# come first, then the target's pool and the draft's (model_runner.py:1371-1380,
# mem_cache/memory_pool.py:2073-2100, kv_cache_configurator.py:498-501 at 0.5.23). The lines
# below are those format strings filled with the docs boot's figures (the 0.5.2 boot this
# file's other tests read): no public 0.5.23 drafted log prints both pools.
BOOT_0_5_23 = """\
[2026-08-01 10:00:00] Load weight end. elapsed=5.00 s, type=LlamaForCausalLM, avail mem=63.48 GB, mem usage=15.11 GB.
[2026-08-01 10:00:02] Load weight end. elapsed=1.00 s, type=LlamaForCausalLMEagle3, avail mem=61.71 GB, mem usage=1.77 GB.
[2026-08-01 10:00:03] KV Cache is allocated. dtype: torch.float16, #tokens: 20480, K size: 1.25 GB, V size: 1.25 GB
[2026-08-01 10:00:03] Memory pool end. avail mem=59.21 GB
[2026-08-01 10:00:03] KV Cache is allocated. dtype: torch.float16, #tokens: 20480, K size: 0.04 GB, V size: 0.04 GB
[2026-08-01 10:00:03] Memory pool end. avail mem=59.13 GB
"""


def test_the_targets_pool_when_the_draft_loads_before_it(tmp_path: Path) -> None:
    """The first pool after the draft's load is the target's: 1.25 + 1.25 GB, not the
    draft's 0.04 + 0.04 (the ledger read no pool at all before)."""
    log = tmp_path / "sglang-0.5.23.log"
    log.write_text(BOOT_0_5_23, encoding="utf-8")
    ledger = parse_ledger(log, "sglang")
    assert ledger.k_bytes == ledger.v_bytes == round(1.25 * (1 << 30))
    assert ledger.kv_tokens == 20480
    assert any("second model" in note for note in ledger.notes)
