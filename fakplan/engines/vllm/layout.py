"""vLLM's KV arithmetic: a stage's layer groups, their pages and blocks, and a pool's count."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fakplan.contract import CostComponent
from fakplan.dtypes import element_type
from fakplan.engines.choices import check_choice, unsized
from fakplan.engines.releases import newer_note, select
from fakplan.engines.served import served_dtype
from fakplan.engines.vllm.rules import (
    BLOCK_ALIGN,
    CHECKPOINT_KV,
    CPU_BLOCK,
    CPU_MLA_BLOCK,
    DEFAULT_BATCHED_TOKENS,
    DEFAULT_BLOCK,
    DOWNCAST,
    FP8_DS_MLA_BYTES,
    KV_CACHE_DTYPE_CHOICES,
    KV_DTYPES,
    MLA_BLOCK,
    RELEASES,
    STATE_DTYPES,
    VllmRules,
)
from fakplan.engines.weights import stage_shares
from fakplan.errors import RuleError
from fakplan.geometry import Geometry, LayerKind
from fakplan.kv import DRAFT_MODEL_METHODS, KvBreakdown, KvQuery, PoolResult


def _checkpoint_kv(query: KvQuery) -> tuple[str, str] | None:
    """The KV dtype the checkpoint's quantization config sets for this release, and why."""
    decl = query.geometry.kv_quant_decl
    if decl is None:
        return None
    rules, _ = select("vllm", CHECKPOINT_KV, query.engine_version)
    stated = query.kv_dtype != "auto"
    if decl.quant_method == "compressed-tensors" and decl.has_scheme:
        if rules.compressed == "always" or (rules.compressed == "auto" and not stated):
            over = f" over the stated {query.kv_dtype}" if stated else ""
            why = f"a compressed-tensors kv_cache_scheme makes the cache fp8{over}"
            return "fp8", f"{why} ({rules.source})"
        return None
    if stated or not decl.quant_method.startswith("modelopt"):
        return None
    form = decl.algo
    if decl.scheme_bits is not None or decl.scheme_type is not None:
        if decl.scheme_dynamic is False and decl.scheme_bits == 8 and decl.scheme_type == "float":
            form = "fp8"
        elif decl.scheme_bits == 4 and decl.scheme_type == "float":
            form = "nvfp4"
        else:
            form = None
    if form not in rules.modelopt:
        return None
    name = "fp8_e4m3" if form == "fp8" else form
    return name, f"the ModelOpt checkpoint's KV scheme makes auto {name} ({rules.source})"


def _dtype_bytes(query: KvQuery) -> tuple[str, int, str, str | None]:
    name = query.kv_dtype
    checkpoint = _checkpoint_kv(query)
    if checkpoint is not None:
        name = checkpoint[0]
        if name not in KV_DTYPES:
            raise RuleError(
                f"vllm --kv-cache-dtype auto is {name} for {query.geometry.source} "
                f"({checkpoint[1]}), a layout fakplan has not sized yet",
                "serving",
                "kv_cache_dtype",
            )
        storage = KV_DTYPES[name] or "fp8"
        return name, element_type(storage).block_bytes, storage, checkpoint[1]
    if name not in KV_DTYPES:
        refused = check_choice(
            "vllm", "--kv-cache-dtype", name, KV_CACHE_DTYPE_CHOICES, query.engine_version
        )
        raise RuleError(refused or unsized("vllm", name, KV_DTYPES), "serving", "kv_cache_dtype")
    stated = KV_DTYPES[name]
    rule = None
    if stated is None:
        storage, rule = served_dtype(query, DOWNCAST)
    else:
        storage = stated
    if name == "fp8_ds_mla" and LayerKind.MLA not in query.geometry.layer_kinds:
        raise RuleError(
            "vllm fp8_ds_mla is an MLA cache layout; this model has no MLA layers",
            "serving",
            "kv_cache_dtype",
        )
    return name, element_type(storage).block_bytes, storage, rule


