"""SGLang's KV arithmetic (docs/engines.md §2).

Rule sets (newest first):

- ``0.5`` — read in v0.5.23 (``pool_configurator.py``): ``cell = H_kv × (head_dim + v_head_dim) × L × b``;
  hybrid sliding-window models get a second pool sized ``swa_full_tokens_ratio`` (0.8) of the full one.
- ``0.4`` — read in v0.4.6.post5 (``model_runner.py profile_max_num_token``):
  ``cell = H_kv × head_dim × L × 2 × b``, and every layer, sliding ones included, gets a
  full-length slot (tests/data/public/ledgers/sglang-002.log shows Gemma 3 allocated that way).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fakplan.contract import CostComponent
from fakplan.dtypes import element_type
from fakplan.engines.alerting import AlertFacts, AlertRule
from fakplan.engines.base import ModelledEngine
from fakplan.engines.choices import check_choice, check_dtypes, unsized
from fakplan.engines.rate_bands import CUSTOM_ALL_REDUCE, SGLANG_DECODE
from fakplan.engines.releases import newer_note, select
from fakplan.engines.served import served_dtype
from fakplan.engines.sglang import cluster, sizing
from fakplan.engines.sglang.cluster import SHM_BYTES
from fakplan.engines.sglang.launch import _in_use_before_weights, launch_record
from fakplan.engines.sglang.refusals import REFUSALS
from fakplan.engines.sglang.rules import (
    DEFAULT_PAGE,
    DOWNCAST,
    DRAFT_MODEL_METHODS,
    KV_CACHE_DTYPE_CHOICES,
    KV_DTYPES,
    MODEL_DTYPE_CHOICES,
    MTP_METHODS,
    NO_KV_METHODS,
    RELEASES,
    SWA_FULL_TOKENS_RATIO,
    SglangRules,
)
from fakplan.engines.sglang.server import SERVER
from fakplan.errors import RuleError
from fakplan.geometry import LayerKind
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures
    from fakplan.launch import LaunchRecord
    from fakplan.sizing import EngineSizing, SizingUnknown


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


def _draft_components(
    engine: SglangEngine, query: KvQuery, release: SglangRules, b: int, page: int
) -> list[CostComponent]:
    """A speculative draft's KV: a pool of its own with the target's token count (the same
    req_to_token indices and allocator; the draft's own layers, heads and dtype: the draft
    worker's memory pool gets the target's MemoryPoolConfig, mem_cache/
    kv_cache_configurator.py, and the "KV Cache is allocated" line it prints comes second;
    0.5.2: draft_runner_cache_size, model_runner.py). With --max-total-tokens both pools
    hold that many tokens, so a KV budget holds the two cells together."""
    method = (query.spec_method or "").lower()
    if not query.spec_tokens or not method or method in NO_KV_METHODS:
        return []
    g = query.geometry
    if query.pp > 1:
        raise RuleError(
            "a speculative draft with PP > 1: which stage holds its pool is not read",
            "parallel",
            "pipeline",
        )
    if query.draft is not None and method in DRAFT_MODEL_METHODS:
        own = dataclasses.replace(
            query, geometry=query.draft, spec_tokens=0, spec_method=None, draft=None
        )
        parts = list(engine.breakdown(own).components)
        if any(c.kind == "sliding" for c in parts):
            raise RuleError(
                f"the {method} draft {query.draft.source} has sliding-window layers: its pool "
                "is not read",
                "launch",
                "speculative",
                "model",
            )
        source = f"the {method} draft {query.draft.source}"
    elif method in MTP_METHODS and g.num_nextn_layers:
        nextn = g.num_nextn_layers
        mla = g.layer_kinds.count(LayerKind.MLA)
        parts = (
            _mla_components(query, b, page, nextn / mla)
            if mla
            else _head_components(query, release, b, page, 1.0, nextn, 0)
        )
        source = f"the checkpoint's {nextn} MTP layer{'s' if nextn > 1 else ''} ({method})"
    else:
        raise RuleError(
            f"speculative method {method!r}: its draft's KV pool is not read (read: "
            f"{', '.join(DRAFT_MODEL_METHODS)} with launch.speculative.model, "
            f"{', '.join(MTP_METHODS)} on a checkpoint with MTP layers, and "
            f"{', '.join(NO_KV_METHODS)}, which keeps none)",
            "launch",
            "speculative",
        )
    cell = sum(c.page_bytes for c in parts) // page
    return [
        CostComponent(
            "draft pool",
            "draft",
            cell * page,
            0,
            True,
            f"{source}: a pool of its own beside the target's, holding as many tokens: "
            + "; ".join(c.derivation for c in parts),
        )
    ]


class SglangEngine(ModelledEngine):
    name = "sglang"
    title = "SGLang"
    takes_model_dtype = True
    speculative_flags = True
    draft_model_methods = DRAFT_MODEL_METHODS
    bootlog_module = "fakplan.engines.sglang.bootlog"
    server = SERVER
    probe_flavour = "sglang"
    shm_bytes = SHM_BYTES
    auto_downcast = DOWNCAST
    sizing_field = "mem_fraction_static"
    stated_pool = "state budget {weights, kv} instead (the pool in tokens, --max-total-tokens)"
    decode_bands = SGLANG_DECODE
    all_reduce = CUSTOM_ALL_REDUCE
    borrowed_band = (
        "no public SGLang decode timings were found: the band is vLLM's on the same cards "
        "(both run CUDA-graph decode over FlashInfer-class kernels), to be closed by the probe"
    )
    pool_over_ranks = (
        "SGLang sizes every rank's pool from the least free memory over its tensor-parallel "
        "ranks (srt/utils get_available_gpu_memory, distributed: an all-reduce MIN): a pool "
        "one rank printed above the smallest overshoots; give the smallest rank's"
    )
    boot_refusals = REFUSALS
    fit_kv_dtypes = ("auto", "fp8_e4m3")

    def alert_rules(self, facts: AlertFacts) -> tuple[AlertRule, ...]:
        return cluster.alert_rules(facts)

    def size_pool(
        self,
        query: KvQuery,
        fraction: float,
        total: int,
        total_derivation: str,
        *,
        sms: int,
        max_num_seqs: int | None,
    ) -> EngineSizing | SizingUnknown:
        return sizing.sglang_sizing(query, fraction, total, total_derivation, DOWNCAST)

    def check(self, setup: Setup) -> None:
        """What SGLang's parser would refuse, refused where the shape says it."""
        check_dtypes(setup, "sglang", KV_CACHE_DTYPE_CHOICES, MODEL_DTYPE_CHOICES, KV_DTYPES)
        if setup.card.device == "cpu":
            raise setup.error(
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
        drafted = _draft_components(self, query, release, b, page)
        if drafted:
            rules.append(
                "a speculative draft: its own pool of the target's token count beside it "
                "(the printed pool is the target's); the draft's weights are not in "
                "fakplan's weights figure: budget.weights must hold them"
            )
        components += drafted
        return KvBreakdown(
            engine="sglang",
            engine_version=version,
            dtype=dtype,
            page_tokens=page,
            layers=full_layers + swa_layers + kinds.count(LayerKind.MLA),
            components=tuple(components),
            rules=tuple(rules),
        )

    def printed_pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        """The first "KV Cache is allocated" line is the target's pool alone: a draft's
        pool prints a line of its own after it."""
        target = tuple(c for c in breakdown.components if c.kind != "draft")
        return self.pool(query, dataclasses.replace(breakdown, components=target), pool_bytes)

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

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        return launch_record(setup, figures)

    def card_bound(self, setup: Setup) -> tuple[int, str]:
        """A budget pair takes ``--mem-fraction-static`` = pair / (card - what is in use
        before the weights), rounded up at 3 places: a pair whose fraction reaches 1 leaves
        SGLang nothing, whatever its ceiling."""
        if setup.engine_sized:
            return super().card_bound(setup)
        total, in_use, source = _in_use_before_weights(setup)
        bound = 999 * (total - in_use) // 1000
        beside = f" - {in_use:,} B in use before the weights ({source})" if in_use else ""
        return bound, (
            f"floor(0.999 x (card.total {total:,} B{beside})) = {bound:,} B, the most a "
            "pair can be with --mem-fraction-static below 1 (SGLang keeps 1 - fraction of "
            "what is free before the weights load)"
        )

    def predicted_ceiling(self, setup: Setup) -> tuple[int | None, str]:
        return None, (
            "unknown: the shape states no ceiling, and SGLang has no floor to predict one "
            "from: it profiles neither activations nor CUDA graphs, it keeps 1 - "
            "--mem-fraction-static of the memory free before the weights (a heuristic, by "
            "release); state ceiling, or read a boot ledger (ceiling: {ledger: PATH})"
        )

    def version_used(self, setup: Setup) -> str | None:
        return select("sglang", RELEASES, setup.engine_version)[1]


# ---------------------------------------------------------------- launch flags
