"""llama.cpp's KV arithmetic (docs/engines.md §3).

llama.cpp sizes its cache in cells (``-c``), not bytes: a KV budget becomes the
largest n_ctx whose cache fits it. Rule sets (newest first):

- ``current`` — read in 0c1e57098 (vendored by llama-cpp-python 0.3.36): n_ctx padded
  to 256; ``--parallel`` slots with or without a unified cache; MLA caches K only;
  iSWA caches ``pad(min(n_ctx_seq, n_swa × (unified ? n_seq : 1) + n_ubatch), 256)`` cells.
- ``2024`` — read in 74d73dc (llama-cpp-python 0.3.2, Nov 2024): n_ctx padded to 256
  with flash attention, else 32; one shared cache.
The boundary between them was not read; builds from b5000 on take ``current``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.contract import Capacity, CostComponent, KvCost, windows_held
from fakplan.dtypes import ElementType, element_type
from fakplan.engines.base import ModelledEngine
from fakplan.engines.choices import Choices, check_choice
from fakplan.engines.query import query_for_shape
from fakplan.engines.releases import Release, select
from fakplan.errors import FakplanError
from fakplan.geometry import LayerKind
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.launch import FlagRow, LaunchRecord, RoleRecord, argv_of, flag

if TYPE_CHECKING:
    from fakplan.figures import Figures
    from fakplan.shape import LoadedShape, Shape


@dataclass(frozen=True)
class LlamacppRules(Release):
    """What differs between the llama.cpp builds fakplan models, as data."""

    # n_ctx is padded to 256 cells always (0c1e57098 llama-context.cpp); the 2024 build
    # padded to 256 with flash attention and to 32 without
    pad_always_256: bool
    # an MLA cache holds K only (0c1e57098: has_v = !is_mla); 2024 kept a V of kv_lora_rank
    mla_k_only: bool
    # slots with a cache of their own each (-np without -kvu, 0c1e57098); 2024: one cache
    split_streams: bool


RELEASES = (
    LlamacppRules("current", (5000,), "0c1e57098", True, True, True),
    LlamacppRules("2024", (1,), "74d73dc", False, False, False),
)
# --cache-type-k / --cache-type-v as llama.cpp's own parser takes them (matched exactly);
# default f16 (common/common.h). fakplan adds "auto" (the default) and "K/V" for a split.
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
CACHE_TYPE_CHOICES = (
    Choices((5000,), "0c1e57098", "common/arg.cpp:304-314 kv_cache_types", CACHE_TYPES),
    Choices((1,), "74d73dc", "common/common.cpp:999-1029 kv_cache_type_from_str", CACHE_TYPES),
)
UNQUANTIZED = frozenset({"f32", "f16", "bf16"})  # cache types stored element by element
N_UBATCH = 512  # default physical batch (common/common.h)
# recurrent state is kept in f32 (src/llama-memory-recurrent.cpp, 0c1e57098)
STATE_BYTES = element_type("fp32").block_bytes
# -ngl 999: more layers than any model has, so every layer is offloaded (the spelling
# llama.cpp's own server README uses for "all")
ALL_LAYERS = 999
PAD = 256


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class _Cache:
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


def _split(text: str) -> tuple[str, str]:
    """K and V cache types of a kv_cache_dtype: ``auto``, ``TYPE``, or ``K/V``."""
    if text == "auto":
        return "f16", "f16"
    k, _, v = text.partition("/")
    return k, v or k


def cache_type_refusal(text: str, version: str | None) -> str | None:
    """Why llama.cpp refuses a kv_cache_dtype (either side of ``K/V``), or None."""
    for name in _split(text):
        refused = check_choice(
            "llama.cpp", "--cache-type-k/-v", name, CACHE_TYPE_CHOICES, _build(version)
        )
        if refused:
            return refused + " (or K/V, e.g. f16/q8_0)"
    return None


def _types(query: KvQuery) -> tuple[str, str]:
    refused = cache_type_refusal(query.kv_dtype, query.engine_version)
    if refused:
        raise FakplanError(refused)
    return _split(query.kv_dtype)


def _cache(query: KvQuery) -> _Cache:
    release, version = select("llamacpp", RELEASES, _build(query.engine_version), build=True)
    k_name, v_name = _types(query)
    if v_name not in UNQUANTIZED and not query.flash_attn:
        raise FakplanError("llama.cpp: a quantized V cache requires flash attention")
    g = query.geometry
    kinds = g.layer_kinds
    full = kinds.count(LayerKind.FULL) + kinds.count(LayerKind.MLA)
    swa = kinds.count(LayerKind.SLIDING)
    if g.mla is not None:
        k_elems = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
        # 0c1e57098 allocates no V tensor for MLA (has_v = !is_mla)
        v_elems = 0 if release.mla_k_only else g.mla.kv_lora_rank
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
    return _Cache(
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
    )


def _build(version: str | None) -> str | None:
    return None if version is None else version.lstrip("bB")


def _step(query: KvQuery, cache: _Cache) -> int:
    """The cells n_ctx is padded to: 256 in current builds; in 2024, 256 with flash attention
    and 32 without (fakplan's launch turns it on only for a quantized V, which needs it)."""
    flash = query.flash_attn and cache.v_name not in UNQUANTIZED
    return PAD if cache.release.pad_always_256 or flash else 32


def _unified(query: KvQuery) -> bool:
    # llama-server: auto -np (4 slots) is unified; an explicit -np N is split unless -kvu.
    return query.kv_unified if query.kv_unified is not None else query.max_num_seqs == 1


def _layout_cells(query: KvQuery, cache: _Cache, n_ctx: int) -> tuple[int, int, int]:
    """(cells per stream, streams, SWA cells per stream) for a requested -c."""
    seqs = query.max_num_seqs
    pad = _step(query, cache)
    n_ctx = _pad(n_ctx, pad)
    if _unified(query) or seqs == 1 or not cache.release.split_streams:
        streams, per_stream = 1, n_ctx
    else:
        streams, per_stream = seqs, _pad(n_ctx // seqs, pad)
    swa = 0
    if cache.swa_layers and query.geometry.sliding_window:
        window = query.geometry.sliding_window * (seqs if _unified(query) else 1)
        swa = _pad(min(per_stream, window + N_UBATCH), PAD)
    return per_stream, streams, swa


def _slot_tokens(query: KvQuery, cache: _Cache, per_stream: int, streams: int) -> int:
    """The context one slot reaches: its stream's cells; with a unified cache the whole of
    it (tools/server n_ctx_slot = n_ctx_seq); the 2024 server gave each n_ctx / n_parallel."""
    if streams == 1 and query.max_num_seqs > 1 and not cache.release.split_streams:
        return per_stream // query.max_num_seqs
    return per_stream


def cache_bytes(query: KvQuery, cache: _Cache, n_ctx: int) -> int:
    per_stream, streams, swa = _layout_cells(query, cache, n_ctx)
    kv = cache.cell_bytes() * per_stream * streams + cache.swa_cell_bytes() * swa * streams
    return kv + cache.state_per_seq * max(1, query.max_num_seqs)


class LlamacppEngine(ModelledEngine):
    name = "llamacpp"
    binaries = ("llama-server", "llama-cpp-python")
    ledger_format = "llamacpp"
    loads_gguf = True

    def check(self, loaded: LoadedShape) -> None:
        shape = loaded.shape
        refused = cache_type_refusal(shape.serving.kv_cache_dtype, shape.engine_version)
        if refused:
            raise loaded.error(refused, "serving", "kv_cache_dtype")
        if shape.launch.binary == "llama-cpp-python" and shape.serving.max_num_seqs > 1:
            raise loaded.error(
                "llama-cpp-python's server serves one sequence at a time; "
                "use launch.binary: llama-server for more slots",
                "serving",
                "max_num_seqs",
            )

    def probe_hint(self, loaded: LoadedShape) -> str | None:
        return loaded.shape.launch.binary or self.binaries[0]

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        cache = _cache(query)
        components = [
            CostComponent(
                "full attention" if query.geometry.mla is None else "mla latent (K only)",
                "full" if query.geometry.mla is None else "mla",
                cache.cell_bytes(),
                0,
                True,
                (
                    f"{cache.full_layers} layers x (row({cache.k_name}, {cache.k_elems})"
                    + (f" + row({cache.v_name}, {cache.v_elems})" if cache.v_elems else ", no V")
                    + f") = {cache.cell_bytes():,} B per cell"
                ),
            )
        ]
        if cache.swa_layers:
            _, _, swa_cells = _layout_cells(query, cache, query.window)
            per_seq = cache.swa_cell_bytes() * swa_cells
            components.append(
                CostComponent(
                    "sliding window",
                    "sliding",
                    0,
                    per_seq,
                    True,
                    f"{cache.swa_layers} layers x {cache.swa_cell_bytes() // cache.swa_layers:,} B x "
                    f"{swa_cells} cells (window {query.geometry.sliding_window} + ubatch {N_UBATCH}, "
                    f"padded to {PAD}) = {per_seq:,} B per stream",
                )
            )
        if cache.state_per_seq:
            components.append(
                CostComponent(
                    "recurrent state",
                    "linear",
                    0,
                    cache.state_per_seq,
                    False,
                    f"R + S of the recurrent layers in f32 = {cache.state_per_seq:,} B per sequence",
                )
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
        )

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        cache = _cache(query)
        step = _step(query, cache)
        streams = 1 if _unified(query) else query.max_num_seqs
        unit = step * streams
        if cache_bytes(query, cache, unit) > pool_bytes:
            return PoolResult(0, None, 0.0, f"{pool_bytes:,} B holds not even {unit} cells")
        low, high = unit, unit
        while cache_bytes(query, cache, high * 2) <= pool_bytes:
            high *= 2
        high *= 2
        while high - low > unit:
            mid = (low + high) // 2 // unit * unit
            if cache_bytes(query, cache, mid) <= pool_bytes:
                low = mid
            else:
                high = mid
        per_stream, streams, _ = _layout_cells(query, cache, low)
        used = cache_bytes(query, cache, low)
        return PoolResult(
            tokens=per_stream * streams,
            num_blocks=None,
            max_concurrency=per_stream * streams / query.window,
            derivation=(
                f"largest -c in steps of {unit} whose cache fits {pool_bytes:,} B: n_ctx {low:,} "
                f"({per_stream:,} cells x {streams} stream(s)) uses {used:,} B"
            ),
            extra={
                "n_ctx": low,
                "cells_per_stream": per_stream,
                "streams": streams,
                "cache_bytes": used,
            },
        )

    # ---- the planner's side

    def capacity(self, loaded: LoadedShape, cost: KvCost, pool_bytes: int) -> Capacity:
        """The cache llama.cpp allocates for the -c fakplan renders: the slots' windows, no more.

        llama.cpp sizes its cache by -c, not by a pool: a larger -c would give a slot more
        context than max_model_len (past the trained context, too) and buy no sessions, since
        each sequence needs a slot. So -c asks for slots x max_model_len; what budget.kv holds
        beyond that cache is unclaimed. A budget below it gets the largest -c that fits.
        """
        query = query_for_shape(loaded)
        cache = _cache(query)
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
        per_stream, streams, _ = _layout_cells(query, cache, n_ctx)
        used = cache_bytes(query, cache, n_ctx)
        derivation = (
            f"{how}; llama.cpp pads to {_step(query, cache)}: {per_stream:,} cells x "
            f"{streams} stream(s) "
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
            slot_tokens=_slot_tokens(query, cache, per_stream, streams),
            slots_share=streams == 1 and seqs > 1 and cache.release.split_streams,
            used_bytes=used,
        )

    def launch(self, loaded: LoadedShape, figures: Figures) -> LaunchRecord:
        return launch_record(loaded, figures)

    def accepted_dtypes(self, loaded: LoadedShape) -> tuple[str, ...]:
        return ("auto", *CACHE_TYPES)

    def version_used(self, loaded: LoadedShape) -> str | None:
        return select("llamacpp", RELEASES, _build(loaded.shape.engine_version), build=True)[1]


# ---------------------------------------------------------------- launch flags


@dataclass(frozen=True)
class _Launch:
    """What the servers' flags are read from: the shape, its cache, -c and the GPU layers."""

    shape: Shape
    cache: _Cache
    n_ctx: int
    gpu_layers: int | None  # None: every layer (the server's own spelling of "all")

    @property
    def model(self) -> str:
        return self.shape.launch.weights or self.shape.model

    @property
    def quantized_v(self) -> bool:
        # a quantized V cache requires flash attention (src/llama-context.cpp, 0c1e57098)
        return self.cache.v_name not in UNQUANTIZED


def _ggml_type(name: str) -> int:
    # gguf (and numpy behind it) loads only for llama-cpp-python's numeric type ids
    from gguf import GGMLQuantizationType

    return int(GGMLQuantizationType[name.upper()])


# llama-server's flags (tools/server, common/arg.cpp), in the order the argv carries them
SERVER_FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("-m", lambda i: i.model),
    flag("--host", lambda i: i.shape.launch.host),
    flag("--port", lambda i: i.shape.launch.port),
    flag("-c", lambda i: i.n_ctx),
    flag("-np", lambda i: i.shape.serving.max_num_seqs),
    flag("--cache-type-k", lambda i: i.cache.k_name),
    flag("--cache-type-v", lambda i: i.cache.v_name),
    flag("-ngl", lambda i: ALL_LAYERS if i.gpu_layers is None else i.gpu_layers),
    flag("-fa", lambda i: "on" if i.quantized_v else None),
    flag("--kv-unified", lambda i: bool(i.shape.serving.kv_unified)),
    flag("--alias", lambda i: i.shape.launch.served_model_name),
)
# llama-cpp-python's server (llama_cpp/server/settings.py, 0.3.36): ggml type ids for types
PYTHON_FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--model", lambda i: i.model),
    flag("--host", lambda i: i.shape.launch.host),
    flag("--port", lambda i: i.shape.launch.port),
    flag("--n_ctx", lambda i: i.n_ctx),
    flag("--type_k", lambda i: _ggml_type(i.cache.k_name)),
    flag("--type_v", lambda i: _ggml_type(i.cache.v_name)),
    flag("--n_gpu_layers", lambda i: -1 if i.gpu_layers is None else i.gpu_layers),
    flag("--flash_attn", lambda i: "true" if i.quantized_v else None),
)


