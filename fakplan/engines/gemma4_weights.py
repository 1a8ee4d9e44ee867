"""Gemma 4's weights per rank as vLLM builds them, from config.json alone.

Read in vLLM 0.19.0's ``model_executor/models/gemma4.py`` and ``gemma4_mm.py``. The text
model differs from Gemma 3's in ways that move gigabytes:

- a full-attention layer has heads of its own: ``global_head_dim`` wide and, where
  ``attention_k_eq_v`` holds, ``num_global_key_value_heads`` of them. vLLM still builds
  the whole ``qkv_proj`` (``QKVParallelLinear``) for such a layer and loads the K weights
  into the V slot too, so V's columns are counted;
- q and k norms of the layer's head width; the v norm has no weight;
- two rotary caches, keyed by layer type (``get_rope``'s ``_ROPE_DICT``):
  - the sliding layers' (default rope) of ``max_position x head_dim``;
  - the full layers' (``Gemma4RotaryEmbedding``, "proportional") of ``max_position x
    global_head_dim``: it applies its rotation to every dimension, zero angles past the
    partial factor (``rotary_embedding/gemma4_rope.py``);
- four norms a layer, and a ``layer_scalar`` buffer of one element;
- the last ``num_kv_shared_layers`` layers read an earlier layer's cache. With
  ``use_double_wide_mlp`` their MLP is twice as wide;
- ``enable_moe_block`` adds a mixture of experts beside the MLP:
  - the router (``Gemma4Router``): a scale of ``hidden`` and a ``GateLinear`` of
    ``hidden x num_experts`` in the model dtype;
  - ``per_expert_scale``;
  - ``FusedMoE``'s w13 and w2 at ``moe_intermediate_size`` split over TP;
  - three more norms;
- per-layer embeddings (``hidden_size_per_layer_input`` > 0):
  - a second vocabulary matrix of ``vocab_size_per_layer_input x (ple x layers)``;
  - a column-parallel projection from ``hidden`` to ``ple x layers``;
  - a norm;
  - per layer, a gate and a projection (replicated) and a norm;
  - in the multimodal wrapper, a buffer of ``max_num_batched_tokens x layers x ple``;
- the embedding is tied to the logits (``tie_word_embeddings``); an untied model adds
  ``lm_head``.

The vision and audio towers are transformers' own modules, built by
``AutoModel.from_config``; their sizes are not read. vLLM leaves them out (on the meta
device) when every modality's ``--limit-mm-per-prompt`` is 0, as ``--language-model-only``
sets: ``_mark_tower_model`` in ``models/interfaces.py`` and ``no_init_weights`` in
``models/utils.py``, v0.19.0. Only then are Gemma 4's weights counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakplan.dtypes import element_type
from fakplan.engines.rank_weights import VOCAB_PAD, RankWeights
from fakplan.engines.torch_allocator import allocated_bytes
from fakplan.geometry.params import CHECKPOINT_DTYPES

GEMMA4_FAMILIES = ("gemma4", "gemma4_text")
# the configs of the towers a multimodal checkpoint builds beside its text model
TOWER_CONFIGS = ("vision_config", "audio_config")


def _up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class _Layout:
    """The config fields the count reads, checked once."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    global_kv_heads: int
    head_dim: int
    global_head_dim: int
    inter: int
    vocab: int
    positions: int
    kinds: tuple[str, ...]
    k_eq_v: bool
    shared: int
    double_wide: bool
    experts: int
    moe_inter: int
    ple: int
    ple_vocab: int
    tied: bool
    bias: bool


def _layout(text: dict[str, Any]) -> _Layout | str:
    """The fields, or why they cannot be read (a sentence)."""
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        heads, kv_heads = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
        head_dim = int(text["head_dim"])
        vocab, positions = int(text["vocab_size"]), int(text["max_position_embeddings"])
        inter = int(text["intermediate_size"])
        kinds = tuple(str(k) for k in text["layer_types"])
    except (KeyError, TypeError, ValueError):
        return "gemma4: its config lacks a field its layers need (or layer_types is not a list)"
    if len(kinds) != layers or set(kinds) - {"sliding_attention", "full_attention"}:
        return "gemma4: layer_types does not name one sliding or full layer per layer"
    k_eq_v = bool(text.get("attention_k_eq_v"))
    moe = bool(text.get("enable_moe_block") or text.get("use_second_mlp_block"))
    experts = int(text.get("num_experts") or 0) if moe else 0
    moe_inter = int(text.get("moe_intermediate_size") or text.get("expert_intermediate_size") or 0)
    if moe and not (experts and moe_inter):
        return "gemma4: enable_moe_block without num_experts and moe_intermediate_size"
    return _Layout(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        global_kv_heads=int(text.get("num_global_key_value_heads") or kv_heads)
        if k_eq_v
        else kv_heads,
        head_dim=head_dim,
        global_head_dim=int(text.get("global_head_dim") or head_dim),
        inter=inter,
        vocab=vocab,
        positions=positions,
        kinds=kinds,
        k_eq_v=k_eq_v,
        shared=int(text.get("num_kv_shared_layers") or 0),
        double_wide=bool(text.get("use_double_wide_mlp")),
        experts=experts,
        moe_inter=moe_inter if moe else 0,
        ple=int(text.get("hidden_size_per_layer_input") or 0),
        ple_vocab=int(text.get("vocab_size_per_layer_input") or vocab),
        tied=bool(text.get("tie_word_embeddings", True)),
        bias=bool(text.get("attention_bias")),
    )


