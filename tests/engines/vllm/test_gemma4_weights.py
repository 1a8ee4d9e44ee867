"""Gemma 4's weights on one vLLM rank (models/gemma4.py, v0.19.0), and serving text-only.

The geometry is nvidia/Gemma-4-31B-IT-NVFP4's ``text_config``, the base google/gemma-4-31B-it
model's layers as nvidia republished them (tests/data/public/configs/SOURCES.md §14). The
test reads it in bf16, as the base checkpoint is served, by dropping the NVFP4
``quantization_config``. No public boot prints Gemma 4's "Model loading took", so the counts
are checked against derivations written out here from the model's code.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines.weights import vllm_rank_weights, weights_refusal
from fakplan.units import printed_interval
from tests.support.paths import PUBLIC

NVFP4 = PUBLIC / "configs" / "nvidia--Gemma-4-31B-IT-NVFP4" / "config.json"


# a small Gemma 4 text model: the fields each small test below states on top of
SMALL: dict[str, Any] = {
    "model_type": "gemma4_text",
    "dtype": "bfloat16",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "head_dim": 16,
    "global_head_dim": 32,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
    "hidden_size_per_layer_input": 0,
}


def _bf16_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(NVFP4.read_text())
    del config["quantization_config"]
    return config


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """As fakplan reads a multimodal config: the text model, its towers beside it."""
    return {
        **config["text_config"],
        "vision_config": config["vision_config"],
        "dtype": config["dtype"],
    }


def _layer(tp: int, *, full: bool) -> int:
    """One Gemma-4-31B layer's elements on a rank: 32 heads; a sliding layer has 16 KV heads
    of 256, a full one 4 KV heads (num_global_key_value_heads, K = V) of 512, whose V
    columns qkv_proj still holds; q/k norms of the head width (v's has no weight); MLP
    gate/up/down 3 x 5,376 x 21,504 split over TP; 4 norms of 5,376; a one-element
    layer_scalar."""
    head, kv = (512, 4) if full else (256, 16)
    q, k = 32 // tp * head, max(1, kv // tp) * head
    attention = 5376 * (q + 2 * k) + q * 5376 + 2 * head
    mlp = 3 * 5376 * (21504 // tp)
    return attention + mlp + 4 * 5376 + 1


def _by_hand(tp: int) -> int:
    """The text model: the tied embedding (262,144 rows, a multiple of 64, over TP); 50
    sliding and 10 full layers (full at 5, 11, ..., 59); two rotary caches of 262,144
    positions, 256 wide (sliding, default rope) and 512 wide (full: Gemma4RotaryEmbedding
    rotates every dimension); the final norm and the one-element normalizer; x 2 B."""
    elements = (
        262_144 // tp * 5376
        + 50 * _layer(tp, full=False)
        + 10 * _layer(tp, full=True)
        + 262_144 * 256
        + 262_144 * 512
        + 5376
        + 1
    )
    return elements * 2


def test_31b_text_model_by_hand() -> None:
    text = _text(_bf16_config())
    for tp in (1, 2, 4):
        found = vllm_rank_weights(text, "gemma4_text", tp=tp, language_model_only=True)
        assert found is not None
        assert found.bytes == _by_hand(tp), tp
    # the count is the model's: 30.8 B parameters beside the 0.2 B rotary cache elements
    assert _by_hand(1) == 62_017_544_826
    # TP 8, written out: a full layer's 4 K=V heads do not split over 8 ranks, so each
    # rank keeps one (QKVParallelLinear replicates): q 4 x 512, k = v 1 x 512
    sliding = 5376 * (1024 + 2 * 512) + 1024 * 5376 + 2 * 256 + 3 * 5376 * 2688 + 4 * 5376 + 1
    full = 5376 * (2048 + 2 * 512) + 2048 * 5376 + 2 * 512 + 3 * 5376 * 2688 + 4 * 5376 + 1
    elements = 32_768 * 5376 + 50 * sliding + 10 * full + 262_144 * (256 + 512) + 5376 + 1
    found = vllm_rank_weights(text, "gemma4_text", tp=8, language_model_only=True)
    assert found is not None and found.bytes == elements * 2


def _31b_vision_tower() -> int:
    """The 31B's vision tower and its embedder in bytes, by hand from its vision_config
    (transformers 5.5.0's Gemma4VisionModel, vLLM's Gemma4MultimodalEmbedder): 27
    layers of 1,152, 16 heads (and KV heads) of 72, MLP 4,304, standardized, no clipped
    linears; the text model is 5,376 wide."""
    layer = (
        4 * 1152 * (16 * 72)  # q, k, v, o
        + 2 * 72  # q and k norms (the v norm has no weight)
        + 3 * 1152 * 4304  # gate, up, down
        + 4 * 1152  # four norms
    )
    patches = 3 * 16 * 16 * 1152 + 2 * 10240 * 1152  # input_proj, position table
    bf16 = 27 * layer + patches + 2 * 1152 + 1152 * 5376  # std bias/scale, embed_vision
    rotary = 2 * (72 // 2 // 2) * 4  # inv_freq and its original copy, float32
    return bf16 * 2 + rotary


def test_the_towers_are_counted_unless_served_text_only() -> None:
    """Built first and whole on every rank: the tower does not split over TP."""
    text = _text(_bf16_config())
    assert _31b_vision_tower() == 1_151_487_216
    for tp in (1, 2):
        found = vllm_rank_weights(text, "gemma4_text", tp=tp)
        assert found is not None
        assert found.bytes == _by_hand(tp) + _31b_vision_tower(), tp
        assert "vision tower" in found.derivation and "transformers 5.5.0" in found.derivation
    text_only = vllm_rank_weights(text, "gemma4_text", language_model_only=True)
    assert text_only is not None and text_only.bytes == _by_hand(1)
    assert "vision tower" not in text_only.derivation.split(";")[0]


def test_the_checkpoint_tensors_are_the_hubs_parameter_count() -> None:
    """The Hub counts google/gemma-4-31B-it's safetensors at 31,273,088,876 BF16 parameters
    (https://huggingface.co/api/models/google/gemma-4-31B-it, ``safetensors.parameters``;
    its two shards hold 62,546,338,248 B). The same base model, as nvidia's config states
    it, counted the way vLLM holds it with its vision tower, less what vLLM holds beyond
    the checkpoint, gives that count: the two rotary caches (262,144 positions x 256 and
    x 512), the normalizer, the V columns a full layer's K=V attention loads K into (10
    layers x 4 KV heads x 512 x 5,376; transformers builds no v_proj there), and the
    vision tower's float32 inverse frequencies (144 B, not saved)."""
    found = vllm_rank_weights(_text(_bf16_config()), "gemma4_text")
    assert found is not None
    held = (found.bytes - 144) // 2
    extra = 262_144 * (256 + 512) + 1 + 10 * 4 * 512 * 5376
    assert held - extra == 31_273_088_876


