"""A pool the engine sizes for itself: what fakplan predicts it will take, term by term.

A shape that gives ``serving.gpu_memory_utilization`` (vLLM) or
``serving.mem_fraction_static`` (SGLang) instead of ``budget.kv`` lets the engine size its
pool at boot. The plan then plans against the pool fakplan predicts, and
every term of the prediction (the weights per rank, the profiling run's activation peak,
the memory outside torch) is a prediction of its own that ``fakplan verify`` closes
against the profiler lines of the boot ledger.

One route serves the shape and ``fakplan kv``: each engine's ``size_pool`` takes the KV
query, the fraction and the card's total and gives an ``EngineSizing`` (or a
``SizingUnknown``); the shape plans against it, and ``fakplan kv`` reads it at both ends of
the card figure's digits (``SizedPool``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SizedTerm:
    """One term between the requested memory and the pool, as a range of bytes."""

    id: str  # the prediction: weights, activation-peak, non-torch, cuda-graphs, non-kv, ...

    what: str  # in words, for the claim
    low: int
    high: int
    derivation: str
    measured: bool = False  # read from public boots, not derived from the config
    # the pool loses fraction x this term, not the term (SGLang keeps 1 - fraction of the
    # memory free before its weights, so what was in use then costs the pool that share)
    scaled: bool = False

    def cost(self, fraction: float, end: str) -> int:
        """What the term takes from the pool at its low or high end, in whole bytes."""
        if not self.scaled:
            return self.low if end == "low" else self.high
        return math.floor(fraction * self.low) if end == "low" else math.ceil(fraction * self.high)


@dataclass(frozen=True)
class SizingUnknown:
    """Why the pool the engine sizes is not predicted (never a guess); the rank's weights
    where they were counted before another term stopped the prediction."""

    reason: str
    weights_bytes: int | None = None
    weights_high: int | None = None  # the top of the weights' interval, where they have one


def bytes_span(low: int, high: int | None) -> str:
    """A count in bytes, or its interval where it has a top of its own."""
    return f"{low:,} B" if high is None else f"{low:,}..{high:,} B"


@dataclass(frozen=True)
class EngineSizing:
    """The pool one rank will size for itself, as a range, with the terms it is left by."""

    flag: str  # the engine's flag: --gpu-memory-utilization, --mem-fraction-static
    field: str  # the shape's: gpu_memory_utilization, mem_fraction_static
    fraction: float
    total_bytes: int  # what the engine multiplies by the fraction (CUDA's total, MemTotal)
    total_derivation: str
    requested_bytes: int
    requested_derivation: str
    terms: tuple[SizedTerm, ...]
    weights_bytes: int  # the weights one rank loads (the plan's weights half)
    refusal: str  # what the engine does when no pool is left
    # what the prediction rests on that is no term: (key, text), e.g. vLLM's model runner
    # and why no CUDA-graph estimate is subtracted
    details: tuple[tuple[str, str], ...] = ()

    @property
    def pool_low(self) -> int:
        return self.requested_bytes - sum(t.cost(self.fraction, "high") for t in self.terms)

    @property
    def pool_high(self) -> int:
        return self.requested_bytes - sum(t.cost(self.fraction, "low") for t in self.terms)

    def fraction_for(self, pool_bytes: int) -> float:
        """The fraction whose pool is at least ``pool_bytes`` at the terms' worst (above 1
        where no fraction is): pool = f x (total - scaled terms) - the other terms."""
        fixed = sum(t.high for t in self.terms if not t.scaled)
        scaled = sum(t.high for t in self.terms if t.scaled)
        return (pool_bytes + fixed) / (self.total_bytes - scaled)

    @property
    def pool_derivation(self) -> str:
        def span(t: SizedTerm) -> str:
            text = f"{t.low:,}" if t.low == t.high else f"{t.low:,}..{t.high:,}"
            return f"{self.fraction:g} x {t.id} {text}" if t.scaled else f"{t.id} {text}"

        terms = " - ".join(span(t) for t in self.terms)
        return (
            f"requested {self.requested_bytes:,} - {terms} = "
            f"{self.pool_low:,}..{self.pool_high:,} B per rank"
        )


# fakplan.kv/1's ``floor`` keys, by term id: one rank's terms, each with its derivation
_FLOOR_KEYS = {
    "weights": "weights",
    "activation-peak": "activation",
    "non-torch": "non_torch",
    "consumed-beyond-weights": "consumed_beyond_weights",
    "cuda-graphs": "cuda_graph",
    "memory-in-use": "memory_in_use",
    "non-kv": "non_kv",
}


def term_fields(t: SizedTerm) -> dict[str, Any]:
    """A term as plan.json's ``engine_sizing.terms`` and fakplan.kv/1's ``sizing.terms``
    record it."""
    return {
        "id": t.id,
        "low_bytes": t.low,
        "high_bytes": t.high,
        "measured": t.measured,
        "scaled": t.scaled,
        "derivation": t.derivation,
    }


@dataclass(frozen=True)
class SizedPool:
    """The pool an engine sizes for itself at both ends of the card figure's digits
    ("79.19 GiB" is an interval of totals): what ``fakplan kv`` prints and its JSON."""

    low_card: EngineSizing | SizingUnknown
    high_card: EngineSizing | None = None

    @classmethod
    def over_card(
        cls, size: Callable[[int], EngineSizing | SizingUnknown], card: tuple[int, int]
    ) -> SizedPool:
        low = size(card[0])
        if isinstance(low, SizingUnknown):
            return cls(low)
        high = size(card[1])
        assert isinstance(high, EngineSizing)  # only the total moved
        return cls(low, high)

    @property
    def pool_interval(self) -> tuple[int, int, int] | None:
        if isinstance(self.low_card, SizingUnknown) or self.high_card is None:
            return None
        low = max(self.low_card.pool_low, 0)
        return low, low, max(self.high_card.pool_high, 0)

    def json(self) -> dict[str, Any]:
        s = self.low_card
        if isinstance(s, SizingUnknown):
            counted: dict[str, Any] = (
                {} if s.weights_bytes is None else {"weights_bytes": s.weights_bytes}
            )
            if s.weights_bytes is not None and s.weights_high is not None:
                counted["weights_range"] = [s.weights_bytes, s.weights_high]
            return {"sizing": {"unknown": s.reason, **counted}, "floor": None}
        interval = self.pool_interval
        assert interval is not None
        floor: dict[str, Any] = {
            "activation_bytes": None,
            "non_torch_bytes": None,
            "cuda_graph_bytes": None,
        }
        for t in s.terms:
            key = _FLOOR_KEYS.get(t.id, t.id.replace("-", "_"))
            span = [t.low, t.high]
            if key == "activation":  # its low end, and the range (the V2 runner has one)
                floor.update(activation_bytes=t.low, activation_range=span)
            else:
                floor[f"{key}_bytes"] = t.low if key == "weights" and t.low == t.high else span
            scaled = f"x {s.fraction:g}: " if t.scaled else ""
            floor[f"{key}_derivation"] = scaled + t.derivation
        floor.update(s.details)
        return {
            "sizing": {
                "pool_range": [interval[0], interval[2]],
                "card_total_range": [s.total_bytes, (self.high_card or s).total_bytes],
                "card_total_derivation": s.total_derivation,
                "requested_bytes": s.requested_bytes,
                "requested_derivation": s.requested_derivation,
                "terms": [term_fields(t) for t in s.terms],
            },
            "floor": floor,
        }

    def lines(self) -> list[str]:
        s = self.low_card
        if isinstance(s, SizingUnknown):
            counted = (
                []
                if s.weights_bytes is None
                else [f"weights per rank: {bytes_span(s.weights_bytes, s.weights_high)} (counted)"]
            )
            return [f"engine-sized pool: unknown ({s.reason})", *counted]
        interval = self.pool_interval
        assert interval is not None
        low, _, high = interval
        lines = [
            f"card total {s.total_derivation}",
            f"requested {s.requested_derivation}",
            *(f"{t.id} {f'x {s.fraction:g}: ' if t.scaled else ''}{t.derivation}" for t in s.terms),
            *(
                f"{key.removesuffix('_derivation').replace('_', ' ')} {text}"
                for key, text in s.details
            ),
            f"pool {low:,}..{high:,} B over the card total's digits (at the low total: "
            f"{s.pool_derivation})",
        ]
        if high <= 0:
            lines.append(
                f"{s.refusal}: the requested memory does not cover one rank's "
                f"{', '.join(t.id for t in s.terms)}; raise the fraction, or spread the "
                "weights over more ranks (--tp)"
            )
        return lines
