"""llama.cpp's cache in cells: the K/V types, the layout a -c gives, and its bytes."""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.dtypes import ElementType, element_type
from fakplan.engines.choices import check_choice
from fakplan.engines.llamacpp.offload import Offload, offload
from fakplan.engines.llamacpp.rules import (
    CACHE_TYPE_CHOICES,
    N_BATCH,
    N_UBATCH,
    PAD,
    RELEASES,
    STATE_BYTES,
    UNQUANTIZED,
    LlamacppRules,
)
from fakplan.engines.releases import select
from fakplan.errors import RuleError
from fakplan.geometry import LayerKind
from fakplan.kv import KvQuery


def padded(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class CacheLayout:
    k: ElementType
    v: ElementType
    k_name: str
    v_name: str
    full_layers: int
    swa_layers: int
    k_elems: int  # n_embd_k_gqa of full layers
    v_elems: int  # n_embd_v_gqa (0 for MLA: no V tensor in 0c1e57098)
    swa_k_elems: int
    swa_v_elems: int
    state_per_seq: int  # recurrent R + S, f32, all recurrent layers
    release: LlamacppRules
    version: str
    # -ngl below every layer: the layers counted above are the GPU's (None: all of them)
    offload: Offload | None = None
    all_layers: int = 0  # the cache's layers on every device

    def cell_bytes(self) -> int:
        k = self.k.row_bytes(self.k_elems) if self.k_elems else 0
        v = self.v.row_bytes(self.v_elems) if self.v_elems else 0
        return self.full_layers * (k + v)

    def swa_cell_bytes(self) -> int:
        if not self.swa_layers:
            return 0
        return self.swa_layers * (
            self.k.row_bytes(self.swa_k_elems) + self.v.row_bytes(self.swa_v_elems)
        )


def split_types(text: str) -> tuple[str, str]:
    """K and V cache types of a kv_cache_dtype: ``auto``, ``TYPE``, or ``K/V``."""
    if text == "auto":
        return "f16", "f16"
    k, _, v = text.partition("/")
    return k, v or k


def cache_type_refusal(text: str, version: str | None) -> str | None:
    """Why llama.cpp refuses a kv_cache_dtype (either side of ``K/V``), or None."""
    for name in split_types(text):
        refused = check_choice(
            "llama.cpp", "--cache-type-k/-v", name, CACHE_TYPE_CHOICES, build_of(version)
        )
        if refused:
            return refused + " (or K/V, e.g. f16/q8_0)"
    return None


def cache_types(query: KvQuery) -> tuple[str, str]:
    refused = cache_type_refusal(query.kv_dtype, query.engine_version)
    if refused:
        raise RuleError(refused, "serving", "kv_cache_dtype")
    return split_types(query.kv_dtype)


def cache_for(query: KvQuery) -> CacheLayout:
    release, version = select("llamacpp", RELEASES, build_of(query.engine_version), build=True)
    k_name, v_name = cache_types(query)
    if v_name not in UNQUANTIZED and not query.flash_attn:
        raise RuleError(
            "llama.cpp: a quantized V cache requires flash attention", "serving", "kv_cache_dtype"
        )
    g = query.geometry
    kinds = g.layer_kinds
    where = None
    if query.device != "cpu" and query.gpu_layers is not None:
        where = offload(query.gpu_layers, g.num_layers + g.num_nextn_layers, release)
        if where.everything:
            where = None
        else:  # each layer's cache on its layer's device (llama-kv-cache.cpp dev_layer(il))
            kinds = tuple(k for i, k in enumerate(kinds) if where.block_on_gpu(i))
    cached = (LayerKind.FULL, LayerKind.MLA, LayerKind.SLIDING)
    full = kinds.count(LayerKind.FULL) + kinds.count(LayerKind.MLA)
    swa = kinds.count(LayerKind.SLIDING)
    if g.mla is not None and release.mla == "expanded":
        # before b5137 the converter wrote DeepSeek as plain attention: every head's K of
        # qk_nope + qk_rope and V of v_head_dim
        heads = g.num_attention_heads
        k_elems = heads * (g.mla.qk_nope_head_dim + g.mla.qk_rope_head_dim)
        v_elems = heads * g.mla.v_head_dim
    elif g.mla is not None:
        k_elems = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
        # b7836 on allocates no V tensor for MLA (has_v = !is_mla)
        v_elems = 0 if release.mla == "k_only" else g.mla.kv_lora_rank
    elif g.attention is not None:
        k_elems = g.attention.num_kv_heads * g.attention.head_dim
        v_elems = g.attention.num_kv_heads * g.attention.v_head_dim
    else:
        k_elems = v_elems = 0
    sl = g.sliding
    state = 0
    if g.linear is not None:
        d = g.linear
        # llama-hparams.cpp n_embd_r / n_embd_s for Gated DeltaNet, kept in f32
        conv = (d.conv_kernel - 1) * (
            d.head_v_dim * d.num_v_heads + 2 * d.num_k_heads * d.head_k_dim
        )
        ssm = d.head_k_dim * d.head_v_dim * d.num_v_heads
        state = kinds.count(LayerKind.LINEAR) * (conv + ssm) * STATE_BYTES
    if g.mamba is not None:
        m = g.mamba
        conv = (m.conv_kernel - 1) * (m.intermediate_size + 2 * m.n_groups * m.state_size)
        ssm = m.state_size * m.intermediate_size
        state += kinds.count(LayerKind.MAMBA) * (conv + ssm) * STATE_BYTES
    return CacheLayout(
        k=element_type(k_name),
        v=element_type(v_name),
        k_name=k_name,
        v_name=v_name,
        full_layers=full,
        swa_layers=swa,
        k_elems=k_elems,
        v_elems=v_elems,
        swa_k_elems=sl.num_kv_heads * sl.head_dim if sl else 0,
        swa_v_elems=sl.num_kv_heads * sl.v_head_dim if sl else 0,
        state_per_seq=state,
        release=release,
        version=version,
        offload=where,
        all_layers=sum(1 for k in g.layer_kinds if k in cached),
    )


def build_of(version: str | None) -> str | None:
    return None if version is None else version.lstrip("bB")


def build_number(version: str | None) -> int | None:
    """The build a version names (b9108: 9108); None where unstated or not a number."""
    build = build_of(version)
    return int(build) if build and build.isdigit() else None


def pad_step(query: KvQuery, cache: CacheLayout) -> int:
    """The cells n_ctx is padded to (LlamacppRules.pad); before b6325 flash attention is
    on only where fakplan's launch passes -fa (a quantized V cache needs it)."""
    rule = cache.release.pad
    if rule == "256":
        return PAD
    if rule == "none":
        return 1
    flash = query.flash_attn and (cache.release.fa_auto or cache.v_name not in UNQUANTIZED)
    return PAD if flash else 32


def is_unified(query: KvQuery) -> bool:
    # llama-server: auto -np (4 slots) is unified; an explicit -np N is split unless -kvu.
    return query.kv_unified if query.kv_unified is not None else query.max_num_seqs == 1


def _stream_cells(query: KvQuery, cache: CacheLayout, n_ctx: int, pad: int) -> tuple[int, int]:
    """(cells per stream, streams) of the base cache for a requested -c."""
    seqs, rule = query.max_num_seqs, cache.release.streams
    if rule == "none" or is_unified(query) or seqs == 1:
        return padded(n_ctx, pad), 1
    if rule == "pad":
        return padded(padded(n_ctx, pad) // seqs, pad), seqs
    if rule == "floor":
        return n_ctx // seqs, seqs
    ceiling = -(-n_ctx // seqs)
    return (ceiling if rule == "ceil" else padded(ceiling, pad)), seqs


def layout_cells(query: KvQuery, cache: CacheLayout, n_ctx: int) -> tuple[int, int, int]:
    """(cells per stream, streams, SWA cells per stream) for a requested -c."""
    pad = pad_step(query, cache)
    per_stream, streams = _stream_cells(query, cache, n_ctx, pad)
    swa = 0
    window = query.geometry.sliding_window
    if cache.swa_layers and window:
        rule = cache.release.swa
        seqs = query.max_num_seqs
        ubatch = min(query.ubatch or N_UBATCH, N_BATCH, n_ctx)
        if rule == "none":
            swa = per_stream
        elif rule == "batch":
            swa = min(per_stream, padded(window * seqs + min(n_ctx, N_BATCH), pad))
        elif rule == "ubatch":
            swa = min(per_stream, padded(window * seqs + ubatch, pad))
        else:
            held = window * (seqs if is_unified(query) else 1) + ubatch
            swa = (
                padded(min(per_stream, held), PAD)
                if rule == "outside"
                else min(per_stream, padded(held, pad))
            )
    return per_stream, streams, swa


def slot_tokens(query: KvQuery, cache: CacheLayout, per_stream: int, streams: int) -> int:
    """The context one slot reaches: its stream's cells; with a unified cache the whole of
    it (tools/server n_ctx_slot = n_ctx_seq); the 2024 server gave each n_ctx / n_parallel."""
    if streams == 1 and query.max_num_seqs > 1 and not cache.release.split_streams:
        return per_stream // query.max_num_seqs
    return per_stream


def own_cache_bytes(query: KvQuery, cache: CacheLayout, n_ctx: int) -> int:
    """The model's own caches for a -c: attention, SWA and recurrent state (a speculative
    draft's context is the draft module's)."""
    per_stream, streams, swa = layout_cells(query, cache, n_ctx)
    kv = cache.cell_bytes() * per_stream * streams + cache.swa_cell_bytes() * swa * streams
    return kv + state_bytes(query, cache)


def printed_cache_bytes(query: KvQuery, cache: CacheLayout, n_ctx: int) -> int:
    """What the first "llama_kv_cache: size =" line of a boot states for a -c: the cache
    of the full-attention layers. Since iSWA (llama_kv_cache_iswa) the SWA layers' cache
    prints a line of its own, and a hybrid's recurrent state prints its own
    (llama_memory_recurrent: size =); before iSWA (``swa`` rule "none") every attention
    layer shares the one cache that line states. A model with no full-attention layer
    prints its SWA cache (or its recurrent state) first: that figure is the whole."""
    per_stream, streams, swa = layout_cells(query, cache, n_ctx)
    if not cache.full_layers:
        return own_cache_bytes(query, cache, n_ctx)
    base = cache.cell_bytes() * per_stream * streams
    if cache.release.swa == "none":
        base += cache.swa_cell_bytes() * swa * streams
    return base


def state_bytes(query: KvQuery, cache: CacheLayout) -> int:
    """The recurrent memory: a row per sequence (mem_size = max(1, n_seq_max)), times
    1 + n_rs_seq from b9191 where a speculative draft keeps snapshots (spec_tokens)."""
    rows = max(1, query.max_num_seqs) * (1 + (query.spec_tokens if cache.release.rs_seq else 0))
    return cache.state_per_seq * rows
