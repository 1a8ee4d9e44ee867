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
import re
from typing import Any

import pytest

from fakplan.engines.weights import vllm_rank_weights
from fakplan.units import printed_interval
from tests.support.paths import PUBLIC


def _weights(model: str, model_type: str, **kw: Any) -> int:
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
        # 57 MiB and 2 MiB above the plain sum: blocks the allocator leaves whole
        ("Qwen--Qwen2.5-7B-Instruct", "qwen2", 1, 1, "14.25 GiB", "corpus/vllm-421.log"),
        ("mistralai--Mixtral-8x7B-v0.1", "mixtral", 2, 1, "43.51 GiB", "corpus/vllm-420.log"),
        # granite: the llama layout, tied, vocab 49,159 padded to 49,216
        (
            "ibm-granite--granite-3.3-8b-instruct",
            "granite",
            1,
            1,
            "15.25 GiB",
            "weights/granite-3.3-8b-h100-v0.19.0.log",
        ),
    ],
)
def test_inside_the_printed_rounding(
    model: str, model_type: str, tp: int, pp: int, printed: str, log: str
) -> None:
    assert f"Model loading took {printed}" in (PUBLIC / log).read_text()
    low, _, high = printed_interval(printed)
    assert low <= _weights(model, model_type, tp=tp, pp=pp, cuda_blocks=True) <= high


def test_the_plain_sum_misses_what_the_allocator_keeps() -> None:
    """Qwen2.5-7B at TP 1 by hand. Each layer's qkv (4,608 x 3,584 x 2 B = 31.5 MiB) and
    down (3,584 x 18,944 x 2 B = 129.5 MiB) leave 0.5 MiB of their 2 MiB-rounded segment,
    gate_up (2 x 18,944 x 3,584 x 2 B = 259 MiB) exactly 1 MiB: none is split off (more
    than 1 MiB must remain), so each layer holds 2 MiB more; o_proj (24.5 MiB) leaves
    1.5 MiB and is split. The embedding and lm_head (152,064 x 3,584 x 2 B = 1,039.5 MiB)
    leave 0.5 MiB each. The plain sum falls outside the printed 14.25 GiB; with the
    blocks it is inside."""
    plain = _weights("Qwen--Qwen2.5-7B-Instruct", "qwen2")
    blocks = _weights("Qwen--Qwen2.5-7B-Instruct", "qwen2", cuda_blocks=True)
    assert blocks - plain == 28 * (2 << 20) + 2 * (1 << 19)
    low, _, high = printed_interval("14.25 GiB")
    assert plain < low <= blocks <= high


def test_what_the_config_cannot_give_is_none() -> None:
    config = json.loads(
        (PUBLIC / "configs" / "Qwen--Qwen3-235B-A22B-FP8" / "config.json").read_text()
    )
    static = {**config["quantization_config"], "activation_scheme": "static"}
    # input scales not counted
    assert vllm_rank_weights({**config, "quantization_config": static}, "qwen3_moe") is None
    gemma = json.loads((PUBLIC / "configs" / "google--gemma-3-27b-it" / "config.json").read_text())
    gemma["text_config"]["rope_scaling"] = {"rope_type": "yarn", "factor": 8.0}
    text = {**gemma["text_config"], "vision_config": gemma["vision_config"]}
    assert vllm_rank_weights(text, "gemma3_text") is None  # a rope cache not read


def _gemma3_text(model: str) -> dict[str, Any]:
    """The config as fakplan reads it: the text model, its tower beside it."""
    from fakplan.geometry import load_geometry

    text = load_geometry(PUBLIC / "configs" / model / "config.json").text_config
    assert text is not None and "vision_config" in text
    return text


def test_gemma3_4b_by_hand() -> None:
    """google/gemma-3-4b-it at TP 1 (Gemma3TextConfig's defaults: vocab 262,208, 8 heads,
    4 KV heads, head_dim 256, 131,072 positions; a layer in 6 global), bf16:

    - text: embedding 262,208 x 2,560 (tied) = 671,252,480; per layer q 2,560 x 2,048,
      k and v 2,560 x 1,024, o 2,048 x 2,560, q/k norms 2 x 256, gate/up/down
      3 x 2,560 x 10,240, 4 norms of 2,560 = 94,382,592, x 34; final norm 2,560:
      3,880,263,168 parameters;
    - SigLIP: conv 1,152 x 3 x 14 x 14 + 1,152, 4,096 positions x 1,152, 27 layers of
      2 LayerNorms (2 x 2 x 1,152), q/k/v/out 4 x (1,152^2 + 1,152), fc1 1,152 x 4,304 +
      4,304, fc2 4,304 x 1,152 + 1,152, a post LayerNorm 2 x 1,152: 416,866,032;
      projector 1,152 x 2,560 + 1,152 = 2,950,272;
    - 4,300,079,472 parameters x 2 B = 8,600,158,944 B; rotary caches 131,072 x 256 x 2 B
      (local) + 131,072 x 8 x 256 x 2 B (global, linear x8) = 603,979,776 B; the tower's
      int64 position_ids 4,096 x 8 B = 32,768 B."""
    found = vllm_rank_weights(_gemma3_text("google--gemma-3-4b-it"), "gemma3_text")
    assert found is not None
    assert found.bytes == 8_600_158_944 + 603_979_776 + 32_768


