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

A quantized checkpoint, or any other architecture, has no count here (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakplan.dtypes import element_type
from fakplan.engines.torch_allocator import allocated_bytes
from fakplan.geometry.params import CHECKPOINT_DTYPES, DENSE_FAMILIES, MOE_FAMILIES, moe_layout

VOCAB_PAD = 64  # DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py, v0.19.0)


@dataclass(frozen=True)
class RankWeights:
    bytes: int
    derivation: str


def stage_shares(layers: int, pp: int) -> list[int]:
    """get_pp_indices: equal shares, the remainder going to the stages before the last."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


Tensors = list[tuple[int, bool]]  # (elements, whether a linear layer's weight)


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
    o_bias = bias and model_type in ("llama", "mistral")
    out: Tensors = [(hidden * (q + 2 * kv_rank), True)]  # qkv_proj
    if qkv_bias:
        out.append((q + 2 * kv_rank, False))  # q, k, v biases, split with their columns
    out.append((q * hidden, True))  # o_proj
    if o_bias:
        out.append((hidden, False))  # o's bias whole on every rank
    attention, out = out, []
    if model_type in ("qwen3", "qwen3_moe"):
        out += [(head_dim, False), (head_dim, False)]  # q_norm, k_norm
    if sparse:
        count, moe_inter, _ = moe_layout(text, model_type)  # type: ignore[misc]
        share = moe_inter // tp
        experts: Tensors = [(count * 2 * share * hidden, True), (count * hidden * share, True)]
        router = (hidden * count, False)  # replicated and unquantized
        # MixtralMoE builds its gate before FusedMoE; Qwen3MoeSparseMoeBlock after
        out += [router, *experts] if model_type == "mixtral" else [*experts, router]
    else:
        share = int(text["intermediate_size"]) // tp
        out += [(2 * share * hidden, True), (hidden * share, True)]  # gate_up, down
    return attention, [*out, (hidden, False), (hidden, False)]  # input, post-attention norms


# --quantization fp8 on a 16-bit checkpoint (quantization/fp8.py Fp8OnlineLinearMethod,
# v0.19.0): every LinearBase weight becomes float8 (1 B) with one float32 scale from
# ops.scaled_fp8_quant(weight, scale=None); embeddings, lm_head, norms and biases stay in
# the model dtype. Per decoder layer four linear layers: qkv, o, gate_up, down.
FP8_LINEARS_PER_LAYER = 4
FP8_SCALE_BYTES = 4


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
) -> RankWeights | None:
    """The bytes PP stage ``stage`` of a TP rank loads, with their derivation; None where
    the config alone does not give them. ``served``: the dtype the weights are served in
    (``--dtype``), else the checkpoint's; ``quantization``: vLLM's --quantization (fp8,
    online, on the dense decoders; any other is not counted); ``rope_bytes``: the rotary
    cache's element size where the engine does not keep it in the model dtype (SGLang's
    float32); ``cuda_blocks``: count what PyTorch's CUDA caching allocator holds for the
    tensors, as vLLM's "Model loading took" measures on a GPU (torch_allocator; the plain
    sum elsewhere, and with --quantization fp8, whose load frees and reuses blocks)."""
    if model_type not in (*DENSE_FAMILIES, *MOE_FAMILIES) or "quantization_config" in text:
        return None
    if quantization is not None and (quantization != "fp8" or model_type in MOE_FAMILIES):
        return None
    stated = CHECKPOINT_DTYPES.get(str(text.get("torch_dtype") or text.get("dtype") or ""))
    dtype = served or stated
    if dtype is None:
        return None
    size = element_type(dtype).block_bytes
    layers = int(text["num_hidden_layers"])
    sparse: frozenset[int] = frozenset()
    if model_type in MOE_FAMILIES:
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
    layers_own = [_layer_tensors(text, model_type, tp, i in sparse) for i in own]
    tensors = [t for attention, rest in layers_own for t in (*attention, *rest)]
    linear = sum(n for n, is_linear in tensors if is_linear)
    params = embeds * rows * hidden + sum(n for n, _ in tensors)
    params += hidden if last else 0
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or hidden // heads)
    rotary = int(head_dim * float(text.get("partial_rotary_factor") or 1.0))
    positions = int(text["max_position_embeddings"])
    rope_size = rope_bytes or size
    rope = positions * rotary * rope_size
    head = (
        f"{model_type} on TP {tp} x PP {pp} (stage {stage}): {embeds} x vocab "
        f"{rows:,} rows/rank x {hidden:,} + {len(own)} layers sharded = {params:,} parameters"
    )
    tail = f"rotary cache {positions:,} x {rotary} x {rope_size} B"
    if quantization is None:
        total = params * size + rope
        derivation = f"{head} x {size} B ({dtype}) + {tail} = {total:,} B"
        if not cuda_blocks:
            return RankWeights(total, derivation)
        blocks = allocated_bytes(
            _creation_order(layers_own, size, rows * hidden * size, hidden * size, rope,
                            leading=leading, trailing=trailing, last=last)
        )  # fmt: skip
        return RankWeights(
            blocks,
            f"{derivation}; as CUDA's caching allocator counts it, {blocks:,} B ({blocks - total:,} B "
            "of blocks left whole: a segment with <= 1 MiB spare is not split, "
            "c10/cuda/CUDACachingAllocator.cpp)",
        )
    scales = len(own) * FP8_LINEARS_PER_LAYER * FP8_SCALE_BYTES
    rest = params - linear
    total = linear + scales + rest * size + rope
    return RankWeights(
        total,
        f"{head}, of them {linear:,} in linear layers x 1 B (fp8, --quantization fp8) + "
        f"{len(own) * FP8_LINEARS_PER_LAYER} float32 scales + {rest:,} x {size} B ({dtype}) "
        f"+ {tail} = {total:,} B",
    )


def _creation_order(
    layers: list[tuple[Tensors, Tensors]],
    size: int,
    vocab_matrix: int,
    norm: int,
    rope: int,
    *,
    leading: bool,
    trailing: bool,
    last: bool,
) -> list[int]:
    """The rank's tensors in bytes, in the order vLLM's model constructor creates them: a
    leading vocab matrix (embed_tokens), each layer (the first one's attention builds the
    one rotary cache), the final norm on the last stage, a trailing lm_head
    (LlamaForCausalLM and its kin)."""
    out = [vocab_matrix] if leading else []
    for index, (attention, rest) in enumerate(layers):
        out += [n * size for n, _ in attention]
        out += [rope] if index == 0 else []
        out += [n * size for n, _ in rest]
    out += [norm] if last else []
    return out + ([vocab_matrix] if trailing else [])
