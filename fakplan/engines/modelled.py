"""The planner's side of an engine whose arithmetic comes from the model's geometry.

vLLM, SGLang and llama.cpp differ in how they cost a token and count a pool
(``breakdown`` and ``pool``); how a shape becomes a query, and a pool result a
``Capacity``, is the same for all three and lives here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.contract import Capacity, KvCost
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape


class ModelledPlanner:
    def breakdown(self, query: KvQuery) -> KvBreakdown:
        raise NotImplementedError

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        raise NotImplementedError

    def kv_cost(self, loaded: LoadedShape) -> KvCost:
        from fakplan.engines import query_for_shape

        return self.breakdown(query_for_shape(loaded))

    def capacity(self, loaded: LoadedShape, cost: KvCost, pool_bytes: int) -> Capacity:
        from fakplan.engines import query_for_shape

        query = query_for_shape(loaded)
        breakdown = cost if isinstance(cost, KvBreakdown) else self.breakdown(query)
        result = self.pool(query, breakdown, pool_bytes)
        pages = (
            result.num_blocks
            if result.num_blocks is not None
            else result.tokens // cost.page_tokens
        )
        return Capacity(result.tokens, pages, pool_bytes, result.derivation)