def test_gemma3_4b_text_only_leaves_the_tower_out() -> None:
    """Served text-only (--language-model-only), the SigLIP tower and the projector are
    built on the meta device: the count above less them is the text model's 3,880,263,168
    parameters x 2 B and its two rotary caches, and the derivation says why."""
    found = vllm_rank_weights(
        _gemma3_text("google--gemma-3-4b-it"), "gemma3_text", language_model_only=True
    )
    assert found is not None
    assert found.bytes == 3_880_263_168 * 2 + 603_979_776
    assert "served text-only" in found.derivation and "vision tower" in found.derivation


@pytest.mark.parametrize(
    ("model", "log"),
    [
        ("google--gemma-3-4b-it", "profiler/prof-012.log"),
        ("google--gemma-3-27b-it", "profiler/prof-011.log"),
    ],
)
def test_gemma3_inside_the_printed_rounding(model: str, log: str) -> None:
    printed = re.search(r"Model loading took (\d+\.\d+ GiB)", (PUBLIC / log).read_text())
    assert printed is not None
    found = vllm_rank_weights(_gemma3_text(model), "gemma3_text", cuda_blocks=True)
    assert found is not None
    low, _, high = printed_interval(printed[1])
    assert low <= found.bytes <= high


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


def test_a_tied_last_stage_builds_its_embedding_first() -> None:
    """PP 2 with tied embeddings: the last stage builds embed_tokens (lm_head ties to it),
    so its one vocab matrix is created first; the order keeps every byte of the count."""
    from fakplan.engines import weights

    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    config["tie_word_embeddings"] = True
    layers = [weights._layer_tensors(config, "llama", 1, False) for _ in range(16)]
    matrix = 128_256 * 4096
    order = weights._creation_order(
        layers,
        2,
        weights.LinearStorage(),
        matrix * 2,
        4096 * 2,
        [(0, 1 << 25)],
        leading=True,
        trailing=False,
        last=True,
    )
    assert order[0] == matrix * 2 and matrix * 2 not in order[1:]
    plain = vllm_rank_weights(config, "llama", pp=2, stage=1)
    assert plain is not None and sum(order) == plain.bytes


def _with_scheme(model: str, weights: dict[str, Any], ignore: list[str]) -> dict[str, Any]:
    """A base config with a compressed-tensors quantization_config over every Linear,
    activations quantized per token as they come (the W8A8 presets')."""
    config: dict[str, Any] = json.loads((PUBLIC / "configs" / model / "config.json").read_text())
    acts = {"num_bits": 8, "type": weights.get("type"), "strategy": "token", "dynamic": True}
    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": group},
        "ignore": ignore,
    }
    return config


FP8_CHANNEL = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}


def test_compressed_tensors_fp8_channel_tp2_by_hand() -> None:
    """Llama-3.3-70B, FP8 weights with one float32 scale per output row, at TP 2.

    - linear weights, 1 B each: 80 layers x (8,192 x (8,192 + 2 x 1,024) + 8,192 x 8,192 +
      3 x 8,192 x 28,672) / 2 = 34,225,520,640 B;
    - float32 scales, one per output row on the rank: q/k/v 10,240 / 2 and gate/up
      57,344 / 2 (column-parallel), o and down 8,192 each (row-parallel: every output
      row) = 50,176 x 4 B x 80 = 16,056,320 B;
    - embedding and lm_head in bf16 (ignore: lm_head): 128,256 / 2 rows x 8,192 x 2 B x 2
      = 2,101,346,304 B; norms (2 per layer + final) x 8,192 x 2 B = 2,637,824 B;
    - the rotary cache 131,072 x 128 x 2 B = 33,554,432 B."""
    config = _with_scheme("meta-llama--Llama-3.3-70B-Instruct", FP8_CHANNEL, ["lm_head"])
    found = vllm_rank_weights(config, "llama", tp=2)
    assert found is not None
    expected = 34_225_520_640 + 16_056_320 + 2_101_346_304 + 2_637_824 + 33_554_432
    assert found.bytes == expected
    assert "compressed-tensors fp8, channel scales" in found.derivation


@pytest.mark.parametrize(
    ("weights", "tp", "log"),
    [
        (FP8_CHANNEL, 2, "profiler/prof-008.log"),  # RedHatAI ...-fp8-dynamic
        (FP8_CHANNEL, 4, "profiler/prof-009.log"),
        ({**FP8_CHANNEL, "type": "int"}, 2, "profiler/prof-010.log"),  # ...-quantized.w8a8
    ],
)
def test_compressed_tensors_w8a8_inside_the_printed_rounding(
    weights: dict[str, Any], tp: int, log: str
) -> None:
    text = (PUBLIC / log).read_text()
    assert "quantization=compressed-tensors" in text
    printed = re.search(r"Model loading took (\d+\.\d+ GiB)", text)
    assert printed is not None
    config = _with_scheme("meta-llama--Llama-3.3-70B-Instruct", weights, ["lm_head"])
    found = vllm_rank_weights(config, "llama", tp=tp, cuda_blocks=True)
    assert found is not None
    low, _, high = printed_interval(printed[1])
    assert low <= found.bytes <= high


def test_a_scheme_fakplan_does_not_count_says_why() -> None:
    from fakplan.engines.weights import weights_unknown

    w4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    config = _with_scheme("meta-llama--Llama-3.1-8B-Instruct", w4, ["lm_head"])
    assert vllm_rank_weights(config, "llama") is None
    assert "Marlin" in weights_unknown(config, "llama", None)
    partial = _with_scheme("meta-llama--Llama-3.1-8B-Instruct", FP8_CHANNEL, ["re:.*o_proj"])
    assert vllm_rank_weights(partial, "llama") is None
    assert "some linear layers and not others" in weights_unknown(partial, "llama", None)


