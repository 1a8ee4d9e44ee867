"""A speculative draft's attention layers in vLLM's KV pool: an EAGLE head or a draft
model registers its layers in the target's KV cache config (v1/spec_decode/eagle.py
load_model, v0.19.0), so where its attention is the target's, each of its layers is one
more layer a block holds; methods without a draft model keep no KV."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import pool_tokens, printed_pool_tokens
from fakplan.errors import RuleError
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import printed_interval
from tests.support.paths import PUBLIC

LLAMA = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
BOOT = PUBLIC / "speculative" / "eagle3-llama31-8b-2layer-v0.10.1.log"


def _draft(tmp_path: Path, layers: int, **changes: object) -> Path:
    """An EAGLE3 head's config for Llama-3.1-8B: the target's attention, ``layers`` layers."""
    config = {**json.loads(LLAMA.read_text()), "num_hidden_layers": layers, **changes}
    config["architectures"] = ["LlamaForCausalLMEagle3"]
    folder = tmp_path / f"draft-{layers}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _query(draft: Path | None, method: str = "eagle3") -> KvQuery:
    return KvQuery(
        geometry=load_geometry(str(LLAMA)),
        engine="vllm",
        engine_version="0.10.1",
        max_model_len=1024,
        spec_tokens=3,
        spec_method=method,
        draft=None if draft is None else load_geometry(str(draft / "config.json")),
    )


def test_an_eagle3_head_reproduces_the_printed_tokens(tmp_path: Path) -> None:
    """The public boot: 41.29 GiB printed, 318,352 tokens. A block of 16 tokens costs
    16 x 8 KV heads x (128 + 128) x 2 B = 65,536 B a layer; with the 2 draft layers
    34 x 65,536 = 2,228,224 B, and 41.29 GiB (44,329,431,204..44,340,168,622 B as
    printed) holds 19,894..19,899 blocks: 318,352 tokens (19,897 blocks) inside. Without
    the draft's layers, 32 a block, 338,240 tokens or more: outside."""
    log = BOOT.read_text()
    assert "Available KV cache memory: 41.29 GiB" in log
    assert "GPU KV cache size: 318,352 tokens" in log
    low, _, high = printed_interval("41.29 GiB")
    found = printed_pool_tokens(_query(_draft(tmp_path, 2)), low, high)
    assert found.extra["tokens_low"] <= 318_352 <= found.extra["tokens_high"]
    assert low // (34 * 65_536) * 16 <= 318_352 <= high // (34 * 65_536) * 16
    without = pool_tokens(replace(_query(None), spec_tokens=0), low)
    assert without.tokens > 318_352


def test_a_draft_model_method_without_its_model_is_refused() -> None:
    with pytest.raises(RuleError, match="name the draft model"):
        pool_tokens(_query(None), 2**30)


def test_a_draft_whose_attention_differs_is_refused(tmp_path: Path) -> None:
    draft = _draft(tmp_path, 1, num_key_value_heads=4)
    with pytest.raises(RuleError, match="KV group of its own"):
        pool_tokens(_query(draft), 2**30)


@pytest.mark.parametrize("method", ["ngram", "medusa", "suffix", "mlp_speculator"])
def test_methods_without_a_draft_model_keep_no_kv(method: str) -> None:
    plain = pool_tokens(replace(_query(None), spec_tokens=0), 2**30)
    assert pool_tokens(_query(None, method), 2**30).num_blocks == plain.num_blocks


def test_an_unread_method_is_refused_with_the_read_ones() -> None:
    with pytest.raises(RuleError, match="read: mtp, eagle, eagle3, draft_model"):
        pool_tokens(_query(None, "lookahead"), 2**30)


def test_kv_takes_vllms_speculative_config(tmp_path: Path) -> None:
    draft = _draft(tmp_path, 2)
    spec = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    args = ["kv", str(LLAMA), "--engine-version", "0.10.1", "--max-model-len", "1024"]
    result = CliRunner().invoke(main, [*args, "--pool", "41.29 GiB", "--json",
                                       "--speculative-config", spec])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["bytes_per_token"] == 34 * 4_096
    low, high = report["tokens_low"], report["tokens_high"]
    assert low <= 318_352 <= high


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("{", "not JSON"),
        ("[1]", "a JSON object"),
        ('{"num_speculative_tokens": 2}', '"method"'),
        ('{"method": "mtp"}', '"num_speculative_tokens"'),
        ('{"method": "mtp", "num_speculative_tokens": 0}', '"num_speculative_tokens"'),
    ],
)
def test_a_bad_speculative_config_is_one_line(config: str, said: str) -> None:
    result = CliRunner().invoke(main, ["kv", str(LLAMA), "--speculative-config", config])
    assert result.exit_code == 2
    assert said in result.output
    assert "Traceback" not in result.output