def _stage_layers(geometry: Geometry, pp: int) -> list[tuple[LayerKind, ...]]:
    """vLLM get_pp_indices: equal shares, the remainder going to the stages before the last."""
    stages, start = [], 0
    for size in stage_shares(geometry.num_layers, pp):
        stages.append(geometry.layer_kinds[start : start + size])
        start += size
    return stages


@dataclass(frozen=True)
class LayerGroup:
    kind: LayerKind
    layers: int  # layers of this kind on the stage
    per_token: int  # bytes per token per layer (attention kinds)
    state: int  # bytes per sequence per layer (state kinds), before padding
    block: int = 0  # tokens per block of this kind
    page: int = 0  # bytes of one page of one layer, after unification


@dataclass(frozen=True)
class StageLayout:
    release: VllmRules
    version: str
    dtype: str
    storage: str
    groups: tuple[LayerGroup, ...]
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


def _specs(query: KvQuery, stage: tuple[LayerKind, ...], b: int, dtype: str) -> list[LayerGroup]:
    g = query.geometry
    tp = query.tp
    out: list[LayerGroup] = []
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
            out.append(LayerGroup(kind, count, per_token, 0))
        elif kind == LayerKind.MLA:
            assert g.mla is not None
            # MLA: one latent of kv_lora_rank + rope dims, the same on every TP rank.
            width = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
            per_token = FP8_DS_MLA_BYTES if dtype == "fp8_ds_mla" else width * b
            out.append(LayerGroup(kind, count, per_token, 0))
        else:
            out.append(LayerGroup(kind, count, 0, _state_bytes(query, kind)))
    return out


def _state_bytes(query: KvQuery, kind: LayerKind) -> int:
    """Recurrent state of one sequence in one layer on one rank (mamba_utils.py, v0.33.0);
    the SSM part's dtype per release (STATE_DTYPES)."""
    g, tp, spec = query.geometry, query.tp, query.spec_tokens
    model = element_type(g.dtype if g.dtype in {"bf16", "fp16", "fp32"} else "bf16").block_bytes
    states, _ = select("vllm", STATE_DTYPES, query.engine_version)
    if kind == LayerKind.LINEAR:
        d = g.linear
        assert d is not None
        conv_dim = 2 * d.head_k_dim * d.num_k_heads + d.head_v_dim * d.num_v_heads
        conv = conv_dim // tp * (d.conv_kernel - 1 + spec) * model
        stated = d.ssm_dtype if states.gdn_ssm_dtype else None
        ssm_b = element_type(stated).block_bytes if stated else model
        temporal = d.num_v_heads // tp * d.head_v_dim * d.head_k_dim * ssm_b
        return conv + temporal
    m = g.mamba
    assert m is not None
    ssm_name = m.ssm_dtype
    if g.architecture == "nemotron_h":
        # the checkpoint's mamba_ssm_cache_dtype counts only where the release reads it
        default = states.nemotron_h_default
        ssm_name = None if default is None else (ssm_name or default)
    ssm_b = element_type(ssm_name).block_bytes if ssm_name else model
    if m.version == 1:
        return m.intermediate_size // tp * (m.conv_kernel - 1) * model + (
            m.intermediate_size // tp * m.state_size * ssm_b
        )
    conv_dim = m.intermediate_size + 2 * m.n_groups * m.state_size
    conv = conv_dim // tp * (m.conv_kernel - 1 + spec) * model
    return conv + m.num_heads // tp * m.head_dim * m.state_size * ssm_b


def _default_block(query: KvQuery, release: VllmRules, is_mla: bool, rules: list[str]) -> int:
    """The attention block before any hybrid raise: stated, or the platform's default."""
    if query.device == "cpu":
        default = CPU_MLA_BLOCK if is_mla else CPU_BLOCK
        if not query.block_size:
            rules.append(
                f"CPU build: block size {default} unless stated (platforms/cpu.py, read in 0.32.0)"
            )
    else:
        default = MLA_BLOCK if is_mla and release.mla_block_64 else DEFAULT_BLOCK
        if is_mla and not query.block_size and release.mla_block_64:
            rules.append("MLA block size 64: FlashMLA forces it (read in v0.11.0)")
    return query.block_size or default


