"""The weights vLLM holds on one rank ("Model loading took X GiB"), counted from config.json.

The first term of the memory a rank spends before its KV pool (issue 17; research notes in
docs/vllm-memory.md). For the plain decoders whose every tensor follows from the config
(fakplan.geometry.params: llama, mistral, qwen2, qwen3 and the qwen3_moe / mixtral
mixtures), vLLM's parallel layers shard them so (v0.19.0 model_executor/layers):

- the embedding and lm_head: vocab padded to 64 (``pad_vocab_size``,
  vocab_parallel_embedding.py:75), rows split over TP; the embedding on the first PP
  stage, lm_head on the last (also the embedding there when tied);
- q/k/v and gate/up column-parallel, o and down row-parallel: split over TP; KV heads
  fewer than TP ranks are replicated (``QKVParallelLinear``); a row-parallel bias whole;
- norms, q/k norms and MoE routers replicated; an expert's intermediate split over TP;
- one rotary cos/sin cache per process: max_position × rotary_dim in the model dtype
  (rotary_embedding/base.py:59, shared through ``_ROPE_DICT``).

Families with layers of their own, each read in vLLM 0.19.0's model file: DeepSeek's
multi-head latent attention (``_mla_layer_tensors``), Qwen3-Next and Qwen3.5's Gated
DeltaNet hybrids (``_gdn_layer_tensors``, Qwen3-VL's tower beside Qwen3.5:
``_qwen3_vision``), Nemotron-H's Mamba-2 hybrid (``_nemotron_h_layer_tensors``),
MiMo-V2-Flash's sliding-window hybrid (``_mimo_layer_tensors``); Gemma 2/3 and their SigLIP
tower (``gemma_rank_weights``). Each distinct rotary embedding keeps one cache, built by
the first layer using it (``_rotary_caches``). Checkpoints in 8 bits (compressed-tensors
W8A8; fp8 per tensor or in blocks) are counted as vLLM creates their tensors
(``checkpoint_storage``), weight-only integer ones (GPTQ, compressed-tensors W4A16) as
the card's kernel keeps them (``packed_weights``); other quantized checkpoints and
architectures have no count here (None), with the reason ``weights_unknown`` gives.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from fakplan.dtypes import element_type
from fakplan.engines.gemma4_weights import GEMMA4_FAMILIES, gemma4_rank_weights, gemma4_refusal
from fakplan.engines.mxfp4_weights import gpt_oss_rank_weights, gpt_oss_refusal
from fakplan.engines.packed_weights import (
    PackedStorage,
    article,
    awq_storage,
    capability_number,
    packed_storage,
    wna16_storage,
)
from fakplan.engines.rank_weights import VOCAB_PAD, RankWeights
from fakplan.engines.torch_allocator import Release, Step, Temporary, allocated_bytes
from fakplan.geometry.params import (
    DENSE_FAMILIES,
    MOE_FAMILIES,
    moe_layout,
    stated_dtype,
    towers,
    without_towers,
)

# DeepseekV2ForCausalLM and DeepseekV3ForCausalLM (one class in vLLM); Kimi K2 publishes
# model_type kimi_k2 with architectures DeepseekV3ForCausalLM
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
# Qwen3NextForCausalLM, and Qwen3.5's text models (dense and MoE, the same layers):
# Gated DeltaNet layers between gated full-attention ones
GDN_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# the text families whose vision tower fakplan counts beside them (Qwen3-VL's ViT)
QWEN3_VISION_FAMILIES = ("qwen3_5_text", "qwen3_5_moe_text")
# NemotronHForCausalLM: Mamba-2, attention, MLP and MoE layers by hybrid_override_pattern
MAMBA_FAMILIES = ("nemotron_h",)
# MiMoV2FlashForCausalLM: sliding-window and full attention by hybrid_layer_pattern
SWA_HYBRID_FAMILIES = ("mimo_v2_flash",)


_Count = Callable[..., "RankWeights | None"]


def stage_shares(layers: int, pp: int) -> list[int]:
    """get_pp_indices: equal shares, the remainder going to the stages before the last."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


@dataclass(frozen=True)
class Tensor:
    """One parameter a rank creates: its elements; for a linear layer's weight (what a
    quantization method stores its own way), its output rows on the rank, the logical
    widths fused into it (q/k/v: 3, gate/up: 2) and, for a fused MoE's weight, the experts
    stacked in it; ``element_bytes``: a parameter kept in its own dtype (0: the model's);
    ``split_input``: a row-parallel layer, whose input dimension TP splits."""

    elements: int
    linear: bool = False
    rows: int = 0
    widths: int = 1
    experts: int = 1
    element_bytes: int = 0
    split_input: bool = False


Tensors = list[Tensor]


