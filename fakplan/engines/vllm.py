"""vLLM's KV arithmetic, release by release (docs/engines.md §1).

Rule sets (newest first):

- ``v1`` — read in v0.33.0 (``vllm/v1/kv_cache_interface.py``, ``kv_cache_planning.py``,
  ``kv_cache_utils.py``); the v0.24.0 boot of tests/data/public/ledgers/vllm-018.log confirms it
  for a hybrid model. Releases 0.12–0.23 are assumed to follow it (boundary not read).
- ``v1-0.11`` — read in v0.11.0: hybrid block count by group size; logged tokens
  ``num_blocks // len(groups) × min_block_size``.
- ``v1-0.8`` — read in v0.8.5.post1: uniform models only; tokens = blocks × block_size.
- ``v0`` — the V0 engine (v0.3.3 … v0.7.3): ``# GPU blocks = available // cache_block_size``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from fakplan.contract import CostComponent
from fakplan.dtypes import element_type
from fakplan.engines.base import ModelledEngine
from fakplan.engines.choices import Choices, check_choice, choices_for
from fakplan.engines.releases import Release, newer_note, select
from fakplan.engines.served import served_dtype
from fakplan.errors import FakplanError
from fakplan.geometry import Geometry, LayerKind
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.launch import FlagRow, LaunchRecord, RoleRecord, argv_of, flag, fraction_up

if TYPE_CHECKING:
    from fakplan.figures import Figures
    from fakplan.shape import LoadedShape, Shape


@dataclass(frozen=True)
class VllmRules(Release):
    """What differs between the vLLM releases fakplan models, as data."""

    # FlashMLA forces 64-token blocks for MLA caches (V1; "Forcing kv cache block size to
    # 64", read in v0.11.0); V0 keeps the default 16
    mla_block_64: bool
    # hybrid layouts (recurrent state, or several attention kinds) are sized by page
    # unification (v0.11.0 on); earlier rules are read for uniform models only
    hybrid: bool
    # V0 cache_engine.get_cache_block_size sizes every attention layer as a full one
    sliding_as_full: bool
    # how the boot line's token count follows from the blocks: "blocks" (blocks x block
    # size), "groups" (v0.11.0: blocks // KV groups x the smallest block) or "requests"
    # (v0.33.0 get_kv_cache_capacity: int(blocks / blocks per request x max_model_len))
    logged_tokens: Literal["blocks", "groups", "requests"]
    # the word the boot log uses for its block count
    blocks_label: str
    # how the pool is given: --kv-cache-memory-bytes (v0.11.0 on) or, before it, a
    # utilisation fraction of the card
    pool_in_bytes: bool


RELEASES = (
    VllmRules("v1", (0, 12), "0.33.0", True, True, False, "requests", "num_blocks", True),
    VllmRules("v1-0.11", (0, 11), "0.11.0", True, True, False, "groups", "num_blocks", True),
    VllmRules("v1-0.8", (0, 8), "0.8.5.post1", True, False, False, "blocks", "num_blocks", False),
    VllmRules("v0", (0, 3), "0.6.6.post1", False, False, True, "blocks", "# GPU blocks", False),
)

# What vLLM's own parser takes, release by release (its CacheDType / ModelDType / BlockSize,
# or the argparse choices= of V0): engines compare exactly, so a shape must spell them so.
KV_CACHE_DTYPE_CHOICES = (
    Choices(
        (0, 33),
        "0.33.0",
        "vllm/config/cache.py:44-67 CacheDType, checked at :172 (no argparse choices)",
        (
            "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
            "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc",
            "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3",
            "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
            "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
        ),
    ),
    Choices(
        (0, 11),
        "0.11.0",
        "vllm/config/cache.py:25-26 CacheDType",
        ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
    ),
    Choices((0, 8), "0.8.5", "vllm/config.py:1291 CacheDType", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    Choices(
        (0, 3),
        "0.6.6.post1",
        "vllm/engine/arg_utils.py:348 choices=",
        ("auto", "fp8", "fp8_e5m2", "fp8_e4m3"),
    ),
)  # fmt: skip
_MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MODEL_DTYPE_CHOICES = (
    Choices((0, 33), "0.33.0", "vllm/config/model.py:100 ModelDType", _MODEL_DTYPES),
    Choices((0, 11), "0.11.0", "vllm/config/model.py:67 ModelDType", _MODEL_DTYPES),
    Choices((0, 8), "0.8.5", "vllm/engine/arg_utils.py:466 choices=", _MODEL_DTYPES),
    Choices((0, 3), "0.6.6.post1", "vllm/engine/arg_utils.py:335 choices=", _MODEL_DTYPES),
)
# --block-size: "any" where the field is a positive int (0.33.0 vllm/config/cache.py:187)
BLOCK_SIZE_CHOICES = (
    Choices((0, 33), "0.33.0", "vllm/config/cache.py:187 block_size: int, gt=0", ("any",)),
    Choices((0, 11), "0.11.0", "vllm/config/cache.py:24 BlockSize", ("1", "8", "16", "32", "64", "128")),
    Choices((0, 8), "0.8.5", "vllm/config.py:1290 BlockSize", ("1", "8", "16", "32", "64", "128")),
    Choices((0, 3), "0.6.6.post1", "vllm/engine/arg_utils.py:431 choices=", ("8", "16", "32", "64", "128")),
)  # fmt: skip

# The bytes of the KV dtypes fakplan has read (vllm/utils/torch_utils.py
# STR_DTYPE_TO_TORCH_DTYPE, v0.33.0: fp8 variants are uint8); the other layouts vLLM
# takes pack scales in ways not read yet.
KV_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "fp8_ds_mla": "fp8",
}
# _resolve_auto_dtype (v0.32.0): a float32 checkpoint under --dtype auto is served in the
# platform's first supported dtype
DOWNCAST = ("bf16", "bf16 on CPUs and bf16 GPUs, fp16 on older GPUs")
FP8_DS_MLA_BYTES = 656  # per token per layer, fixed (vllm MLAAttentionSpec, v0.11.0/v0.33.0)
DEFAULT_BLOCK = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (v0.33.0); CUDA platform default (v0.11.0)
MLA_BLOCK = 64  # FlashMLA forces 64 (v0.11.0 "Forcing kv cache block size to 64")
BLOCK_ALIGN = 16  # hybrid attention block sizes are multiples of the kernel alignment
DEFAULT_BATCHED_TOKENS = 8192  # serve default on large GPUs; only sliding windows depend on it
GIB = 1 << 30
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
RAY_PORT = 6379  # ray start --head's default GCS port


CPU_BLOCK = 128  # platforms/cpu.py check_and_update_config (v0.32.0 CPU build)
CPU_MLA_BLOCK = 16  # "CPU MLA backend requires block_size=16" (v0.32.0 CPU build)


def _unsized(name: str) -> str:
    return (
        f"vllm takes --kv-cache-dtype {name!r}, but fakplan has not read its layout's bytes "
        f"(it packs scales); fakplan sizes {', '.join(KV_DTYPES)}"
    )


def _dtype_bytes(query: KvQuery) -> tuple[str, int, str, str | None]:
    name = query.kv_dtype
    if name not in KV_DTYPES:
        refused = check_choice(
            "vllm", "--kv-cache-dtype", name, KV_CACHE_DTYPE_CHOICES, query.engine_version
        )
        raise FakplanError(refused or _unsized(name))
    storage = KV_DTYPES[name]
    rule = None
    if storage is None:
        storage, rule = served_dtype(query, DOWNCAST)
    if name == "fp8_ds_mla" and LayerKind.MLA not in query.geometry.layer_kinds:
        raise FakplanError("vllm fp8_ds_mla is an MLA cache layout; this model has no MLA layers")
    return name, element_type(storage).block_bytes, storage, rule


def _stage_layers(geometry: Geometry, pp: int) -> list[tuple[LayerKind, ...]]:
    """vLLM get_pp_indices: equal shares, the remainder going to the stages before the last."""
    total = geometry.num_layers
    parts = [total // pp] * pp
    for i in range(2, total % pp + 2):
        parts[-i] += 1
    stages, start = [], 0
    for size in parts:
        stages.append(geometry.layer_kinds[start : start + size])
        start += size
    return stages


@dataclass(frozen=True)
class _Group:
    kind: LayerKind
    layers: int  # layers of this kind on the stage
    per_token: int  # bytes per token per layer (attention kinds)
    state: int  # bytes per sequence per layer (state kinds), before padding
    block: int = 0  # tokens per block of this kind
    page: int = 0  # bytes of one page of one layer, after unification


@dataclass(frozen=True)
class _Layout:
    release: VllmRules
    version: str
    dtype: str
    storage: str
    groups: tuple[_Group, ...]
    group_size: int
    page: int  # unified page bytes (one layer, one block)
    block: int  # the attention block size (tokens)
    rules: tuple[str, ...]

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page

    @property
    def num_kv_groups(self) -> int:
        return sum(math.ceil(g.layers / self.group_size) for g in self.groups)


def _specs(query: KvQuery, stage: tuple[LayerKind, ...], b: int, dtype: str) -> list[_Group]:
    g = query.geometry
    tp = query.tp
    out: list[_Group] = []
    for kind in (
        LayerKind.FULL,
        LayerKind.SLIDING,
        LayerKind.MLA,
        LayerKind.LINEAR,
        LayerKind.MAMBA,
    ):
        count = sum(1 for k in stage if k == kind)
        if not count:
            continue
        if kind in (LayerKind.FULL, LayerKind.SLIDING):
            heads = g.attention if kind == LayerKind.FULL else g.sliding
            assert heads is not None
            # vllm/config/model.py get_num_kv_heads: max(1, total // tp) — replicated below tp.
            per_rank = max(1, heads.num_kv_heads // tp)
            per_token = per_rank * (heads.head_dim + heads.v_head_dim) * b
            out.append(_Group(kind, count, per_token, 0))
        elif kind == LayerKind.MLA:
            assert g.mla is not None
            # MLA: one latent of kv_lora_rank + rope dims, the same on every TP rank.
            width = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
            per_token = FP8_DS_MLA_BYTES if dtype == "fp8_ds_mla" else width * b
            out.append(_Group(kind, count, per_token, 0))
        else:
            out.append(_Group(kind, count, 0, _state_bytes(query, kind)))
    return out


def _state_bytes(query: KvQuery, kind: LayerKind) -> int:
    """Recurrent state of one sequence in one layer on one rank (mamba_utils.py, v0.33.0)."""
    g, tp, spec = query.geometry, query.tp, query.spec_tokens
    model = element_type(g.dtype if g.dtype in {"bf16", "fp16", "fp32"} else "bf16").block_bytes
    if kind == LayerKind.LINEAR:
        d = g.linear
        assert d is not None
        conv_dim = 2 * d.head_k_dim * d.num_k_heads + d.head_v_dim * d.num_v_heads
        conv = conv_dim // tp * (d.conv_kernel - 1 + spec) * model
        ssm_b = element_type(d.ssm_dtype).block_bytes if d.ssm_dtype else model
        temporal = d.num_v_heads // tp * d.head_v_dim * d.head_k_dim * ssm_b
        return conv + temporal
    m = g.mamba
    assert m is not None
    ssm_b = element_type(m.ssm_dtype).block_bytes if m.ssm_dtype else model
    if m.version == 1:
        return m.intermediate_size // tp * (m.conv_kernel - 1) * model + (
            m.intermediate_size // tp * m.state_size * ssm_b
        )
    conv_dim = m.intermediate_size + 2 * m.n_groups * m.state_size
    conv = conv_dim // tp * (m.conv_kernel - 1 + spec) * model
    return conv + m.num_heads // tp * m.head_dim * m.state_size * ssm_b


def _layout(query: KvQuery, stage: tuple[LayerKind, ...]) -> _Layout:
    release, version = select("vllm", RELEASES, query.engine_version)
    dtype, b, storage, dtype_rule = _dtype_bytes(query)
    groups = _specs(query, stage, b, dtype)
    if not groups:
        raise FakplanError(f"{query.geometry.source}: no layer holds a KV cache")
    is_mla = any(gr.kind == LayerKind.MLA for gr in groups)
    rules = [
        f"vllm {release.rule} arithmetic (read in {release.read_in})",
        *newer_note("vllm", RELEASES, query.engine_version),
    ]
    if dtype_rule:
        rules.append(dtype_rule)
    if query.device == "cpu":
        default_block = CPU_MLA_BLOCK if is_mla else CPU_BLOCK
        if not query.block_size:
            rules.append(
                f"CPU build: block size {default_block} unless stated "
                "(platforms/cpu.py, read in 0.32.0)"
            )
    else:
        default_block = MLA_BLOCK if is_mla and release.mla_block_64 else DEFAULT_BLOCK
        if is_mla and not query.block_size and release.mla_block_64:
            rules.append("MLA block size 64: FlashMLA forces it (read in v0.11.0)")
    block = query.block_size or default_block
    attention = [gr for gr in groups if gr.per_token]
    states = [gr for gr in groups if gr.state]
    if not release.hybrid and (states or len(attention) > 1):
        raise FakplanError(
            f"vllm {version}: hybrid layouts ({', '.join(gr.kind.value for gr in groups)}) "
            "are modelled from v0.11 on; state engine_version 0.11.0 or later"
        )
    if release.sliding_as_full:
        rules.append("V0: sliding windows were allocated as full layers")
    if states:
        # vllm/platforms/interface.py (v0.33.0): raise the attention block until one
        # attention page holds one state page, then pad the state page to match.
        largest_state = max(gr.state for gr in states)
        per_layer = max(gr.per_token for gr in attention) if attention else 0
        if per_layer:
            needed = BLOCK_ALIGN * -(-largest_state // (BLOCK_ALIGN * per_layer))
            if needed > block:
                rules.append(
                    f"attention block raised to {needed} tokens so one attention page "
                    f"({needed} x {per_layer:,} B) holds a state page ({largest_state:,} B)"
                )
                block = needed
    pages = [gr.per_token * block for gr in attention] + [gr.state for gr in states]
    page = max(pages)
    unified: list[_Group] = []
    for gr in groups:
        if gr.per_token:
            own = gr.per_token * block
            if own < page and page % own == 0:
                # unify_kv_cache_spec_page_size: a smaller page takes a larger block size.
                unified.append(
                    _Group(gr.kind, gr.layers, gr.per_token, 0, block * page // own, page)
                )
            else:
                unified.append(_Group(gr.kind, gr.layers, gr.per_token, 0, block, page))
        else:
            unified.append(_Group(gr.kind, gr.layers, 0, gr.state, block, page))
    counts = [gr.layers for gr in unified]
    smallest, largest = min(counts), max(counts)
    # get_kv_cache_groups: one group size for all types (v0.33.0 kv_cache_planning.py).
    group_size = largest if largest < 1.5 * smallest else smallest
    if len(unified) == 1:
        group_size = unified[0].layers
    return _Layout(
        release, version, dtype, storage, tuple(unified), group_size, page, block, tuple(rules)
    )


def _full_length(gr: _Group, layout: _Layout) -> bool:
    """A group every token of the window is cached for (V0 sizes sliding windows so too)."""
    return gr.kind in (LayerKind.FULL, LayerKind.MLA) or (
        gr.kind == LayerKind.SLIDING and layout.release.sliding_as_full
    )


def _sliding_blocks(query: KvQuery, gr: _Group) -> int:
    """Blocks a sliding-window group holds per request: the window less one token plus a
    scheduler step's batch, capped at max_model_len, and one more (SlidingWindowSpec)."""
    window = query.window
    batched = query.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    window_tokens = query.geometry.sliding_window or window
    return -(-min(window_tokens - 1 + batched, window) // gr.block) + 1


def _state_pages(query: KvQuery) -> int:
    """MambaSpec: "none" keeps 1 page; "align" (prefix caching) keeps 2, plus checkpoints."""
    return (2 if query.prefix_caching else 1) + query.spec_tokens


def _blocks_per_request(layout: _Layout, query: KvQuery) -> int:
    total = 0
    for gr in layout.groups:
        copies = math.ceil(gr.layers / layout.group_size)
        if _full_length(gr, layout):
            need = -(-query.window // gr.block)
        elif gr.kind == LayerKind.SLIDING:
            need = _sliding_blocks(query, gr)
        else:
            need = _state_pages(query)
        total += copies * need
    return total


def _stage_breakdown(query: KvQuery, layout: _Layout) -> KvBreakdown:
    components: list[CostComponent] = []
    window = query.window
    batched = query.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    for gr in layout.groups:
        if _full_length(gr, layout):
            page = gr.layers * gr.per_token * gr.block
            components.append(
                CostComponent(
                    name="mla latent" if gr.kind == LayerKind.MLA else "full attention",
                    kind=gr.kind.value,
                    page_bytes=page * layout.block // gr.block,
                    per_seq_bytes=0,
                    scales_with_dtype=True,
                    derivation=_attention_text(query, gr, layout),
                )
            )
        elif gr.kind == LayerKind.SLIDING:
            window_tokens = query.geometry.sliding_window or window
            blocks = _sliding_blocks(query, gr)
            per_seq = blocks * gr.block * gr.per_token * gr.layers
            components.append(
                CostComponent(
                    name="sliding window",
                    kind=gr.kind.value,
                    page_bytes=0,
                    per_seq_bytes=per_seq,
                    scales_with_dtype=True,
                    derivation=(
                        f"{gr.layers} layers x {gr.per_token:,} B/token x {blocks} blocks of "
                        f"{gr.block} (window {window_tokens} - 1 + {batched} batched tokens, "
                        f"+1 block) = {per_seq:,} B per sequence"
                    ),
                )
            )
        else:
            pages = _state_pages(query)
            per_seq = gr.layers * layout.page * pages
            mode = "align (prefix caching)" if query.prefix_caching else "none"
            components.append(
                CostComponent(
                    name="linear-attention state" if gr.kind == LayerKind.LINEAR else "mamba state",
                    kind=gr.kind.value,
                    page_bytes=0,
                    per_seq_bytes=per_seq,
                    scales_with_dtype=False,
                    derivation=(
                        f"{gr.layers} layers x {gr.state:,} B state"
                        f"{f' padded to {layout.page:,} B' if layout.page != gr.state else ''}"
                        f" x {pages} pages (mamba_cache_mode {mode}) = {per_seq:,} B per sequence"
                    ),
                )
            )
    kv_layers = sum(gr.layers for gr in layout.groups)
    return KvBreakdown(
        engine="vllm",
        engine_version=layout.version,
        dtype=layout.storage if layout.dtype == "auto" else layout.dtype,
        page_tokens=layout.block,
        layers=kv_layers,
        components=tuple(components),
        rules=layout.rules,
    )


def _attention_text(query: KvQuery, gr: _Group, layout: _Layout) -> str:
    g = query.geometry
    if gr.kind == LayerKind.MLA:
        assert g.mla is not None
        if layout.dtype == "fp8_ds_mla":
            return f"{gr.layers} layers x {FP8_DS_MLA_BYTES} B (fp8_ds_mla) = {gr.layers * gr.per_token:,} B/token, on every TP rank"
        width = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
        return (
            f"{gr.layers} layers x ({g.mla.kv_lora_rank} + {g.mla.qk_rope_head_dim}) x "
            f"{gr.per_token // width} B = {gr.layers * gr.per_token:,} B/token, on every TP rank"
        )
    heads = g.attention
    assert heads is not None
    per_rank = max(1, heads.num_kv_heads // query.tp)
    replicated = (
        " (replicated: fewer KV heads than TP ranks)" if heads.num_kv_heads < query.tp else ""
    )
    b = gr.per_token // (per_rank * (heads.head_dim + heads.v_head_dim))
    return (
        f"{gr.layers} layers x {per_rank} KV heads/rank{replicated} x ({heads.head_dim} + "
        f"{heads.v_head_dim}) x {b} B = {gr.layers * gr.per_token:,} B/token"
    )


def _pool(query: KvQuery, layout: _Layout, pool_bytes: int) -> PoolResult:
    window = query.window
    if layout.release.logged_tokens == "blocks":
        per_block = layout.bytes_per_block
        blocks = pool_bytes // per_block
        tokens = blocks * layout.block
        label = layout.release.blocks_label
        return PoolResult(
            tokens=tokens,
            num_blocks=blocks,
            max_concurrency=tokens / window,
            derivation=(
                f"{label} = {pool_bytes:,} B // {per_block:,} B per block "
                f"({layout.group_size} layers x {layout.page:,} B) = {blocks:,}; "
                f"tokens = {blocks:,} x {layout.block} = {tokens:,}"
            ),
        )
    per_block = layout.bytes_per_block
    blocks = pool_bytes // per_block
    per_request = _blocks_per_request(layout, query)
    if layout.release.logged_tokens == "groups":
        groups = layout.num_kv_groups
        min_block = min(gr.block for gr in layout.groups)
        tokens = blocks // groups * min_block
        concurrency = blocks / per_request
        text = (
            f"num_blocks = {pool_bytes:,} B // {per_block:,} B = {blocks:,}; logged tokens = "
            f"{blocks:,} // {groups} groups x {min_block} = {tokens:,} (v0.11.0)"
        )
    else:
        concurrency = blocks / per_request
        # kv_cache_utils.get_kv_cache_capacity: int(max_concurrency * max_model_len), in floats.
        tokens = int(concurrency * window)
        text = (
            f"num_blocks = {pool_bytes:,} B // {per_block:,} B per block "
            f"({layout.group_size} layers x {layout.page:,} B) = {blocks:,}; "
            f"{per_request} blocks per {window:,}-token request; "
            f"tokens = int({blocks:,} / {per_request} x {window:,}) = {tokens:,}"
        )
    return PoolResult(
        tokens=tokens,
        num_blocks=blocks,
        max_concurrency=round(concurrency, 2),
        derivation=text,
        extra={"blocks_per_request": per_request, "usable_blocks": blocks - 1},
    )


def _heaviest_stage(query: KvQuery) -> tuple[int, _Layout]:
    stages = _stage_layers(query.geometry, query.pp)
    layouts = [_layout(query, stage) for stage in stages]
    # every worker sizes its own pool; the engine keeps the minimum (get_kv_cache_configs)
    index = max(range(len(layouts)), key=lambda i: layouts[i].bytes_per_block)
    return index, layouts[index]


class VllmEngine(ModelledEngine):
    name = "vllm"
    # `vllm serve MODEL`, or `python -m vllm.entrypoints.openai.api_server --model MODEL`
    # for builds such as vllm-cpu whose `vllm` command cannot find its own package
    binaries = ("vllm", "vllm-api-server")
    takes_model_dtype = True
    speculative_flags = True
    ledger_format = "vllm"
    probe_flavour = "vllm"
    auto_downcast = DOWNCAST

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        stage, layout = _heaviest_stage(query)
        result = _stage_breakdown(query, layout)
        if query.pp > 1:
            return replace(result, notes=(f"pipeline stage {stage} of {query.pp} (the heaviest)",))
        return result

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        _, layout = _heaviest_stage(query)
        return _pool(query, layout, pool_bytes)

    def launch(self, loaded: LoadedShape, figures: Figures) -> LaunchRecord:
        return launch_record(loaded, figures)

    # ---- the planner's side (engines.Engine)

    def accepted_dtypes(self, loaded: LoadedShape) -> tuple[str, ...]:
        return choices_for(KV_CACHE_DTYPE_CHOICES, loaded.shape.engine_version).values

    def check(self, loaded: LoadedShape) -> None:
        """What vLLM's parser would refuse, refused where the shape says it."""
        shape = loaded.shape
        version, serving = shape.engine_version, shape.serving
        for value, option, table, loc in (
            (serving.kv_cache_dtype, "--kv-cache-dtype", KV_CACHE_DTYPE_CHOICES, "kv_cache_dtype"),
            (serving.dtype, "--dtype", MODEL_DTYPE_CHOICES, "dtype"),
        ):
            refused = check_choice("vllm", option, value, table, version)
            if refused:
                raise loaded.error(refused, "serving", loc)
        if serving.kv_cache_dtype not in KV_DTYPES:
            raise loaded.error(_unsized(serving.kv_cache_dtype), "serving", "kv_cache_dtype")
        blocks = choices_for(BLOCK_SIZE_CHOICES, version)
        size = serving.block_size
        if size is not None and "any" not in blocks.values and str(size) not in blocks.values:
            raise loaded.error(
                f"vllm --block-size {size} is refused by the engine: vllm {blocks.read_in} "
                f"takes {', '.join(blocks.values)} ({blocks.source})",
                "serving",
                "block_size",
            )

    def version_used(self, loaded: LoadedShape) -> str | None:
        return select("vllm", RELEASES, loaded.shape.engine_version)[1]


# ---------------------------------------------------------------- launch flags


@dataclass(frozen=True)
class _Launch:
    """What vLLM's flags are read from: the shape, and the words that state its pool."""

    shape: Shape
    pool: tuple[str, ...]  # bytes, a whole-GiB variable's absence, or a utilisation


def _speculative(i: _Launch) -> str | None:
    s, spec = i.shape.serving, i.shape.launch.speculative
    if spec is None or not s.spec_tokens:
        return None
    config: dict[str, object] = {"method": spec.method, "num_speculative_tokens": s.spec_tokens}
    if spec.model:
        config["model"] = spec.model
    return json.dumps(config, separators=(",", ":"))


# vllm serve's flags, in the order the argv carries them (vllm/engine/arg_utils.py)
FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--host", lambda i: i.shape.launch.host),
    flag("--port", lambda i: i.shape.launch.port),
    flag("--served-model-name", lambda i: i.shape.launch.served_model_name),
    flag("--tensor-parallel-size", lambda i: i.shape.parallel.tensor),
    flag("--pipeline-parallel-size", lambda i: i.shape.parallel.pipeline),
    flag("--max-model-len", lambda i: i.shape.serving.max_model_len),
    flag("--max-num-seqs", lambda i: i.shape.serving.max_num_seqs),
    flag("--kv-cache-dtype", lambda i: i.shape.serving.kv_cache_dtype),
    flag("--block-size", lambda i: i.shape.serving.block_size),
    flag("--dtype", lambda i: None if i.shape.serving.dtype == "auto" else i.shape.serving.dtype),
    lambda i: i.pool,
    flag("--max-num-batched-tokens", lambda i: i.shape.serving.max_num_batched_tokens),
    flag("--no-enable-prefix-caching", lambda i: not i.shape.serving.prefix_caching),
    flag("--speculative-config", _speculative),
)


def _pool_flags(
    shape: Shape,
    release: VllmRules,
    version: str,
    environment: dict[str, str | None],
    derivations: dict[str, str],
) -> tuple[str, ...]:
    """How the shape's pool reaches vLLM: the CPU build's variable, bytes, or a fraction."""
    if shape.card.device == "cpu":
        pool: list[str] = []
        _cpu_pool(shape.budget.kv, version, pool, environment, derivations)
        return tuple(pool)
    if release.pool_in_bytes:
        # --kv-cache-memory-bytes (v0.11.0, v0.33.0) states the pool and ignores utilisation.
        derivations["--kv-cache-memory-bytes"] = (
            f"budget.kv = {shape.budget.kv:,} B per GPU (vllm {version} takes the pool in bytes)"
        )
        return ("--kv-cache-memory-bytes", str(shape.budget.kv))
    util = fraction_up(shape.budget.weights + shape.budget.kv, shape.card.total)
    derivations["--gpu-memory-utilization"] = (
        f"(budget.weights {shape.budget.weights:,} B + budget.kv {shape.budget.kv:,} B) / "
        f"card.total {shape.card.total:,} B = {util:.4f}, rounded up; vllm {version} has no "
        "byte flag, and budget.weights must cover all it counts as non-KV "
        "(weights, activation peak, non-torch)"
    )
    return ("--gpu-memory-utilization", f"{util:.4f}")


def _env(shape: Shape, figures: Figures, environment: dict[str, str | None]) -> dict[str, str]:
    s, par = shape.serving, shape.parallel
    env = {
        "MODEL": shape.launch.weights or shape.model,
        "TENSOR_PARALLEL_SIZE": str(par.tensor),
        "PIPELINE_PARALLEL_SIZE": str(par.pipeline),
        "MAX_MODEL_LEN": str(s.max_model_len),
        "MAX_NUM_SEQS": str(s.max_num_seqs),
        "KV_CACHE_DTYPE": s.kv_cache_dtype,
        "KV_CACHE_MEMORY_BYTES": str(shape.budget.kv),
        "KV_TOKENS_PREDICTED": str(figures.tokens_backed),
    }
    if s.dtype != "auto":
        env["DTYPE"] = s.dtype
    # serve.sh exports these (or unsets them); the env file says the same
    env.update({key: value for key, value in environment.items() if value is not None})
    return env


def _roles(
    shape: Shape, argv: list[str], environment: dict[str, str | None], env: dict[str, str]
) -> tuple[RoleRecord, ...]:
    """One serve.sh, or a Ray head (which serves) and its workers across nodes."""
    par, ln = shape.parallel, shape.launch
    if par.nodes == 1:
        return (
            RoleRecord(
                name="serve", file="serve.sh", environment=environment, argv=(*argv, *ln.extra_args)
            ),
        )
    head = ln.head_address or ""
    port = str(ln.head_port or RAY_PORT)
    gpus = str(shape.card.count)
    env["RAY_ADDRESS"] = f"{head}:{port}"
    return (
        RoleRecord(
            name="head",
            file="serve-head.sh",
            before=(("ray", "start", "--head", "--port", port, "--num-gpus", gpus),),
            environment=environment,
            argv=(*argv, "--distributed-executor-backend", "ray", *ln.extra_args),
            note=f"run on {head} once every worker has joined ({par.nodes - 1} worker node(s))",
        ),
        RoleRecord(
            name="worker",
            file="serve-worker.sh",
            argv=("ray", "start", "--address", f"{head}:{port}", "--num-gpus", gpus, "--block"),
            note=f"run on each of the {par.nodes - 1} other node(s) before the head serves",
        ),
    )


def launch_record(loaded: LoadedShape, figures: Figures) -> LaunchRecord:
    """``vllm serve`` argv realising the shape; Ray head/worker roles across nodes."""
    shape = loaded.shape
    release, version = select("vllm", RELEASES, shape.engine_version)
    derivations: dict[str, str] = {}
    environment: dict[str, str | None] = {}
    model = shape.launch.weights or shape.model
    if shape.launch.binary == "vllm-api-server":
        argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        argv = ["vllm", "serve", model]
    pool = _pool_flags(shape, release, version, environment, derivations)
    argv += argv_of(FLAGS, _Launch(shape, pool))
    env = _env(shape, figures, environment)
    roles = _roles(shape, argv, environment, env)
    return LaunchRecord(binary="vllm", env=env, roles=roles, derivations=derivations)


def _cpu_pool(
    kv: int,
    version: str,
    argv: list[str],
    environment: dict[str, str | None],
    derivations: dict[str, str],
) -> None:
    """The CPU build's pool: VLLM_CPU_KVCACHE_SPACE, in whole GiB, or bytes by flag.

    platforms/cpu.py (v0.32.0 CPU build) reads the variable as ``int(...) * GiB`` and
    lets it override --kv-cache-memory-bytes; cpu_worker.determine_available_memory
    then logs "Explicitly set (X/Y) GiB for KV cache on node N" and returns that pool.
    """
    if kv % GIB == 0:
        environment[CPU_KV_SPACE] = str(kv // GIB)
        derivations[CPU_KV_SPACE] = (
            f"budget.kv = {kv:,} B = {kv // GIB} GiB: the CPU build's pool, a whole number of "
            f"GiB (vllm {version})"
        )
        return
    environment[CPU_KV_SPACE] = None
    argv += ["--kv-cache-memory-bytes", str(kv)]
    derivations["--kv-cache-memory-bytes"] = (
        f"budget.kv = {kv:,} B is not a whole number of GiB, which {CPU_KV_SPACE} needs: "
        f"the pool goes by flag and the variable is unset, since it would override the flag "
        f"(vllm {version} CPU build)"
    )