def test_an_audio_tower_by_hand() -> None:
    """A small Gemma 4 with both towers, read at the configs' defaults where they say
    nothing (Gemma4AudioConfig: conformer layers, clipped linears, subsampling channels
    128 and 32, output 1536; Gemma4VisionConfig: 16 layers of 768, 12 heads of 64).
    Audio by hand, per layer: two feed-forward blocks (1,024 -> 4,096 -> 1,024, two
    norms), q/k/v and post (1,024 x 1,024), relative_k_proj, per_dim_scale (128), the
    soft cap, the light convolution (linear_start to 2,048, linear_end, a 5-tap depthwise
    kernel, two norms), three norms; each of the 10 clipped linears holds 4 scalars."""
    text = {
        **SMALL,
        "num_hidden_layers": 1,
        "intermediate_size": 128,
        "layer_types": ["full_attention"],
        "vision_config": {"dtype": "bfloat16"},
        "audio_config": {"hidden_size": 1024, "num_hidden_layers": 2},
    }
    audio_layer = (
        2 * (2 * 1024 * 4096 + 2 * 1024)
        + 4 * 1024 * 1024
        + 1024 * 1024
        + 128
        + 1
        + 1024 * 2048
        + 1024 * 1024
        + 1024 * 5
        + 2 * 1024
        + 3 * 1024
        + 10 * 4
    )
    audio = (
        128 * 9  # layer0: 1 -> 128 channels, 3 x 3
        + 128  # its LayerNorm
        + 32 * 128 * 9  # layer1: 128 -> 32
        + 32
        + (128 // 4) * 32 * 1024  # input_proj_linear
        + 1024 // 2  # the relative position timescales
        + 2 * audio_layer
        + 1024 * 1536
        + 1536  # output_proj and its bias
        + 1536 * 64  # embed_audio to the text model's 64
    )
    vision_layer = 4 * 768 * 768 + 2 * 64 + 3 * 768 * 3072 + 4 * 768
    vision = 3 * 256 * 768 + 2 * 10240 * 768 + 16 * vision_layer + 768 * 64
    with_towers = vllm_rank_weights(text, "gemma4_text")
    text_only = vllm_rank_weights(text, "gemma4_text", language_model_only=True)
    assert with_towers is not None and text_only is not None
    assert with_towers.bytes - text_only.bytes == 2 * (vision + audio) + 2 * (64 // 4) * 4
    assert "audio tower" in with_towers.derivation


def test_an_unreadable_tower_config_is_a_reason() -> None:
    text = {**_text(_bf16_config()), "vision_config": {"hidden_size": "wide"}}
    assert vllm_rank_weights(text, "gemma4_text") is None
    reason = weights_refusal(text, "gemma4_text", None, 1, 1)
    assert "vision_config's hidden_size" in reason
    assert vllm_rank_weights(text, "gemma4_text", language_model_only=True) is not None


def _nvfp4_text() -> dict[str, Any]:
    config = json.loads(NVFP4.read_text())
    return {**_text(config), "quantization_config": config["quantization_config"]}


def test_nvfp4_needs_the_card_and_counts_by_its_kernel() -> None:
    """nvidia/Gemma-4-31B-IT-NVFP4 at TP 1, text-only. Its ``ignore`` leaves every layer's
    self_attn, lm_head and the vision tower unquantized, so the 60 MLPs are NVFP4 and
    the rest is bf16 (ModelOptQuantConfigBase.is_layer_excluded). By hand:

    - bf16: the embedding, the attention of 50 sliding and 10 full layers (with their q/k
      norms), 4 norms and a layer scalar a layer, two rotary caches, the final norm and
      the normalizer: 10,199,781,693 elements;
    - gate_up (N 43,008 = 2 x 21,504 outputs, K 5,376 inputs): the weight N x K/2 =
      115,605,504 B, the block scales N x K/16 = 14,450,688 B, four float32 scalars kept
      (16 B); the two per-width scales (2 x 2 x 4 B) are freed;
    - down (N 5,376, K 21,504): 57,802,752 + 7,225,344 + 16 B;
    - CUTLASS (compute capability 10.0 on): no padding (N and K multiples of 32; the
      swizzled scales' rows multiples of 128, columns of 4), so the swizzled scales
      replace the loaded ones byte for byte;
    - Marlin (7.5 to 9.x): the weight and scales rewritten at the same size, and an int32
      workspace word per SM for each of the 120 layers (132 SMs on an H100)."""
    text = _nvfp4_text()
    assert vllm_rank_weights(text, "gemma4_text", language_model_only=True) is None
    reason = weights_refusal(text, "gemma4_text", None, 1, 1, language_model_only=True)
    assert "compute capability" in reason
    bf16 = (
        262_144 * 5376
        + 50 * (_layer(1, full=False) - 3 * 5376 * 21504)
        + 10 * (_layer(1, full=True) - 3 * 5376 * 21504)
        + 262_144 * (256 + 512)
        + 5376
        + 1
    )
    assert bf16 == 10_199_781_693
    mlp = (115_605_504 + 14_450_688 + 16) + (57_802_752 + 7_225_344 + 16)
    cutlass = vllm_rank_weights(text, "gemma4_text", language_model_only=True, capability="10.0")
    assert cutlass is not None
    assert cutlass.bytes == 2 * bf16 + 60 * mlp
    marlin = vllm_rank_weights(
        text, "gemma4_text", language_model_only=True, capability="9.0", sms=132
    )
    assert marlin is not None
    assert marlin.bytes == 2 * bf16 + 60 * mlp + 120 * 132 * 4
    assert "Marlin" in marlin.derivation and "CUTLASS" in cutlass.derivation
    blocks = vllm_rank_weights(
        text, "gemma4_text", language_model_only=True, capability="10.0", cuda_blocks=True
    )
    assert blocks is not None and blocks.high is not None
    assert blocks.bytes == cutlass.bytes < blocks.high < cutlass.bytes * 1.01


def test_nvfp4_padding_and_the_ignore_list_by_hand() -> None:
    """A small text-only config, NVFP4 with every self_attn ignored, on CUTLASS at TP 1:

    - bf16: embedding 1,024 x 64 = 65,536; layer 0 (sliding; q 4 x 16, k = v 2 x 16): qkv
      128 x 64 = 8,192, o 4,096, q/k norms 32, 4 norms 256, a scalar; its rotary cache
      128 x 16 = 2,048; layer 1 (full; q 4 x 32, one K=V head of 32): qkv 192 x 64 =
      12,288, o 8,192, norms 64 + 256 + 1; its cache 128 x 32 = 4,096; final norm 64 and
      the normalizer: 105,123 elements, 210,246 B;
    - gate_up (N 160, K 64): weight 160 x 32 = 5,120 B; scales 160 x 4 swizzled to 256
      rows (128's multiple) x 4 = 1,024 B; 16 B of scalars: 6,160 B;
    - down (N 64, K 80): K is not a multiple of 32, so the weight is padded to 64 x 96 / 2 =
      3,072 B; scales 64 x 5 swizzled to 128 x 8 = 1,024 B; 16 B: 4,112 B."""
    config = {
        **SMALL,
        "num_hidden_layers": 2,
        "intermediate_size": 80,
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": True,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "ignore": ["lm_head", "model.layers.*.self_attn*"],
        },
    }
    found = vllm_rank_weights(config, "gemma4_text", capability="12.0")
    assert found is not None
    assert found.bytes == 210_246 + 2 * (6160 + 4112)
    # layer 0's gate named unquantized and its up not: vLLM's is_layer_skipped raises for
    # the fused gate_up_proj, so the count is refused with vLLM's words
    config["quantization_config"]["ignore"] = [
        "model.layers.*.self_attn*",
        "model.layers.0.mlp.up_proj",
    ]
    assert vllm_rank_weights(config, "gemma4_text", capability="12.0") is None
    reason = weights_refusal(config, "gemma4_text", None, 1, 1, "12.0")
    assert "Detected some but not all shards of model.layers.0.mlp.gate_up_proj" in reason
    # a wildcard naming one width: vLLM builds gate_up_proj in NVFP4 (no rule names the
    # fused layer) while the checkpoint keeps up_proj unquantized, so the load fails
    config["quantization_config"]["ignore"] = ["model.layers.*.self_attn*", "*.up_proj"]
    assert vllm_rank_weights(config, "gemma4_text", capability="12.0") is None
    reason = weights_refusal(config, "gemma4_text", None, 1, 1, "12.0")
    assert "leaves model.layers.0.mlp.up_proj unquantized" in reason and "load fails" in reason
    # a config that leaves per-layer embeddings to transformers' default is refused
    del config["hidden_size_per_layer_input"]
    assert "hidden_size_per_layer_input" in weights_refusal(
        config, "gemma4_text", None, 1, 1, "12.0"
    )


def test_experts_per_layer_embeddings_and_shared_layers_by_hand() -> None:
    """A small config that switches on what the 31B leaves off: 4 layers (full every
    second), 2 of them KV-shared with use_double_wide_mlp, a mixture of 4 experts beside
    the MLP, per-layer embeddings of 8, an untied lm_head; at TP 2.

    - embedding 1,024 rows / 2 x 64 = 32,768; lm_head the same;
    - per-layer embeddings: a vocab matrix 1,024 / 2 x (8 x 4 layers) = 16,384, its scale
      1, the projection 32 / 2 x 64 = 1,024, its norm 8, two scalar buffers 2;
    - a sliding layer: q 4 / 2 x 16 = 32, k = v 2 / 2 x 16 = 16: qkv 64 x 64 = 4,096, o
      32 x 64 = 2,048, q/k norms 32; a full layer: head 32, 1 global KV head kept whole
      under TP 2 (K = V): q 64, k 32: qkv 64 x 128 = 8,192, o 4,096, norms 64;
    - MLP 3 x 64 x 128 / 2 = 12,288, twice as wide on the 2 shared layers (24,576); 4
      norms 256; router scale 64, root_size 1, proj 64 x 4 = 256, per_expert_scale 4,
      w13 4 x 2 x 16 x 64 = 8,192, w2 4 x 64 x 16 = 4,096, 3 norms 192; PLE gate and
      projection 2 x 64 x 8 = 1,024, its norm 64; layer_scalar 1;
    - rotary caches 128 x 16 (sliding) + 128 x 32 (full) = 6,144; final norm 64,
      normalizer 1."""
    config = {
        **SMALL,
        "num_hidden_layers": 4,
        "intermediate_size": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_kv_shared_layers": 2,
        "use_double_wide_mlp": True,
        "enable_moe_block": True,
        "num_experts": 4,
        "moe_intermediate_size": 32,
        "hidden_size_per_layer_input": 8,
        "vocab_size_per_layer_input": 1000,
        "tie_word_embeddings": False,
    }
    common = 256 + (64 + 1 + 256 + 4 + 8192 + 4096 + 192) + (1024 + 64) + 1
    sliding = 4096 + 2048 + 32
    full = 8192 + 4096 + 64
    layers = (sliding + 12_288) + (full + 12_288) + (sliding + 24_576) + (full + 24_576)
    elements = 2 * 32_768 + (16_384 + 1 + 1024 + 8 + 2) + layers + 4 * common + 6144 + 64 + 1
    found = vllm_rank_weights(config, "gemma4_text", tp=2)
    assert found is not None
    assert found.bytes == elements * 2


def test_fakplan_kv_sizes_the_pool_of_a_text_only_gemma4(tmp_path: Path) -> None:
    """`fakplan kv --language-model-only` counts the text model and profiles no encoder:
    the pool is the requested memory less those terms; without it, the encoder's
    profiling run is the reason, in one line, and the weights are counted."""
    folder = tmp_path / "gemma-4-31b-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_bf16_config()))
    args = [
        "kv", str(folder), "--engine-version", "0.19.0", "--gpu-memory-utilization", "0.9",
        "--card-total", "139.8 GiB", "--max-model-len", "32768", "--json",
    ]  # fmt: skip
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 0, refused.output
    unread = json.loads(refused.output)["sizing"]
    # the weights, towers included, are counted; the encoder's profiling run is not read
    assert "profiling run of its encoder" in unread["unknown"]
    assert unread["weights_bytes"] >= _by_hand(1) + _31b_vision_tower()
    served = CliRunner().invoke(main, [*args, "--language-model-only"])
    assert served.exit_code == 0, served.output
    sizing = json.loads(served.output)["sizing"]
    terms = {t["id"]: t for t in sizing["terms"]}
    weights = terms["weights"]["low_bytes"]
    # the text model's tensors as the caching allocator counts them: at least their bytes;
    # at most 1 MiB left whole (and 511 B of rounding) on each of its 243 tensors over
    # 1 MiB (4 a layer, the embedding, two rotary caches), 511 B on each of the 422 small
    # ones (7 a layer, the final norm, the normalizer)
    assert 0 <= weights - _by_hand(1) <= 243 * (2**20 + 511) + 422 * 511
    # the pool's low end: the low card total's request less every term's top
    low_total = printed_interval("139.8 GiB")[0]
    others = sum(t["high_bytes"] for name, t in terms.items() if name != "weights")
    assert sizing["pool_range"][0] == math.ceil(low_total * 0.9) - weights - others


def test_a_shape_serves_text_only_with_the_flag_and_other_engines_refuse_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "gemma").mkdir()
    (tmp_path / "gemma" / "config.json").write_text(json.dumps(_bf16_config()))
    shape = (
        "name: g\nengine: {engine}\nengine_version: '{version}'\nmodel: gemma\n"
        "card: {{total: 139.8 GiB}}\nbudget: {{weights: 60 GiB, kv: 60 GiB}}\n"
        "serving: {{max_num_seqs: 4, max_model_len: 8192, language_model_only: true}}\n"
    )
    (tmp_path / "v.yaml").write_text(shape.format(engine="vllm", version="0.19.0"))
    out = tmp_path / "out"
    compiled = CliRunner().invoke(main, ["compile", str(tmp_path / "v.yaml"), "-o", str(out)])
    assert compiled.exit_code == 0, compiled.output
    serve = next(out.rglob("serve.sh")).read_text()
    assert "--language-model-only" in serve
    (tmp_path / "s.yaml").write_text(shape.format(engine="sglang", version="0.5.2"))
    refused = CliRunner().invoke(main, ["plan", str(tmp_path / "s.yaml")])
    assert refused.exit_code == 2
    assert "serving.language_model_only" in refused.output
    assert "Traceback" not in refused.output