def test_phi4_and_gemma2_by_hand() -> None:
    """From the catalog's published configs, bf16, TP 1 (no boot at hand: the count and
    its parts, derived here):

    - microsoft/phi-4 (phi3: vLLM's Phi3ForCausalLM is its LlamaForCausalLM): embedding
      and lm_head 2 x 100,352 x 5,120; 40 layers of q and o 5,120^2, k and v
      5,120 x 1,280, gate/up/down 3 x 5,120 x 17,920, 2 norms; final norm:
      14,659,507,200 parameters; rotary cache 16,384 x 128 x 2 B;
    - google/gemma-2-9b-it: embedding 256,000 x 3,584 (tied); 42 layers of q and o
      3,584 x 4,096, k and v 3,584 x 2,048, gate/up/down 3 x 3,584 x 14,336, 4 norms;
      final norm: 9,241,705,984 parameters; one rotary cache 8,192 x 256 x 2 B."""
    from fakplan.geometry import catalog

    phi = catalog.entries()["microsoft/phi-4"]["config"]
    layer = 2 * 5120 * 5120 + 2 * 5120 * 1280 + 3 * 5120 * 17920 + 2 * 5120
    params = 2 * 100_352 * 5120 + 40 * layer + 5120
    assert params == 14_659_507_200
    found = vllm_rank_weights(phi, "phi3")
    assert found is not None and found.bytes == params * 2 + 16_384 * 128 * 2
    gemma = catalog.entries()["google/gemma-2-9b-it"]["config"]
    layer = 2 * 3584 * 4096 + 2 * 3584 * 2048 + 3 * 3584 * 14_336 + 4 * 3584
    params = 256_000 * 3584 + 42 * layer + 3584
    assert params == 9_241_705_984
    found = vllm_rank_weights(gemma, "gemma2")
    assert found is not None and found.bytes == params * 2 + 8192 * 256 * 2
    longrope = {**phi, "rope_scaling": {"type": "longrope", "long_factor": [1.0]}}
    assert vllm_rank_weights(longrope, "phi3") is None


def test_what_the_w8a8_count_does_not_cover_is_none() -> None:
    """Weight-only 8-bit (vLLM repacks it for Marlin), static activations (input scales),
    asymmetric activations (zero-point terms), a tower beside a text model other than
    Gemma 3's, and Gemma's rotary caches kept in another dtype (SGLang's float32)."""
    dynamic = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
    for acts in (None, {**dynamic, "dynamic": False}, {**dynamic, "symmetric": False}):
        config = _with_scheme("meta-llama--Llama-3.1-8B-Instruct", FP8_CHANNEL, ["lm_head"])
        config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = acts
        assert vllm_rank_weights(config, "llama") is None, acts
    config = _with_scheme("meta-llama--Llama-3.1-8B-Instruct", FP8_CHANNEL, ["lm_head"])
    config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = dynamic
    assert vllm_rank_weights(config, "llama") is not None
    plain = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    tower = {**plain, "vision_config": {"hidden_size": 1024}}
    assert vllm_rank_weights(tower, "llama") is None
    gemma = _gemma3_text("google--gemma-3-4b-it")
    assert vllm_rank_weights(gemma, "gemma3_text", rope_bytes=4) is None


def _catalog(model_id: str) -> dict[str, Any]:
    from fakplan.geometry.catalog import entries

    config: dict[str, Any] = entries()[model_id]["config"]
    return config


def test_deepseek_v2_lite_by_hand() -> None:
    """DeepSeek-V2-Lite (multi-head latent attention, no q LoRA) at TP 1, bf16:

    - embedding and lm_head 2 x 102,400 x 2,048 = 419,430,400; final norm 2,048;
    - per layer: q_proj 2,048 x 16 x 192, kv_a_proj_with_mqa 2,048 x (512 + 64),
      kv_a_layernorm 512, kv_b_proj 512 x 16 x (128 + 128), o_proj 16 x 128 x 2,048,
      two norms of 2,048: 13,767,168, x 27;
    - layer 0 dense (first_k_dense_replace 1): 3 x 2,048 x 10,944 = 67,239,936;
    - 26 MoE layers: router 2,048 x 64, 2 shared experts 3 x 2,048 x 2,816, 64 routed
      experts 3 x 2,048 x 1,408: 571,080,704 each;
    - 15,706,484,224 parameters x 2 B, and the yarn rotary cache 4,096 x 40 positions x 64
      x 2 B = 20,971,520 B."""
    params = 419_430_400 + 2_048 + 27 * 13_767_168 + 67_239_936 + 26 * 571_080_704
    assert params == 15_706_484_224
    assert _weights("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2") == params * 2 + 20_971_520


def test_deepseek_v2_lite_against_vllm_print() -> None:
    """vLLM 0.5.0.post1 printed "Loading model weights took 29.3010 GB" (GiB) for
    DeepSeek-V2-Lite at TP 1 (weights/SOURCES.md); the allocator's count is inside its
    rounding, the plain sum is not."""
    log = (PUBLIC / "weights" / "deepseek-v2-lite-v0.5.0.post1.log").read_text()
    assert "Loading model weights took 29.3010 GB" in log
    low, _, high = printed_interval("29.3010 GiB")
    assert _weights("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2") < low
    assert low <= _weights("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2", cuda_blocks=True) <= high