def launch_record(loaded: LoadedShape, figures: Figures) -> LaunchRecord:
    """``llama-server`` (or llama-cpp-python's server) with the -c the slots' windows take."""
    shape = loaded.shape
    cache = _cache(query_for_shape(loaded))
    binary = shape.launch.binary or "llama-server"
    derivations = {"-c": figures.tokens_derivation}
    gpu_layers = None if shape.launch.gpu_layers in (None, -1) else shape.launch.gpu_layers
    if shape.card.device == "cpu":
        gpu_layers = 0  # the shape's checks refuse a stated offload on a CPU card
        derivations["gpu layers"] = "0: card.device is cpu, every layer and the cache in RAM"
    inputs = _Launch(shape, cache, figures.tokens_backed, gpu_layers)
    if binary == "llama-server":
        argv = ["llama-server", *argv_of(SERVER_FLAGS, inputs)]
    else:
        argv = ["python3", "-m", "llama_cpp.server", *argv_of(PYTHON_FLAGS, inputs)]
        derivations["--type_k/--type_v"] = (
            f"ggml type ids of {cache.k_name}/{cache.v_name} (gguf GGMLQuantizationType)"
        )
    env = {
        "MODEL": inputs.model,
        "N_CTX": str(inputs.n_ctx),
        "N_PARALLEL": str(shape.serving.max_num_seqs),
        "CACHE_TYPE_K": cache.k_name,
        "CACHE_TYPE_V": cache.v_name,
    }
    role = RoleRecord(name="serve", file="serve.sh", argv=(*argv, *shape.launch.extra_args))
    return LaunchRecord(binary=binary, env=env, roles=(role,), derivations=derivations)
