"""The weights one vLLM rank loads, counted from config.json, against "Model loading took".

The printed figures are vLLM 0.19.0's (tests/data/public/profiler and corpus: llm-d-planner's
H100 runs). A hand derivation of one, Llama-3.1-8B at TP 2:

- embedding and lm_head: vocab 128,256 (a multiple of 64) / 2 = 64,128 rows x 4,096, twice;
- 32 layers of q 16 x 128 + k, v 4 x 128 each (x 4,096 in), o 2,048 x 4,096,
  gate/up/down 3 x 4,096 x 7,168, two norms of 4,096 (replicated);
- the final norm 4,096; bf16; a rotary cache of 131,072 positions x 128 x 2 B = 32 MiB.
"""

from __future__ import annotations

import json

import pytest

from fakplan.engines.vllm.weights import vllm_rank_weights
from fakplan.units import printed_interval

from .conftest import PUBLIC


def _weights(model: str, model_type: str, **kw: int) -> int:
    config = json.loads((PUBLIC / "configs" / model / "config.json").read_text())
    found = vllm_rank_weights(config, model_type, **kw)
    assert found is not None
    return found.bytes


def test_llama_8b_tp2_by_hand() -> None:
    layer = 4096 * (16 * 128 + 2 * 4 * 128) + 2048 * 4096 + 3 * 4096 * 7168 + 2 * 4096
    params = 2 * 64_128 * 4096 + 32 * layer + 4096
    assert _weights("meta-llama--Llama-3.1-8B-Instruct", "llama", tp=2) == params * 2 + 32 * 2**20


@pytest.mark.parametrize(
    ("model", "model_type", "tp", "pp", "printed", "log"),
    [
        ("meta-llama--Llama-3.1-8B-Instruct", "llama", 1, 1, "14.99 GiB", "profiler/prof-001.log"),
        ("meta-llama--Llama-3.1-8B-Instruct", "llama", 2, 1, "7.51 GiB", "profiler/prof-002.log"),
        ("meta-llama--Llama-3.1-8B-Instruct", "llama", 4, 1, "3.77 GiB", "profiler/prof-003.log"),
        # PP 2: rank 0 holds the embedding and layers 0-15 (get_pp_indices)
        ("meta-llama--Llama-3.1-8B-Instruct", "llama", 1, 2, "7.51 GiB", "profiler/prof-004.log"),
        ("Qwen--Qwen3-30B-A3B", "qwen3_moe", 1, 1, "56.88 GiB", "profiler/prof-014.log"),
        ("Qwen--Qwen3-8B", "qwen3", 1, 1, "15.27 GiB", "corpus/vllm-419.log"),
        ("Qwen--Qwen2.5-7B-Instruct", "qwen2", 4, 1, "3.55 GiB", "corpus/vllm-422.log"),
    ],
)
def test_inside_the_printed_rounding(
    model: str, model_type: str, tp: int, pp: int, printed: str, log: str
) -> None:
    assert f"Model loading took {printed}" in (PUBLIC / log).read_text()
    low, _, high = printed_interval(printed)
    assert low <= _weights(model, model_type, tp=tp, pp=pp) <= high


@pytest.mark.parametrize(
    ("model", "model_type", "tp", "printed", "log"),
    [
        # 0.6 MiB and 57 MiB more than the count: memory the load keeps that no tensor of
        # the config explains (Qwen2.5-7B at TP 4 matches to the printed digit)
        ("mistralai--Mixtral-8x7B-v0.1", "mixtral", 2, "43.51 GiB", "corpus/vllm-420.log"),
        ("Qwen--Qwen2.5-7B-Instruct", "qwen2", 1, "14.25 GiB", "corpus/vllm-421.log"),
    ],
)
def test_within_half_a_percent(
    model: str, model_type: str, tp: int, printed: str, log: str
) -> None:
    assert f"Model loading took {printed}" in (PUBLIC / log).read_text()
    _, nominal, _ = printed_interval(printed)
    counted = _weights(model, model_type, tp=tp)
    assert counted <= nominal and (nominal - counted) / nominal < 0.005


def test_what_the_config_cannot_give_is_none() -> None:
    config = json.loads(
        (PUBLIC / "configs" / "Qwen--Qwen3-235B-A22B-FP8" / "config.json").read_text()
    )
    assert vllm_rank_weights(config, "qwen3_moe") is None  # quantized
    gemma = json.loads((PUBLIC / "configs" / "google--gemma-3-27b-it" / "config.json").read_text())
    assert vllm_rank_weights(gemma, "gemma3") is None  # a vision tower beside the text model


def test_served_in_float32() -> None:
    # --dtype float32 (corpus vllm-409): every parameter and the rotary cache at 4 B
    printed = "29.98 GiB"
    assert f"Model loading took {printed}" in (PUBLIC / "corpus" / "vllm-409.log").read_text()
    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    found = vllm_rank_weights(config, "llama", served="fp32")
    assert found is not None
    low, _, high = printed_interval(printed)
    assert low <= found.bytes <= high
