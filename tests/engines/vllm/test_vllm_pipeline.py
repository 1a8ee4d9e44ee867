"""vLLM's pool at PP > 1 (issue 31 item 3): the engine keeps the smallest pool over its
workers, and the last stage, which holds the LM head and runs the sampler, is the one that
binds where every earlier stage provably leaves more.

The fit set is the PP 2 boot of llm-d-planner's 0.19.0 runs (prof-004); the PP 4 boot of the
same source (prof-028) checks what it fits: every stage's non-torch memory and what a
stage's forward printed beyond fakplan's estimate."""

from __future__ import annotations

import json
from typing import Any

from fakplan.engines.vllm.floor import (
    FORWARD_EXCESS_MEASURED,
    NON_TORCH_PP_MEASURED,
    Unknown,
    VllmFloor,
    vllm_floor,
)
from fakplan.units import GIB, printed_interval
from tests.support.floor_corpus import pp_fit, pp_fit_set, row, stage_prints
from tests.support.paths import PUBLIC

LLAMA = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"


def _floor(
    pp: int, config: dict[str, Any] | None = None, model_type: str = "llama", **kw: Any
) -> VllmFloor | Unknown:
    """prof-004's launch (0.19.0, H100, 0.95, 8,192 tokens, 1,024 slots) at ``pp`` stages,
    for Llama-3.1-8B unless another config is given."""
    args: dict[str, Any] = {
        "version": "0.19.0", "tp": 1, "pp": pp, "card_total": round(79.19 * GIB),
        "utilization": 0.95, "batched_tokens": 8192, "max_num_seqs": 1024, "sms": 132, **kw,
    }  # fmt: skip
    return vllm_floor(config or json.loads(LLAMA.read_text()), model_type, **args)


def test_the_pp_terms_are_their_fit_sets() -> None:
    """Refitted from the fit set's own lines: prof-004's two stages printed 0.07 GiB of
    non-torch memory each, and its first stage 1.1 GiB of peak against fakplan's forward
    estimate for Llama-3.1-8B at 8,192 tokens (two hidden states 4 x 8,192 x 4,096 + the MLP
    8,192 x 3 x 14,336 x 2 B + 32 MiB of cuBLAS = 872,415,232 B)."""
    fitted = pp_fit_set()
    assert [r.case["id"] for r in fitted] == ["prof-004"]
    span, excess = pp_fit(fitted)
    assert span == NON_TORCH_PP_MEASURED["tp1"]
    assert excess == FORWARD_EXCESS_MEASURED
    assert excess == round(1.105 * GIB) - (4 * 8192 * 4096 + 8192 * 3 * 14_336 * 2 + (32 << 20))


def test_the_last_stage_adds_the_activations_it_receives_by_hand() -> None:
    """The last stage's peak is the sampler phase (as at PP 1) + the hidden states and
    residual it keeps for what it receives, 2 x 8,192 x 4,096 x 2 B; its weights are its
    share of the layers with the final norm and the LM head."""
    single, staged = _floor(1), _floor(2)
    assert isinstance(single, VllmFloor) and isinstance(staged, VllmFloor)
    received = 2 * 8192 * 4096 * 2
    assert staged.activation.bytes == single.activation.bytes + received
    assert staged.activation_span[1] == single.activation_span[1] + received
    assert "received activation tensors" in staged.activation.derivation
    # 16 of 32 layers (each q and o 2 x 4,096^2 + k and v 2 x 1,024 x 4,096 + 3 x 4,096 x
    # 14,336 + 2 norms of 4,096 parameters), the LM head 128,256 x 4,096 and the final norm
    # 4,096, in bf16, + the rotary cache 131,072 x 128 x 2 B; every tensor a whole number of
    # 512 B with > 1 MiB spare or none, so the allocator holds exactly the sum
    layer = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 4096 * 14_336 + 2 * 4096
    expected = (16 * layer + 128_256 * 4096 + 4096) * 2 + 131_072 * 128 * 2
    assert staged.weights.bytes == expected
    assert staged.non_torch == NON_TORCH_PP_MEASURED["tp1"]
    assert "the last of 2 stages binds" in staged.stages