def _raised_block(
    groups: list[LayerGroup], block: int, release: VllmRules, rules: list[str]
) -> int:
    """Raise the attention block until one attention page holds one state page (the state
    page is then padded to match): in steps of 16 (0.11.0 models/config.py:367), from
    0.20.0 of max(16, the block) (platforms/interface.py:577)."""
    states = [gr.state for gr in groups if gr.state]
    per_layer = max((gr.per_token for gr in groups if gr.per_token), default=0)
    if not states or not per_layer:
        return block
    largest = max(states)
    step = max(BLOCK_ALIGN, block) if release.align_to_block else BLOCK_ALIGN
    needed = step * -(-largest // (step * per_layer))
    if needed <= block:
        return block
    rules.append(
        f"attention block raised to {needed} tokens so one attention page "
        f"({needed} x {per_layer:,} B) holds a state page ({largest:,} B)"
    )
    return needed


def _unified(groups: list[LayerGroup], block: int) -> tuple[list[LayerGroup], int]:
    """unify_kv_cache_spec_page_size: every group's page is the largest one; a smaller
    attention page takes a proportionally larger block."""
    page = max(gr.per_token * block if gr.per_token else gr.state for gr in groups)
    unified: list[LayerGroup] = []
    for gr in groups:
        if not gr.per_token:
            unified.append(LayerGroup(gr.kind, gr.layers, 0, gr.state, block, page))
            continue
        own = gr.per_token * block
        tokens = block * page // own if own < page and page % own == 0 else block
        unified.append(LayerGroup(gr.kind, gr.layers, gr.per_token, 0, tokens, page))
    return unified, page


def _group_size(groups: list[LayerGroup], release: VllmRules) -> int:
    """get_kv_cache_groups: one group size for all types (VllmRules.group_ratio)."""
    if len(groups) == 1:
        return groups[0].layers
    counts = [gr.layers for gr in groups]
    smallest, largest = min(counts), max(counts)
    ratio = release.group_ratio
    return largest if ratio is not None and largest < ratio * smallest else smallest


def _layout(query: KvQuery, stage: tuple[LayerKind, ...]) -> StageLayout:
    release, version = select("vllm", RELEASES, query.engine_version)
    dtype, b, storage, dtype_rule = _dtype_bytes(query)
    groups = _specs(query, stage, b, dtype)
    if not groups:
        raise RuleError(f"{query.geometry.source}: no layer holds a KV cache", "model")
    rules = [
        f"vllm {release.rule} arithmetic (read in {release.read_in})",
        *newer_note("vllm", RELEASES, query.engine_version),
        *([dtype_rule] if dtype_rule else []),
    ]
    is_mla = any(gr.kind == LayerKind.MLA for gr in groups)
    block = _default_block(query, release, is_mla, rules)
    attention = [gr for gr in groups if gr.per_token]
    if not release.hybrid and (len(attention) < len(groups) or len(attention) > 1):
        raise RuleError(
            f"vllm {version}: hybrid layouts ({', '.join(gr.kind.value for gr in groups)}) "
            "are modelled from v0.11 on; state engine_version 0.11.0 or later",
            "engine_version",
        )
    if release.sliding_as_full:
        rules.append("V0: sliding windows were allocated as full layers")
    block = _raised_block(groups, block, release, rules)
    unified, page = _unified(groups, block)
    return StageLayout(
        release, version, dtype, storage, tuple(unified), _group_size(unified, release), page,
        block, tuple(rules),
    )  # fmt: skip


def _full_length(gr: LayerGroup, layout: StageLayout) -> bool:
    """A group every token of the window is cached for (V0 sizes sliding windows so too)."""
    return gr.kind in (LayerKind.FULL, LayerKind.MLA) or (
        gr.kind == LayerKind.SLIDING and layout.release.sliding_as_full
    )


def _in_flight(query: KvQuery, release: VllmRules) -> tuple[int, str]:
    """Tokens a sliding window must hold beyond itself: one scheduler step's batch, from
    0.26.0 times the batches in flight (2 under async scheduling at PP 1, else PP)."""
    batched = query.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    if not release.batches_in_flight:
        return batched, f"{batched} batched tokens"
    # max_concurrent_batches: PP batches fill the pipeline; async scheduling (on unless
    # stated off) overlaps 2 at PP 1 on the V1 runner
    batches = 2 if query.pp == 1 and query.async_scheduling is not False else query.pp
    if batches == 1:
        return batched, f"{batched} batched tokens (1 batch in flight)"
    return batches * batched, f"{batches} x {batched} batched tokens in flight"


def _sliding_blocks(query: KvQuery, gr: LayerGroup, release: VllmRules) -> int:
    """Blocks a sliding-window group holds per request: the window less one token plus the
    tokens in flight, capped at max_model_len, and one more (SlidingWindowSpec)."""
    window = query.window
    window_tokens = query.geometry.sliding_window or window
    extra, _ = _in_flight(query, release)
    return -(-min(window_tokens - 1 + extra, window) // gr.block) + 1


def _prefix_caching(query: KvQuery, release: VllmRules) -> bool:
    """Whether a hybrid model runs with prefix caching: as stated, else the release's default."""
    if not release.hybrid_prefix_possible:
        return False
    stated = query.prefix_caching
    return release.hybrid_prefix_default if stated is None else stated


def _state_pages(query: KvQuery, release: VllmRules) -> tuple[int, str]:
    """MambaSpec pages a request keeps, and the mode in words (VllmRules.state_modes)."""
    if not release.state_modes:
        return 1, "one page (no mamba_cache_mode before 0.15)"
    if _prefix_caching(query, release):
        return 2 + query.spec_tokens, "mamba_cache_mode align (prefix caching)"
    return 1 + query.spec_tokens, "mamba_cache_mode none"


def _blocks_per_request(layout: StageLayout, query: KvQuery) -> int:
    total = 0
    for gr in layout.groups:
        copies = math.ceil(gr.layers / layout.group_size)
        if _full_length(gr, layout):
            need = -(-query.window // gr.block)
        elif gr.kind == LayerKind.SLIDING:
            need = _sliding_blocks(query, gr, layout.release)
        else:
            need, _ = _state_pages(query, layout.release)
        total += copies * need
    return total


def _sliding_component(query: KvQuery, gr: LayerGroup, release: VllmRules) -> CostComponent:
    window_tokens = query.geometry.sliding_window or query.window
    _, batched = _in_flight(query, release)
    blocks = _sliding_blocks(query, gr, release)
    per_seq = blocks * gr.block * gr.per_token * gr.layers
    return CostComponent(
        name="sliding window",
        kind=gr.kind.value,
        page_bytes=0,
        per_seq_bytes=per_seq,
        scales_with_dtype=True,
        derivation=(
            f"{gr.layers} layers x {gr.per_token:,} B/token x {blocks} blocks of "
            f"{gr.block} (window {window_tokens} - 1 + {batched}, "
            f"+1 block) = {per_seq:,} B per sequence"
        ),
    )


def _state_component(query: KvQuery, gr: LayerGroup, layout: StageLayout) -> CostComponent:
    pages, mode = _state_pages(query, layout.release)
    per_seq = gr.layers * layout.page * pages
    padded = f" padded to {layout.page:,} B" if layout.page != gr.state else ""
    return CostComponent(
        name="linear-attention state" if gr.kind == LayerKind.LINEAR else "mamba state",
        kind=gr.kind.value,
        page_bytes=0,
        per_seq_bytes=per_seq,
        scales_with_dtype=False,
        derivation=(
            f"{gr.layers} layers x {gr.state:,} B state{padded} x {pages} pages "
            f"({mode}) = {per_seq:,} B per sequence"
        ),
    )


def _component(query: KvQuery, gr: LayerGroup, layout: StageLayout) -> CostComponent:
    """One group's cost: per page where it grows with the window, else per sequence."""
    if _full_length(gr, layout):
        page = gr.layers * gr.per_token * gr.block
        return CostComponent(
            name="mla latent" if gr.kind == LayerKind.MLA else "full attention",
            kind=gr.kind.value,
            page_bytes=page * layout.block // gr.block,
            per_seq_bytes=0,
            scales_with_dtype=True,
            derivation=_attention_text(query, gr, layout),
        )
    if gr.kind == LayerKind.SLIDING:
        return _sliding_component(query, gr, layout.release)
    return _state_component(query, gr, layout)


def stage_breakdown(query: KvQuery, layout: StageLayout) -> KvBreakdown:
    return KvBreakdown(
        engine="vllm",
        engine_version=layout.version,
        dtype=layout.storage if layout.dtype == "auto" else layout.dtype,
        page_tokens=layout.block,
        layers=sum(gr.layers for gr in layout.groups),
        components=tuple(_component(query, gr, layout) for gr in layout.groups),
        rules=layout.rules,
    )


def _attention_text(query: KvQuery, gr: LayerGroup, layout: StageLayout) -> str:
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


def count_pool(query: KvQuery, layout: StageLayout, pool_bytes: int) -> PoolResult:
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
            f"{blocks:,} // {groups} groups x {min_block} = {tokens:,} "
            f"({layout.release.rule}, read in {layout.release.read_in})"
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


# EAGLE heads and a separate draft model register their attention layers in the target's KV
# cache config (v1/spec_decode/eagle.py load_model, v0.19.0); ngram, suffix, medusa and
# mlp_speculator keep no KV
NO_KV_METHODS = ("ngram", "suffix", "medusa", "mlp_speculator")


def _with_draft(query: KvQuery, stages: list[tuple[LayerKind, ...]]) -> list[tuple[LayerKind, ...]]:
    """A speculative draft's attention layers cache in the same pool, on the last PP stage
    (vLLM registers them in the one KV cache config):

    - an MTP draft (method unset or ``*mtp``): the checkpoint's own nextn layers, each one
      more layer of the model's attention kind;
    - an EAGLE head or a separate draft model: its own decoder layers, one more layer each
      where their attention is the target's (same KV heads and head size: the same KV
      spec, so the same group); a draft whose attention differs, or a target without
      full-attention layers, makes a group of its own, which fakplan does not read."""
    g, method = query.geometry, query.spec_method
    if not query.spec_tokens or (method or "mtp") in NO_KV_METHODS:
        return stages
    if method is None or "mtp" in method:
        if not g.num_nextn_layers:
            return stages
        kind = LayerKind.MLA if LayerKind.MLA in g.layer_kinds else LayerKind.FULL
        return [*stages[:-1], stages[-1] + (kind,) * g.num_nextn_layers]
    if method not in DRAFT_MODEL_METHODS:
        raise RuleError(
            f"speculative method {method!r}: which layers its draft keeps in the KV pool is "
            f"not read (read: mtp, {', '.join(DRAFT_MODEL_METHODS)}, and {', '.join(NO_KV_METHODS)}, "
            "which keep none)",
            "launch",
            "speculative",
            "method",
        )
    draft = query.draft
    if draft is None:
        raise RuleError(
            f"the {method} draft's attention layers share the KV pool: name the draft model "
            "(launch.speculative.model, or model in --speculative-config) to count them",
            "launch",
            "speculative",
        )
    if set(draft.layer_kinds) != {LayerKind.FULL} or draft.attention != g.attention:
        raise RuleError(
            f"the {method} draft {draft.source} caches its attention in a KV group of its own "
            f"(its layers {sorted(set(draft.layer_kinds))}, heads {draft.attention}; the "
            f"target's {g.attention}): not read",
            "launch",
            "speculative",
            "model",
        )
    return [*stages[:-1], stages[-1] + (LayerKind.FULL,) * draft.num_layers]


def heaviest_stage(query: KvQuery) -> tuple[int, StageLayout]:
    stages = _with_draft(query, _stage_layers(query.geometry, query.pp))
    layouts = [_layout(query, stage) for stage in stages]
    # every worker sizes its own pool; the engine keeps the minimum (get_kv_cache_configs)
    index = max(range(len(layouts)), key=lambda i: layouts[i].bytes_per_block)
    return index, layouts[index]
