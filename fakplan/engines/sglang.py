"""SGLang's KV arithmetic (docs/engines.md §2).

Rule sets (newest first):

- ``0.5`` — read in v0.5.23 (``pool_configurator.py``): ``cell = H_kv × (head_dim + v_head_dim) × L × b``;
  hybrid sliding-window models get a second pool sized ``swa_full_tokens_ratio`` (0.8) of the full one.
- ``0.4`` — read in v0.4.6.post5 (``model_runner.py profile_max_num_token``):
  ``cell = H_kv × head_dim × L × 2 × b``, and every layer, sliding ones included, gets a
  full-length slot (tests/data/public/ledgers/sglang-002.log shows Gemma 3 allocated that way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.contract import CostComponent
from fakplan.dtypes import element_type
from fakplan.engines.base import ModelledEngine
from fakplan.engines.choices import Choices, check_choice, check_dtypes, unsized
from fakplan.engines.releases import Release, newer_note, select
from fakplan.engines.served import served_dtype
from fakplan.engines.sglang_refusals import REFUSALS
from fakplan.engines.sglang_sizing import IN_USE_MEASURED, shape_sizing
from fakplan.errors import RuleError
from fakplan.geometry import LayerKind
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.launch import (
    FlagRow,
    LaunchRecord,
    RoleRecord,
    argv_of,
    flag,
    fraction_up,
    head_address,
)

if TYPE_CHECKING:
    from fakplan.figures import Figures
    from fakplan.shape import LoadedShape, Shape
    from fakplan.sizing import EngineSizing


@dataclass(frozen=True)
class SglangRules(Release):
    """What differs between the SGLang releases fakplan models, as data."""

    # sliding-window layers get a pool of their own, sized at swa_full_tokens_ratio of
    # the full pool (0.5); 0.4 gives them full-length slots in the one pool
    swa_pool: bool
    # a cell's V is v_head_dim wide (0.5); 0.4 sizes V as head_dim (2 x head_dim per head)
    own_v_head_dim: bool


RELEASES = (
    SglangRules("0.5", (0, 5), "0.5.23", True, True),
    SglangRules("0.4", (0, 4), "0.4.6.post5", False, False),
)

# What SGLang's own parser takes (argparse choices=), release by release; from 0.5.23 the
# options live in python/sglang/srt/arg_groups/fields/*.py, not server_args.py.
_FP8 = ("auto", "fp8_e5m2", "fp8_e4m3")
KV_CACHE_DTYPE_CHOICES = (
    Choices(
        (0, 5, 23),
        "0.5.23",
        "python/sglang/srt/arg_groups/fields/model.py:209-218 choices=",
        (*_FP8, "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"),
    ),
    Choices((0, 5), "0.5.2", "python/sglang/srt/server_args.py:1031 choices=", _FP8),
    Choices((0, 4), "0.4.6.post5", "python/sglang/srt/server_args.py:553 choices=", _FP8),
)
_MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MODEL_DTYPE_CHOICES = (
    Choices((0, 5, 23), "0.5.23", "python/sglang/srt/arg_groups/fields/model.py:173", _MODEL_DTYPES),
    Choices((0, 5), "0.5.2", "python/sglang/srt/server_args.py:1001 choices=", _MODEL_DTYPES),
    Choices((0, 4), "0.4.6.post5", "python/sglang/srt/server_args.py:539 choices=", _MODEL_DTYPES),
)  # fmt: skip

# The bytes of the KV dtypes fakplan has read (python/sglang/srt/mem_cache/kv_cache_dtype.py,
# v0.5.23); mxfp8, nvfp4 and fp4_mx_block16 pack scales in ways not read yet.
KV_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
# python/sglang/srt/configs/model_config.py _get_and_verify_dtype: float32 under auto is
# served in fp16 (bf16 for Gemma)
DOWNCAST = ("fp16", "fp16, bf16 for Gemma")
DIST_INIT_PORT = 20000  # a free port for torch.distributed's rendezvous on the head
SWA_FULL_TOKENS_RATIO = 0.8  # server_args default (v0.5.23)
DEFAULT_PAGE = 1  # _page_size_default (v0.5.23); backends such as FlashMLA force 64


def _gpt_oss_override(query: KvQuery) -> tuple[str, str] | None:
    """SGLang serves GptOssForCausalLM with an mxfp4 quantization_config in bfloat16
    (server_args.py:2489 at v0.5.2; srt/arg_groups/model_overrides/gpt_oss.py:63 at
    v0.5.23), whatever its config states."""
    g = query.geometry
    if query.model_dtype != "auto" or g.architecture != "gpt_oss" or g.quant_method != "mxfp4":
        return None
    return "bf16", "SGLang's GPT-OSS override serves an mxfp4 checkpoint in bfloat16"


def _dtype(query: KvQuery) -> tuple[str, int, str | None]:
    """The dtype as reported (auto resolved), its bytes per element, and the rule applied."""
    name = query.kv_dtype
    if name not in KV_DTYPES:
        refused = check_choice(
            "sglang", "--kv-cache-dtype", name, KV_CACHE_DTYPE_CHOICES, query.engine_version
        )
        raise RuleError(refused or unsized("sglang", name, KV_DTYPES), "serving", "kv_cache_dtype")
    storage = KV_DTYPES[name]
    rule = None
    if storage is None:
        # auto: the checkpoint's kv_cache_quant_algo FP8 wins, else the served dtype
        storage = query.geometry.kv_cache_quant
        if storage is None:
            storage, rule = _gpt_oss_override(query) or served_dtype(query, DOWNCAST)
    return (storage if name == "auto" else name), element_type(storage).block_bytes, rule


def _mla_components(query: KvQuery, b: int, page: int, scale: float) -> list[CostComponent]:
    """MLA: one latent of kv_lora_rank + rope dims per token, the same on every TP rank."""
    g = query.geometry
    if g.mla is None or LayerKind.MLA not in g.layer_kinds:
        return []
    layers = round(g.layer_kinds.count(LayerKind.MLA) * scale)
    cell = (g.mla.kv_lora_rank + g.mla.qk_rope_head_dim) * layers * b
    return [
        CostComponent(
            "mla latent",
            "mla",
            cell * page,
            0,
            True,
            f"({g.mla.kv_lora_rank} + {g.mla.qk_rope_head_dim}) x {layers} layers x {b} B = "
            f"{cell:,} B/token, not split by TP",
        )
    ]


def _head_components(
    query: KvQuery,
    release: SglangRules,
    b: int,
    page: int,
    scale: float,
    full_layers: int,
    swa_layers: int,
) -> list[CostComponent]:
    """Full and sliding-window attention cells; the SWA pool at its ratio of the full one."""
    g, out = query.geometry, []
    for label, heads, count in (
        ("full attention", g.attention, full_layers),
        ("sliding window", g.sliding, swa_layers),
    ):
        if not count:
            continue
        heads = heads or g.attention
        assert heads is not None
        layers = round(count * scale)
        per_rank = max(1, heads.num_kv_heads // query.tp)
        dims = heads.head_dim + (heads.v_head_dim if release.own_v_head_dim else heads.head_dim)
        cell = per_rank * dims * layers * b
        ratio = SWA_FULL_TOKENS_RATIO if label == "sliding window" else 1
        out.append(
            CostComponent(
                label,
                "sliding" if label == "sliding window" else "full",
                round(cell * page * ratio),
                0,
                True,
                f"{per_rank} KV heads/rank x {dims} x {layers} layers x {b} B = {cell:,} B/token"
                + (f", at {ratio} of the full pool's tokens" if ratio != 1 else ""),
            )
        )
    return out


class SglangEngine(ModelledEngine):
    name = "sglang"
    takes_model_dtype = True
    speculative_flags = True
    ledger_format = "sglang"
    probe_flavour = "sglang"
    auto_downcast = DOWNCAST
    sizing_field = "mem_fraction_static"
    boot_refusals = REFUSALS
    fit_kv_dtypes = ("auto", "fp8_e4m3")

    def check(self, loaded: LoadedShape) -> None:
        """What SGLang's parser would refuse, refused where the shape says it."""
        check_dtypes(loaded, "sglang", KV_CACHE_DTYPE_CHOICES, MODEL_DTYPE_CHOICES, KV_DTYPES)
        if loaded.shape.card.device == "cpu":
            raise loaded.error(
                "fakplan models SGLang on GPUs only (its CPU backend's pool is not read "
                "yet); use gpu, or engine vllm or llamacpp for a CPU card",
                "card",
                "device",
            )

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        release, version = select("sglang", RELEASES, query.engine_version)
        if query.device == "cpu":
            raise RuleError(
                "sglang on a CPU: its CPU backend's pool is not modelled; fakplan models "
                "SGLang on GPUs",
                "card",
                "device",
            )
        dtype, b, dtype_rule = _dtype(query)
        g = query.geometry
        kinds = g.layer_kinds
        rules = [
            f"sglang {release.rule} cell arithmetic (read in {release.read_in})",
            *newer_note("sglang", RELEASES, query.engine_version),
            *([dtype_rule] if dtype_rule else []),
        ]
        page = query.block_size or DEFAULT_PAGE
        # PP: the stage with the most layers bounds the pool (min over ranks).
        scale = -(-g.num_layers // query.pp) / g.num_layers
        components = _mla_components(query, b, page, scale)
        full_layers, swa_layers = kinds.count(LayerKind.FULL), kinds.count(LayerKind.SLIDING)
        if not release.swa_pool:
            full_layers, swa_layers = full_layers + swa_layers, 0
            if kinds.count(LayerKind.SLIDING):
                rules.append("0.4: sliding-window layers get full-length slots")
        components += _head_components(query, release, b, page, scale, full_layers, swa_layers)
        if LayerKind.LINEAR in kinds or LayerKind.MAMBA in kinds:
            rules.append("hybrid linear-attention/Mamba: only the attention layers are in the cell")
        if not components:
            raise RuleError(f"{g.source}: no layer holds a KV cache", "model")
        return KvBreakdown(
            engine="sglang",
            engine_version=version,
            dtype=dtype,
            page_tokens=page,
            layers=full_layers + swa_layers + kinds.count(LayerKind.MLA),
            components=tuple(components),
            rules=tuple(rules),
        )

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        page = breakdown.page_tokens
        full = [c for c in breakdown.components if c.kind != "sliding"]
        swa = [c for c in breakdown.components if c.kind == "sliding"]
        full_cell = sum(c.page_bytes for c in full) // page
        if swa:
            swa_cell = sum(c.page_bytes for c in swa) / SWA_FULL_TOKENS_RATIO / page
            combined = full_cell + SWA_FULL_TOKENS_RATIO * swa_cell
            tokens = int(pool_bytes // combined) // page * page
            swa_tokens = int(tokens * SWA_FULL_TOKENS_RATIO) // page * page
            return PoolResult(
                tokens=tokens,
                num_blocks=None,
                max_concurrency=None,
                derivation=(
                    f"{pool_bytes:,} B // ({full_cell:,} + {SWA_FULL_TOKENS_RATIO} x {swa_cell:,.0f}) B "
                    f"= {tokens:,} full-layer tokens (page {page}); sliding-window tokens = "
                    f"{SWA_FULL_TOKENS_RATIO} x {tokens:,} = {swa_tokens:,}"
                ),
                extra={"swa_tokens": swa_tokens},
            )
        cell = breakdown.page_bytes // page
        raw = pool_bytes // cell
        tokens = raw // page * page
        return PoolResult(
            tokens=tokens,
            num_blocks=None,
            max_concurrency=tokens / query.window,
            derivation=(
                f"max_total_num_tokens = {pool_bytes:,} B // {cell:,} B per cell = {raw:,}"
                + (f", rounded down to page {page}: {tokens:,}" if page > 1 else "")
            ),
        )

    # ---- the planner's side

    def launch(self, loaded: LoadedShape, figures: Figures) -> LaunchRecord:
        return launch_record(loaded, figures)

    def card_bound(self, loaded: LoadedShape) -> tuple[int, str]:
        """A budget pair takes ``--mem-fraction-static`` = pair / (card - what is in use
        before the weights), rounded up at 3 places: a pair whose fraction reaches 1 leaves
        SGLang nothing, whatever its ceiling."""
        if loaded.shape.engine_sized:
            return super().card_bound(loaded)
        total, in_use, source = _in_use_before_weights(loaded.shape)
        bound = 999 * (total - in_use) // 1000
        beside = f" - {in_use:,} B in use before the weights ({source})" if in_use else ""
        return bound, (
            f"floor(0.999 x (card.total {total:,} B{beside})) = {bound:,} B, the most a "
            "pair can be with --mem-fraction-static below 1 (SGLang keeps 1 - fraction of "
            "what is free before the weights load)"
        )

    def predicted_ceiling(self, loaded: LoadedShape) -> tuple[int | None, str]:
        return None, (
            "unknown: the shape states no ceiling, and SGLang has no floor to predict one "
            "from: it profiles neither activations nor CUDA graphs, it keeps 1 - "
            "--mem-fraction-static of the memory free before the weights (a heuristic, by "
            "release); state ceiling, or read a boot ledger (ceiling: {ledger: PATH})"
        )

    def version_used(self, loaded: LoadedShape) -> str | None:
        return select("sglang", RELEASES, loaded.shape.engine_version)[1]

    def sized_pool(self, loaded: LoadedShape) -> EngineSizing:
        return shape_sizing(loaded, DOWNCAST)


# ---------------------------------------------------------------- launch flags


@dataclass(frozen=True)
class _Launch:
    """What SGLang's flags are read from: the shape, the figures, the static fraction."""

    shape: Shape
    figures: Figures
    fraction: float


def _speculative(i: _Launch) -> list[str]:
    s, spec = i.shape.serving, i.shape.launch.speculative
    if spec is None or not s.spec_tokens:
        return []
    words = ["--speculative-algorithm", spec.method.upper()]
    words += ["--speculative-num-draft-tokens", str(s.spec_tokens)]
    if spec.model:
        words += ["--speculative-draft-model-path", spec.model]
    return words


# sglang.launch_server's flags, in the order the argv carries them
FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--model-path", lambda i: i.shape.launch.weights or i.shape.model),
    flag("--host", lambda i: i.shape.launch.host),
    flag("--port", lambda i: i.shape.launch.port),
    flag("--tp", lambda i: i.shape.parallel.tensor),
    flag(
        "--pp-size", lambda i: i.shape.parallel.pipeline if i.shape.parallel.pipeline > 1 else None
    ),
    flag("--served-model-name", lambda i: i.shape.launch.served_model_name),
    flag("--context-length", lambda i: i.shape.serving.max_model_len),
    flag("--max-running-requests", lambda i: i.shape.serving.max_num_seqs),
    flag("--kv-cache-dtype", lambda i: i.shape.serving.kv_cache_dtype),
    flag("--dtype", lambda i: None if i.shape.serving.dtype == "auto" else i.shape.serving.dtype),
    flag("--page-size", lambda i: i.figures.cost.page_tokens),
    flag(
        "--max-total-tokens",
        lambda i: None if i.shape.engine_sized else i.figures.tokens_backed,
    ),
    flag(
        "--mem-fraction-static",
        lambda i: f"{i.fraction:g}" if i.shape.engine_sized else f"{i.fraction:.3f}",
    ),
    _speculative,
)


def _roles(shape: Shape, argv: list[str], env: dict[str, str]) -> tuple[RoleRecord, ...]:
    """One serve.sh, or one script per node with SGLang's own --nnodes/--node-rank flags."""
    par, tail = shape.parallel, tuple(shape.launch.extra_args)
    if par.nodes == 1:
        return (RoleRecord(name="serve", file="serve.sh", argv=(*argv, *tail)),)
    address = f"{head_address(shape)}:{shape.launch.head_port or DIST_INIT_PORT}"
    env["DIST_INIT_ADDR"] = address
    nodes = ("--nnodes", str(par.nodes))
    return tuple(
        RoleRecord(
            name=f"node{rank}",
            file=f"serve-node{rank}.sh",
            argv=(*argv, *nodes, "--node-rank", str(rank), "--dist-init-addr", address, *tail),
            note="the head node (its address is --dist-init-addr)"
            if rank == 0
            else f"node rank {rank}",
        )
        for rank in range(par.nodes)
    )


def _budget_fraction(loaded: LoadedShape) -> tuple[float, str]:
    """The fraction that leaves SGLang room for the budgeted pair: SGLang keeps
    ``1 - fraction`` of the memory free *before* the weights load (sglang_sizing), so what
    is in use then (CUDA context, torch.distributed) comes out of the pair unless the
    fraction is of what is free, not of the card. ``--max-total-tokens`` caps the pool."""
    shape = loaded.shape
    budget = shape.stated_budget
    total, in_use, source = _in_use_before_weights(shape)
    pair = budget.weights + budget.kv
    named = f"(budget.weights {budget.weights:,} B + budget.kv {budget.kv:,} B)"
    fraction = fraction_up(pair, max(total - in_use, 1), 3)
    if fraction >= 1:
        # the pair-ceiling gate fails it against SGLangEngine.card_bound; serve.sh refuses
        return fraction, (
            f"{named} = {pair:,} B / (card.total {total:,} B - {in_use:,} B in use before the "
            f"weights) = {fraction:.3f}: 1 or more leaves SGLang nothing for activations and "
            "CUDA graphs (the pair-ceiling gate fails)"
        )
    if in_use:
        return fraction, (
            f"{named} / (card.total {total:,} B - {in_use:,} B, the most memory in use "
            f"before the weights measured at TP {shape.parallel.tensor}: {source}; another "
            f"card's CUDA context may differ) = {fraction:.3f}, rounded up; SGLang keeps "
            "1 - fraction of what is free before the weights load, and --max-total-tokens "
            "caps the pool"
        )
    return fraction, (
        f"{named} / card.total {total:,} B = {fraction:.3f}, rounded up; SGLang keeps "
        "1 - fraction of what is free before the weights load, and the memory in use then "
        "(CUDA context, torch.distributed, NCCL) is not measured at TP "
        f"{shape.parallel.tensor} PP {shape.parallel.pipeline}: the pool it profiles falls "
        "short of budget.kv by the fraction of that memory unless budget.weights leaves the "
        "slack (fakplan verify's kv-tokens says); --max-total-tokens caps the pool"
    )


def _in_use_before_weights(shape: Shape) -> tuple[int, int, str]:
    """(card.total, the most memory measured in use before the weights at this layout, where
    that figure comes from); 0 in use where nothing is measured (TP > 1, PP > 1)."""
    measured = IN_USE_MEASURED.get(shape.parallel.tensor) if shape.parallel.pipeline == 1 else None
    if measured is None:
        return shape.card.total, 0, ""
    return shape.card.total, measured[0][1], measured[1]


def launch_record(loaded: LoadedShape, figures: Figures) -> LaunchRecord:
    """``python3 -m sglang.launch_server`` argv; SGLang's own multi-node flags across nodes."""
    shape = loaded.shape
    s, par = shape.serving, shape.parallel
    env = {
        "MODEL": shape.launch.weights or shape.model,
        "TP": str(par.tensor),
        "CONTEXT_LENGTH": str(s.max_model_len),
        "MAX_RUNNING_REQUESTS": str(s.max_num_seqs),
        "KV_CACHE_DTYPE": s.kv_cache_dtype,
        "PAGE_SIZE": str(figures.cost.page_tokens),
    }
    if s.mem_fraction_static is not None:
        fraction = s.mem_fraction_static
        derivations = {
            "--mem-fraction-static": (
                f"serving.mem_fraction_static {fraction:g}: SGLang sizes its pool from it "
                "(no --max-total-tokens is passed; the plan's kv-pool prediction is what it "
                "will size)"
            ),
        }
        env["MEM_FRACTION_STATIC"] = f"{fraction:g}"
        env["KV_POOL_PREDICTED"] = str(figures.kv_budget_bytes)
        env["KV_TOKENS_PREDICTED"] = str(figures.tokens_backed)
    else:
        fraction, fraction_derivation = _budget_fraction(loaded)
        derivations = {
            "--max-total-tokens": f"the tokens budget.kv backs: {figures.tokens_derivation}",
            "--mem-fraction-static": fraction_derivation,
        }
        env["MAX_TOTAL_TOKENS"] = str(figures.tokens_backed)
        env["MEM_FRACTION_STATIC"] = f"{fraction:.3f}"
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        *argv_of(FLAGS, _Launch(shape, figures, fraction)),
    ]
    roles = _roles(shape, argv, env)
    return LaunchRecord(binary="sglang", env=env, roles=roles, derivations=derivations)