def test_spec_tokens_and_the_config_must_agree() -> None:
    spec = '{"method": "mtp", "num_speculative_tokens": 2}'
    result = CliRunner().invoke(
        main, ["kv", str(LLAMA), "--spec-tokens", "3", "--speculative-config", spec]
    )
    assert result.exit_code == 2
    assert "differ" in result.output


def test_a_shapes_eagle_head_costs_its_layers(tmp_path: Path) -> None:
    """shapes/example.yaml (Llama-3.1-8B, 131,072 B a token over 32 layers) with an EAGLE3
    head of 2 layers beside it: 34 x 4,096 = 139,264 B a token in the plan."""
    root = Path(__file__).resolve().parents[3]
    folder = _draft(tmp_path, 2)
    shape = tmp_path / "spec.yaml"
    shape.write_text(
        (root / "shapes" / "example.yaml")
        .read_text()
        .replace("  max_num_seqs: 2\n", "  max_num_seqs: 2\n  spec_tokens: 3\n")
        .replace("launch:\n", f"launch:\n  speculative: {{method: eagle3, model: {folder.name}}}\n")
    )
    result = CliRunner().invoke(main, ["plan", str(shape), "--json"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.output)["rate_bytes_per_token"] == 34 * 4_096


def test_the_weights_gate_counts_a_draft_model_beside_the_target(tmp_path: Path) -> None:
    """vLLM loads a draft_model's weights on the same ranks as the target's: the weights
    gate holds budget.weights against both. By hand from the configs: Llama-3.1-8B has
    8,030,261,248 parameters; Llama-3.2-3B (tied embeddings) 128,256 x 3,072 + 3,072 +
    28 x (3,072 x 64 x 128 + 3 x 3,072 x 8,192 + 2 x 3,072); both in bf16."""
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    shape = tmp_path / "drafted.yaml"
    shape.write_text(
        """name: drafted
engine: vllm
engine_version: "0.19.0"
model: meta-llama/Llama-3.1-8B-Instruct
card: {total: 80 GiB}
budget: {weights: 16 GiB, kv: 40 GiB}
serving: {max_num_seqs: 16, max_model_len: 8192, spec_tokens: 3}
launch:
  speculative: {method: draft_model, model: meta-llama/Llama-3.2-3B-Instruct}
""",
        encoding="utf-8",
    )
    draft = 128_256 * 3_072 + 3_072 + 28 * (3_072 * 64 * 128 + 3 * 3_072 * 8_192 + 2 * 3_072)
    plan = compile_plan(load_shape(shape))
    (gate,) = [g for g in plan.gates if g.id == "weights-fit"]
    assert gate.status == "fail"  # 16 GiB held the target alone
    assert gate.numbers["weights_per_rank_bytes"] == (8_030_261_248 + draft) * 2
    assert "the draft model's" in gate.detail


def test_kv_counts_a_draft_models_weights_with_the_targets() -> None:
    """vLLM loads the drafter inside the target's memory profile, so its weights are in
    "Model loading took": Llama-3.1-8B's 16,094,076,928 B (with its rotary cache) and the
    3B draft's 3,212,749,824 parameters x 2 B plus its rotary cache 131,072 x 128 x 2 B."""
    result = CliRunner().invoke(
        main,
        [
            "kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.19.0",
            "--gpu-memory-utilization", "0.9", "--card-total", "79.19 GiB", "--json",
            "--speculative-config",
            '{"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", '
            '"num_speculative_tokens": 3}',
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sizing = json.loads(result.output)["sizing"]
    draft = 3_212_749_824 * 2 + 131_072 * 128 * 2
    assert sizing["weights_bytes"] == 16_094_076_928 + draft
    assert "profiling run" in sizing["unknown"]
