"""A pool the engine sizes for itself: what fakplan predicts it will take, term by term.

A shape that gives ``serving.gpu_memory_utilization`` (vLLM) or
``serving.mem_fraction_static`` (SGLang) instead of ``budget.kv`` lets the engine size its
pool at boot. The plan then plans against the pool fakplan predicts, and
every term of the prediction (the weights per rank, the profiling run's activation peak,
the memory outside torch) is a prediction of its own that ``fakplan verify`` closes
against the profiler lines of the boot ledger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
