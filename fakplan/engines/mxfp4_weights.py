"""gpt-oss's weights per rank as vLLM holds them after the load, from config.json alone.

gpt-oss quantizes only its experts, to MXFP4 (``Mxfp4Config``: attention, router and vocab
matrices stay in the model dtype). What the experts cost on the card depends on the kernel
vLLM picks for it (``fused_moe/oracle/mxfp4.py`` ``select_mxfp4_moe_backend``, v0.19.0):
on compute capability 9.0 that is the Triton backend (``triton_kernels`` ships in the
wheel as ``vllm/third_party/triton_kernels``), which is what is counted here:

- the load creates, per layer (``quantization/mxfp4.py`` ``Mxfp4MoEMethod.create_weights``):
  ``w13`` [E, 2I', H/2] and ``w2`` [E, H, I'/2] uint8 (two fp4 values a byte), their
  scales [E, 2I', H/32] and [E, H, I'/32] uint8 (one per 32 values), and bf16 biases
  [E, 2I'] and [E, H]; I' is the intermediate size per rank rounded up to 64 for Triton
  (``mxfp4_round_up_hidden_size_and_intermediate_size``);
- after the load (``convert_to_mxfp4_moe_kernel_format``, Triton branch) the biases are
  widened to float32 (``replace_parameter``: the bf16 ones are freed), the weights are
  swizzled into new tensors and the originals deleted, and the scales are swizzled into
  new tensors **beside** the original scale parameters, which stay
  (``utils/mxfp4_utils.py`` ``_swizzle_mxfp4``). The swizzled weight is transposed and
  both its dims padded to 64 (``HopperMXValueLayout``); the swizzled scale's rows are
  padded to 2 x num_warps(8) x 2 x 8 = 256 and its columns to 2 (``HopperMXScaleLayout``;
  ``triton_kernels/tensor_details/layout_details/hopper_*.py`` in the 0.19.0 wheel).

"Model loading took" is ``torch.cuda.max_memory_allocated`` after ``empty_cache`` and a
peak reset, around the load and this processing (``platforms/cuda.py``
``get_current_memory_usage``, ``gpu_model_runner.py`` ``load_model``). Which freed blocks
the swizzled copies reuse decides the last few tens of MiB, so the weights are an
interval: at least every live tensor's plain bytes; at most the load as the caching
allocator counts it, with every copy in a fresh block and the freed originals taking only
their own bytes back.
"""

from __future__ import annotations

from typing import Any

from fakplan.dtypes import element_type
from fakplan.engines.packed_weights import capability_number
from fakplan.engines.rank_weights import VOCAB_PAD, RankWeights, round_up
from fakplan.engines.torch_allocator import allocated_bytes

MXFP4_BLOCK = 32  # values per scale (Mxfp4MoEMethod.create_weights mxfp4_block)
TRITON_INTERMEDIATE_ALIGN = 64  # mxfp4_round_up_hidden_size_and_intermediate_size
VALUE_ALIGN = 64  # HopperMXValueLayout.swizzle_data: both dims pre-padded to 64
SCALE_ALIGN_ROWS = 2 * 8 * 2 * 8  # HopperMXScaleLayout: 2 x num_warps x 2 x 8
SCALE_ALIGN_COLUMNS = 2
ROPE_BYTES = 4  # gpt_oss.py get_rope(dtype=torch.float32)


def gpt_oss_refusal(
    text: dict[str, Any],
    *,
    tp: int,
    pp: int,
    served: str | None,
    quantization: str | None,
    capability: str | None,
) -> str | None:
    """Why gpt-oss's weights are not counted for this launch and card (None: they are)."""
    scheme = text.get("quantization_config")
    method = scheme.get("quant_method") if isinstance(scheme, dict) else None
    if method != "mxfp4":
        return f"gpt_oss with quant_method {method!r}: read for the published mxfp4 checkpoints"
    if quantization not in (None, "mxfp4"):
        return f"gpt_oss under --quantization {quantization}: read for its own mxfp4"
    if pp != 1:
        return "gpt_oss at PP > 1: which vocab matrices and norms each stage builds is not read"
    heads, kv_heads = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
    if int(text["intermediate_size"]) % tp or heads % tp or kv_heads % tp:
        return f"gpt_oss at TP {tp}: its heads or experts' width do not split evenly"
    if served not in (None, "bf16"):
        return f"gpt_oss served as {served}: read in bfloat16, its checkpoint's dtype"
    if capability is None:
        return (
            "gpt_oss: its MXFP4 experts take the layout of the kernel vLLM picks for the card "
            "(fused_moe/oracle/mxfp4.py, v0.19.0): give the card's compute capability "
            "(9.0, Triton, is counted)"
        )
    if capability_number(capability) != 90:
        return (
            f"gpt_oss on compute capability {capability}: its MXFP4 experts go to another "
            "kernel than Triton on 9.0 (Marlin before 9.0, FlashInfer TRT-LLM on 10.x; "
            "fused_moe/oracle/mxfp4.py, v0.19.0), whose layout is not read"
        )
    return None