def test_fp8_blocks_by_hand() -> None:
    """Qwen/Qwen3-30B-A3B-FP8 (fp8, 128 x 128 blocks) at TP 1: float8 linear weights and a
    float32 scale per block (a fused expert's per expert and per width); the vocab
    matrices, router and norms in bf16. Per layer:

    - qkv 5,120 x 2,048 (40 x 16 blocks), o 2,048 x 4,096 (16 x 32),
      w13 128 x 1,536 x 2,048 (128 x 2 x 6 x 16), w2 128 x 2,048 x 768 (128 x 16 x 6):
      622,854,144 B of weights, 38,016 scales;
    - router 2,048 x 128, q/k norms 2 x 128, two norms of 2,048 in bf16;

    x 48, with embedding and lm_head 2 x 151,936 x 2,048, the final norm and the rotary
    cache 40,960 x 128 x 2 B."""
    config = _catalog("Qwen/Qwen3-30B-A3B-FP8")
    bf16 = 2 * 151_936 * 2_048 + 48 * (2_048 * 128 + 2 * 128 + 2 * 2_048) + 2_048
    total = 48 * (622_854_144 + 38_016 * 4) + bf16 * 2 + 40_960 * 128 * 2
    found = vllm_rank_weights(config, "qwen3_moe")
    assert found is not None and found.bytes == total == 31_185_031_168
    assert "128x128 blocks" in found.derivation


def test_deepseek_v3_fp8_tp8_by_hand() -> None:
    """deepseek-ai/DeepSeek-V3 (fp8 128 x 128 blocks, q LoRA 1,536, kv LoRA 512) on one
    of 8 ranks: 16 of 128 heads, vocab 129,280 / 8 = 16,160 rows. Weights float8 (1 B), a
    float32 scale per block, the rest bf16:

    - attention: fused_qkv_a 2,112 x 7,168 (whole on every rank; 17 x 56 blocks),
      q_a_layernorm 1,536, q_b 3,072 x 1,536 (24 x 12), kv_a_layernorm 512,
      kv_b 4,096 x 512 (32 x 4), o 7,168 x 2,048 (56 x 16); and, as kv_b is quantized,
      its bf16 copy 512 x 16 x 256 x 2 B that the MLA layer keeps (W_UK_T, W_UV);
    - 3 dense layers: gate_up 4,608 x 7,168 (36 x 56), down 7,168 x 2,304 (56 x 18);
    - 58 MoE layers: router 7,168 x 256 (bf16), e_score_correction_bias 256 float32,
      a shared expert (gate_up 512 x 7,168, 4 x 56; down 7,168 x 256, 56 x 2),
      256 routed experts (w13 256 x 512 x 7,168, 256 x 2 x 2 x 56; w2 256 x 7,168 x 256,
      256 x 56 x 2);
    - two norms a layer, the final norm, embedding and lm_head, the yarn rotary cache
      4,096 x 40 x 64 x 2 B."""
    attention = 15_138_816 + 4_718_592 + 2_097_152 + 14_680_064
    attention += 4 * (952 + 288 + 128 + 896) + 2 * (1_536 + 512) + 512 * 16 * 256 * 2
    dense = 33_030_144 + 16_515_072 + 4 * (2_016 + 1_008)
    shared = 3_670_016 + 1_835_008 + 4 * (224 + 112)
    routed = 939_524_096 + 469_762_048 + 4 * (57_344 + 28_672)
    moe = 7_168 * 256 * 2 + 256 * 4 + shared + routed
    norms = 2 * 7_168 * 2
    total = 61 * (attention + norms) + 3 * dense + 58 * moe
    total += 2 * 16_160 * 7_168 * 2 + 7_168 * 2 + 163_840 * 64 * 2
    found = vllm_rank_weights(_catalog("deepseek-ai/DeepSeek-V3"), "deepseek_v3", tp=8)
    assert found is not None and found.bytes == total


# the catalog's architectures whose weights fakplan does not count yet (issue 30) on an
# H100 (compute capability 9.0, 132 SMs) served text-only, each for the reason
# weights_refusal gives: nvidia's mixed-precision (FP8 and W4A16 NVFP4) checkpoints, which
# vLLM 0.19.0 does not load (the test below)
NOT_COUNTED = {
    "qwen3_5_moe_text",
    "qwen3_5_text",
}


def test_the_catalog_architectures_counted() -> None:
    """Every catalog model's weights per rank are counted at TP 1 on an H100, with its
    towers and served text-only, or it is one of the architectures listed above, with a
    reason."""
    from fakplan.engines.weights import weights_refusal
    from fakplan.geometry.catalog import catalog_ids, lookup

    for text_only in (True, False):
        missing: dict[str, str] = {}
        for model_id in catalog_ids():
            geometry = lookup(model_id)
            assert geometry is not None and geometry.text_config is not None
            text, family = geometry.text_config, geometry.architecture
            counted = vllm_rank_weights(
                text, family, capability="9.0", sms=132, language_model_only=text_only
            )
            if counted is None:
                missing[family] = weights_refusal(
                    text, family, None, 1, 1, "9.0", language_model_only=text_only, sms=132
                )
        assert set(missing) == NOT_COUNTED, text_only
        assert all(reason for reason in missing.values())


