"""A speculative draft model's KV cache in llama-server (``-md``), by build.

llama-server builds the draft's context from a copy of the target's parameters, with the
draft's own model, GPU layers (``-ngld``) and cache types (``-ctkd/-ctvd``, f16 unless
stated: never the target's ``-ctk/-ctv``, d67341dc1 #13782). How many contexts it makes
and how many cells each holds changed four times (docs/engines.md §3.7a, read in the
upstream sources of each era and run on CPU at b5873, b9108, b10470 and b10587):

- up to cd5e3b575 (#16736): one context per slot of ``-cd``, else ``-c / -np`` cells
  (``tools/server/server.cpp`` b5873:1963-1996, 2071), plus a temporary one while loading,
  freed before the slots' are made;
- from cd5e3b575: the slots' contexts take the target's per-sequence size
  (``llama_n_ctx_seq``) where ``-cd`` is not given;
- from 72d3b1898 (#18471, b7864): no temporary context (``server-context.cpp``
  b9108:784-809);
- from 68e7ea3ea (#22838, b9109): one context shared by the slots, ``n_seq_max = -np``
  with the target's unified flag, of the command line's ``-c`` (``-cd`` removed);
- from 2fb989b9e (#27496, b10584): as many cells as the target's context
  (``common/speculative.cpp`` b10587:2391).

fakplan's launch always states ``-c`` and never ``-cd``, so where ``-c`` is 0 the
draft's own trained context is the figure only for a boot read back, not for a plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from fakplan.engines.llamacpp.cache import (
    CacheLayout,
    build_number,
    cache_for,
    is_unified,
    layout_cells,
    own_cache_bytes,
)
from fakplan.errors import RuleError
from fakplan.kv import KvQuery


@dataclass(frozen=True)
class DraftEra:
    """How one run of builds sizes a draft model's KV."""

    first: int  # the first build of the era
    contexts: Literal["per_slot", "shared"]
    # a context's cells where -cd is not given: "split" (-c / -np), "n_ctx_seq" (the
    # target's per-sequence cells), "n_ctx" (-c as given), "target" (the target's cells)
    cells: Literal["split", "n_ctx_seq", "n_ctx", "target"]
    temporary: bool  # one more context while loading, freed before the slots' contexts
    source: str


DRAFT_ERAS = (
    DraftEra(10584, "shared", "target", False, "2fb989b9e #27496, common/speculative.cpp b10587:2391"),
    DraftEra(9109, "shared", "n_ctx", False, "68e7ea3ea #22838, common/speculative.cpp"),
    DraftEra(7864, "per_slot", "n_ctx_seq", False, "72d3b1898 #18471, server-context.cpp b9108:784-809"),
    DraftEra(6931, "per_slot", "n_ctx_seq", True, "cd5e3b575 #16736, tools/server/server.cpp"),
    DraftEra(1, "per_slot", "split", True, "tools/server/server.cpp b5873:1963-1996, 2071"),
)  # fmt: skip
DRAFT_CACHE_TYPE = "f16"  # -ctkd/-ctvd's default (common/common.h)
# launch.speculative.method (vLLM's spelling) for llama-server's separate draft model, -md
DRAFT_METHODS = ("draft_model",)
# --draft-max became a removed stub at b8955 (14e733e36): --spec-draft-n-max from then
DRAFT_N_MAX_FLAG_BUILD = 8955
# launch.speculative.method for the checkpoint's own MTP layers: --spec-type draft-mtp
# (255582687 #22673, b9180), one context on the target's weights holding only the nextn
# layers (llama-model.cpp b9180:1952-2047 filters il >= n_layer - nextn_predict_layers for
# the Gated DeltaNet and Mamba hybrids; b10587 ~2327-2437), at the target's cells, in the
# target's -ctk/-ctv until b9317 and in -ctkd/-ctvd (f16) from b9318 (6c4cbdc70 #23646)
MTP_METHODS = ("mtp",)
MTP_BUILD = 9180
MTP_DRAFT_TYPES_BUILD = 9318


def _build(version: str | None) -> int:
    """The build a version names; the newest era's where unstated."""
    number = build_number(version)
    return DRAFT_ERAS[0].first if number is None else number


def draft_era(version: str | None) -> DraftEra:
    number = _build(version)
    return next(e for e in DRAFT_ERAS if number >= e.first)


@dataclass(frozen=True)
class DraftCache:
    """The draft model's KV: its contexts, each one's cells and streams, and the bytes."""

    contexts: int
    cells: int  # per stream of one context
    streams: int
    bytes: int
    derivation: str
    # what one cell of the target's context costs in the draft's (padding aside): the
    # draft's cell, times -np where every slot's context holds the whole unified context
    per_target_cell: int
    temporary: bool = False  # one more context of the same size is made and freed at load

    def printed(self) -> tuple[int, int, str]:
        """What the boot's cache lines print for the draft, summed: every context's line,
        the temporary one's too (llama-server prints it as it makes it)."""
        one = self.bytes // self.contexts
        lines = self.contexts + int(self.temporary)
        return one * lines, lines, (
            f"{lines} context line(s) x {one:,} B" + (" (the temporary one included)" if
            self.temporary else "") + f": {self.derivation}"
        )  # fmt: skip