def gemma4_refusal(
    text: dict[str, Any],
    *,
    tp: int,
    pp: int,
    quantization: str | None,
    language_model_only: bool,
    batched_tokens: int | None,
) -> str | None:
    """Why Gemma 4's weights are not counted for this launch (None: they are)."""
    towers = [t.split("_")[0] for t in TOWER_CONFIGS if isinstance(text.get(t), dict)]
    if towers and not language_model_only:
        plural = len(towers) > 1
        return (
            f"gemma4: its {' and '.join(towers)} tower{'s' if plural else ''} (transformers' "
            f"modules, built by AutoModel.from_config in gemma4_mm.py, v0.19.0) "
            f"{'are' if plural else 'is'} not counted; serve it text-only "
            "(--language-model-only leaves the towers out) or state the pair"
        )
    scheme = text.get("quantization_config")
    if scheme is not None:
        method = scheme.get("quant_method") if isinstance(scheme, dict) else None
        algo = scheme.get("quant_algo") if isinstance(scheme, dict) else None
        return (
            f"gemma4: a {method or 'quantized'}{f' {algo}' if algo else ''} checkpoint: its "
            "quantized layers are not counted (Gemma 4 is read in its model dtype)"
        )
    if quantization is not None:
        return f"gemma4 under --quantization {quantization}: read in its model dtype only"
    if pp != 1:
        return "gemma4 at PP > 1: which layers, caches and vocab matrices each stage builds is not read"
    layout = _layout(text)
    if isinstance(layout, str):
        return layout
    widths = {"num_attention_heads": layout.heads, "intermediate_size": layout.inter}
    if layout.experts:
        widths["moe_intermediate_size"] = layout.moe_inter
    if layout.ple:
        widths["hidden_size_per_layer_input x num_hidden_layers"] = layout.ple * layout.layers
    for name, value in widths.items():
        if value % tp:
            return f"gemma4 at TP {tp}: {name} {value:,} does not split evenly"
    for kv in {layout.kv_heads, layout.global_kv_heads}:
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            return f"gemma4 at TP {tp}: {kv} KV heads neither split nor replicate evenly"
    if layout.ple and towers and batched_tokens is None:
        return (
            "gemma4 with per-layer embeddings: the multimodal wrapper's buffer of "
            "max_num_batched_tokens x layers x hidden_size_per_layer_input needs the batch "
            "size (give max_num_batched_tokens)"
        )
    return None


