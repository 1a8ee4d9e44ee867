"""llama.cpp's KV arithmetic (docs/engines.md §3).

llama.cpp sizes its cache in cells (``-c``), not bytes: a KV budget becomes the
largest n_ctx whose cache fits it. The rule sets are rows of ``rules.RELEASES``, one per
build where the layout changed (read at b10573 and at the commits that changed it;
0c1e57098, the copy llama-cpp-python 0.3.36 vendors, agrees with b10573): from b6981 n_ctx
and each stream padded to 256 and iSWA caches
``pad(min(n_ctx_seq, n_swa × (unified ? n_seq : 1) + n_ubatch), 256)`` cells; MLA caches
K only from b7836; recurrent rows × (1 + n_rs_seq) from b9191; streams per slot from
b5913; no SWA cache before b5429; the 2024 row (74d73dc) pads to 256 with flash
attention, else 32, in one shared cache.

The package is the engine's parts: ``rules`` (builds, cache types, constants, as data),
``cache`` (the cells a -c gives and their bytes), ``launch`` (the flag tables).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fakplan.contract import Capacity, CostComponent, KvCost, windows_held
from fakplan.engines.base import ModelledEngine
from fakplan.engines.llamacpp.cache import (
    CacheLayout,
    build_number,
    build_of,
    cache_for,
    cache_type_refusal,
    is_unified,
    layout_cells,
    own_cache_bytes,
    pad_step,
    printed_cache_bytes,
    slot_tokens,
)
from fakplan.engines.llamacpp.draft import DRAFT_METHODS, MTP_METHODS, cache_bytes, draft_cache
from fakplan.engines.llamacpp.launch import launch_record
from fakplan.engines.llamacpp.offload import gpu_weights, offload
from fakplan.engines.llamacpp.refusals import REFUSALS
from fakplan.engines.llamacpp.rules import (
    CACHE_TYPE_CHOICES,
    CACHE_TYPES,
    HF_FILE_BUILD,
    HF_TAG_BUILD,
    N_UBATCH,
    PAD,
    RELEASES,
)
from fakplan.engines.llamacpp.server import SERVER
from fakplan.engines.rate_bands import LLAMACPP_DECODE, LLAMACPP_PREFILL
from fakplan.engines.releases import select
from fakplan.hub import gguf_ref
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures
    from fakplan.geometry import Geometry
    from fakplan.launch import LaunchRecord

__all__ = ["CACHE_TYPES", "CACHE_TYPE_CHOICES", "RELEASES", "LlamacppEngine"]


class LlamacppEngine(ModelledEngine):
    name = "llamacpp"
    title = "llama.cpp"
    binaries = ("llama-server", "llama-cpp-python")
    bootlog_module = "fakplan.engines.llamacpp.bootlog"
    server = SERVER
    loads_gguf = True
    printed_pool_is_cache = True
    tensor_parallel = False
    boot_refusals = REFUSALS
    fit_kv_dtypes = ("f16", "q8_0")
    decode_bands = LLAMACPP_DECODE
    prefill_bands = LLAMACPP_PREFILL
    draft_model_methods = DRAFT_METHODS

    def check(self, setup: Setup) -> None:
        par = setup.parallel
        if par.tensor > 1 or par.pipeline > 1 or par.nodes > 1:
            # its -sm layer spreads blocks and their cache over the cards by free memory,
            # which no per-rank share describes
            raise setup.error(
                "llama.cpp splits a model over cards by layers (-sm layer), not by tensor or "
                "pipeline ranks; fakplan plans llama.cpp on one card: set parallel.tensor, "
                "pipeline and nodes to 1 (launch.gpu_layers leaves layers in RAM)",
                "parallel",
                "tensor" if par.tensor > 1 else "pipeline" if par.pipeline > 1 else "nodes",
            )
        refused = cache_type_refusal(setup.serving.kv_dtype, setup.engine_version)
        if refused:
            raise setup.error(refused, "serving", "kv_cache_dtype")
        self._check_hub_weights(setup)
        self._check_draft(setup)
        if setup.launch.binary == "llama-cpp-python" and setup.serving.max_num_seqs > 1:
            raise setup.error(
                "llama-cpp-python's server serves one sequence at a time; "
                "use launch.binary: llama-server for more slots",
                "serving",
                "max_num_seqs",
            )

    def _check_draft(self, setup: Setup) -> None:
        """A speculative draft fakplan can count: llama-server's separate draft model
        (-md), with its model and its tokens a step."""
        spec = setup.launch.speculative
        if spec is None:
            return
        if spec.method.lower() not in (*DRAFT_METHODS, *MTP_METHODS):
            raise setup.error(
                f"method {spec.method!r}: fakplan plans llama-server's separate draft model "
                "(method draft_model, -md) and the checkpoint's MTP layers (method mtp, "
                "--spec-type draft-mtp); the other speculative types are not counted yet",
                "launch",
                "speculative",
                "method",
            )
        if spec.method.lower() in DRAFT_METHODS and spec.model is None:
            raise setup.error(
                "draft_model needs the draft's GGUF (or its config) for -md", "launch",
                "speculative", "model",
            )  # fmt: skip
        if not setup.serving.spec_tokens:
            raise setup.error(
                "a speculative draft needs serving.spec_tokens: its tokens a step "
                "(--spec-draft-n-max)",
                "serving",
                "spec_tokens",
            )
        if (setup.launch.binary or "llama-server") != "llama-server":
            raise setup.error(
                "llama-cpp-python's server takes no speculative draft (-md, --spec-type): use "
                "launch.binary: llama-server",
                "launch",
                "binary",
            )

    def _check_hub_weights(self, setup: Setup) -> None:
        """A GGUF by Hub id needs a server that fetches one, at a build that takes it."""
        weights = setup.launch.weights or setup.model
        field = ("launch", "weights") if setup.launch.weights else ("model",)
        ref = gguf_ref(weights)
        if ref is None or setup.resolve(weights).exists():
            return
        if setup.launch.binary == "llama-cpp-python":
            raise setup.error(
                f"{weights}: llama-cpp-python's server loads a local file; download the "
                "GGUF and name its path, or use launch.binary: llama-server (-hf)",
                *field,
            )
        build = build_number(setup.engine_version)
        need = HF_FILE_BUILD if ref[1].endswith(".gguf") else HF_TAG_BUILD
        if build is not None and build < need:
            raise setup.error(
                f"{weights}: llama-server b{build} does not fetch "
                f"{'a file by --hf-file' if need == HF_FILE_BUILD else 'a quant tag by -hf'} "
                f"(from b{need}); name the file (repo:file.gguf) or a newer build",
                *field,
            )

    def probe_hint(self, setup: Setup) -> str | None:
        return setup.launch.binary or self.binaries[0]

    def window_step(self, setup: Setup) -> int:
        """llama.cpp pads each stream's cells (cache.pad_step): a window between two steps
        reaches past max_model_len, which the context gate refuses."""
        query = setup.query
        return pad_step(query, cache_for(query))

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        cache = cache_for(query)
        components = [
            CostComponent(
                "full attention" if query.geometry.mla is None else "mla latent (K only)",
                "full" if query.geometry.mla is None else "mla",
                cache.cell_bytes(),
                0,
                True,
                (
                    f"{cache.full_layers} layers{_on_gpu(cache)} x (row({cache.k_name}, {cache.k_elems})"
                    + (f" + row({cache.v_name}, {cache.v_elems})" if cache.v_elems else ", no V")
                    + f") = {cache.cell_bytes():,} B per cell"
                ),
            )
        ]
        if cache.swa_layers:
            _, _, swa_cells = layout_cells(query, cache, query.window)
            per_seq = cache.swa_cell_bytes() * swa_cells
            components.append(
                CostComponent(
                    "sliding window",
                    "sliding",
                    0,
                    per_seq,
                    True,
                    f"{cache.swa_layers} layers{_on_gpu(cache)} x {cache.swa_cell_bytes() // cache.swa_layers:,} B x "
                    f"{swa_cells} cells (window {query.geometry.sliding_window} + ubatch {query.ubatch or N_UBATCH}, "
                    f"padded to {PAD}) = {per_seq:,} B per stream",
                )
            )
        if cache.state_per_seq:
            snapshots = query.spec_tokens if cache.release.rs_seq else 0
            per_seq = cache.state_per_seq * (1 + snapshots)
            kept = f" x (1 + {snapshots} draft snapshots, n_rs_seq)" if snapshots else ""
            components.append(
                CostComponent(
                    "recurrent state",
                    "linear",
                    0,
                    per_seq,
                    False,
                    f"R + S of the recurrent layers in f32 = {cache.state_per_seq:,} B{kept} "
                    "per sequence",
                )
            )
        draft = draft_cache(query, query.max_num_seqs * query.window)
        if draft is not None:
            components.append(
                CostComponent(
                    "MTP context" if query.draft is None else "draft model",
                    "draft",
                    draft.per_target_cell,
                    0,
                    False,
                    f"{draft.per_target_cell:,} B per cell of the target's context; at -c "
                    f"{query.max_num_seqs * query.window:,} (the slots' windows): "
                    f"{draft.derivation}",
                )
            )
        notes: tuple[str, ...] = ()
        if cache.offload is not None:
            on_gpu = cache.full_layers + cache.swa_layers
            notes = (
                f"{cache.offload.describe()}: the cache of {on_gpu} of {cache.all_layers} "
                "layers is on the GPU, the rest in RAM (each layer's cache on its layer's "
                "device, llama-kv-cache.cpp)",
            )
        return KvBreakdown(
            engine="llamacpp",
            engine_version=cache.version,
            dtype=f"{cache.k_name}/{cache.v_name}"
            if cache.k_name != cache.v_name
            else cache.k_name,
            page_tokens=1,
            layers=cache.full_layers + cache.swa_layers,
            components=tuple(components),
            rules=(f"llama.cpp {cache.release.rule} arithmetic (read in {cache.release.read_in})",),
            notes=notes,
        )

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        """The largest -c whose whole cache (attention, SWA and recurrent state) fits."""
        return self._fitted(query, pool_bytes, cache_bytes, "cache")

    def printed_pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        """The -c a boot's printed "llama_kv_cache: size =" line comes from: that line is
        the full-attention cache alone where SWA layers and recurrent state print their own
        (``printed_cache_bytes``), so they are not taken out of it."""
        return self._fitted(query, pool_bytes, printed_cache_bytes, "printed attention cache")

    def _fitted(
        self,
        query: KvQuery,
        pool_bytes: int,
        size: Callable[[KvQuery, CacheLayout, int], int],
        what: str,
    ) -> PoolResult:
        cache = cache_for(query)
        step = pad_step(query, cache)
        streams = 1 if is_unified(query) else query.max_num_seqs
        unit = step * streams
        if size(query, cache, unit) > pool_bytes:
            return PoolResult(0, None, 0.0, f"{pool_bytes:,} B holds not even {unit} cells")
        low, high = unit, unit
        while size(query, cache, high * 2) <= pool_bytes:
            high *= 2
        high *= 2
        while high - low > unit:
            mid = (low + high) // 2 // unit * unit
            if size(query, cache, mid) <= pool_bytes:
                low = mid
            else:
                high = mid
        per_stream, streams, _ = layout_cells(query, cache, low)
        used = size(query, cache, low)
        return PoolResult(
            tokens=per_stream * streams,
            num_blocks=None,
            max_concurrency=per_stream * streams / query.window,
            derivation=(
                f"largest -c in steps of {unit} whose {what} fits {pool_bytes:,} B: n_ctx "
                f"{low:,} ({per_stream:,} cells x {streams} stream(s)) uses {used:,} B"
            ),
            extra={
                "n_ctx": low,
                "cells_per_stream": per_stream,
                "streams": streams,
                "cache_bytes": used,
            },
        )

    # ---- the planner's side

    def capacity(self, setup: Setup, cost: KvCost, pool_bytes: int) -> Capacity:
        """The cache llama.cpp allocates for the -c fakplan renders: the slots' windows, no more.

        llama.cpp sizes its cache by -c, not by a pool: a larger -c would give a slot more
        context than max_model_len (past the trained context, too) and buy no sessions, since
        each sequence needs a slot. So -c asks for slots x max_model_len; what budget.kv holds
        beyond that cache is unclaimed. A budget below it gets the largest -c that fits.
        """
        query = setup.query
        cache = cache_for(query)
        seqs, window = query.max_num_seqs, query.window
        wanted = seqs * window
        if cache_bytes(query, cache, wanted) <= pool_bytes:
            n_ctx = wanted
            how = f"-c {wanted:,} = {seqs} slot(s) x max_model_len {window:,}"
        else:
            breakdown = cost if isinstance(cost, KvBreakdown) else self.breakdown(query)
            fitted = self.pool(query, breakdown, pool_bytes)
            n_ctx = int(fitted.extra.get("n_ctx", 0))
            how = f"{fitted.derivation}, short of {seqs} slot(s) x max_model_len {window:,}"
        if not n_ctx:
            return Capacity(0, 0, pool_bytes, how, sessions=0, slot_tokens=0, used_bytes=0)
        per_stream, streams, _ = layout_cells(query, cache, n_ctx)
        draft = draft_cache(query, n_ctx)
        used = own_cache_bytes(query, cache, n_ctx) + (0 if draft is None else draft.bytes)
        drafted = "" if draft is None else f" and the draft model's {draft.bytes:,} B"
        derivation = (
            f"{how}; llama.cpp pads to {pad_step(query, cache)}: {per_stream:,} cells x "
            f"{streams} stream(s){drafted} "
            f"take {used:,} B of budget.kv's {pool_bytes:,} B"
            + (
                f", {pool_bytes - used:,} B unclaimed (the cache is sized by -c)"
                if used < pool_bytes
                else ""
            )
        )
        return Capacity(
            per_stream * streams,
            per_stream * streams,
            pool_bytes,
            derivation,
            sessions=windows_held(per_stream, streams, seqs, window),
            slot_tokens=slot_tokens(query, cache, per_stream, streams),
            slots_share=streams == 1 and seqs > 1 and cache.release.split_streams,
            used_bytes=used,
            draft_printed=None if draft is None else draft.printed(),
        )

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        return launch_record(setup, figures)

    def offload_layers(self, setup: Setup) -> int | None:
        """block_count + 1 (the output layer): -ngl's count of every layer."""
        if setup.card.device == "cpu":
            return None
        g = setup.geometry
        return g.num_layers + g.num_nextn_layers + 1

    def resident_weights(self, setup: Setup, geometry: Geometry) -> tuple[int | None, str | None]:
        """The GGUF's bytes on the GPU: the layers -ngl offloads (offload.py); the input
        layer stays in RAM whatever -ngl says. A CPU card holds every byte."""
        placement = geometry.placement
        if placement is None or setup.card.device == "cpu":
            return geometry.weight_bytes, geometry.weight_source
        release, _ = select("llamacpp", RELEASES, build_of(setup.engine_version), build=True)
        where = offload(setup.launch.gpu_layers, len(placement.block_bytes), release)
        on_gpu, derivation = gpu_weights(placement, where)
        return on_gpu, f"{geometry.weight_source}; {derivation}"

    def predicted_ceiling(self, setup: Setup) -> tuple[int | None, str]:
        return None, (
            "unknown: the shape states no ceiling, and llama.cpp's floor is not predicted: "
            "its compute buffers are what ggml's graph allocator reserves for the worst-case "
            "batch (n_ubatch tokens against the whole cache), tensor reuse included, which "
            "fakplan does not model; state ceiling, or read a boot ledger (ceiling: {ledger: "
            "PATH}: its compute and output buffer lines)"
        )

    def version_used(self, setup: Setup) -> str | None:
        return select("llamacpp", RELEASES, build_of(setup.engine_version), build=True)[1]


def _on_gpu(cache: CacheLayout) -> str:
    """Where -ngl leaves some layers' cache in RAM: which layers a count is of."""
    if cache.offload is None:
        return ""
    ngl = cache.offload.gpu_layers
    return f" on the GPU (-ngl {ngl})"