def test_qwen3_next_tp4_by_hand() -> None:
    """Qwen/Qwen3-Next-80B-A3B-Instruct on one of 4 ranks, bf16: 36 Gated DeltaNet layers
    and 12 full-attention ones (every 4th), each with a 512-expert MoE block:

    - Gated DeltaNet: conv1d (2 x 2,048 + 4,096) / 4 x 4, in_proj_qkvz 3,072 x 2,048,
      in_proj_ba 16 x 2,048, dt_bias 8, A_log 8 (float32), the gated norm 128,
      out_proj 1,024 x 2,048: 8,429,712 parameters;
    - full attention with its output gate: qkv (2 x 4 x 256 + 2 x 256) x 2,048 (2 KV heads
      on 4 ranks: one replicated), o 1,024 x 2,048, q/k norms 2 x 256: 7,340,544;
    - MoE: router 2,048 x 512, shared_expert_gate 2,048, the shared expert 3 x 128 x
      2,048, the experts 512 x 3 x 128 x 2,048: 404,490,240; two norms 4,096;
    - embedding and lm_head 2 x 37,984 x 2,048, the final norm; the rotary cache
      262,144 positions x 64 (a quarter of 256) x 2 B; A_log's 36 x 8 extra 2 B."""
    linear_layer = 8_429_712 + 404_490_240 + 4_096
    full_layer = 7_340_544 + 404_490_240 + 4_096
    params = 36 * linear_layer + 12 * full_layer + 2 * 37_984 * 2_048 + 2_048
    assert params == 19_962_868_800
    total = params * 2 + 36 * 8 * 2 + 262_144 * 64 * 2
    config = _catalog("Qwen/Qwen3-Next-80B-A3B-Instruct")
    found = vllm_rank_weights(config, "qwen3_next", tp=4)
    assert found is not None and found.bytes == total


