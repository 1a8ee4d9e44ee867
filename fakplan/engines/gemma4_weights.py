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
  (the widths are the published configs' ``rope_parameters``: default rope on sliding
  layers, proportional on full ones; another rope type would size its cache otherwise);
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
``AutoModel.from_config`` before the text model and counted from their configs
(``gemma4_towers``). vLLM leaves them out (on the meta device) when every modality's
``--limit-mm-per-prompt`` is 0, as ``--language-model-only`` sets: ``_mark_tower_model``
in ``models/interfaces.py`` and ``no_init_weights`` in ``models/utils.py``, v0.19.0.

A ModelOpt NVFP4 checkpoint (nvidia's) quantizes the linear layers its ``ignore`` list
does not name; those are held as the card's kernel keeps them (``nvfp4_weights``), the
rest in the model dtype. NVFP4 experts and per-layer gates are not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from fakplan.dtypes import element_type
from fakplan.engines.gemma4_towers import TRANSFORMERS_SOURCE, gemma4_towers
from fakplan.engines.nvfp4_weights import NVFP4_GROUP, Nvfp4Kernel, nvfp4_kernel, nvfp4_layer
from fakplan.engines.rank_weights import VOCAB_PAD, RankWeights, round_up
from fakplan.engines.torch_allocator import allocated_bytes
from fakplan.geometry.params import stated_dtype, towers

GEMMA4_FAMILIES = ("gemma4", "gemma4_text")


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
    # transformers' Gemma4TextConfig defaults per-layer embeddings to 256 wide (5.25.0's
    # configuration_gemma4.py), which a config that leaves them out gets in vLLM too;
    # the default moved between releases, so it is not assumed
    if "hidden_size_per_layer_input" not in text:
        return (
            "gemma4: its config leaves hidden_size_per_layer_input to transformers' default "
            "(per-layer embeddings, 256 wide in 5.25.0), which fakplan does not assume"
        )
    ple = int(text.get("hidden_size_per_layer_input") or 0)
    if ple and "vocab_size_per_layer_input" not in text:
        return "gemma4: per-layer embeddings without vocab_size_per_layer_input"
    return _Layout(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        global_kv_heads=int(text.get("num_global_key_value_heads") or kv_heads)
        if k_eq_v
        else kv_heads,
        head_dim=head_dim,
        # transformers' default, as the KV geometry takes it (geometry/hf_layouts.py)
        global_head_dim=int(text.get("global_head_dim") or 512),
        inter=inter,
        vocab=vocab,
        positions=positions,
        kinds=kinds,
        k_eq_v=k_eq_v,
        shared=int(text.get("num_kv_shared_layers") or 0),
        double_wide=bool(text.get("use_double_wide_mlp")),
        experts=experts,
        moe_inter=moe_inter if moe else 0,
        ple=ple,
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
    capability: str | None = None,
    sms: int | None = None,
    served: str | None = None,
) -> str | None:
    """Why Gemma 4's weights are not counted for this launch and card (None: they are)."""
    present = towers(text)
    scheme: _Nvfp4Scheme | None = None
    if "quantization_config" in text:
        found = _nvfp4_scheme(text)
        if isinstance(found, str):
            return found
        scheme = found
        kernel = nvfp4_kernel(capability, sms)
        if isinstance(kernel, str):
            return f"gemma4: {kernel}"
        layout = _layout(text)
        if not isinstance(layout, str) and (layout.experts or layout.ple):
            return (
                "gemma4: an NVFP4 checkpoint with experts or per-layer embeddings: "
                "ModelOptNvFp4FusedMoE's layouts and the quantized per-layer gates are not read"
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
    if layout.ple and present and batched_tokens is None:
        return (
            "gemma4 with per-layer embeddings: the multimodal wrapper's buffer of "
            "max_num_batched_tokens x layers x hidden_size_per_layer_input needs the batch "
            "size (give max_num_batched_tokens)"
        )
    if scheme is not None:
        quantized = _quantized(_parts(layout, tp, _prefix(text), 0)[0], scheme)
        if isinstance(quantized, str):
            return quantized
    dtype = served or stated_dtype(text)
    if not dtype:
        return "gemma4: its config states no dtype fakplan reads (give --dtype)"
    if present and not language_model_only:
        found_towers = gemma4_towers(text, dtype)
        if isinstance(found_towers, str):
            return found_towers
    return None


@dataclass(frozen=True)
class _Part:
    """One tensor a rank creates, in elements; a linear layer's weight also carries its
    outputs and inputs on the rank, its module's name as vLLM prefixes it (what a
    quantization config's ``ignore`` list is matched against) and the widths fused in it."""

    name: str
    elements: int
    rows: int = 0
    inputs: int = 0
    module: str = ""
    widths: int = 1


def _linear(module: str, rows: int, inputs: int, widths: int = 1) -> _Part:
    return _Part(module.rsplit(".", 1)[-1], rows * inputs, rows, inputs, module, widths)


def _counted(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _layer(lay: _Layout, index: int, tp: int, prefix: str) -> tuple[list[_Part], list[_Part]]:
    """One decoder layer's tensors, in the order Gemma4DecoderLayer creates them, split
    after the attention's projections and q/k norms (where a first layer of its type
    builds its rotary cache). ``prefix``: vLLM's name of the text model."""
    full = lay.kinds[index] == "full_attention"
    head = lay.global_head_dim if full else lay.head_dim
    kv = lay.global_kv_heads if full and lay.k_eq_v else lay.kv_heads
    q, k = lay.heads // tp * head, max(1, kv // tp) * head
    at = f"{prefix}layers.{index}."
    attention = [_linear(f"{at}self_attn.qkv_proj", q + 2 * k, lay.hidden, 3)]
    if lay.bias:
        attention.append(_Part("qkv bias", q + 2 * k))
    attention.append(_linear(f"{at}self_attn.o_proj", lay.hidden, q))
    if lay.bias:
        attention.append(_Part("o bias", lay.hidden))
    attention += [_Part("q_norm", head), _Part("k_norm", head)]
    wide = lay.double_wide and index >= lay.layers - lay.shared > 0
    share = lay.inter * (2 if wide else 1) // tp
    rest = [
        _linear(f"{at}mlp.gate_up_proj", 2 * share, lay.hidden, 2),
        _linear(f"{at}mlp.down_proj", lay.hidden, share),
    ]
    rest += [_Part("norm", lay.hidden)] * 4
    if lay.experts:
        expert = lay.moe_inter // tp
        rest += [
            _Part("router scale", lay.hidden),
            _Part("router root_size", 1),
            _Part("router proj", lay.hidden * lay.experts),
            _Part("per_expert_scale", lay.experts),
            _Part("w13", lay.experts * 2 * expert * lay.hidden),
            _Part("w2", lay.experts * lay.hidden * expert),
        ]
        rest += [_Part("norm", lay.hidden)] * 3
    if lay.ple:
        rest += [
            _Part("per_layer_input_gate", lay.hidden * lay.ple),
            _Part("per_layer_projection", lay.ple * lay.hidden),
            _Part("post_per_layer_input_norm", lay.hidden),
        ]
    rest.append(_Part("layer_scalar", 1))
    return attention, rest


# Gemma4ForConditionalGeneration.hf_to_vllm_mapper (gemma4_mm.py, v0.19.0), first match
# wins (WeightsMapper._map_name): how the ignore list's checkpoint names become vLLM's
MULTIMODAL_PREFIXES = (
    ("model.embed_audio.", "embed_audio."),
    ("model.embed_vision.", "embed_vision."),
    ("model.language_model.", "language_model.model."),
    ("model.vision_tower.", "vision_tower."),
    ("model.audio_tower.", "audio_tower."),
    ("lm_head.", "language_model.lm_head."),
    ("model", "language_model.model"),
)
# the fused layers' widths as the checkpoint names them (packed_modules_mapping)
PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@dataclass(frozen=True)
class _Nvfp4Scheme:
    """A ModelOpt NVFP4 checkpoint's ``ignore`` list as vLLM holds it: ``apply_vllm_mapper``
    splits an entry ending in a "*" not after a dot into the name and the name + ".*",
    then maps each to vLLM's prefixes (a multimodal checkpoint's)."""

    exclude: tuple[str, ...]

    @staticmethod
    def of(ignore: list[str], multimodal: bool) -> _Nvfp4Scheme:
        split: list[str] = []
        for entry in ignore:
            if len(entry) >= 2 and entry[-1] == "*" and entry[-2] != ".":
                split += [entry[:-1], entry[:-1] + ".*"]
            else:
                split.append(entry)
        return _Nvfp4Scheme(tuple(_mapped(e) for e in split) if multimodal else tuple(split))

    def excluded(self, prefix: str) -> bool | str:
        """``ModelOptQuantConfigBase.is_layer_excluded``: a fused layer's widths named
        exactly (all or none, else the message vLLM raises), an entry found in the name
        (or in it without ``language_model.``), or a wildcard match."""
        proj = prefix.rsplit(".", 1)[-1]
        if proj in PACKED:
            named = {prefix[: -len(proj)] + shard in self.exclude for shard in PACKED[proj]}
            if len(named) > 1:
                return (
                    f"Detected some but not all shards of {prefix} are quantized. All shards "
                    "of fused layers to have the same precision."
                )
            if named == {True}:
                return True
        elif prefix in self.exclude:
            return True
        bare = (
            prefix.removeprefix("language_model.") if prefix.startswith("language_model.") else ""
        )
        return any(
            (e != prefix and (e in prefix or (bare != "" and e in bare))) or fnmatch(prefix, e)
            for e in self.exclude
        )


def _mapped(name: str) -> str:
    for old, new in MULTIMODAL_PREFIXES:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def _nvfp4_scheme(text: dict[str, Any]) -> _Nvfp4Scheme | str:
    """The unquantized modules of a ModelOpt NVFP4 checkpoint, read as vLLM's
    ``ModelOptQuantConfigBase.from_config`` reads ``quantization_config`` (``quant_algo``,
    ``group_size``, ``ignore``), or why it is not read (a sentence)."""
    scheme = text.get("quantization_config")
    method = scheme.get("quant_method") if isinstance(scheme, dict) else None
    if not isinstance(scheme, dict) or method != "modelopt":
        return (
            f"gemma4: a {method or 'quantized'} checkpoint is not read (Gemma 4 is read in its "
            "model dtype or as ModelOpt NVFP4)"
        )
    algo = str(scheme.get("quant_algo") or "").upper()
    if algo != "NVFP4":
        return f"gemma4: a ModelOpt {algo or 'unnamed'} checkpoint: read as NVFP4 only"
    group = scheme.get("group_size")
    try:
        group_size = NVFP4_GROUP if group is None else int(group)
    except (TypeError, ValueError):
        return f"gemma4: an NVFP4 checkpoint whose group_size is {group!r}, not a number"
    if group_size != NVFP4_GROUP:
        return f"gemma4: an NVFP4 checkpoint with group_size {group_size}: read for 16 only"
    ignore = scheme.get("ignore") or []
    if not isinstance(ignore, list):
        return "gemma4: an NVFP4 checkpoint whose ignore is not a list"
    return _Nvfp4Scheme.of([str(i) for i in ignore], _multimodal(text))


def _multimodal(text: dict[str, Any]) -> bool:
    """Gemma4ForConditionalGeneration (a tower beside the text model) rather than
    Gemma4ForCausalLM: its text model is vLLM's ``language_model.model``."""
    archs = [str(a) for a in text.get("architectures") or ()]
    return bool(towers(text)) or any("ConditionalGeneration" in a for a in archs)


def _prefix(text: dict[str, Any]) -> str:
    """vLLM's name of the text model, the parent of its ``layers``."""
    return "language_model.model." if _multimodal(text) else "model."


def _parts(
    lay: _Layout, tp: int, prefix: str, ple_buffer: int
) -> tuple[list[_Part], dict[str, int]]:
    """Every tensor of the text model on a rank, in creation order, and the rotary caches
    by layer type (elements); ``prefix``: vLLM's name of the text model."""
    rows = round_up(lay.vocab, VOCAB_PAD) // tp
    parts: list[_Part] = [_Part("embed_tokens", rows * lay.hidden)]
    ple_total = lay.ple * lay.layers
    if lay.ple:
        ple_rows = round_up(lay.ple_vocab, VOCAB_PAD) // tp
        # embed_tokens_per_layer, its scale, the projection, its norm, two scalar buffers
        parts += [
            _Part("embed_tokens_per_layer", ple_rows * ple_total),
            _Part("embed_scale_per_layer", 1),
            _Part("per_layer_model_projection", ple_total // tp * lay.hidden),
            _Part("per_layer_projection_norm", lay.ple),
            _Part("per_layer_input_scale", 1),
            _Part("per_layer_projection_scale", 1),
        ]
    ropes: dict[str, int] = {}
    for index in range(lay.layers):
        attention, rest = _layer(lay, index, tp, prefix)
        parts += attention
        kind = lay.kinds[index]
        if kind not in ropes:
            width = lay.global_head_dim if kind == "full_attention" else lay.head_dim
            ropes[kind] = lay.positions * width
            parts.append(_Part(f"rotary cache ({kind})", ropes[kind]))
        parts += rest
    parts += [_Part("norm", lay.hidden), _Part("normalizer", 1)]
    if not lay.tied:
        parts.append(_Part("lm_head", rows * lay.hidden))
    if ple_buffer:
        parts.append(_Part("per_layer_embeddings", ple_buffer))  # gemma4_mm.py
    return parts, ropes


def _quantized(parts: list[_Part], scheme: _Nvfp4Scheme) -> list[bool] | str:
    """Which parts are NVFP4 linear layers, or vLLM's refusal of one (a sentence)."""
    out = []
    for part in parts:
        if not part.module:
            out.append(False)
            continue
        excluded = scheme.excluded(part.module)
        if isinstance(excluded, str):
            return f"gemma4: vLLM refuses the checkpoint: {excluded}"
        proj = part.module.rsplit(".", 1)[-1]
        for shard in PACKED.get(proj, ()):
            named = part.module[: -len(proj)] + shard
            if scheme.excluded(named) != excluded:
                # the checkpoint stores the width as the ignore list says; vLLM builds the
                # fused layer by its own name, so the load cannot fill it
                return (
                    f"gemma4: the checkpoint's ignore list leaves {named} "
                    f"{'unquantized' if not excluded else 'quantized'} while vLLM builds "
                    f"{part.module} {'in NVFP4' if not excluded else 'unquantized'}: its load fails"
                )
        if not excluded and part.inputs % NVFP4_GROUP:
            return (
                f"gemma4: vLLM refuses {part.module}: its {part.inputs:,} inputs per rank are "
                "not a multiple of 16 (ModelOptNvFp4LinearMethod.create_weights)"
            )
        out.append(not excluded)
    return out


def gemma4_rank_weights(
    text: dict[str, Any],
    *,
    tp: int = 1,
    served: str | None = None,
    cuda_blocks: bool = False,
    batched_tokens: int | None = None,
    capability: str | None = None,
    sms: int | None = None,
    language_model_only: bool = False,
) -> RankWeights | None:
    """One TP rank's weights (check ``gemma4_refusal`` first; None where it refuses or no
    dtype is known): the towers the config carries, unless ``language_model_only``
    (``gemma4_towers``), then every parameter and buffer of the text model's modules in
    the order vLLM creates them (the module's docstring; the Attention layers' float32
    scale scalars, a few KiB, are left out as for every family), in the model dtype, a
    ModelOpt NVFP4 checkpoint's quantized linear layers as the card's kernel keeps them
    (``nvfp4_weights``); with ``cuda_blocks``, as the caching allocator counts them (an
    interval where NVFP4 conversions free blocks)."""
    lay = _layout(text)
    dtype = served or stated_dtype(text)
    if isinstance(lay, str) or dtype is None:
        return None
    kernel: Nvfp4Kernel | None = None
    scheme: _Nvfp4Scheme | None = None
    if "quantization_config" in text:
        found_scheme, found_kernel = _nvfp4_scheme(text), nvfp4_kernel(capability, sms)
        if isinstance(found_scheme, str) or isinstance(found_kernel, str):
            return None
        scheme, kernel = found_scheme, found_kernel
    size = element_type(dtype).block_bytes
    prefix = _prefix(text)
    rows = round_up(lay.vocab, VOCAB_PAD) // tp
    buffer = 0
    if lay.ple and towers(text):
        buffer = (batched_tokens or 0) * lay.ple * lay.layers  # the wrapper's batch buffer
    parts, ropes = _parts(lay, tp, prefix, buffer)
    quantized = [False] * len(parts) if scheme is None else _quantized(parts, scheme)
    if isinstance(quantized, str):
        return None
    # the towers come first (gemma4_mm.py), so the allocator sees their blocks first
    loaded: list[int] = []
    towers_said = ""
    if towers(text) and not language_model_only:
        built = gemma4_towers(text, dtype)
        if isinstance(built, str):
            return None
        loaded += [t.elements * element_type(t.dtype).block_bytes for t in built.tensors]
        towers_said = (
            f"{' and '.join(built.said)}, whole on every rank = {sum(loaded):,} B "
            f"({TRANSFORMERS_SOURCE}, built first by gemma4_mm.py, v0.19.0); "
        )
    tower_bytes = sum(loaded)
    converted: list[int] = []
    freed = 0
    for part, nvfp4 in zip(parts, quantized, strict=True):
        if kernel is None or not nvfp4:
            loaded.append(part.elements * size)
            continue
        held = nvfp4_layer(part.rows, part.inputs, part.widths, kernel)
        assert held is not None  # _quantized refuses inputs vLLM refuses
        loaded += held.loaded
        converted += held.converted
        freed += held.freed
    total = sum(loaded) + sum(converted) - freed
    text_total = total - tower_bytes
    elements = sum(p.elements for p in parts)
    kinds_said = []
    for kind, head, kv in (
        ("sliding_attention", lay.head_dim, lay.kv_heads),
        ("full_attention", lay.global_head_dim, lay.global_kv_heads),
    ):
        if kind in lay.kinds:
            attention = _layer(lay, lay.kinds.index(kind), tp, prefix)[0]
            k_eq_v = ", K loaded into V too" if kind == "full_attention" and lay.k_eq_v else ""
            kinds_said.append(
                f"{_counted(lay.kinds.count(kind), kind.split('_')[0] + ' layer')} (q/k/v/o "
                f"with q/k norms {sum(p.elements for p in attention):,}, head {head}, "
                f"{_counted(kv, 'KV head')}{k_eq_v})"
            )
    said = [
        f"embedding {rows:,} rows/rank x {lay.hidden:,}{' (tied)' if lay.tied else ' and lm_head'}",
        " and ".join(kinds_said) + " per rank",
        f"MLP {lay.hidden:,} x {lay.inter:,} / TP {tp}"
        + (f" (x2 on the {lay.shared} KV-shared layers)" if lay.double_wide and lay.shared else ""),
        "4 norms and a layer scalar a layer",
    ]
    if lay.experts:
        said.append(
            f"{lay.experts} experts of {lay.moe_inter:,} / TP {tp} with their router and 3 "
            "norms a layer"
        )
    if lay.ple:
        said.append(
            f"per-layer embeddings {lay.ple} x {lay.layers} layers (vocab "
            f"{lay.ple_vocab:,}, projection, gates)"
            + (f", batch buffer {batched_tokens:,} tokens" if buffer else "")
        )
    caches = " + ".join(
        f"{lay.positions:,} x {n // lay.positions} ({k.split('_')[0]})" for k, n in ropes.items()
    )
    said.append(f"rotary caches {caches}")
    if kernel is None:
        counted = f"{elements:,} elements x {size} B ({dtype}) = {text_total:,} B"
    else:
        counted = (
            f"{elements:,} elements, of them {sum(quantized)} linear layers in NVFP4 (ModelOpt; "
            f"its ignore list leaves the rest in {dtype}) on {kernel.text}: "
            f"{sum(loaded) - tower_bytes:,} B loaded + {sum(converted):,} B the kernel's "
            f"conversion creates - {freed:,} B it frees = {text_total:,} B (quantization/modelopt.py, "
            "utils/nvfp4_utils.py, utils/marlin_utils_fp4.py)"
        )
    derivation = (
        f"gemma4 on TP {tp}: {towers_said}text model: {'; '.join(said)} = {counted} "
        "(models/gemma4.py, v0.19.0)"
        + (f"; in all {tower_bytes:,} + {text_total:,} = {total:,} B" if towers_said else "")
    )
    if not cuda_blocks:
        return RankWeights(total, derivation)
    blocks = allocated_bytes(loaded + converted) - freed
    if kernel is None:
        return RankWeights(
            blocks,
            f"{derivation}; as CUDA's caching allocator counts it, {blocks:,} B ({blocks - total:,} B "
            "of blocks rounded up and left whole, c10/cuda/CUDACachingAllocator.cpp)",
        )
    return RankWeights(
        total,
        f"{derivation}; as CUDA's caching allocator counts it, {total:,}..{blocks:,} B: at "
        "least the live tensors' bytes, at most the load's blocks with every converted tensor "
        "in a fresh block and the freed originals giving back only their own bytes "
        "(c10/cuda/CUDACachingAllocator.cpp)",
        high=blocks,
    )