def draft_cache(query: KvQuery, n_ctx: int, stated_c: int | None = None) -> DraftCache | None:
    """The draft model's KV beside a target context of ``n_ctx`` cells (``-c``, resolved);
    ``stated_c``: the ``-c`` on the command line where it differs (0: the trained context).
    None without a draft model."""
    draft = query.draft
    if (query.spec_method or "").lower() in MTP_METHODS and query.spec_tokens:
        return mtp_cache(query, n_ctx)
    if draft is None:
        return None
    if draft.sliding is not None or draft.linear is not None or draft.mamba is not None:
        raise RuleError(
            f"llama.cpp: a draft model with sliding-window or recurrent layers "
            f"({draft.architecture}) is not counted: only full-attention drafts are",
            "launch",
            "speculative",
            "model",
        )
    era = draft_era(query.engine_version)
    stated = n_ctx if stated_c is None else stated_c
    target = cache_for(query)
    per_stream, streams, _ = layout_cells(query, target, n_ctx)
    slots = query.max_num_seqs
    draft_query = dataclasses.replace(
        query, geometry=draft, kv_dtype=DRAFT_CACHE_TYPE, draft=None, spec_tokens=0,
        gpu_layers=None,
    )  # fmt: skip
    if era.contexts == "per_slot":
        draft_query = dataclasses.replace(draft_query, max_num_seqs=1, kv_unified=None)
        contexts = slots
        if era.cells == "split":
            wanted = stated // slots if stated else draft.context_length
            how = f"-c {stated:,} / -np {slots}" if stated else "the draft's trained context"
        else:
            wanted, how = per_stream, "the target's cells per sequence (llama_n_ctx_seq)"
    else:
        contexts = 1
        draft_query = dataclasses.replace(draft_query, kv_unified=is_unified(query))
        if era.cells == "n_ctx" and stated:
            wanted, how = stated, f"-c {stated:,}"
        elif era.cells == "n_ctx":
            wanted, how = draft.context_length, "-c 0: the draft's trained context"
        else:
            wanted, how = per_stream * streams, "the target's cells (llama_n_ctx)"
    cache = cache_for(draft_query)
    whole = era.cells == "n_ctx_seq" and is_unified(query) and slots > 1
    per_target_cell = cache.cell_bytes() * (slots if whole else 1)
    cells, kept, _ = layout_cells(draft_query, cache, wanted)
    one = own_cache_bytes(draft_query, cache, wanted)
    total = one * contexts
    temporary = (
        "; while loading, one more context of the same size is made and freed before the "
        "slots' (a peak, not kept)"
        if era.temporary
        else ""
    )
    return DraftCache(
        contexts,
        cells,
        kept,
        total,
        f"draft {draft.architecture} ({draft.source}): {contexts} context(s) x {kept} "
        f"stream(s) x {cells:,} cells ({how}, padded) x {cache.cell_bytes():,} B per cell in "
        f"{DRAFT_CACHE_TYPE} (-ctkd/-ctvd, never -ctk/-ctv) = {total:,} B "
        f"(llama.cpp {era.source}){temporary}",
        per_target_cell,
        era.temporary,
    )


def cache_bytes(query: KvQuery, cache: CacheLayout, n_ctx: int) -> int:
    """Everything a -c makes llama-server allocate for KV: the model's own caches and a
    speculative draft model's contexts."""
    found = draft_cache(query, n_ctx)
    return own_cache_bytes(query, cache, n_ctx) + (0 if found is None else found.bytes)


def mtp_cache(query: KvQuery, n_ctx: int) -> DraftCache:
    """The MTP draft context llama-server makes against the target (--spec-type draft-mtp):
    the checkpoint's nextn layers at the target's cells."""
    g = query.geometry
    number = _build(query.engine_version)
    if number < MTP_BUILD:
        raise RuleError(
            f"llama.cpp b{number}: MTP drafting (--spec-type draft-mtp) arrived in b{MTP_BUILD} "
            "(255582687, #22673)",
            "launch",
            "speculative",
            "method",
        )
    if not g.num_nextn_layers:
        raise RuleError(
            f"{g.source} has no MTP (nextn) layers for --spec-type draft-mtp",
            "launch",
            "speculative",
            "method",
        )
    if g.linear is None and g.mamba is None:
        raise RuleError(
            f"llama.cpp's MTP context for {g.architecture}: the nextn-layer filter is read for "
            "the Gated DeltaNet and Mamba hybrids only (others may cache every layer): not counted",
            "launch",
            "speculative",
            "method",
        )
    types = query.kv_dtype if number < MTP_DRAFT_TYPES_BUILD else DRAFT_CACHE_TYPE
    mtp_query = dataclasses.replace(query, kv_dtype=types)
    cache = cache_for(mtp_query)
    per_layer = cache.k.row_bytes(cache.k_elems) + cache.v.row_bytes(cache.v_elems)
    per_stream, streams, _ = layout_cells(mtp_query, cache, n_ctx)
    layers = g.num_nextn_layers
    total = per_layer * layers * per_stream * streams
    which = "the target's -ctk/-ctv" if types == query.kv_dtype else "-ctkd/-ctvd, f16"
    return DraftCache(
        1,
        per_stream,
        streams,
        total,
        f"MTP context on the target's weights: {layers} nextn layer(s) x {streams} stream(s) x "
        f"{per_stream:,} cells (the target's) x {per_layer:,} B per layer-cell in "
        f"{cache.k_name}/{cache.v_name} ({which}) = {total:,} B (llama.cpp 255582687 #22673; "
        "types 6c4cbdc70 #23646)",
        per_layer * layers,
    )
