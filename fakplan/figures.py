"""The figures a plan is derived from: what engines compute and gates judge.

They sit below the engines, the gates and the plan, so each layer imports the
one below it and none reaches up (the layering is a checked contract).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.cluster import ClusterFacts
from fakplan.contract import KvCost
from fakplan.sizing import EngineSizing

if TYPE_CHECKING:
    from fakplan.engines import Finding


@dataclass(frozen=True)
class Figures:
    """The derived numbers gates and predictions are computed from."""

    name: str
    engine: str
    kv_cache_dtype: str
    max_num_seqs: int
    max_model_len: int
    spec_tokens: int
    cost: KvCost
    contract_bytes: int
    contract_derivation: str
    kv_budget_bytes: int
    weights_budget_bytes: int
    tokens_backed: int
    tokens_derivation: str
    pair_bytes: int
    pair_derivation: str
    card_total_bytes: int
    ceiling_bytes: int | None
    ceiling_derivation: str
    max_spec_rows: int | None
    unclaimed_warn_above: int
    # the most any pair can be on the card under this engine (Engine.card_bound): it
    # decides where no ceiling is known
    card_bound_bytes: int
    card_bound_derivation: str
    model: ModelFacts | None = None

    # engines that size the cache by a context length (llama.cpp): sessions the slots serve,
    # the context one slot reaches, and the bytes of budget.kv the cache takes
    engine_sessions: int | None = None
    slot_tokens: int | None = None
    slots_share: bool = False
    kv_used_bytes: int | None = None
    draft_printed: tuple[int, int, str] | None = None  # Capacity.draft_printed

    # a pool the engine sizes for itself (serving.gpu_memory_utilization): the prediction,
    # the tokens at its ends widened by the tolerance, and that tolerance
    sizing: EngineSizing | None = None
    sized_tokens: tuple[int, int] | None = None
    sizing_tolerance_pct: float = 1.0
    # where the ceiling came from: stated, a boot ledger, or predicted before any boot
    ceiling_basis: str | None = None
    # the pods of a shape deployed on Kubernetes (launch.kubernetes)
    cluster: ClusterFacts | None = None
    # the engine's boot refusals checked against the shape (engines.refusals); None: the
    # engine lists none (custom)
    boot: tuple[Finding, ...] | None = None

    @property
    def card_bound(self) -> tuple[int, str]:
        """(bytes, derivation) of the card's bound on the pair."""
        return self.card_bound_bytes, self.card_bound_derivation

    @property
    def whole_sessions(self) -> int:
        if self.engine_sessions is not None:
            return self.engine_sessions
        return self.tokens_backed // self.max_model_len

    @property
    def sessions_derivation(self) -> str:
        whole = f"{self.tokens_backed:,} tokens // {self.max_model_len:,}"
        if self.engine_sessions is None:
            return f"{whole} = {self.whole_sessions}"
        return (
            f"{self.engine_sessions} of {self.max_num_seqs} slot(s) hold a full window "
            f"({self.slot_tokens:,} cells each; a sequence needs a slot)"
        )

    @property
    def kv_unclaimed_bytes(self) -> int | None:
        return None if self.kv_used_bytes is None else self.kv_budget_bytes - self.kv_used_bytes

    @property
    def unclaimed_bytes(self) -> int | None:
        return None if self.ceiling_bytes is None else self.ceiling_bytes - self.pair_bytes


@dataclass(frozen=True)
class ModelFacts:
    """What the geometry says that gates check a shape against (modelled engines only)."""

    source: str
    trained_context: int
    rope_scaling: str | None
    rope_scaling_declared: bool
    attention_heads: int
    kv_heads: int | None
    tp: int
    pp: int
    weight_bytes: int | None
    weight_source: str | None

    @property
    def weights_per_rank(self) -> int | None:
        """The even share of the weights on one rank: a lower bound (norms and embeddings may be replicated)."""
        if self.weight_bytes is None:
            return None
        return -(-self.weight_bytes // (self.tp * self.pp))
