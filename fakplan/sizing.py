"""A pool the engine sizes for itself: what fakplan predicts it will take, term by term.

A shape that gives ``serving.gpu_memory_utilization`` instead of ``budget.kv`` lets the
engine size its pool at boot. The plan then plans against the pool fakplan predicts, and
every term of the prediction (the weights per rank, the profiling run's activation peak,
the memory outside torch) is a prediction of its own that ``fakplan verify`` closes
against the profiler lines of the boot ledger.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SizedTerm:
    """One term between the requested memory and the pool, as a range of bytes."""

    id: str  # the prediction it becomes: weights, activation-peak, non-torch, non-kv
    what: str  # in words, for the claim
    low: int
    high: int
    derivation: str
    measured: bool = False  # read from public boots, not derived from the config


@dataclass(frozen=True)
class EngineSizing:
    """The pool one rank will size for itself, as a range, with the terms it is left by."""

    flag: str  # the engine's flag: --gpu-memory-utilization
    fraction: float
    total_bytes: int  # what the engine multiplies by the fraction (CUDA's total, MemTotal)
    total_derivation: str
    requested_bytes: int
    requested_derivation: str
    terms: tuple[SizedTerm, ...]
    weights_bytes: int  # the weights one rank loads (the plan's weights half)

    @property
    def pool_low(self) -> int:
        return self.requested_bytes - sum(t.high for t in self.terms)

    @property
    def pool_high(self) -> int:
        return self.requested_bytes - sum(t.low for t in self.terms)

    @property
    def pool_derivation(self) -> str:
        def span(t: SizedTerm) -> str:
            return f"{t.low:,}" if t.low == t.high else f"{t.low:,}..{t.high:,}"

        terms = " - ".join(f"{t.id} {span(t)}" for t in self.terms)
        return (
            f"requested {self.requested_bytes:,} - {terms} = "
            f"{self.pool_low:,}..{self.pool_high:,} B per rank"
        )
