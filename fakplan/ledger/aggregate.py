"""Turn a boot's hits into figures: one value where ranks agree, the binding rank's where not.

The engines size every rank by the smallest pool (else the least free memory), so where
ranks print different figures that rank's are the ledger's, every rank's value is kept in
``ranks``, and a note names the spread. ``Derivations`` is the view through which a
format then adds its derived figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.ledger.boot import Boot, Hit
from fakplan.ledger.model import LedgerFigure, rank_order, shown, spread
from fakplan.ledger.patterns import Default, Value

MAIN = "main"  # the label of lines that name no rank, where other lines do


@dataclass
class Aggregate:
    """A boot's figures, every rank's where ranks differ, and the rank that binds."""

    figures: dict[str, LedgerFigure]
    ranks: dict[str, dict[str, LedgerFigure]]
    notes: list[str]
    binding: str | None = None


# What makes a rank the binding one, in order: its KV pool (vLLM takes the minimum of the
# workers' blocks, docs/engines.md §1.3; SGLang's ranks share one token count), then the free
# memory the pool was sized from (SGLang takes the minimum over ranks, §2.4), then later steps.
POOL_FIGURES = ("kv_tokens", "num_blocks", "kv_bytes", "k_bytes", "v_bytes", "full_kv_tokens")
FREE_FIGURES = (
    "free_after_weights_bytes",
    "free_before_load_bytes",
    "free_after_pool_bytes",
    "free_before_graphs_bytes",
    "free_after_graphs_bytes",
    "free_at_ready_bytes",
)
SHOWN_SPREADS = 4  # figures named in the note; every one is in ``ranks``


def aggregate(boot: Boot) -> Aggregate:
    """The common value of each figure where ranks agree; the binding rank's where not."""
    by_name: dict[str, list[Hit]] = {}
    for (_, name), hit in boot.hits.items():
        by_name.setdefault(name, []).append(hit)
    figures: dict[str, LedgerFigure] = {}
    ranks: dict[str, dict[str, LedgerFigure]] = {}
    differ: list[str] = []
    agree: dict[str, list[Hit]] = {}
    for name, hits in by_name.items():
        hits.sort(key=lambda h: h.line)
        if len({_hashable(h.value) for h in hits}) == 1:
            stated_by = {h.rank for h in hits}
            first = hits[0]
            figures[name] = first.figure(first.rank if len(stated_by) == 1 else None)
            if len(stated_by) > 1:
                agree[name] = hits
            continue
        differ.append(name)
        for hit in hits:
            label = hit.rank if hit.rank is not None else MAIN
            ranks.setdefault(label, {})[name] = hit.figure(label)
    if not differ:
        return Aggregate(figures=figures, ranks={}, notes=[])
    ordered = {label: ranks[label] for label in sorted(ranks, key=rank_order)}
    binding, why = _binding(ordered, differ)
    unstated = [name for name in differ if name not in ordered[binding]]
    for name in differ:
        if name in ordered[binding]:
            figures[name] = ordered[binding][name]
    for name, hits in agree.items():  # the same value everywhere: cite the binding rank's line
        own = next((h for h in hits if (h.rank or MAIN) == binding), None)
        if own is not None:
            figures[name] = own.figure(None)
    spreads = [
        spread(name, {label: per[name] for label, per in ordered.items() if name in per})
        for name in differ
    ]
    more = len(spreads) - SHOWN_SPREADS
    note = (
        "ranks state different values: "
        + "; ".join(spreads[:SHOWN_SPREADS])
        + (f"; and {more} more" if more > 0 else "")
        + f". {binding} binds ({why}) and gives these figures; every rank's value is in ranks"
    )
    if unstated:
        note += f"; {binding} does not state {', '.join(unstated)}: no figure for them"
    return Aggregate(figures=figures, ranks=ordered, notes=[note], binding=binding)


def _binding(ranks: dict[str, dict[str, LedgerFigure]], differ: list[str]) -> tuple[str, str]:
    """The rank every rank is sized by, and why: the smallest pool, else the least free memory.

    A rank that does not state a figure cannot bind on it.
    """
    labels = list(ranks)
    for group, what in (
        (POOL_FIGURES, "the smallest KV pool"),
        (FREE_FIGURES, "the ranks' pools agree; the least free memory"),
    ):
        names = [n for n in group if n in differ]
        if not names:
            continue

        def key(label: str, names: list[str] = names) -> tuple[float, ...]:
            return tuple(_number(ranks[label].get(n)) for n in names)

        best = min(labels, key=lambda label: (key(label), rank_order(label)))
        decided = next(
            (n for i, n in enumerate(names) if any(key(o)[i] != key(best)[i] for o in labels)),
            names[0],
        )
        figure = ranks[best].get(decided)
        value = f" {shown(figure)}" if figure is not None else ""
        return best, f"{what}, {decided}{value}: the engine sizes every rank by it"
    return labels[0], "the first rank: the ranks' pools and free memory agree"


def _number(figure: LedgerFigure | None) -> float:
    """A figure as a sort key: one a rank does not state (or not as a number) never binds."""
    if figure is None or isinstance(figure.value, bool | str):
        return float("inf")
    return float(figure.value)


def _hashable(value: Value) -> tuple[str, Value]:
    """A value with its type: ``1`` and ``True`` (or ``1.0``) are not the same figure."""
    return (type(value).__name__, value)


class Derivations:
    """The ``DerivedFigures`` view ``LedgerFormat.derive`` adds derived figures through."""

    def __init__(self, agg: Aggregate, boot: Boot) -> None:
        self._figures = agg.figures
        self._blocked = {name for per_rank in agg.ranks.values() for name in per_rank}
        self._defaults = boot.defaults

    def value(self, name: str) -> Value | None:
        figure = self._figures.get(name)
        return None if figure is None else figure.value

    def cite(self, name: str) -> str:
        """``"54.12 GB (line 2)"``: a figure as printed, with its line, for a derivation."""
        figure = self._figures[name]
        shown = figure.printed or (
            f"{figure.value:,}" if isinstance(figure.value, int) else str(figure.value)
        )
        return f"{shown} (line {figure.line})"

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._figures if n.startswith(prefix))

    def _free(self, name: str) -> bool:
        return name not in self._figures and name not in self._blocked

    def derive(self, name: str, value: Value, derivation: str, *, main: str, source: str) -> None:
        """Add ``name``, derived from printed figures (``main`` gives its line), unless stated."""
        if not self._free(name):
            return
        anchor = self._figures[main]
        self._figures[name] = LedgerFigure(
            value=value,
            line=anchor.line,
            text=anchor.text,
            derived=True,
            derivation=derivation,
            source=source,
        )

    def copy(self, name: str, to: str) -> None:
        """State ``to`` as the same printed figure as ``name`` (same line, not derived)."""
        figure = self._figures.get(name)
        if figure is not None and self._free(to):
            self._figures[to] = figure

    def default(self, name: str) -> Default | None:
        found = self._defaults.get(name)
        return None if found is None else found[0]