def test_one_rtx_5090_does_not_hold_the_nvfp4_31b_even_text_only() -> None:
    """vllm#40291 (vLLM 0.19.1, one RTX 5090, towers loaded) ran out of memory while
    creating Gemma-4-31B-IT-NVFP4's layers, with 29.39 GiB allocated. fakplan, given only
    the card (CUDA's 31.35 GiB, that boot's own print, and the card table's 12.0 and 170
    SMs), counts the text model alone at more than 0.9 of the card, and says vLLM refuses."""
    oom = (PUBLIC / "cuda_totals" / "rtx-5090.log").read_text()
    assert "Of the allocated memory 29.39 GiB is allocated by PyTorch" in oom
    result = CliRunner().invoke(
        main,
        [
            "kv", "nvidia/Gemma-4-31B-IT-NVFP4", "--engine-version", "0.19.0",
            "--card-sku", "RTX-5090", "--gpu-memory-utilization", "0.9",
            "--max-model-len", "8192", "--language-model-only", "--json",
        ],
        env={"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sizing = json.loads(result.output)["sizing"]
    weights = {t["id"]: t for t in sizing["terms"]}["weights"]["low_bytes"]
    assert weights > math.ceil(printed_interval("31.35 GiB")[2] * 0.9)
    assert weights > printed_interval("29.39 GiB")[2]  # more than the boot had made
    assert sizing["pool_range"] == [0, 0]


def test_fit_serves_text_only_where_asked(tmp_path: Path) -> None:
    """`fakplan fit --language-model-only` plans every point text-only: without it the
    encoder's profiling run is the reason no point is found; with it each emitted shape
    states the flag."""
    folder = tmp_path / "gemma-4-31b-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_bf16_config()))
    args = [
        "fit", str(folder), "--engine", "vllm", "--engine-version", "0.19.0",
        "--card-sku", "H100-SXM-80GB", "--utilization", "0.9", "--window", "8192", "--json",
    ]  # fmt: skip
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code in (1, 2), refused.output
    assert "profiling run of its encoder" in refused.output
    emitted = tmp_path / "points"
    served = CliRunner().invoke(main, [*args, "--language-model-only", "--emit", str(emitted)])
    assert served.exit_code == 0, served.output
    shapes = [yaml.safe_load(p.read_text()) for p in emitted.glob("*.yaml")]
    assert shapes and all(s["serving"]["language_model_only"] is True for s in shapes)


def test_a_text_only_shape_budgets_the_text_model_not_the_checkpoint(tmp_path: Path) -> None:
    """The weights-fit gate holds a shape's budget to what the engine loads: served
    text-only, not the checkpoint's total (towers included) but the text model counted
    from its config. google/gemma-3-4b-it: 3,880,263,168 text parameters x 2 B + its
    two rotary caches (603,979,776 B), whatever its index says."""
    folder = tmp_path / "gemma"
    folder.mkdir()
    shutil.copy(PUBLIC / "configs" / "google--gemma-3-4b-it" / "config.json", folder)
    index = {"metadata": {"total_size": 8_600_158_944}, "weight_map": {}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    shape = (
        "name: g\nengine: vllm\nengine_version: '0.19.0'\nmodel: gemma\n"
        "card: {{total: 80 GiB}}\nbudget: {{weights: 9 GiB, kv: 40 GiB}}\n"
        "serving: {{max_num_seqs: 4, max_model_len: 8192{extra}}}\n"
    )
    needs = {}
    for extra in ("", ", language_model_only: true"):
        (tmp_path / "s.yaml").write_text(shape.format(extra=extra))
        result = CliRunner().invoke(main, ["plan", "--json", str(tmp_path / "s.yaml")])
        assert result.exit_code in (0, 1), result.output
        gates = {g["id"]: g for g in json.loads(result.output)["gates"]}
        needs[extra] = gates["weights-fit"]["numbers"]["weights_per_rank_bytes"]
    assert needs[""] == 8_600_158_944  # the index's total_size
    assert needs[", language_model_only: true"] == 3_880_263_168 * 2 + 603_979_776