def _layer(
    lay: _Layout, index: int, tp: int
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """One decoder layer's tensors in elements, in the order Gemma4DecoderLayer creates
    them, split after the attention's projections and q/k norms (where a first layer of
    its type builds its rotary cache): (name, elements)."""
    full = lay.kinds[index] == "full_attention"
    head = lay.global_head_dim if full else lay.head_dim
    kv = lay.global_kv_heads if full and lay.k_eq_v else lay.kv_heads
    q, k = lay.heads // tp * head, max(1, kv // tp) * head
    attention = [("qkv_proj", lay.hidden * (q + 2 * k))]
    if lay.bias:
        attention.append(("qkv bias", q + 2 * k))
    attention.append(("o_proj", q * lay.hidden))
    if lay.bias:
        attention.append(("o bias", lay.hidden))
    attention += [("q_norm", head), ("k_norm", head)]
    rest: list[tuple[str, int]] = []
    wide = lay.double_wide and index >= lay.layers - lay.shared > 0
    share = lay.inter * (2 if wide else 1) // tp
    rest += [("gate_up_proj", 2 * share * lay.hidden), ("down_proj", share * lay.hidden)]
    rest += [("norm", lay.hidden)] * 4
    if lay.experts:
        expert = lay.moe_inter // tp
        rest += [
            ("router scale", lay.hidden),
            ("router root_size", 1),
            ("router proj", lay.hidden * lay.experts),
            ("per_expert_scale", lay.experts),
            ("w13", lay.experts * 2 * expert * lay.hidden),
            ("w2", lay.experts * lay.hidden * expert),
        ]
        rest += [("norm", lay.hidden)] * 3
    if lay.ple:
        rest += [
            ("per_layer_input_gate", lay.hidden * lay.ple),
            ("per_layer_projection", lay.ple * lay.hidden),
            ("post_per_layer_input_norm", lay.hidden),
        ]
    rest.append(("layer_scalar", 1))
    return attention, rest


def gemma4_rank_weights(
    text: dict[str, Any],
    *,
    tp: int = 1,
    served: str | None = None,
    cuda_blocks: bool = False,
    batched_tokens: int | None = None,
) -> RankWeights | None:
    """One TP rank's weights, text model only (check ``gemma4_refusal`` first; None where
    it refuses or no dtype is known): every tensor in the model dtype, in the order vLLM
    creates them (the module's docstring); with ``cuda_blocks``, as the caching allocator
    counts them."""
    lay = _layout(text)
    dtype = served or CHECKPOINT_DTYPES.get(str(text.get("torch_dtype") or text.get("dtype") or ""))
    if isinstance(lay, str) or dtype is None:
        return None
    size = element_type(dtype).block_bytes
    rows = _up(lay.vocab, VOCAB_PAD) // tp
    order: list[int] = [rows * lay.hidden]  # embed_tokens
    ple_total = lay.ple * lay.layers
    if lay.ple:
        ple_rows = _up(lay.ple_vocab, VOCAB_PAD) // tp
        # embed_tokens_per_layer, its scale, the projection, its norm, two scalar buffers
        order += [ple_rows * ple_total, 1, ple_total // tp * lay.hidden, lay.ple, 1, 1]
    ropes: dict[str, int] = {}
    for index in range(lay.layers):
        attention, rest = _layer(lay, index, tp)
        order += [n for _, n in attention]
        kind = lay.kinds[index]
        if kind not in ropes:
            width = lay.global_head_dim if kind == "full_attention" else lay.head_dim
            ropes[kind] = lay.positions * width
            order.append(ropes[kind])
        order += [n for _, n in rest]
    order += [lay.hidden, 1]  # the final norm, the normalizer buffer
    if not lay.tied:
        order.append(rows * lay.hidden)  # lm_head
    buffer = 0
    if lay.ple and any(isinstance(text.get(t), dict) for t in TOWER_CONFIGS):
        buffer = (batched_tokens or 0) * ple_total  # gemma4_mm.py per_layer_embeddings
        order.append(buffer)
    elements = sum(order)
    total = elements * size
    first = _layer(lay, 0, tp)
    full_at = lay.kinds.index("full_attention") if "full_attention" in lay.kinds else 0
    full = _layer(lay, full_at, tp)
    parts = [
        f"embedding {rows:,} rows/rank x {lay.hidden:,}{' (tied)' if lay.tied else ' and lm_head'}",
        f"{lay.kinds.count('sliding_attention')} sliding layers (q/k/v/o with q/k norms "
        f"{sum(n for _, n in first[0]):,}, head {lay.head_dim}, {lay.kv_heads} KV heads) and "
        f"{lay.kinds.count('full_attention')} full layers (q/k/v/o with q/k norms "
        f"{sum(n for _, n in full[0]):,}, head {lay.global_head_dim}, {lay.global_kv_heads} KV "
        f"heads{', K loaded into V too' if lay.k_eq_v else ''}) per rank",
        f"MLP {lay.hidden:,} x {lay.inter:,} / TP {tp}"
        + (f" (x2 on the {lay.shared} KV-shared layers)" if lay.double_wide and lay.shared else ""),
        "4 norms and a layer scalar a layer",
    ]
    if lay.experts:
        parts.append(
            f"{lay.experts} experts of {lay.moe_inter:,} / TP {tp} with their router and 3 "
            "norms a layer"
        )
    if lay.ple:
        parts.append(
            f"per-layer embeddings {lay.ple} x {lay.layers} layers (vocab "
            f"{lay.ple_vocab:,}, projection, gates)"
            + (f", batch buffer {batched_tokens:,} tokens" if buffer else "")
        )
    caches = " + ".join(
        f"{lay.positions:,} x {n // lay.positions} ({k.split('_')[0]})" for k, n in ropes.items()
    )
    parts.append(f"rotary caches {caches}")
    derivation = (
        f"gemma4 text model on TP {tp}: {'; '.join(parts)} = {elements:,} elements x {size} B "
        f"({dtype}) = {total:,} B (models/gemma4.py, v0.19.0)"
    )
    if not cuda_blocks:
        return RankWeights(total, derivation)
    blocks = allocated_bytes(n * size for n in order)
    return RankWeights(
        blocks,
        f"{derivation}; as CUDA's caching allocator counts it, {blocks:,} B ({blocks - total:,} B "
        "of blocks rounded up and left whole, c10/cuda/CUDACachingAllocator.cpp)",
    )