def test_nemotron_h_by_hand() -> None:
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 at TP 1, bf16, by its pattern (23 Mamba-2,
    6 attention, 23 MoE layers), each with one norm of 2,688:

    - Mamba-2: 64 heads x 64 = 4,096 inner, 8 groups x 128 state: conv1d (4,096 + 2,048)
      x 4 + its bias 6,144, in_proj (8,192 + 2,048 + 64) x 2,688, A (float32), D, dt_bias
      64 each, out_proj 4,096 x 2,688, the gated norm 4,096: 38,742,208 parameters;
    - attention (no rotary embedding): q/k/v (32 + 2 x 2) x 128 x 2,688, o 4,096 x 2,688;
    - MoE: router 2,688 x 128, e_score_correction_bias 128 (float32), the shared expert's
      up and down 3,712 x 2,688 each, 128 non-gated experts 2 x 1,856 x 2,688 each;
    - embedding and lm_head 2 x 131,072 x 2,688, the final norm; the float32 parameters
      (A, e_score_correction_bias) 23 x (64 + 128) x 2 B more."""
    mamba = 24_576 + 6_144 + 10_304 * 2_688 + 3 * 64 + 4_096 * 2_688 + 4_096
    assert mamba == 38_742_208
    attention = (32 + 4) * 128 * 2_688 + 4_096 * 2_688
    moe = 2_688 * 128 + 128 + 2 * 3_712 * 2_688 + 128 * 2 * 1_856 * 2_688
    params = 23 * mamba + 6 * attention + 23 * moe + 52 * 2_688 + 2 * 131_072 * 2_688 + 2_688
    total = params * 2 + 23 * (64 + 128) * 2
    config = _catalog("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    found = vllm_rank_weights(config, "nemotron_h")
    assert found is not None and found.bytes == total
    assert "no rotary cache" in found.derivation
    assert "MoE routers in the model dtype" in found.derivation  # the card is not given


@pytest.mark.parametrize(("capability", "fp32"), [("9.0", False), ("10.0", False),
                                                  ("8.9", True), ("12.0", True)])  # fmt: skip
def test_nemotron_h_router_follows_the_card(capability: str, fp32: bool) -> None:
    """GateLinear(force_fp32_compute=True) stores the router in float32 off SM 9.0 and
    the 10.x family (gate_linear.py, v0.19.0): 23 routers of 2,688 x 128, 2 B more each
    element there."""
    config = _catalog("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    plain = vllm_rank_weights(config, "nemotron_h")
    found = vllm_rank_weights(config, "nemotron_h", capability=capability)
    assert plain is not None and found is not None
    assert found.bytes - plain.bytes == (23 * 2_688 * 128 * 2 if fp32 else 0)
    assert "MoE routers in the model dtype" not in found.derivation


def test_mimo_v2_flash_fp8_tp8_by_hand() -> None:
    """XiaomiMiMo/MiMo-V2-Flash (fp8, 128 x 128 blocks) on one of 8 ranks. Full attention
    (64 heads, 4 KV heads) and sliding-window (64 heads, 8 KV heads) layers alike hold 8
    heads and one KV head here: q 8 x 192, k 192, v 128 (v_head_dim) = 1,856 rows x 4,096
    (15 x 32 blocks), o 8 x 128 -> 4,096 (32 x 8 blocks); the 39 sliding-window layers an
    8-head attention sink (bf16). Layer 0 dense: gate_up 4,096 x 4,096 (32 x 32), down
    4,096 x 2,048 (32 x 16). 47 MoE layers: the router 4,096 x 256 and its
    e_score_correction_bias in float32, 256 experts of 256 (w13 256 x 512 x 4,096,
    256 x 2 x 2 x 32 blocks; w2 256 x 4,096 x 256, 256 x 32 x 2). Two norms a layer, the
    final norm, embedding and lm_head 2 x 19,072 x 4,096 in bf16, and two rotary caches
    (the full and the sliding-window layers' rope_theta differ) of 262,144 x 64 x 2 B."""
    attention = 7_602_176 + 15 * 32 * 4 + 4_194_304 + 32 * 8 * 4 + 2 * 4_096 * 2
    moe = 4_096 * 256 * 4 + 256 * 4 + 536_870_912 + 256 * 2 * 2 * 32 * 4
    moe += 268_435_456 + 256 * 32 * 2 * 4
    dense = 16_777_216 + 32 * 32 * 4 + 8_388_608 + 32 * 16 * 4
    total = 48 * attention + 39 * 8 * 2 + 47 * moe + dense
    total += 2 * 19_072 * 4_096 * 2 + 4_096 * 2 + 2 * 262_144 * 64 * 2
    config = json.loads(
        (PUBLIC / "configs" / "XiaomiMiMo--MiMo-V2-Flash" / "config.json").read_text()
    )
    found = vllm_rank_weights(config, "mimo_v2_flash", tp=8)
    assert found is not None and found.bytes == total


def _mimo(**changes: Any) -> int:
    config = json.loads(
        (PUBLIC / "configs" / "XiaomiMiMo--MiMo-V2-Flash" / "config.json").read_text()
    )
    found = vllm_rank_weights({**config, **changes}, "mimo_v2_flash", tp=8)
    assert found is not None
    return found.bytes


def test_mimo_shares_one_rotary_cache_where_the_thetas_agree() -> None:
    """get_rope keys _ROPE_DICT by head size, rotary dim, positions and rope parameters
    (rotary_embedding/__init__.py, v0.19.0): with swa_rope_theta equal to rope_theta (or
    absent, which mimo_v2_flash.py reads as rope_theta) both kinds of layer share the
    first layer's cache, one 262,144 x 64 x 2 B cache fewer."""
    one_cache = 262_144 * 64 * 2
    assert _mimo() - _mimo(swa_rope_theta=5_000_000) == one_cache
    without = {k: v for k, v in json.loads(
        (PUBLIC / "configs" / "XiaomiMiMo--MiMo-V2-Flash" / "config.json").read_text()
    ).items() if k != "swa_rope_theta"}  # fmt: skip
    found = vllm_rank_weights(without, "mimo_v2_flash", tp=8)
    assert found is not None and _mimo() - found.bytes == one_cache


def test_mimo_router_dtype_null_is_the_model_dtype() -> None:
    """getattr(config, "moe_router_dtype", "float32") through str_dtype_to_torch_dtype: a
    null (or unmapped) value gives None, so nn.Linear takes the model's bf16: 2 B less per
    router element and bias over 47 MoE layers of 4,096 x 256 + 256."""
    per_layer = (4_096 * 256 + 256) * 2
    assert _mimo() - _mimo(moe_router_dtype=None) == 47 * per_layer
    assert _mimo(moe_router_dtype="bfloat16") == _mimo(moe_router_dtype=None)
    assert _mimo(moe_router_dtype="float32") == _mimo()


def test_qwen3_5_with_its_vision_tower_tp8_by_hand() -> None:
    """Qwen/Qwen3.5-397B-A17B (bf16) on one of 8 ranks: Qwen3-VL's vision tower, then the
    Qwen3-Next layers (45 Gated DeltaNet, 15 full attention, every one with a 512-expert
    MoE block).

    - tower (width 1,152, 16 heads, 27 blocks, fc 4,304): Conv3d 1,152 x 3 x 2 x 16 x 16
      + bias, positions 2,304 x 1,152, rotary 8,192 x 36, merger (2 x 1,152 norm,
      4,608 x 4,608 / 8 + 576, 576 x 4,096 + 4,096), a block 4 x 1,152 norms + q/k/v
      3 x 1,152^2 / 8 + 432 + proj 144 x 1,152 + 1,152 + fc1 538 x 1,152 + 538 +
      fc2 1,152 x 538 + 1,152 = 1,910,986: 61,336,846 parameters;
    - Gated DeltaNet: conv1d 1,536 x 4, in_proj_qkvz 2,560 x 4,096, in_proj_ba 16 x 4,096,
      dt_bias and A_log 8 each, the gated norm 128, out_proj 1,024 x 4,096: 14,751,888;
    - full attention: qkv (2 x 4 x 256 + 2 x 256) x 4,096, o 1,024 x 4,096, q/k norms:
      14,680,576; MoE: router 4,096 x 512, shared_expert_gate 4,096, the shared expert
      3 x 128 x 4,096, 512 experts 3 x 128 x 4,096: 808,980,480; two norms 8,192;
    - embedding and lm_head 2 x 31,040 x 4,096, the final norm; the rotary cache: an
      MRotaryEmbedding (rope_parameters has mrope_section) caches 4 x 262,144 positions
      (rotary_embedding/mrope.py) x 64 (partial_rotary_factor 0.25 of 256) x 2 B; A_log's
      45 x 8 x 2 B."""
    from fakplan.geometry import load_geometry

    tower = 1_769_472 + 1_152 + 2_654_208 + 294_912 + 2_304 + 2_654_208 + 576
    tower += 2_359_296 + 4_096 + 27 * 1_910_986
    assert tower == 61_336_846
    linear_layer = 14_751_888 + 808_980_480 + 8_192
    full_layer = 14_680_576 + 808_980_480 + 8_192
    params = tower + 45 * linear_layer + 15 * full_layer + 2 * 31_040 * 4_096 + 4_096
    total = params * 2 + 45 * 8 * 2 + 4 * 262_144 * 64 * 2
    geometry = load_geometry(str(PUBLIC / "configs" / "Qwen--Qwen3.5-397B-A17B" / "config.json"))
    assert geometry.text_config is not None
    found = vllm_rank_weights(geometry.text_config, geometry.architecture, tp=8)
    assert found is not None and found.bytes == total


@pytest.mark.parametrize(
    ("model", "family", "change", "tp", "pp"),
    [
        # MiMo's per-layer lists shorter than its layers
        ("XiaomiMiMo--MiMo-V2-Flash", "mimo_v2_flash", {"hybrid_layer_pattern": [0, 1]}, 1, 1),
        ("XiaomiMiMo--MiMo-V2-Flash", "mimo_v2_flash", {"moe_layer_freq": [0, 1]}, 1, 1),
        # heads that do not divide over TP (vLLM asserts they do)
        ("Qwen--Qwen3-Next-80B-A3B-Instruct", "qwen3_next", {}, 3, 1),
        # a family whose stages build their vocab matrices their own way, at PP 2
        ("Qwen--Qwen3-Next-80B-A3B-Instruct", "qwen3_next", {}, 1, 2),
        ("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2", {}, 1, 2),
        # a config missing a field its layers need
        ("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2", {"moe_intermediate_size": None}, 1, 1),
    ],
)
def test_what_vllm_would_not_build_is_refused_not_counted(
    model: str, family: str, change: dict[str, Any], tp: int, pp: int
) -> None:
    from fakplan.engines.weights import weights_refusal

    config = json.loads((PUBLIC / "configs" / model / "config.json").read_text())
    config = {**config, **change}
    assert vllm_rank_weights(config, family, tp=tp, pp=pp) is None
    assert weights_refusal(config, family, None, tp, pp)


def test_gpt_oss_20b_tp2_on_hopper_by_hand() -> None:
    """gpt-oss-20b at TP 2 on compute capability 9.0 (Triton), vLLM 0.19.0's
    quantization/mxfp4.py and the wheel's triton_kernels Hopper layouts, by hand:

    - the vocab matrices: 201,088 (a multiple of 64) / 2 = 100,544 rows x 2,880, twice;
    - per layer, in bf16: 32 sinks; qkv (32 + 2 x 4 heads) x 64 = 2,560 out of 2,880 in,
      its bias; o 2,048 x 2,880 and its bias 2,880 (a row-parallel bias is whole); the
      router 2,880 x 32 + 32; two norms of 2,880;
    - the experts: 2,880 / 2 = 1,440 per rank, rounded up to 64 for Triton: I' = 1,472.
      Loaded: w13 32 x 2,944 x 1,440 B, its scales 32 x 2,944 x 90, w2 32 x 2,880 x 736,
      its scales 32 x 2,880 x 46, biases 32 x (2,944 + 2,880) x 2 B. After the load: w13
      swizzled to 32 x 1,472 x 2,944 (1,440 padded to 64) and w2 to 32 x 768 x 2,880
      replace the originals; new scales of 32 x 3,072 (rows padded to 256) x 90 and x 46
      (even already) join the originals; the biases become float32 (4 B, not 2);
    - the final norm 2,880; the float32 YaRN rotary cache 4,096 x 32 positions x 64 x 4 B.
    """
    attention = 32 + 2_880 * 2_560 + 2_560 + 2_048 * 2_880 + 2_880
    bf16 = attention + 2_880 * 32 + 32 + 2 * 2_880
    experts = (
        32 * 1_472 * 2_944  # w13, swizzled
        + 32 * 2_944 * 90 + 32 * 3_072 * 90  # w13 scales, original and swizzled
        + 32 * 768 * 2_880  # w2, swizzled
        + 32 * 2_880 * 46 + 32 * 3_072 * 46  # w2 scales
        + 32 * (2_944 + 2_880) * 4  # biases in float32
    )  # fmt: skip
    total = 2 * 100_544 * 2_880 * 2 + 24 * (bf16 * 2 + experts) + 2_880 * 2
    total += 4_096 * 32 * 64 * 4
    config = json.loads((PUBLIC / "configs" / "openai--gpt-oss-20b" / "config.json").read_text())
    found = vllm_rank_weights(config, "gpt_oss", tp=2, capability="9.0")
    assert found is not None and found.bytes == total and found.high is None


@pytest.mark.parametrize(
    ("tp", "printed", "log", "backend"),
    [
        # its excerpt keeps no backend line (an H100 takes Triton: the oracle's order)
        (2, "7.01 GiB", "profiler/prof-013.log", ""),
        # a run that failed after its load, never used to fit anything
        (1, "13.64 GiB", "weights/gpt-oss-20b-tp1-h100-v0.19.0.log", "Using 'TRITON' Mxfp4"),
    ],
)
def test_gpt_oss_20b_print_inside_the_interval(
    tp: int, printed: str, log: str, backend: str
) -> None:
    """vLLM 0.19.0 on an H100. The count is an interval, from the live tensors' bytes to
    the allocator's blocks with no freed block reused; each print, with its rounding,
    lies inside it, and the interval is narrow (under 1 %)."""
    text = (PUBLIC / log).read_text()
    assert f"Model loading took {printed}" in text and backend in text
    config = json.loads((PUBLIC / "configs" / "openai--gpt-oss-20b" / "config.json").read_text())
    found = vllm_rank_weights(config, "gpt_oss", tp=tp, capability="9.0", cuda_blocks=True)
    assert found is not None and found.high is not None
    low, _, high = printed_interval(printed)
    assert found.bytes <= low and high <= found.high
    assert found.high - found.bytes < found.bytes // 100


@pytest.mark.parametrize(
    ("change", "tp", "capability", "said"),
    [
        ({}, 1, None, "give the card's compute capability"),
        ({}, 1, "8.0", "Marlin before 9.0"),
        ({}, 1, "10.0", "FlashInfer"),
        ({}, 3, "9.0", "do not split evenly"),
        ({"quantization_config": None}, 1, "9.0", "read for the published mxfp4"),
    ],
)
def test_gpt_oss_refused_where_its_kernel_is_not_read(
    change: dict[str, Any], tp: int, capability: str | None, said: str
) -> None:
    from fakplan.engines.weights import weights_refusal

    config = json.loads((PUBLIC / "configs" / "openai--gpt-oss-20b" / "config.json").read_text())
    config = {**config, **change}
    assert vllm_rank_weights(config, "gpt_oss", tp=tp, capability=capability) is None
    assert said in weights_refusal(config, "gpt_oss", None, tp, 1, capability)


@pytest.mark.parametrize(("stage", "printed"), [(0, "4.26"), (1, "3.28"), (2, "3.28"), (3, "4.26")])
def test_each_stage_of_a_pp4_boot_inside_its_print(stage: int, printed: str) -> None:
    """Llama-3.1-8B at PP 4 (vLLM 0.19.0, H100): every stage prints its own weights. The
    first holds the embedding and 8 layers, the middle two 8 layers each, the last 8
    layers, the final norm and lm_head (get_pp_indices; untied)."""
    lines = (PUBLIC / "weights/llama-3.1-8b-pp4-h100-v0.19.0.log").read_text().splitlines()
    pattern = rf"Worker_PP{stage} .*weights memory: ([0-9.]+)GiB"
    found = [m[1] for line in lines if (m := re.search(pattern, line))]
    assert found == [printed]
    low, _, high = printed_interval(f"{printed} GiB")
    weights = _weights(
        "meta-llama--Llama-3.1-8B-Instruct", "llama", pp=4, stage=stage, cuda_blocks=True
    )
    assert low <= weights <= high


def test_granites_pool_is_unknown_for_the_reason_its_boots_print() -> None:
    """granite's weights are counted, but its three public 0.19.0 boots print 0.46 GiB of
    non-torch memory, outside the range every other dense model's boots give: the pool is
    not predicted, and the reason says so."""
    from fakplan.engines.vllm.floor import Unknown, vllm_floor

    text = (PUBLIC / "weights/granite-3.3-8b-h100-v0.19.0.log").read_text()
    assert "non-torch forward increase memory: 0.46GiB" in text
    config = json.loads(
        (PUBLIC / "configs" / "ibm-granite--granite-3.3-8b-instruct" / "config.json").read_text()
    )
    found = vllm_floor(
        config, "granite", version="0.19.0", tp=1, pp=1, card_total=85_030_000_000,
        utilization=0.95, batched_tokens=8192, max_num_seqs=1024, sms=132,
    )  # fmt: skip
    assert isinstance(found, Unknown) and "0.46 GiB of non-torch memory" in found.reason
    low, _, high = printed_interval("15.25 GiB")  # its "Model loading took"
    assert found.weights is not None and low <= found.weights <= high
    # its peak is not the reason: the printed 0.85 GiB is above the sampler phase of its
    # 49k vocabulary and inside the forward's range, as the reason says
    from fakplan.engines.vllm.floor import activation_peak

    term, top = activation_peak(
        config, "granite", tp=1, batched_tokens=8192, max_num_seqs=1024, sms=132
    )
    low, _, high = printed_interval("0.85 GiB")  # "torch peak memory increase: 0.85GiB"
    assert top is not None and term.bytes < low and high <= top
    assert "inside the activation range" in found.reason


@pytest.mark.parametrize("folder", ["nvidia--Qwen3.6-27B-NVFP4", "nvidia--Qwen3.6-35B-A3B-NVFP4"])
def test_a_mixed_precision_checkpoint_vllm_019_cannot_load_is_said_so(folder: str) -> None:
    """nvidia's Qwen3.6 NVFP4 checkpoints name W4A16_NVFP4 in quantized_layers, which vLLM's
    ModelOptMixedPrecisionConfig has no quantized layer for up to 0.21 (FP8 and NVFP4
    only), and builds from 0.22 (the LM head from 0.23): the answer says which releases
    load them, with the layers counted from the config here, not merely that their weights
    are uncounted."""
    from fakplan.engines.weights import weights_refusal
    from fakplan.geometry import load_geometry

    config = json.loads((PUBLIC / "configs" / folder / "config.json").read_text())
    layers = config["quantization_config"]["quantized_layers"]
    w4a16 = [n for n, spec in layers.items() if spec["quant_algo"] == "W4A16_NVFP4"]
    assert "lm_head" in w4a16
    geometry = load_geometry(PUBLIC / "configs" / folder / "config.json")
    assert geometry.text_config is not None
    reason = weights_refusal(
        geometry.text_config, geometry.architecture, None, 1, 1, "9.0",
        language_model_only=True, sms=132,
    )  # fmt: skip
    assert reason.startswith("a ModelOpt mixed-precision checkpoint")
    assert "FP8 and NVFP4 layers only up to 0.21" in reason and "LM head from 0.23" in reason
    assert f"W4A16_NVFP4 ({len(w4a16)} layers, lm_head among them)" in reason
