"""The weights one rank holds, as counted from a config: the record every counter returns."""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_PAD = 64  # DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py, v0.19.0)


def round_up(value: int, multiple: int) -> int:
    """``value`` padded to a multiple (vLLM's round_up, torch's padding of a dimension)."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class RankWeights:
    """``bytes`` with its derivation; ``high``: the top of an interval where the caching
    allocator's reuse of freed blocks or a measured load residue decides the rest (None:
    exact); ``measured``: part of it is read from public boots, not derived."""

    bytes: int
    derivation: str
    high: int | None = None
    measured: bool = False

    @property
    def top(self) -> int:
        return self.bytes if self.high is None else self.high