@dataclass(frozen=True)
class LinearStorage:
    """How a rank stores a linear layer's weight: ``bits`` per element (None: the served
    dtype's), and its scales: none, one float32 per layer (``layer``), one per output row
    (``channel``) or one per logical width (``tensor``); ``blocks``: CUDA's caching
    allocator's blocks count as the tensors are created (False where the load quantizes
    in place, freeing and reusing blocks)."""

    bits: int | None = None
    scale: str = "none"
    blocks: bool = True
    text: str = ""
    block: tuple[int, int] = (0, 0)
    fp8: bool = False  # float8 weights (an fp8 kernel, or Marlin before SM 8.9)
    # Marlin's W8A16 repack on a card without fp8 kernels: the scales in the model dtype,
    # one per output channel (per group of a block's k inputs), and a workspace per layer
    marlin: bool = False
    sms: int | None = None

    def weight_bytes(self, t: Tensor, size: int) -> int:
        if not t.linear or self.bits is None:
            return t.elements * (t.element_bytes or size)
        return t.elements * self.bits // 8

    def scale_bytes(self, t: Tensor, size: int = 2) -> int:
        """float32 scales (vLLM's ChannelQuantScaleParameter / PerTensorScaleParameter,
        compressed_tensors_w8a8_fp8.py and _int8.py; BlockQuantScaleParameter,
        fp8_utils.py create_fp8_scale_parameter, one per block_n x block_k block of a
        linear layer's rank; a fused MoE's per expert and per width, Fp8MoEMethod
        create_weights, fp8.py; v0.19.0). Repacked for Marlin (``marlin``), scales of
        ``size`` bytes per output channel, a block's repeated over its n outputs (one row
        per k inputs), and an int32 workspace word per SM (prepare_fp8_layer_for_marlin,
        marlin_utils_fp8.py, v0.19.0)."""
        if not t.linear:
            return 0
        if self.marlin:
            return sum(self.allocations(t, size)[1:])
        if self.scale == "block":
            n, k = self.block
            columns = -(-(t.elements // t.rows) // k)
            if t.experts > 1:
                per_width = t.rows // t.experts // t.widths
                return FP8_SCALE_BYTES * t.experts * t.widths * -(-per_width // n) * columns
            return FP8_SCALE_BYTES * -(-t.rows // n) * columns
        return (
            FP8_SCALE_BYTES
            * {"none": 0, "layer": 1, "channel": t.rows, "tensor": t.widths}[self.scale]
        )

    def allocations(self, t: Tensor, size: int) -> list[int]:
        """A tensor's allocations after the load, in bytes: the weight, then its scales
        (and, repacked for Marlin, the workspace)."""
        out = [self.weight_bytes(t, size)]
        if self.marlin and t.linear:
            columns = t.elements // t.rows
            groups = -(-columns // self.block[1]) if self.scale == "block" else 1
            return [*out, groups * t.rows * size, *([self.sms * 4] if self.sms else [])]
        scale = self.scale_bytes(t, size)
        return out + ([scale] if scale else [])


def _mlp(hidden: int, inter: int) -> Tensors:
    """A gated MLP on a rank: gate/up fused (column-parallel), down (row-parallel);
    ``inter`` is the rank's share of the intermediate size."""
    return [
        Tensor(2 * inter * hidden, True, 2 * inter, 2),
        Tensor(hidden * inter, True, hidden, split_input=True),
    ]


def _experts(count: int, share: int, hidden: int) -> Tensors:
    """A fused MoE's w13 and w2 on a rank: ``count`` experts of ``share`` intermediate."""
    return [
        Tensor(count * 2 * share * hidden, True, count * 2 * share, 2, count),
        Tensor(count * hidden * share, True, count * hidden, 1, count, split_input=True),
    ]


def _layer_tensors(
    text: dict[str, Any], model_type: str, tp: int, sparse: bool
) -> tuple[Tensors, Tensors]:
    """One decoder layer's tensors on a rank, in the order vLLM creates them, split where
    the first layer's attention builds the rotary cache (after q/k/v and o); a linear
    layer's weight is what a quantization method quantizes."""
    hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    q, kv_rank = heads // tp * head_dim, max(1, kv // tp) * head_dim
    # biases as each family's attention takes them (models/llama.py: q/k/v and o both
    # attention_bias; qwen2.py: q/k/v always, o never; qwen3.py, qwen3_moe.py: q/k/v
    # attention_bias, o never; mixtral.py: none; read in v0.13.0)
    bias = bool(text.get("attention_bias"))
    qkv_bias = model_type == "qwen2" or (bias and model_type != "mixtral")
    o_bias = bias and model_type in ("llama", "mistral", "granite")
    out: Tensors = [Tensor(hidden * (q + 2 * kv_rank), True, q + 2 * kv_rank, 3)]  # qkv_proj
    if qkv_bias:
        out.append(Tensor(q + 2 * kv_rank))  # q, k, v biases, split with their columns
    out.append(Tensor(q * hidden, True, hidden, split_input=True))  # o_proj: row-parallel
    if o_bias:
        out.append(Tensor(hidden))  # o's bias whole on every rank
    attention, out = out, []
    if model_type in ("qwen3", "qwen3_moe"):
        out += [Tensor(head_dim), Tensor(head_dim)]  # q_norm, k_norm
    if sparse:
        count, moe_inter, _ = moe_layout(text, model_type)  # type: ignore[misc]
        share = moe_inter // tp
        experts = _experts(count, share, hidden)
        router = Tensor(hidden * count)  # replicated and unquantized
        # MixtralMoE builds its gate before FusedMoE; Qwen3MoeSparseMoeBlock after
        out += [router, *experts] if model_type == "mixtral" else [*experts, router]
    else:
        share = int(text["intermediate_size"]) // tp
        out += _mlp(hidden, share)
        if text.get("mlp_bias") and model_type in ("llama", "mistral", "granite"):
            # LlamaMLP / GraniteMLP(bias=mlp_bias): gate_up's split with its columns,
            # down's whole on every rank
            out += [Tensor(2 * share), Tensor(hidden)]
    return attention, [*out, Tensor(hidden), Tensor(hidden)]  # input, post-attention norms


def deepseek_sparse(text: dict[str, Any]) -> frozenset[int]:
    """The layers DeepseekV2DecoderLayer gives a DeepseekV2MoE: routed experts configured,
    from ``first_k_dense_replace`` on, every ``moe_layer_freq``-th (deepseek_v2.py v0.19.0)."""
    if text.get("n_routed_experts") is None:
        return frozenset()
    first = int(text.get("first_k_dense_replace") or 0)
    freq = int(text.get("moe_layer_freq") or 1)
    layers = int(text["num_hidden_layers"])
    return frozenset(i for i in range(first, layers) if i % freq == 0)


def _mla_layer_tensors(text: dict[str, Any], tp: int, sparse: bool) -> tuple[Tensors, Tensors]:
    """One DeepSeek decoder layer on a rank, in creation order (deepseek_v2.py v0.19.0):

    - DeepseekV2MLAAttention: with a q LoRA, fused_qkv_a_proj (q_a and kv_a_with_mqa fused,
      ``disable_tp``: whole on every rank), q_a_layernorm, q_b_proj (column-parallel);
      without, kv_a_proj_with_mqa (replicated) and q_proj (column-parallel); then
      kv_a_layernorm, kv_b_proj (column-parallel), o_proj (row-parallel);
    - the MLP: DeepseekV2MLP (gate/up, down) on a dense layer; on a sparse one the router
      (GateLinear, unquantized), its float32 e_score_correction_bias with ``noaux_tc``,
      the shared experts' MLP (n_shared x moe_intermediate) and the fused routed experts;
    - two norms."""
    hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
    nope, rope = int(text["qk_nope_head_dim"]), int(text["qk_rope_head_dim"])
    value, latent = int(text["v_head_dim"]), int(text["kv_lora_rank"])
    q_lora = text.get("q_lora_rank")
    local = heads // tp
    out: Tensors = []
    if q_lora:
        q_lora = int(q_lora)
        width = q_lora + latent + rope
        out += [Tensor(hidden * width, True, width, 2), Tensor(q_lora)]
        out.append(Tensor(q_lora * local * (nope + rope), True, local * (nope + rope)))
    else:
        out.append(Tensor(hidden * (latent + rope), True, latent + rope))
        out.append(Tensor(hidden * local * (nope + rope), True, local * (nope + rope)))
    out.append(Tensor(latent))  # kv_a_layernorm
    out.append(Tensor(latent * local * (nope + value), True, local * (nope + value)))
    out.append(Tensor(local * value * hidden, True, hidden))  # o_proj
    attention, out = out, []
    if sparse:
        count = int(text["n_routed_experts"])
        share = int(text["moe_intermediate_size"]) // tp
        out.append(Tensor(hidden * count))  # the router
        if text.get("topk_method") == "noaux_tc":
            out.append(Tensor(count, element_bytes=4))  # e_score_correction_bias
        shared = int(text.get("n_shared_experts") or 0) * int(text["moe_intermediate_size"])
        out += _mlp(hidden, shared // tp) if shared else []
        out += _experts(count, share, hidden)
    else:
        out += _mlp(hidden, int(text["intermediate_size"]) // tp)
    return attention, [*out, Tensor(hidden), Tensor(hidden)]


def qwen3_next_layer_types(text: dict[str, Any]) -> list[str]:
    """Each layer's kind: the config's ``layer_types``, else every
    ``full_attention_interval``-th layer full attention (transformers Qwen3NextConfig)."""
    stated = text.get("layer_types")
    layers = int(text["num_hidden_layers"])
    if isinstance(stated, list) and len(stated) == layers:
        return [str(kind) for kind in stated]
    interval = int(text.get("full_attention_interval") or 4)
    return [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)
    ]


def _gdn_layer_tensors(
    text: dict[str, Any], tp: int, kind: str, sparse: bool
) -> tuple[Tensors, Tensors]:
    """One Qwen3-Next decoder layer on a rank, in creation order (models/qwen3_next.py,
    layers/mamba/gdn_linear_attn.py, v0.19.0):

    - a Gated DeltaNet layer: conv1d (conv_dim x kernel, column-parallel, unquantized),
      in_proj_qkvz (2 key + 2 value widths), in_proj_ba (2 x value heads), dt_bias (model
      dtype), A_log (float32), the gated norm of one value head, out_proj (row-parallel);
    - a full-attention layer: qkv_proj with the output gate (2 x heads x head_dim + k, v),
      o_proj, then its q/k norms (the rotary cache comes between);
    - the MoE block: router, shared_expert_gate (hidden x 1), the shared expert's MLP, the
      fused experts; or a dense MLP; then two norms."""
    hidden = int(text["hidden_size"])
    attention: Tensors
    out: Tensors = []
    if kind == "linear_attention":
        k_heads, v_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
        k_dim, v_dim = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
        key, value = k_heads * k_dim, v_heads * v_dim
        conv = (2 * key + value) // tp
        qkvz = (2 * key + 2 * value) // tp
        attention = [
            Tensor(conv * int(text["linear_conv_kernel_dim"])),
            Tensor(hidden * qkvz, True, qkvz, 4),
            Tensor(hidden * 2 * v_heads // tp, True, 2 * v_heads // tp, 2),
            Tensor(v_heads // tp),  # dt_bias
            Tensor(v_heads // tp, element_bytes=4),  # A_log
            Tensor(v_dim),  # the gated norm
            Tensor(value // tp * hidden, True, hidden),  # out_proj
        ]
    else:
        heads, kv = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
        head_dim = int(text.get("head_dim") or hidden // heads)
        gate = 2 if text.get("attn_output_gate", True) else 1
        q, kv_rank = gate * heads // tp * head_dim, max(1, kv // tp) * head_dim
        attention = [
            Tensor(hidden * (q + 2 * kv_rank), True, q + 2 * kv_rank, 3),
            Tensor(heads // tp * head_dim * hidden, True, hidden),
        ]
        out += [Tensor(head_dim), Tensor(head_dim)]  # q_norm, k_norm
    if sparse:
        count, share = int(text["num_experts"]), int(text["moe_intermediate_size"]) // tp
        shared = int(text.get("shared_expert_intermediate_size") or 0) // tp
        out += [Tensor(hidden * count), Tensor(hidden)]  # router, shared_expert_gate
        out += _mlp(hidden, shared) if shared else []
        out += _experts(count, share, hidden)
    else:
        out += _mlp(hidden, int(text["intermediate_size"]) // tp)
    return attention, [*out, Tensor(hidden), Tensor(hidden)]


def fp32_router(capability: str | None) -> bool:
    """GateLinear(force_fp32_compute=True) keeps its weight in float32 where no specialised
    router kernel runs: off compute capability 9.0 and the 10.x family
    (fused_moe/router/gate_linear.py, v0.19.0); unknown capability: the model dtype."""
    if capability is None:
        return False
    cap = capability_number(capability)
    return not (cap == 90 or cap // 10 == 10)


def _nemotron_h_layer_tensors(
    text: dict[str, Any], tp: int, kind: str, capability: str | None = None
) -> tuple[Tensors, Tensors]:
    """One Nemotron-H layer on a rank, by its ``hybrid_override_pattern`` letter, in creation
    order (models/nemotron_h.py, layers/mamba/mamba_mixer2.py, v0.19.0); every layer then
    one norm:

    - ``M``, MambaMixer2: conv1d ((I + 2 g S) / t x kernel, unquantized, with its bias),
      in_proj ((2 I + 2 g S + heads) / t x H), A (float32), D and dt_bias (heads / t),
      out_proj (row-parallel), the gated norm (I / t); I = mamba heads x head size, g the
      groups, raised to t where they do not divide it (extra_groups_for_head_shards);
    - ``*``, attention without rotary embedding: q/k/v, o (no biases);
    - ``-``, a non-gated MLP (up, down; relu2);
    - ``E``, the MoE: the router (GateLinear: the model dtype on SM 9.0 and 10.x, float32
      elsewhere, where force_fp32_compute has no kernel: ``fp32_router``; the model dtype
      where the card is not given), its float32 e_score_correction_bias, the
      shared experts' non-gated MLP, the latent projections where moe_latent_size is set,
      the non-gated fused experts (w13 of one width)."""
    hidden = int(text["hidden_size"])
    out: Tensors
    if kind == "M":
        heads, head = int(text["mamba_num_heads"]), int(text["mamba_head_dim"])
        inner, state = heads * head, int(text["ssm_state_size"])
        groups = int(text.get("n_groups") or 1)
        groups += 0 if groups % tp == 0 else tp - groups
        conv = inner + 2 * groups * state
        bias = bool(text.get("use_bias"))
        proj = (2 * inner + 2 * groups * state + heads) // tp
        out = [Tensor(conv // tp * int(text["conv_kernel"]))]
        out += [Tensor(conv // tp)] if text.get("use_conv_bias", True) else []
        out.append(Tensor(hidden * proj, True, proj, 5))
        out += [Tensor(proj)] if bias else []
        out += [Tensor(heads // tp, element_bytes=4), Tensor(heads // tp), Tensor(heads // tp)]
        out.append(Tensor(inner // tp * hidden, True, hidden))
        out += [Tensor(hidden)] if bias else []
        out.append(Tensor(inner // tp))  # the gated norm
    elif kind == "*":
        heads, kv = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
        head_dim = int(text.get("head_dim") or hidden // heads)
        q, kv_rank = heads // tp * head_dim, max(1, kv // tp) * head_dim
        out = [
            Tensor(hidden * (q + 2 * kv_rank), True, q + 2 * kv_rank, 3),
            Tensor(q * hidden, True, hidden),
        ]
    elif kind == "-":
        inter = int(text["intermediate_size"]) // tp
        out = [Tensor(inter * hidden, True, inter), Tensor(hidden * inter, True, hidden)]
    elif kind == "E":
        count, share = int(text["n_routed_experts"]), int(text["moe_intermediate_size"]) // tp
        width = int(text.get("moe_latent_size") or hidden)
        router = Tensor(hidden * count, element_bytes=4 if fp32_router(capability) else 0)
        out = [router, Tensor(count, element_bytes=4)]
        shared = int(text.get("n_shared_experts") or 0)
        shared *= int(text.get("moe_shared_expert_intermediate_size") or 0)
        if shared:
            out += [
                Tensor(shared // tp * hidden, True, shared // tp),
                Tensor(hidden * (shared // tp), True, hidden),
            ]
        if text.get("moe_latent_size"):
            out += [Tensor(width * hidden, True, width), Tensor(hidden * width, True, hidden)]
        out += [
            Tensor(count * share * width, True, count * share, 1, count),
            Tensor(count * width * share, True, count * width, 1, count),
        ]
    else:
        raise ValueError(f"hybrid_override_pattern letter {kind!r}")
    return out, [Tensor(hidden)]


# vLLM's _STR_DTYPE_TO_TORCH_DTYPE (config/model.py, v0.19.0), in bytes
_ROUTER_DTYPES = {"half": 2, "float16": 2, "float": 4, "float32": 4, "bfloat16": 2}


def _router_bytes(text: dict[str, Any]) -> int:
    """MiMo's router element size: ``getattr(config, "moe_router_dtype", "float32")``
    through str_dtype_to_torch_dtype, whose None (a null or unmapped value) leaves
    nn.Linear in the model's default dtype (0 here: the model's)."""
    if "moe_router_dtype" not in text:
        return 4
    return _ROUTER_DTYPES.get(str(text["moe_router_dtype"]), 0)


def _mimo_layer_tensors(text: dict[str, Any], tp: int, index: int) -> tuple[Tensors, Tensors]:
    """One MiMo-V2-Flash decoder layer on a rank, in creation order (models/mimo_v2_flash.py
    v0.19.0): attention with its own heads where ``hybrid_layer_pattern`` marks a sliding-
    window layer (q/k of head_dim, v of v_head_dim: QKVParallelLinear's v_head_size; o
    from heads x v_head_dim), the SWA layers' attention_sink_bias (model dtype); then a
    dense MLP or, where ``moe_layer_freq`` marks it, the MoE: the router (an nn.Linear in
    moe_router_dtype, unquantized: ``_router_bytes``) and its e_score_correction_bias
    in that dtype, the fused experts; two norms."""
    hidden = int(text["hidden_size"])
    swa = int(text["hybrid_layer_pattern"][index]) == 1
    prefix = "swa_" if swa else ""
    heads, kv = int(text[f"{prefix}num_attention_heads"]), int(text[f"{prefix}num_key_value_heads"])
    head_dim = int(text[f"{prefix}head_dim"])
    value_dim = int(text.get(f"{prefix}v_head_dim") or head_dim)
    q, k_rank = heads // tp * head_dim, max(1, kv // tp) * head_dim
    v_rank = max(1, kv // tp) * value_dim
    attention = [
        Tensor(hidden * (q + k_rank + v_rank), True, q + k_rank + v_rank, 3),
        Tensor(heads // tp * value_dim * hidden, True, hidden),
    ]
    out: Tensors = []
    if swa and text.get("add_swa_attention_sink_bias"):
        out.append(Tensor(heads // tp))
    freq = text.get("moe_layer_freq")
    if isinstance(freq, list) and freq[index]:
        count, share = int(text["n_routed_experts"]), int(text["moe_intermediate_size"]) // tp
        width = _router_bytes(text)
        out += [Tensor(hidden * count, element_bytes=width), Tensor(count, element_bytes=width)]
        out += _experts(count, share, hidden)
    else:
        out += _mlp(hidden, int(text["intermediate_size"]) // tp)
    return attention, [*out, Tensor(hidden), Tensor(hidden)]


def _rotary_caches(
    text: dict[str, Any], model_type: str, own: range, kinds: list[str]
) -> list[tuple[int, int, int, str]]:
    """The rotary caches a stage builds: (position of the layer that builds it among the
    stage's layers, positions, rotary_dim, kind). One cache per distinct rotary embedding
    (``_ROPE_DICT``), built by the first layer using it: the first full-attention layer;
    none in Nemotron-H; MiMo-V2-Flash's full and sliding-window layers two where their
    head_dim or rope_theta differ, else one."""
    hidden = int(text["hidden_size"])
    if model_type in MAMBA_FAMILIES:
        return []
    if model_type in MLA_FAMILIES:
        positions, rotary, kind = _mla_rope(text)
        return [(0, positions, rotary, kind)] if own else []
    stated = text.get("rope_parameters") or text.get("rope_scaling")
    nested = stated.get("partial_rotary_factor") if isinstance(stated, dict) else None
    factor = float(text.get("partial_rotary_factor") or nested or 1.0)
    positions = int(text["max_position_embeddings"])
    if isinstance(stated, dict) and stated.get("mrope_section"):
        # MRotaryEmbedding caches 4 x max_position (rotary_embedding/mrope.py, v0.19.0)
        positions *= 4
    if model_type in SWA_HYBRID_FAMILIES:
        # _ROPE_DICT keys a cache by head size, rotary dim, positions and rope parameters:
        # the sliding-window layers share the full layers' cache where their head_dim and
        # rope_theta (swa_rope_theta, else rope_theta) are the same
        theta = text.get("rope_theta", 1000000)
        caches: dict[tuple[int, Any], tuple[int, int, int, str]] = {}
        for n, i in enumerate(own):
            swa = int(text["hybrid_layer_pattern"][i]) == 1
            head = int(text["swa_head_dim" if swa else "head_dim"])
            key = (head, text.get("swa_rope_theta", theta) if swa else theta)
            kind = "sliding window" if swa else "full"
            caches.setdefault(key, (n, positions, int(head * factor), kind))
        return sorted(caches.values())
    heads = int(text["num_attention_heads"])
    rotary = int(int(text.get("head_dim") or hidden // heads) * factor)
    at = next((n for n, i in enumerate(own) if kinds[i] == "full_attention"), None)
    return [] if at is None else [(at, positions, rotary, "")]


def _qwen3_vision(vision: dict[str, Any], tp: int) -> tuple[Tensors, str] | None:
    """Qwen3-VL's vision transformer on a rank, in creation order (models/qwen3_vl.py
    Qwen3_VisionTransformer, v0.19.0; sharded as the language model, mm_encoder_tp_mode
    "weights"): the Conv3d patch embedding with its bias; the position embedding (an
    nn.Embedding, whole); its rotary cache (8,192 positions x half a head, a rotary
    embedding of its own); the patch merger (LayerNorm, fc1 and fc2 with biases, on
    hidden x merge^2) and one per deepstack index; the blocks (two LayerNorms, q/k/v and
    proj with biases, fc1/fc2 with biases)."""
    try:
        width, heads = int(vision["hidden_size"]), int(vision["num_heads"])
        depth, inter = int(vision["depth"]), int(vision["intermediate_size"])
        patch, temporal = int(vision["patch_size"]), int(vision.get("temporal_patch_size") or 2)
        channels = int(vision.get("in_channels") or 3)
        positions = int(vision["num_position_embeddings"])
        merge, out = int(vision.get("spatial_merge_size") or 2), int(vision["out_hidden_size"])
    except (KeyError, TypeError, ValueError):
        return None
    deepstack = len(vision.get("deepstack_visual_indexes") or ())
    merged = width * merge * merge
    rotary = (width // heads) // 2
    tensors: Tensors = [
        Tensor(width * channels * temporal * patch * patch),
        Tensor(width),
        Tensor(positions * width),
        Tensor(8192 * rotary),
    ]

    def merger(norm: int) -> Tensors:
        return [
            Tensor(norm), Tensor(norm),
            Tensor(merged * merged // tp), Tensor(merged // tp),
            Tensor(merged // tp * out), Tensor(out),
        ]  # fmt: skip

    tensors += merger(width)
    for _ in range(deepstack):
        tensors += merger(merged)
    for _ in range(depth):
        tensors += [Tensor(width)] * 4  # norm1, norm2: weight and bias
        tensors += [Tensor(3 * width * width // tp), Tensor(3 * width // tp)]
        tensors += [Tensor(width // tp * width), Tensor(width)]
        tensors += [Tensor(inter // tp * width), Tensor(inter // tp)]
        tensors += [Tensor(width * inter // tp), Tensor(width)]
    text = (
        f"vision tower: patch {channels}x{temporal}x{patch}x{patch} conv + {positions:,} "
        f"positions x {width:,} + rotary 8,192 x {rotary} + merger ({merged:,}^2, "
        f"{merged:,}x{out:,}){f' + {deepstack} deepstack mergers' if deepstack else ''} + "
        f"{depth} blocks (q/k/v/proj {width:,}^2, fc1/fc2 {width:,}x{inter:,}, biases, 2 "
        f"LayerNorms) / TP {tp}"
    )
    return tensors, text


def _mla_rope(text: dict[str, Any]) -> tuple[int, int, str]:
    """(positions, rotary_dim, kind) of the one rotary cache the MLA layers share: with yarn
    scaling DeepseekScalingRotaryEmbedding caches original_max_position x factor positions
    (rotary_embedding/__init__.py get_rope, deepseek_scaling_rope.py, v0.19.0), in the
    model dtype where the custom ops are off (vLLM's default under Inductor)."""
    rope = int(text["qk_rope_head_dim"])
    found = text.get("rope_scaling") or text.get("rope_parameters")
    scaling: dict[str, Any] = found if isinstance(found, dict) else {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default")
    if kind == "yarn":
        original = int(scaling["original_max_position_embeddings"])
        factor = float(scaling["factor"])
        return int(original * factor), rope, f"deepseek_yarn {original:,} x {factor:g}"
    return int(text["max_position_embeddings"]), rope, kind


def _mla_dequantized(text: dict[str, Any], tp: int, size: int) -> int:
    """The 16-bit copy of kv_b_proj that MLAAttention.process_weights_after_loading keeps
    per layer when kv_b_proj is quantized (W_UK_T and W_UV are views of
    get_and_maybe_dequant_weights' new tensor; an unquantized weight is viewed, not copied:
    layers/attention/mla_attention.py, quantization/utils/quant_utils.py, v0.19.0)."""
    local = int(text["num_attention_heads"]) // tp
    width = int(text["qk_nope_head_dim"]) + int(text["v_head_dim"])
    return int(text["kv_lora_rank"]) * local * width * size


# --quantization fp8 on a 16-bit checkpoint (quantization/fp8.py Fp8OnlineLinearMethod,
# v0.19.0): every LinearBase weight becomes float8 (1 B) with one float32 scale from
# ops.scaled_fp8_quant(weight, scale=None); embeddings, lm_head, norms and biases stay in
# the model dtype. Per decoder layer four linear layers: qkv, o, gate_up, down.
FP8_LINEARS_PER_LAYER = 4
FP8_SCALE_BYTES = 4


def _refused_as_none(count: _Count) -> _Count:
    """``count`` gives None, not a number or a traceback, where vLLM would not build the
    model as counted (``layout_refusal``) or the config lacks a field its layers read."""

    @functools.wraps(count)
    def guarded(text: dict[str, Any], model_type: str, **options: Any) -> RankWeights | None:
        tp, pp = int(options.get("tp", 1)), int(options.get("pp", 1))
        if layout_refusal(text, model_type, tp, pp):
            return None
        try:
            return count(text, model_type, **options)
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
            return None

    return cast(_Count, guarded)


def layout_refusal(text: dict[str, Any], model_type: str, tp: int, pp: int) -> str | None:
    """Why vLLM would not build this model at this TP/PP as fakplan counts it, or None:
    heads that do not divide over TP (vLLM asserts), a Mamba-2 group count that neither
    divides TP nor is 1 (mamba_mixer2.py), per-layer lists shorter than the layers, and PP
    for the families whose stages build their vocab matrices their own way."""
    own_layers = (*MLA_FAMILIES, *GDN_FAMILIES, *MAMBA_FAMILIES, *SWA_HYBRID_FAMILIES)
    if model_type in GEMMA_FAMILIES and pp != 1:
        return (
            f"{model_type} at PP {pp}: which rotary caches and tied embedding each stage "
            "builds is not read"
        )
    if model_type not in own_layers:
        return None  # the plain decoders and Gemma: their counts check their own layout
    if pp != 1:
        return (
            f"{model_type} at PP {pp}: which vocab matrices and norms each stage builds is not read"
        )
    try:
        layers = int(text["num_hidden_layers"])
        heads = [int(text["num_attention_heads"])]
        if model_type in SWA_HYBRID_FAMILIES:
            heads.append(int(text["swa_num_attention_heads"]))
            for key in ("hybrid_layer_pattern", "moe_layer_freq"):
                found = text.get(key)
                if isinstance(found, list) and len(found) < layers:
                    return f"{model_type}: {key} lists {len(found)} of {layers} layers"
        if model_type in GDN_FAMILIES:
            heads += [int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])]
        if model_type in MAMBA_FAMILIES:
            heads.append(int(text["mamba_num_heads"]))
            groups = int(text.get("n_groups") or 1)
            if groups % tp and groups != 1:
                return f"{model_type}: {groups} Mamba-2 groups neither divide TP {tp} nor are 1"
    except (KeyError, TypeError, ValueError):
        return f"{model_type}: its config lacks a field its layers need"
    odd = [h for h in heads if h % tp]
    if odd:
        return f"{model_type}: {odd[0]} heads do not divide over TP {tp} (vLLM asserts they do)"
    return None


@_refused_as_none
def vllm_rank_weights(
    text: dict[str, Any],
    model_type: str,
    *,
    tp: int = 1,
    pp: int = 1,
    stage: int = 0,
    served: str | None = None,
    quantization: str | None = None,
    rope_bytes: int | None = None,
    cuda_blocks: bool = False,
    capability: str | None = None,
    sms: int | None = None,
    language_model_only: bool = False,
    batched_tokens: int | None = None,
) -> RankWeights | None:
    """The bytes PP stage ``stage`` of a TP rank loads, with their derivation; None where
    the config alone does not give them (``weights_refusal`` says why). ``served``: the
    dtype the weights are served in (``--dtype``), else the checkpoint's;
    ``quantization``: vLLM's --quantization (fp8 online on the dense decoders, or the
    method a checkpoint's quantization_config names: ``checkpoint_storage``);
    ``rope_bytes``: the rotary cache's element size where the engine does not keep it in
    the model dtype (SGLang's float32); ``cuda_blocks``: count what PyTorch's CUDA caching
    allocator holds for the tensors, as vLLM's "Model loading took" measures on a GPU
    (torch_allocator; the plain sum elsewhere, and with --quantization fp8, whose load
    frees and reuses blocks); ``capability``, ``sms``: the card's, for a weight-only
    integer checkpoint, whose kernel keeps tensors of its own (``packed_weights``);
    ``language_model_only``: the towers left out (--language-model-only, or every
    modality's --limit-mm-per-prompt 0); ``batched_tokens``: max_num_batched_tokens, for
    a buffer Gemma 4's multimodal wrapper sizes by it."""
    present = towers(text)
    left_out = (
        f"; served text-only (--language-model-only): the {' and '.join(present)} "
        f"tower{'s' if len(present) > 1 else ''} built on the meta device, holding nothing "
        "(models/interfaces.py _mark_tower_model, v0.19.0)"
    )
    if model_type in GEMMA4_FAMILIES:
        if rope_bytes is not None or gemma4_refusal(
            text, tp=tp, pp=pp, quantization=quantization,
            language_model_only=language_model_only, batched_tokens=batched_tokens,
            capability=capability, sms=sms, served=served,
        ):  # fmt: skip
            return None
        counted = gemma4_rank_weights(
            text, tp=tp, served=served, cuda_blocks=cuda_blocks, batched_tokens=batched_tokens,
            capability=capability, sms=sms, language_model_only=language_model_only,
        )  # fmt: skip
        if counted is None or not present or not language_model_only:
            return counted
        return dataclasses.replace(counted, derivation=counted.derivation + left_out)
    if language_model_only and present:
        # the towers (and Gemma 3's projector) are built on the meta device: no memory
        # (models/interfaces.py _mark_tower_model, models/utils.py no_init_weights, v0.19.0)
        text_only = vllm_rank_weights(
            without_towers(text), model_type, tp=tp,
            pp=pp, stage=stage, served=served, quantization=quantization,
            rope_bytes=rope_bytes, cuda_blocks=cuda_blocks, capability=capability, sms=sms,
        )  # fmt: skip
        if text_only is None:
            return None
        return dataclasses.replace(text_only, derivation=text_only.derivation + left_out)
    if "audio" in present:
        return None  # an audio tower (the Omni models'): not read
    if model_type == "gpt_oss":
        if rope_bytes is not None or gpt_oss_refusal(
            text, tp=tp, pp=pp, served=served, quantization=quantization, capability=capability
        ):
            return None
        return gpt_oss_rank_weights(text, tp=tp, cuda_blocks=cuda_blocks)
    if model_type in GEMMA_FAMILIES:
        if quantization is not None or "quantization_config" in text or pp != 1:
            return None
        if rope_bytes is not None:
            return None  # an engine keeping its rotary caches apart from the model dtype
        return gemma_rank_weights(text, model_type, tp=tp, served=served, cuda_blocks=cuda_blocks)
    if model_type == "phi3" and text.get("rope_scaling"):
        return None  # longrope keeps a long and a short cache: not read
    tower: Tensors = []
    tower_text = ""
    if "vision_config" in text:
        # a tower beside the text model: Gemma 3's SigLIP (above) and Qwen3-VL's ViT
        found_tower = (
            _qwen3_vision(text["vision_config"], tp)
            if model_type in QWEN3_VISION_FAMILIES and pp == 1 and quantization is None
            and "quantization_config" not in text
            else None
        )  # fmt: skip
        if found_tower is None:
            return None
        tower, tower_text = found_tower
    mla, gdn = model_type in MLA_FAMILIES, model_type in GDN_FAMILIES
    mamba, mimo = model_type in MAMBA_FAMILIES, model_type in SWA_HYBRID_FAMILIES
    if (mla or gdn or mamba or mimo) and rope_bytes is not None:
        return None  # another engine's DeepSeek or Qwen3-Next layers: not read
    storage = linear_storage(text, model_type, quantization, capability=capability, tp=tp, sms=sms)
    if isinstance(storage, str) or (isinstance(storage, PackedStorage) and rope_bytes):
        return None  # (another engine's kernels for a packed checkpoint: not read)
    dtype = served or stated_dtype(text)
    if dtype is None:
        return None
    size = element_type(dtype).block_bytes
    layers = int(text["num_hidden_layers"])
    sparse: frozenset[int] = frozenset()
    if mla:
        sparse = deepseek_sparse(text)
    elif model_type in MOE_FAMILIES or (model_type in GDN_FAMILIES and "num_experts" in text):
        found = moe_layout(text, model_type)
        if found is None:
            return None
        sparse = found[2]
    shares = stage_shares(layers, pp)
    first = sum(shares[:stage])
    own = range(first, first + shares[stage])
    hidden = int(text["hidden_size"])
    rows = -(-int(text["vocab_size"]) // VOCAB_PAD) * VOCAB_PAD // tp
    tied = bool(text.get("tie_word_embeddings", False))
    last = stage == pp - 1
    # the vocab matrices a stage builds: embed_tokens on the first stage, and on a tied
    # model's last (lm_head ties to it); a separate lm_head on an untied model's last
    leading, trailing = stage == 0 or (last and tied), last and not tied
    embeds = leading + trailing
    kinds = qwen3_next_layer_types(text) if gdn else ["full_attention"] * layers
    pattern = str(text.get("hybrid_override_pattern") or "")
    if mamba and (len(pattern) != layers or set(pattern) - set("M*-E")):
        return None
    layers_own = [
        _mla_layer_tensors(text, tp, i in sparse) if mla else
        _gdn_layer_tensors(text, tp, kinds[i], i in sparse) if gdn else
        _nemotron_h_layer_tensors(text, tp, pattern[i], capability) if mamba else
        _mimo_layer_tensors(text, tp, i) if mimo else
        _layer_tensors(text, model_type, tp, i in sparse)
        for i in own
    ]  # fmt: skip
    tensors = [t for attention, rest in layers_own for t in (*attention, *rest)]
    linear = sum(t.elements for t in tensors if t.linear)
    own_dtype = [t for t in tensors if t.element_bytes and not t.linear]
    params = embeds * rows * hidden + sum(t.elements for t in tensors)
    params += hidden if last else 0
    params += sum(t.elements for t in tower)
    rope_size = rope_bytes or size
    ropes = [
        (
            at,
            positions * rotary * rope_size,
            f"{positions:,}{f' ({kind})' if kind else ''} x {rotary}",
        )
        for at, positions, rotary, kind in _rotary_caches(text, model_type, own, kinds)
    ]
    rope = sum(b for _, b, _ in ropes)
    head = (
        f"{model_type} on TP {tp} x PP {pp} (stage {stage}): "
        f"{tower_text + ' + ' if tower_text else ''}{embeds} x vocab "
        f"{rows:,} rows/rank x {hidden:,} + {len(own)} layers sharded = {params:,} parameters"
    )
    if ropes:
        caches = " + ".join(t for _, _, t in ropes)
        tail = f"rotary cache{'s' if len(ropes) > 1 else ''} {caches} x {rope_size} B"
    else:
        tail = "no rotary cache"
    if mamba and "E" in pattern and capability is None:
        tail += (
            " (the MoE routers in the model dtype, as on compute capability 9.0 and 10.x; "
            "float32 on other cards: give the card's capability)"
        )
    wider = sum(t.elements * (t.element_bytes - size) for t in own_dtype)
    if own_dtype:
        tail += f" + {sum(t.elements for t in own_dtype):,} float32 parameters' extra {wider:,} B"
    if isinstance(storage, PackedStorage):
        packed = _packed_total(storage, tensors, size)
        if packed is None:
            return None
        held, held_text = packed
        rest = params - linear
        total = held + rest * size + rope + wider
        derivation = (
            f"{head}, of them {linear:,} in linear layers held as {held_text} + "
            f"{rest:,} x {size} B ({dtype}) + {tail} = {total:,} B"
        )
    elif storage.bits is None:
        total = params * size + rope + wider
        derivation = f"{head} x {size} B ({dtype}) + {tail} = {total:,} B"
    else:
        scales = sum(storage.scale_bytes(t, size) for t in tensors)
        rest = params - linear
        copies = len(own) * _mla_dequantized(text, tp, size) if mla else 0
        total = linear * storage.bits // 8 + scales + rest * size + rope + wider + copies
        count = sum(1 for t in tensors if t.linear)
        if storage.marlin:
            scale_text = (
                f"{scales:,} B of {size}-byte scales per output channel"
                f"{' per k-block of inputs' if storage.scale == 'block' else ''} and "
                f"workspaces ({count} linear layers)"
            )
        elif storage.scale == "layer" and not mla:
            scale_text = f"{len(own) * FP8_LINEARS_PER_LAYER} float32 scales"
        else:
            scale_text = f"{scales:,} B of float32 scales ({storage.scale}: {count} linear layers)"
        if storage.fp8 and capability is None:
            scale_text += (
                " (on a card with fp8 kernels, compute capability 8.9 on; older cards "
                "repack for Marlin: give the card's capability)"
            )
        copy_text = (
            f" + {len(own)} x kv_b_proj dequantized to {size} B ({copies:,} B, W_UK_T/W_UV)"
            if copies
            else ""
        )
        derivation = (
            f"{head}, of them {linear:,} in linear layers x {storage.bits / 8:g} B "
            f"({storage.text}) + {scale_text} + {rest:,} x {size} B ({dtype}) + {tail}"
            f"{copy_text} = {total:,} B"
        )
    if not cuda_blocks or (isinstance(storage, LinearStorage) and not storage.blocks):
        return RankWeights(total, derivation)
    order = _creation_order(
        layers_own, size, storage, rows * hidden * size, hidden * size,
        [(at, b) for at, b, _ in ropes], leading=leading, trailing=trailing, last=last,
    )  # fmt: skip
    order = [t.elements * size for t in tower] + order  # the tower comes first
    if mla and isinstance(storage, LinearStorage) and storage.bits is not None:
        order += [_mla_dequantized(text, tp, size)] * len(own)  # after the load
    blocks = allocated_bytes(order)
    return RankWeights(
        blocks,
        f"{derivation}; as CUDA's caching allocator counts it, {blocks:,} B ({blocks - total:,} B "
        "of blocks left whole: a segment with <= 1 MiB spare is not split, "
        "c10/cuda/CUDACachingAllocator.cpp)",
    )


# Gemma 2 and 3 (vLLM model_executor/models/gemma2.py, gemma3.py, gemma3_mm.py, siglip.py,
# v0.19.0)
GEMMA3_FAMILIES = ("gemma3", "gemma3_text")
GEMMA_FAMILIES = ("gemma2", *GEMMA3_FAMILIES)
# what a published Gemma 3 config leaves to Gemma3TextConfig (transformers
# models/gemma3/configuration_gemma3.py)
GEMMA3_DEFAULTS = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window_pattern": 6,
}


def gemma_rank_weights(
    text: dict[str, Any],
    model_type: str,
    *,
    tp: int = 1,
    served: str | None = None,
    cuda_blocks: bool = False,
) -> RankWeights | None:
    """Gemma 2 or 3 on one vLLM rank: the SigLIP vision tower and the projector (where the
    config has a vision_config), then the text model, in the order vLLM creates them.
    Gemma 2 has no q/k norms and one rotary cache (every layer's rope is the same,
    shared through ``_ROPE_DICT``); the rest is as Gemma 3's:

    - the tower (siglip.py): a conv patch embedding (weight and bias), a position
      embedding of (image/patch)^2 rows (VocabParallelEmbedding, split over TP) and its
      int64 position_ids buffer; per layer two LayerNorms (weight and bias), q/k/v and
      out projections with biases, fc1 and fc2 with biases; a post LayerNorm;
    - the projector (gemma3_mm.py): mm_input_projection_weight vision x text hidden and
      an RMSNorm of the vision width, whole on every rank;
    - the text model (gemma3.py): the embedding (tied to the logits), per layer q/k/v and
      o, q/k norms of head_dim, gate/up and down, four norms; the final norm; two rotary
      caches: the local layers' (default rope, max_position x head_dim) built by layer 0,
      the global layers' (rope_scaling: a linear factor f caches max_position x f
      positions, LinearScalingRotaryEmbedding) built by the first global layer."""
    gemma3 = model_type in GEMMA3_FAMILIES
    cfg = {**GEMMA3_DEFAULTS, **text} if gemma3 else dict(text)
    dtype = served or stated_dtype(cfg)
    if dtype is None:
        return None
    size = element_type(dtype).block_bytes
    try:
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
        head_dim, inter = int(cfg["head_dim"]), int(cfg["intermediate_size"])
        vocab, positions = int(cfg["vocab_size"]), int(cfg["max_position_embeddings"])
        pattern = int(cfg.get("sliding_window_pattern") or 6)
    except (KeyError, TypeError, ValueError):
        return None
    found = cfg.get("rope_scaling")
    scaling: dict[str, Any] = found if isinstance(found, dict) else {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default")
    if kind not in ("default", "linear") or (kind != "default" and not gemma3):
        return None
    factor = float(scaling.get("factor") or 1.0) if kind == "linear" else 1.0
    global_positions = int(positions * factor)
    sizes: list[Step] = []
    parts: list[str] = []
    vision = cfg.get("vision_config")
    if isinstance(vision, dict):
        tower = _siglip(vision, hidden, tp, size)
        if tower is None:
            return None
        sizes += tower[0]
        parts.append(tower[1])
    q, k = heads // tp * head_dim, max(1, kv // tp) * head_dim
    rows = -(-vocab // VOCAB_PAD) * VOCAB_PAD // tp
    share = inter // tp
    sizes.append(rows * hidden * size)
    for index in range(layers):
        sizes += [hidden * (q + 2 * k) * size, q * hidden * size]
        if index == 0:  # the local layers' rope
            sizes += rotary_cache_steps(positions, head_dim, size, "local")
        if index == pattern - 1 and gemma3:  # the global layers' rope
            linear = factor if kind == "linear" else None
            sizes += rotary_cache_steps(positions, head_dim, size, "global", linear)
        if gemma3:
            sizes += [head_dim * size, head_dim * size]  # q_norm, k_norm
        sizes += [2 * share * hidden * size, share * hidden * size]  # gate_up, down
        sizes += [hidden * size] * 4
    sizes.append(hidden * size)
    total = sum(step for step in sizes if isinstance(step, int))
    ropes = (
        f"rotary caches {positions:,} (local) and {global_positions:,} ({kind} x{factor:g}, "
        f"global) x {head_dim}"
        if gemma3
        else f"one rotary cache {positions:,} x {head_dim}"
    )
    parts.append(
        f"text: embedding {rows:,} rows/rank x {hidden:,} (tied), {layers} layers of q/k/v "
        f"{hidden:,}x({heads}+2x{kv})x{head_dim} / TP {tp} + o{' + q/k norms' if gemma3 else ''}"
        f" + gate/up/down 3x{hidden:,}x{inter:,} / TP {tp} + 4 norms, final norm; {ropes}"
    )
    derivation = f"{model_type} on TP {tp}: {'; '.join(parts)}; x {size} B ({dtype}) = {total:,} B"
    if not cuda_blocks:
        return RankWeights(total, derivation)
    blocks = allocated_bytes(sizes)
    return RankWeights(
        blocks,
        f"{derivation}; as CUDA's caching allocator counts it, {blocks:,} B ({blocks - total:,} B "
        "of blocks left whole, c10/cuda/CUDACachingAllocator.cpp)",
    )


def rotary_cache_steps(
    positions: int, rotary_dim: int, size: int, key: str, factor: float | None = None
) -> list[Step]:
    """A rotary cache as vLLM builds it on the device, with the float32 temporaries the
    allocator sees freed: the inverse frequencies, the positions, freqs, cos and sin, their
    concatenation, then the cache in the model dtype (rotary_embedding/base.py
    ``_compute_cos_sin_cache`` and ``__init__``, 0.21.0). ``factor``: a linear scaling's,
    whose positions are divided by it in a second tensor and whose caches are
    concatenated once more (linear_scaling_rope.py, 0.21.0)."""
    half = rotary_dim // 2
    count = int(positions * factor) if factor is not None else positions
    steps: list[Step] = [Temporary(half * 4, f"{key}.inv_freq"), Temporary(count * 4, f"{key}.t")]
    if factor is not None:  # t = t / scaling_factor: a new tensor, the first one freed
        steps += [Temporary(count * 4, f"{key}.t_scaled"), Release(f"{key}.t")]
    temporaries = ["inv_freq", "t_scaled" if factor is not None else "t"]
    for name in ("freqs", "cos", "sin"):
        steps.append(Temporary(count * half * 4, f"{key}.{name}"))
        temporaries.append(name)
    steps.append(Temporary(count * rotary_dim * 4, f"{key}.cache"))
    returned = f"{key}.cache"
    if factor is not None:  # torch.cat(cache_list): one more float32 copy is returned
        steps.append(Temporary(count * rotary_dim * 4, f"{key}.caches"))
        temporaries.append("cache")
        returned = f"{key}.caches"
    steps += [Release(f"{key}.{name}") for name in temporaries]
    steps += [count * rotary_dim * size, Release(returned)]  # cache.to(dtype), kept
    return steps


def _siglip(
    vision: dict[str, Any], text_hidden: int, tp: int, size: int
) -> tuple[list[int], str] | None:
    """A SigLIP tower and Gemma 3's projector, tensor by tensor in creation order."""
    try:
        width, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
        layers, patch = int(vision["num_hidden_layers"]), int(vision["patch_size"])
        image, channels = int(vision["image_size"]), int(vision.get("num_channels") or 3)
    except (KeyError, TypeError, ValueError):
        return None
    if vision.get("vision_use_head"):
        return None  # a pooling head fakplan does not count
    count = (image // patch) ** 2
    positions = -(-count // VOCAB_PAD) * VOCAB_PAD // tp
    sizes = [width * channels * patch * patch * size, width * size]  # conv weight, bias
    sizes += [positions * width * size, count * 8]  # position embedding, position_ids
    w, f = width // tp, inter // tp
    for _ in range(layers):
        sizes += [width * size, width * size]  # layer_norm1
        sizes += [3 * w * width * size, 3 * w * size, width * w * size, width * size]
        sizes += [width * size, width * size]  # layer_norm2
        sizes += [f * width * size, f * size, width * f * size, width * size]
    sizes += [width * size, width * size]  # post_layernorm
    sizes += [width * text_hidden * size, width * size]  # projector weight, its norm
    text = (
        f"vision tower: patch {channels}x{patch}x{patch} conv + {count:,} positions x "
        f"{width:,} + {layers} layers (q/k/v/out {width:,}^2, fc1/fc2 {width:,}x{inter:,}, "
        f"biases, 2 LayerNorms) / TP {tp}; projector {width:,}x{text_hidden:,}"
    )
    return sizes, text


def linear_storage(
    text: dict[str, Any],
    model_type: str,
    quantization: str | None,
    *,
    capability: str | None = None,
    tp: int = 1,
    sms: int | None = None,
) -> LinearStorage | PackedStorage | str:
    """How vLLM stores the linear layers' weights for this checkpoint and --quantization
    (on a card of ``capability``, where the kernel depends on it), or why fakplan does not
    count them."""
    counted = (
        *DENSE_FAMILIES, *MOE_FAMILIES, *GEMMA_FAMILIES, *MLA_FAMILIES, *GDN_FAMILIES,
        *MAMBA_FAMILIES, *SWA_HYBRID_FAMILIES,
    )  # fmt: skip
    if model_type not in counted:
        return f"{model_type}: its weights per rank are not counted from a config"
    experts = model_type in (
        *MOE_FAMILIES, *MLA_FAMILIES, *GDN_FAMILIES, *MAMBA_FAMILIES, *SWA_HYBRID_FAMILIES,
    )  # fmt: skip
    scheme = text.get("quantization_config")
    if scheme is None:
        if quantization is None:
            return LinearStorage()
        if quantization == "fp8" and not experts:
            online = LinearStorage(
                8, "layer", blocks=False, text="fp8, --quantization fp8", fp8=True
            )
            return _fp8_on_card(online, capability, sms, experts)
        return f"{model_type} under --quantization {quantization}: not counted"
    found = checkpoint_storage(scheme, capability, tp, sms)
    if isinstance(found, str):
        return found
    method = str(scheme.get("quant_method")) if isinstance(scheme, dict) else ""
    if isinstance(found, PackedStorage):
        moe = model_type in MOE_FAMILIES and found.layout in ("gptq", "awq")
        if model_type not in DENSE_FAMILIES and not moe:
            return (
                f"{article(found.text)} {found.text} {model_type} checkpoint: read for the "
                "dense decoders (and GPTQ's and AWQ's mixtures of experts)"
            )
        # GPTQMarlinConfig / AWQMarlinConfig.override_quantization_method: gptq_marlin or
        # awq_marlin unless the user asks for another method (--quantization gptq or awq
        # keeps that method's own kernel)
        if quantization is not None and UNIFIED_METHODS.get(quantization) == method:
            if model_type not in DENSE_FAMILIES:
                return (
                    f"{article(found.text)} {found.text} {model_type} checkpoint under "
                    f"{quantization}: 0.26's mixture-of-experts method for it (a backend "
                    "select_wna16_moe_backend chooses) is not read"
                )
            return found
        if quantization not in (None, f"{method}_marlin", "marlin") and not (
            quantization == method and method == "compressed-tensors"
        ):
            return f"--quantization {quantization} over a {method} checkpoint: not read"
        return found
    if experts and found.scale != "block":
        return f"a {found.text} mixture of experts: its fused experts' scales are not counted"
    if model_type in MAMBA_FAMILIES:
        return (
            f"a {found.text} non-gated mixture of experts: Fp8MoEMethod creates w13 at twice "
            "the intermediate whatever the activation (fp8.py), which is not read"
        )
    if quantization not in (None, method):
        return f"--quantization {quantization} over a {method} checkpoint"
    return _fp8_on_card(found, capability, sms, experts)


def _fp8_on_card(
    storage: LinearStorage, capability: str | None, sms: int | None, experts: bool
) -> LinearStorage | str:
    """fp8 weights on a card without fp8 kernels (compute capability 7.5 to 8.9):
    MarlinFP8ScaledMMLinearKernel comes first in vLLM's list and takes them below 8.9
    (kernels/linear/scaled_mm/marlin.py is_supported, v0.19.0), repacking them W8A16."""
    if not storage.fp8 or capability is None:
        return storage
    cap = capability_number(capability)
    if cap >= 89:
        return storage
    if cap < 75:
        return f"fp8 weights on compute capability {capability}: vLLM has no kernel for them"
    if experts:
        return (
            f"fp8 weights of a family with experts or layers of its own on compute capability "
            f"{capability}: Marlin's repack of them (prepare_fp8_moe_layer_for_marlin) is not "
            "read (read: the dense decoders)"
        )
    return dataclasses.replace(
        storage,
        marlin=True,
        sms=sms,
        text=f"{storage.text}, repacked for Marlin on compute capability {capability} "
        "(scales in the model dtype per output channel)",
    )


# what an fp8 checkpoint may leave unquantized that vLLM never quantizes anyway (the
# router, norms, the vocab matrices): Qwen3's FP8 checkpoints list lm_head, the norms and
# mlp.gate of every layer in modules_to_not_convert
_NEVER_QUANTIZED = ("lm_head", "embed_tokens", "norm", "layernorm", "mlp.gate")


def _fp8_storage(scheme: dict[str, Any]) -> LinearStorage | str:
    """An fp8 checkpoint (quant_method fp8) as vLLM's Fp8LinearMethod and Fp8MoEMethod
    create it (quantization/fp8.py v0.19.0): float8 weights (1 B) and, with
    ``weight_block_size`` [n, k], one float32 ``weight_scale_inv`` per n x k block of a
    rank's weight (a fused MoE's per expert and per width); without, one float32 scale
    per logical width, requantized to the largest at load (one per layer). On cards
    without fp8 kernels (before SM 8.9) vLLM repacks the weights for Marlin
    (``_fp8_on_card``); DeepGEMM or FlashInfer may lay the scales out their own way,
    which is not counted."""
    scheme_name = str(scheme.get("activation_scheme") or "")
    if scheme_name != "dynamic":
        return (
            f"an fp8 checkpoint with {scheme_name or 'unnamed'} activations: its input scales "
            "are not counted"
        )
    ignored = scheme.get("ignored_layers") or scheme.get("modules_to_not_convert") or ()
    kept = [str(n) for n in ignored if not str(n).endswith(_NEVER_QUANTIZED)]
    if kept:
        return (
            "an fp8 checkpoint that leaves some linear layers unquantized "
            f"({', '.join(kept[:3])}): not counted"
        )
    block = scheme.get("weight_block_size")
    if block is None:
        return LinearStorage(8, "layer", text="fp8 checkpoint, per-tensor scales", fp8=True)
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) for b in block)):
        return f"an fp8 checkpoint whose weight_block_size is {block!r}, not [n, k]"
    n, k = block
    return LinearStorage(8, "block", text=f"fp8 checkpoint, {n}x{k} blocks", block=(n, k), fp8=True)


# vLLM 0.26 folds awq, awq_marlin and auto_awq into one AutoAWQConfig, and gptq,
# gptq_marlin and auto_gptq into one AutoGPTQConfig, and prints quantization=auto_awq or
# auto_gptq for such a checkpoint. Their linear methods (AutoAWQMarlinLinearMethod,
# AutoGPTQLinearMethod: quantization/auto_awq.py, auto_gptq.py, 0.26.0) are 0.19's
# AWQMarlinLinearMethod and GPTQMarlinLinearMethod renamed, line for line (the same
# choose_mp_linear_kernel, its kernels in the same order), so a dense model's layers are
# held as awq_marlin and gptq_marlin held them. Their mixture-of-experts methods are new
# (a backend chosen by select_wna16_moe_backend), and are not read.
UNIFIED_METHODS = {"auto_awq": "awq", "auto_gptq": "gptq"}


def checkpoint_storage(
    scheme: Any, capability: str | None = None, tp: int = 1, sms: int | None = None
) -> LinearStorage | PackedStorage | str:
    """A checkpoint's quantization_config as vLLM loads it, or why it is not counted.

    compressed-tensors W8A8 (the FP8_DYNAMIC / INT8_W8A8 presets of compressed-tensors'
    quantization/quant_scheme.py: 8-bit float or int weights, one scale per output
    channel, or per tensor): vLLM's CompressedTensorsW8A8Fp8 / W8A8Int8 create the
    weight in one byte per element and a float32 ChannelQuantScaleParameter of one per
    output row (a row-parallel layer's every row), or a PerTensorScaleParameter of one
    per logical width (schemes/compressed_tensors_w8a8_fp8.py, _int8.py, v0.19.0); the
    embedding and lm_head stay in the served dtype (``ignore: [lm_head]``). Weight-only
    integer checkpoints (GPTQ, compressed-tensors pack-quantized) are held as the card's
    kernel keeps them (``packed_weights``): ``capability``, ``tp`` and ``sms`` say which."""
    if not isinstance(scheme, dict):
        return "a quantization_config that is not a JSON object"
    method = str(scheme.get("quant_method") or "unnamed")
    if method == "fp8":
        return _fp8_storage(scheme)
    if method == "gptq":
        return packed_storage(scheme, capability, tp, sms)
    if method == "awq":
        return awq_storage(scheme, capability, tp, sms)
    if method == "modelopt":
        return _modelopt_reason(scheme)
    if method != "compressed-tensors":
        return f"a {method} checkpoint: its weights are not counted"
    groups = scheme.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return "a compressed-tensors checkpoint with no config_groups"
    specs = [g.get("weights") if isinstance(g, dict) else None for g in groups.values()]
    targets = {t for g in groups.values() if isinstance(g, dict) for t in g.get("targets") or ()}
    ignored = {str(i) for i in scheme.get("ignore") or ()}
    if targets != {"Linear"} or not ignored <= {"lm_head"}:
        return (
            "a compressed-tensors checkpoint that quantizes some linear layers and not others "
            f"(targets {sorted(targets)}, ignore {sorted(ignored)[:4]}): not counted"
        )
    first = specs[0]
    if not isinstance(first, dict) or any(s != first for s in specs):
        return "a compressed-tensors checkpoint whose groups store weights differently"
    bits, kind, strategy = first.get("num_bits"), first.get("type"), first.get("strategy")
    weight_only = all(
        isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()
    )
    if weight_only and kind == "int" and scheme.get("format") == "pack-quantized":
        return wna16_storage(first, capability, tp, sms)
    if bits == 8 and kind in ("float", "int") and strategy in ("channel", "tensor"):
        if first.get("symmetric") is False:
            return (
                "an asymmetric 8-bit compressed-tensors checkpoint: its zero points are not counted"
            )
        acts = [
            g.get("input_activations") if isinstance(g, dict) else None for g in groups.values()
        ]
        if not all(_dynamic_symmetric(a, kind) for a in acts):
            return (
                "a compressed-tensors checkpoint whose activations are not 8-bit, dynamic and "
                "symmetric (weight-only: repacked for Marlin; static: input scales; "
                "asymmetric: zero-point terms): not counted"
            )
        if kind == "int" and strategy == "tensor":
            return (
                "an int8 per-tensor compressed-tensors checkpoint: vLLM widens its scales as "
                "it loads; not counted"
            )
        name = "fp8" if kind == "float" else "int8"
        return LinearStorage(
            8, str(strategy), text=f"compressed-tensors {name}, {strategy} scales",
            fp8=kind == "float",
        )  # fmt: skip
    return (
        f"a compressed-tensors {bits}-bit {kind} {strategy} checkpoint: vLLM repacks it as it "
        "loads (Marlin), a transient fakplan does not read; its weights are not counted"
    )


# the per-layer algorithms ModelOptMixedPrecisionConfig.get_quant_method builds a quantized
# layer for up to vLLM 0.21 (quantization/modelopt.py, 0.19.0 and 0.21.0); any other leaves
# the layer unquantized, so the checkpoint's packed tensors for it do not load. 0.22.0 adds
# W4A16_NVFP4 for linear layers and experts, 0.23.0 for the LM head too (ParallelLMHead)
MIXED_PRECISION_READ = ("FP8", "NVFP4")


def _modelopt_reason(scheme: dict[str, Any]) -> str:
    """Why a ModelOpt checkpoint's weights are not counted for this family (Gemma 4's
    NVFP4 is: ``gemma4_weights``), or which vLLM releases load it at all."""
    algo = str(scheme.get("quant_algo") or "unnamed").upper()
    layers = scheme.get("quantized_layers")
    if algo == "MIXED_PRECISION" and isinstance(layers, dict):
        algos: dict[str, list[str]] = {}
        for name, spec in layers.items():
            found = str(spec.get("quant_algo") if isinstance(spec, dict) else spec).upper()
            algos.setdefault(found, []).append(str(name))
        unread = {a: n for a, n in algos.items() if a not in MIXED_PRECISION_READ}
        if unread:
            said = ", ".join(
                f"{a} ({len(n)} layers{', lm_head among them' if 'lm_head' in n else ''})"
                for a, n in sorted(unread.items())
            )
            if set(unread) == {"W4A16_NVFP4"}:
                return (
                    f"a ModelOpt mixed-precision checkpoint whose quantized_layers name {said}: "
                    "vLLM's ModelOptMixedPrecisionConfig builds FP8 and NVFP4 layers only up "
                    "to 0.21 (so those layers are built unquantized and their packed tensors "
                    "have nowhere to load), W4A16_NVFP4 linear layers and experts from 0.22 "
                    "and the LM head from 0.23 (quantization/modelopt.py get_quant_method; "
                    "public 0.22.0 boots fail on lm_head.input_scale: vllm#44081, vllm#45102); "
                    "fakplan does not count W4A16_NVFP4 layers (Marlin's weight-only NVFP4) yet"
                )
            return (
                f"a ModelOpt mixed-precision checkpoint whose quantized_layers name {said}: "
                "an algorithm vLLM's ModelOptMixedPrecisionConfig builds no quantized layer "
                "for in the releases read (FP8 and NVFP4 to 0.21, W4A16_NVFP4 from 0.22; "
                "quantization/modelopt.py get_quant_method), so those layers' packed tensors "
                "have nowhere to load; fakplan does not count it"
            )
    return (
        f"a ModelOpt {algo} checkpoint: NVFP4 layers are counted for Gemma 4 only "
        "(engines/nvfp4_weights.py), and FP8 layers with static input scales and NVFP4 "
        "experts (ModelOptNvFp4FusedMoE) are not read"
    )


def _dynamic_symmetric(spec: Any, kind: Any) -> bool:
    """W8A8's activations as counted: quantized per token as they come (no stored input
    scale), symmetric (no zero-point term), 8 bits of the weights' type."""
    return (
        isinstance(spec, dict)
        and spec.get("num_bits") == 8
        and spec.get("type") == kind
        and spec.get("dynamic") is True
        and spec.get("symmetric") is not False
    )


def weights_unknown(
    text: dict[str, Any],
    model_type: str,
    quantization: str | None,
    capability: str | None = None,
    tp: int = 1,
) -> str:
    """Why ``vllm_rank_weights`` gives None for this config (a sentence)."""
    found = linear_storage(text, model_type, quantization, capability=capability, tp=tp)
    if isinstance(found, str):
        return found
    if isinstance(found, PackedStorage):
        if stated_dtype(text) is None:
            stated = text.get("torch_dtype") or text.get("dtype")
            return (
                f"{article(found.text)} {found.text} checkpoint whose config states no dtype "
                f"({stated!r}): give --dtype"
            )
        return (
            f"{article(found.text)} {found.text} checkpoint on compute capability "
            f"{found.capability}: a layer's shape sends it to a kernel whose tensors are not "
            "read - experts to MoeWNA16 (hidden not a multiple of 128, or the rank's "
            "intermediate not of 64 and of the group: check_moe_marlin_supports_layer), "
            "8-bit per-channel layers on SM 8.x to AllSpark, a shape Marlin refuses to "
            "Exllama or AWQ's own kernel (outputs not a multiple of 64, inputs of 128)"
        )
    return f"{model_type}: its checkpoint dtype or layer layout is not read from the config"


def weights_refusal(
    text: dict[str, Any],
    model_type: str,
    quantization: str | None,
    tp: int,
    pp: int,
    capability: str | None = None,
    served: str | None = None,
    language_model_only: bool = False,
    batched_tokens: int | None = None,
    sms: int | None = None,
) -> str:
    """Why ``vllm_rank_weights`` gives None at this TP/PP (a sentence)."""
    if model_type in GEMMA4_FAMILIES:
        found = gemma4_refusal(
            text, tp=tp, pp=pp, quantization=quantization,
            language_model_only=language_model_only, batched_tokens=batched_tokens,
            capability=capability, sms=sms, served=served,
        )  # fmt: skip
        return found or "gemma4: its weights are not counted for this launch"
    if language_model_only:
        text = without_towers(text)
    if "audio" in towers(text):
        return (
            f"{model_type}: its audio tower is not counted; serve it text-only "
            "(--language-model-only leaves the towers out) or state the pair"
        )
    if model_type == "gpt_oss":
        found = gpt_oss_refusal(
            text, tp=tp, pp=pp, served=served, quantization=quantization, capability=capability
        )
        return found or "gpt_oss: its config lacks a field its layers need"
    return layout_refusal(text, model_type, tp, pp) or weights_unknown(
        text, model_type, quantization, capability, tp
    )


def _held(storage: PackedStorage, t: Tensor, size: int) -> list[int] | None:
    """A packed checkpoint's linear tensor as its kernel keeps it (``packed_weights``)."""
    return storage.allocations(t.elements, t.rows, t.split_input, size, t.experts)


def _packed_total(storage: PackedStorage, tensors: Tensors, size: int) -> tuple[int, str] | None:
    """A packed checkpoint's linear layers on the rank, as their kernels hold them: the
    bytes and how they split, or None where a layer goes to a kernel not read."""
    held = 0
    kernels: dict[str, int] = {}
    packed = 0
    for t in tensors:
        if not t.linear:
            continue
        found = _held(storage, t, size)
        kernel = storage.kernel(t.rows, t.elements // t.rows, t.split_input, t.experts)
        if found is None or kernel is None:
            return None
        held += sum(found)
        packed += t.elements * storage.bits // 8
        kernels[kernel] = kernels.get(kernel, 0) + 1
    by_kernel = ", ".join(f"{n} on {k}" for k, n in sorted(kernels.items()))  # layers
    text = (
        f"{storage.text} on compute capability {storage.capability} (layers: {by_kernel}): "
        f"{packed:,} B packed + {held - packed:,} B of scales, zero points, indices and "
        f"workspaces the kernels keep = {held:,} B"
    )
    return held, text


def _creation_order(
    layers: list[tuple[Tensors, Tensors]],
    size: int,
    storage: LinearStorage | PackedStorage,
    vocab_matrix: int,
    norm: int,
    ropes: list[tuple[int, int]],
    *,
    leading: bool,
    trailing: bool,
    last: bool,
) -> list[int]:
    """The rank's tensors in bytes, in the order vLLM's model constructor creates them: a
    leading vocab matrix (embed_tokens), each layer (the first one's attention builds the
    one rotary cache; a quantized linear layer's weight, then its scales), the final norm
    on the last stage, a trailing lm_head (LlamaForCausalLM and its kin)."""

    def allocations(tensors: Tensors) -> list[int]:
        out = []
        for t in tensors:
            if isinstance(storage, PackedStorage):
                held = _held(storage, t, size) if t.linear else None
                out += held or [t.elements * (t.element_bytes or size)]
                continue
            out += storage.allocations(t, size)
        return out

    out = [vocab_matrix] if leading else []
    for index, (attention, rest) in enumerate(layers):
        out += allocations(attention)
        out += [b for at, b in ropes if at == index]
        out += allocations(rest)
    out += [norm] if last else []
    return out + ([vocab_matrix] if trailing else [])
