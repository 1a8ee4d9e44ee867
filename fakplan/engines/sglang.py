"""SGLang's KV arithmetic (reference/engines.md §2).

Rule sets (newest first):

- ``0.5`` — read in v0.5.23 (``pool_configurator.py``): ``cell = H_kv × (head_dim + v_head_dim) × L × b``;
  hybrid sliding-window models get a second pool sized ``swa_full_tokens_ratio`` (0.8) of the full one.
- ``0.4`` — read in v0.4.6.post5 (``model_runner.py profile_max_num_token``):
  ``cell = H_kv × head_dim × L × 2 × b``, and every layer, sliding ones included, gets a
  full-length slot (shared/ledgers/sglang-002.log shows Gemma 3 allocated that way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.contract import Capacity, CostComponent, KvCost
from fakplan.dtypes import element_type
from fakplan.engines.releases import Release, select
from fakplan.errors import FakplanError
from fakplan.geometry import LayerKind
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape

RELEASES = (
    Release("0.5", (0, 5), "0.5.23"),
    Release("0.4", (0, 4), "0.4.6.post5"),
)

# python/sglang/srt/mem_cache/kv_cache_dtype.py (v0.5.23)
KV_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
SWA_FULL_TOKENS_RATIO = 0.8  # server_args default (v0.5.23)
DEFAULT_PAGE = 1  # _page_size_default (v0.5.23); backends such as FlashMLA force 64


def _dtype(query: KvQuery) -> tuple[str, int]:
    name = query.kv_dtype.lower()
    if name not in KV_DTYPES:
        raise FakplanError(
            f"sglang --kv-cache-dtype {query.kv_dtype!r}: fakplan knows {', '.join(KV_DTYPES)}"
        )
    storage = KV_DTYPES[name]
    if storage is None:
        g = query.geometry
        # auto: the checkpoint's kv_cache_quant_algo FP8 wins, else the model dtype.
        storage = g.kv_cache_quant or g.dtype
        if storage not in {"bf16", "fp16", "fp32", "fp8"}:
            raise FakplanError(
                f"sglang --kv-cache-dtype auto follows the model dtype, unknown for {g.source}"
            )
    return name, element_type(storage).block_bytes


class SglangEngine:
    name = "sglang"

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        release, version = select("sglang", RELEASES, query.engine_version)
        dtype, b = _dtype(query)
        g = query.geometry
        tp, page = query.tp, query.block_size or DEFAULT_PAGE
        kinds = g.layer_kinds
        # PP: the stage with the most layers bounds the pool (min over ranks).
        per_stage = -(-g.num_layers // query.pp)
        scale = per_stage / g.num_layers
        components: list[CostComponent] = []
        rules = [f"sglang {release.rule} cell arithmetic (read in {release.read_in})"]
        if LayerKind.MLA in kinds:
            assert g.mla is not None
            layers = round(kinds.count(LayerKind.MLA) * scale)
            width = g.mla.kv_lora_rank + g.mla.qk_rope_head_dim
            cell = width * layers * b
            components.append(
                CostComponent(
                    "mla latent",
                    "mla",
                    cell * page,
                    0,
                    True,
                    f"({g.mla.kv_lora_rank} + {g.mla.qk_rope_head_dim}) x {layers} layers x {b} B = {cell:,} B/token, not split by TP",
                )
            )
        full_layers = kinds.count(LayerKind.FULL)
        swa_layers = kinds.count(LayerKind.SLIDING)
        if release.rule == "0.4":
            full_layers, swa_layers = full_layers + swa_layers, 0
            if kinds.count(LayerKind.SLIDING):
                rules.append("0.4: sliding-window layers get full-length slots")
        for label, heads, count in (
            ("full attention", g.attention, full_layers),
            ("sliding window", g.sliding, swa_layers),
        ):
            if not count:
                continue
            heads = heads or g.attention
            assert heads is not None
            layers = round(count * scale)
            per_rank = max(1, heads.num_kv_heads // tp)
            dims = (
                2 * heads.head_dim if release.rule == "0.4" else heads.head_dim + heads.v_head_dim
            )
            cell = per_rank * dims * layers * b
            ratio = SWA_FULL_TOKENS_RATIO if label == "sliding window" else 1
            components.append(
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
        if LayerKind.LINEAR in kinds or LayerKind.MAMBA in kinds:
            rules.append("hybrid linear-attention/Mamba: only the attention layers are in the cell")
        if not components:
            raise FakplanError(f"{g.source}: no layer holds a KV cache")
        return KvBreakdown(
            engine="sglang",
            engine_version=version,
            kv_dtype=dtype,
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

    def accepted_dtypes(self, loaded: LoadedShape) -> tuple[str, ...]:
        return tuple(KV_DTYPES)

    def version_used(self, loaded: LoadedShape) -> str | None:
        return select("sglang", RELEASES, loaded.shape.engine_version)[1]

    def kv_cost(self, loaded: LoadedShape) -> KvCost:
        from fakplan.engines import query_for_shape

        b = self.breakdown(query_for_shape(loaded))
        return KvCost(dtype=b.kv_dtype, page_tokens=b.page_tokens, components=b.components)

    def capacity(self, loaded: LoadedShape, cost: KvCost, pool_bytes: int) -> Capacity:
        from fakplan.engines import query_for_shape

        query = query_for_shape(loaded)
        result = self.pool(query, self.breakdown(query), pool_bytes)
        return Capacity(
            result.tokens, result.tokens // cost.page_tokens, pool_bytes, result.derivation
        )