def gpt_oss_rank_weights(text: dict[str, Any], *, tp: int, cuda_blocks: bool) -> RankWeights:
    """One TP rank's weights after the load on compute capability 9.0 (check
    ``gpt_oss_refusal`` first): exact bytes, or with ``cuda_blocks`` the interval the
    caching allocator's reuse of freed blocks leaves (the module's docstring)."""
    size = element_type("bf16").block_bytes
    hidden, experts = int(text["hidden_size"]), int(text["num_local_experts"])
    layers, head = int(text["num_hidden_layers"]), int(text["head_dim"])
    q, kv = int(text["num_attention_heads"]) // tp, int(text["num_key_value_heads"]) // tp
    rows = round_up(int(text["vocab_size"]), VOCAB_PAD) // tp
    inter = round_up(int(text["intermediate_size"]) // tp, TRITON_INTERMEDIATE_ALIGN)
    qkv = (q + 2 * kv) * head
    scaling = text.get("rope_scaling") or text.get("rope_parameters") or {}
    positions = int(scaling.get("original_max_position_embeddings") or 0) * int(
        scaling.get("factor") or 1
    ) or int(text["max_position_embeddings"])
    rope = positions * head * ROPE_BYTES
    vocab = rows * hidden * size
    w13, w13_scale = (
        experts * 2 * inter * (hidden // 2),
        experts * 2 * inter * (hidden // MXFP4_BLOCK),
    )
    w2, w2_scale = experts * hidden * (inter // 2), experts * hidden * (inter // MXFP4_BLOCK)
    w13_bias, w2_bias = experts * 2 * inter * size, experts * hidden * size
    # per layer, in TransformerBlock's order: attention (the first builds the rotary
    # cache), sinks, qkv and o with biases; the router (GateLinear, bias); the experts;
    # the two norms
    layer = [
        q * size, hidden * qkv * size, qkv * size, q * head * hidden * size, hidden * size,
        hidden * experts * size, experts * size,
        w13, w13_scale, w2, w2_scale, w13_bias, w2_bias,
        hidden * size, hidden * size,
    ]  # fmt: skip
    loaded = [vocab]
    for index in range(layers):
        loaded += ([rope] if index == 0 else []) + layer
    loaded += [hidden * size, vocab]  # the final norm, lm_head (untied)
    # after the load: the swizzled copies, the float32 biases; the originals freed
    w13_copy = experts * round_up(hidden // 2, VALUE_ALIGN) * round_up(2 * inter, VALUE_ALIGN)
    w2_copy = experts * round_up(inter // 2, VALUE_ALIGN) * round_up(hidden, VALUE_ALIGN)
    w13_scale_copy = (
        experts
        * round_up(2 * inter, SCALE_ALIGN_ROWS)
        * round_up(hidden // MXFP4_BLOCK, SCALE_ALIGN_COLUMNS)
    )
    w2_scale_copy = (
        experts
        * round_up(hidden, SCALE_ALIGN_ROWS)
        * round_up(inter // MXFP4_BLOCK, SCALE_ALIGN_COLUMNS)
    )
    copies = [w13_copy, w13_scale_copy, w2_copy, w2_scale_copy, 2 * w13_bias, 2 * w2_bias]
    freed = w13 + w2 + w13_bias + w2_bias
    plain = sum(loaded) + layers * (sum(copies) - freed)
    derivation = (
        f"gpt_oss on TP {tp} (MXFP4 experts, Triton on compute capability 9.0): 2 x vocab "
        f"{rows:,} rows/rank x {hidden:,} x {size} B + {layers} layers of attention "
        f"({q} q + 2 x {kv} kv heads/rank x {head}, biases, {q} sinks) and a router in "
        f"{size} B, {experts} experts of I' = {inter:,} (the width per rank rounded up to "
        f"{TRITON_INTERMEDIATE_ALIGN}) loaded as w13 {w13:,} + scales {w13_scale:,} + w2 "
        f"{w2:,} + scales {w2_scale:,} + biases {w13_bias + w2_bias:,} B, then swizzled: "
        f"w13 {w13_copy:,} + w2 {w2_copy:,} B (dims padded to {VALUE_ALIGN}) replace the "
        f"originals, scales {w13_scale_copy:,} + {w2_scale_copy:,} B (rows padded to "
        f"{SCALE_ALIGN_ROWS}) join them, biases widened to float32 (+{w13_bias + w2_bias:,} "
        f"B) + rotary cache {positions:,} x {head} x {ROPE_BYTES} B (float32) = {plain:,} B "
        "(quantization/mxfp4.py, fused_moe/oracle/mxfp4.py, utils/mxfp4_utils.py, "
        "models/gpt_oss.py, v0.19.0)"
    )
    if not cuda_blocks:
        return RankWeights(plain, derivation)
    top = allocated_bytes(loaded + copies * layers) - layers * freed
    return RankWeights(
        plain,
        f"{derivation}; as CUDA's caching allocator counts it, {plain:,}..{top:,} B: at "
        "least the live tensors' bytes, at most the load's blocks with every copy in a "
        "fresh block and the freed originals giving back only their own bytes (which freed "
        "blocks the copies reuse is not modelled; c10/cuda/CUDACachingAllocator.cpp)",
        high=top,
    )