def test_the_pp_boots_fall_inside() -> None:
    """prof-004 (fit) and prof-028 (check, PP 4): the printed pool of the binding stage is in
    the range fakplan gives, and the earlier stages printed peaks inside the forward range
    fakplan allows them (its estimate, + the received tensors after the first stage, up to
    the measured excess). prof-028's first stage printed the same 1.1 GiB the margin was
    fitted on, so it holds by construction; its middle stages (1.05 GiB with what they
    receive) are the independent check."""
    for case in ("prof-004", "prof-028"):
        found = row(case)
        assert isinstance(found.found, VllmFloor), (case, found.found)
        pool = found.printed["pool"]
        assert pool is not None and found.found.pool[0] <= pool <= found.found.pool[1], case
    check = row("prof-028")
    peaks = stage_prints(check, r"torch peak memory increase: ([\d.]+)GiB")
    estimate = 4 * 8192 * 4096 + 8192 * 3 * 14_336 * 2 + (32 << 20)
    received = 2 * 8192 * 4096 * 2
    for stage in (0, 1, 2):
        low, _, high = printed_interval(f"{peaks[stage]} GiB")
        floor = estimate + (received if stage else 0)
        assert low <= floor + FORWARD_EXCESS_MEASURED and floor <= high, stage
    # the binding stage: PP3 printed 2.01 GiB, the sampler phase + what it receives
    low, _, high = printed_interval(f"{peaks[3]} GiB")
    a_low, a_high = check.found.activation_span  # type: ignore[union-attr]
    assert a_low <= high and low <= a_high


def test_an_earlier_stage_that_may_bind_is_unknown() -> None:
    """Few slots leave the last stage's sampler phase small: where an earlier stage's forward
    could leave less, fakplan says which stage and why instead of a pool."""
    found = _floor(2, max_num_seqs=1)
    assert isinstance(found, Unknown)
    assert "stage 0's pool may be the smallest" in found.reason
    assert found.weights is not None  # the last stage's, counted before it stopped


def test_fakplan_kv_sizes_a_pp_pool(runner: Any) -> None:
    """prof-028's launch (PP 4) from the CLI: the printed 2,257,264 tokens are in range."""
    from fakplan.cli import main

    args = [
        "kv", str(LLAMA), "--engine-version", "0.19.0", "--pp", "4",
        "--gpu-memory-utilization", "0.95", "--card-total", "79.19 GiB",
        "--max-model-len", "8192", "--json",
    ]  # fmt: skip
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["tokens_low"] <= 2_257_264 <= out["tokens_high"]
    assert out["floor"]["stages"].startswith("the last of 4 stages binds")


def test_layers_that_do_not_split_evenly_are_unknown() -> None:
    """The engine keeps the smallest block count over its workers, and a stage's block is
    its own layers' page: at PP 3, Llama-3.1-8B's 32 layers split 11/11/10, an earlier
    stage has the larger block, and a pool compared in bytes would name the wrong stage."""
    found = _floor(3)
    assert isinstance(found, Unknown)
    assert "32 layers do not split evenly over 3 stages" in found.reason
    assert isinstance(_floor(64), Unknown)  # more stages than layers


def test_a_multimodal_model_served_text_only_counts_every_stage() -> None:
    """--language-model-only leaves the tower out of every stage, not only the last: the
    earlier stages are counted as the last is, and the pool is the text model's."""
    config = json.loads(LLAMA.read_text())
    config["vision_config"] = {"model_type": "pixtral", "hidden_size": 1024}
    text_only = _floor(2, config, language_model_only=True)
    plain = _floor(2)
    assert isinstance(text_only, VllmFloor) and isinstance(plain, VllmFloor)
    assert text_only.pool == plain.pool


def test_a_family_whose_stages_are_not_counted_says_so() -> None:
    """Gemma 2 at PP 2: its stage weights are not counted, and the reason names PP."""
    config = json.loads((PUBLIC / "configs" / "google--gemma-2-9b-it" / "config.json").read_text())
    found = _floor(2, config, "gemma2")
    assert isinstance(found, Unknown) and "gemma2 at PP 2" in found.reason


def test_a_pipeline_shape_gets_no_predicted_ceiling(tmp_path: Any) -> None:
    """The public PP boots print 1.43-1.48 GiB in use at init (prof-004, prof-028), not the
    0.51-0.615 GiB the PP 1 ceiling charges: a stated pair at PP 2 gets no predicted ceiling
    rather than one 0.87 GiB too high."""
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    for log in ("prof-004.log", "prof-028.log"):
        text = (PUBLIC / "profiler" / log).read_text()
        assert "cuda_memory=1.43GiB" in text or "cuda_memory=1.48GiB" in text
    shape = tmp_path / "pp.yaml"
    shape.write_text(
        f"""name: pp
engine: vllm
engine_version: "0.19.0"
model: {json.dumps(str(LLAMA))}
card: {{total: "79.19 GiB", sms: 132, count: 2}}
parallel: {{pipeline: 2}}
budget: {{weights: 10 GiB, kv: 50 GiB}}
serving:
  max_num_seqs: 8
  max_model_len: 8192
""",
        encoding="utf-8",
    )
    plan = compile_plan(load_shape(shape))
    assert plan.ceiling_bytes is None
    assert "at PP 1 only" in plan.derivations["ceiling_bytes"]
