"""One boot as a scan reads it: its hits (figures per rank) and what it has seen so far.

``EngineScan`` (``scan``) fills a ``Boot`` line by line; ``aggregate`` turns a finished
one into figures. Kept apart so each side reads the boot without the other's logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fakplan.ledger.model import LedgerFigure, LedgerLine
from fakplan.ledger.patterns import Default, Value


@dataclass
class Hit:
    """One figure as one rank's line stated it; ``priority`` decides which statement stays."""

    value: Value
    line: int
    text: str
    printed: str | None
    unit: str | None
    rank: str | None
    source: str
    priority: int

    def figure(self, rank: str | None) -> LedgerFigure:
        """The hit as a ledger figure, cited as ``rank``'s (None where every rank agrees)."""
        return LedgerFigure(
            value=self.value,
            line=self.line,
            text=self.text,
            printed=self.printed,
            unit=self.unit,
            rank=rank,
            source=self.source,
        )


@dataclass
class Boot:
    """The lines of one boot, as far as they have been read."""

    start: int
    end: int = 0
    hits: dict[tuple[str | None, str], Hit] = field(default_factory=dict)
    lines: list[LedgerLine] = field(default_factory=list)
    dropped_lines: int = 0
    content_ranks: set[str | None] = field(default_factory=set)
    phases: dict[str | None, int] = field(default_factory=dict)
    once_seen: dict[tuple[str | None, str, tuple[str, ...]], str | None] = field(
        default_factory=dict
    )
    series_count: dict[tuple[str | None, str, str | None], int] = field(default_factory=dict)
    # per (rank, series): the occurrence its next line has at least (Row.opens)
    series_floor: dict[tuple[str | None, str], int] = field(default_factory=dict)
    second_model: dict[str | None, int] = field(default_factory=dict)
    # a draft's cache summary lines, (line, bytes, text): its KV, kept apart from the pool
    draft_kv: list[tuple[int, int, str]] = field(default_factory=list)
    serving_from: int | None = None  # the line saying the server is up
    request_errors: int = 0  # failure lines after it: requests', not the boot's
    defaults: dict[str, tuple[Default, int, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # figure -> the first note on it
    unreadable_count: int = 0
    repeated: tuple[int, str, int] | None = None  # the first (line, needle, times)
    repeated_lines: int = 0
    repeated_last: int = 0
    ranks_seen: set[str | None] = field(default_factory=set)

    def size(self) -> int:
        """Figures and per-device state kept (read or not): bounded by MAX_FIGURES."""
        return len(self.hits) + len(self.unreadable) + len(self.series_count)

    @property
    def has_content(self) -> bool:
        return bool(self.content_ranks)

    def names(self) -> set[str]:
        return {name for _, name in self.hits}

    def stated(self) -> set[str]:
        """The figures the boot printed, read or not: a capacity line whose number cannot
        be read still shows the boot got that far."""
        return self.names() | set(self.unreadable)

    def span(self) -> str:
        return f"lines {self.start}-{self.end}"
