"""Feed recognised lines through one engine's rows: boots, ranks, second models.

A file can hold several boots (a restarted server appends to its log), lines
from several ranks interleaved, and a second model (a draft) in the middle of a
boot. ``EngineScan`` keeps only what it needs as it streams: the current boot,
the last boot that stated anything and the last complete one, so memory does
not grow with the file. ``finish`` picks the boot the ledger describes and
turns its hits into figures: the common value where ranks agree; where they
differ, every rank's value and the binding rank's as the figure (the engines
size every rank by the smallest pool); then the engine's derived figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from fakplan.ledger.model import LedgerFigure, LedgerLine, rank_order, shown, spread
from fakplan.ledger.patterns import Default, LedgerFormat, Row, Unreadable, Value
from fakplan.ledger.reader import clip

MAX_LINES_KEPT = (
    2_000  # recognised lines listed per boot (a TP8 boot has ~100); figures never depend
)
# on it, and 20,000 lines of a failure message repeated held 40 MB
SHOWN_UNREADABLE = 8  # unreadable figures noted one by one; the rest are counted
MAX_REPEATS = 8  # a row's needle this often on one line: no engine's line (real ones: 1-2)
# What one boot can state: more is no engine's boot (a TP8 boot states ~300 figures), and
# state kept per rank and per device would otherwise grow with the file (GBs for a 30 MB log).
MAX_RANKS = 256
MAX_FIGURES = 10_000
MAIN = "main"  # the label of lines that name no rank, where other lines do

_ALL = "\x00all"  # a second model announced without a rank holds for every rank


@dataclass
class Hit:
    value: Value
    line: int
    text: str
    printed: str | None
    unit: str | None
    rank: str | None
    source: str
    priority: int

    def figure(self, rank: str | None) -> LedgerFigure:
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
    second_model: dict[str | None, int] = field(default_factory=dict)
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


class EngineScan:
    """One engine's pass over the recognised lines of a file."""

    def __init__(self, fmt: LedgerFormat) -> None:
        self.fmt = fmt
        self.current = Boot(start=1)
        self.previous: Boot | None = None  # the last finished boot that stated anything
        self.last_complete: Boot | None = None
        self.boots = 0
        self.recognised = 0  # lines that name this engine (signature rows)
        self.matched = 0  # lines any row matched
        self.overflow: str | None = None  # why the scan stopped: more than a boot states

    # ------------------------------------------------------------ feeding

    def feed(self, number: int, text: str, unterminated: bool) -> None:
        if self.overflow is not None:
            return
        rank: str | None = None
        ranked = False
        signature = False
        matched = False
        series_hit: set[tuple[str | None, str, str | None]] = set()
        for row in self.fmt.rows:
            if row.needle not in text:
                continue
            times = text.count(row.needle)
            if times > MAX_REPEATS:  # tried from each, "new slot.*?n_ctx_slot" is quadratic
                self._repeated(number, row.needle, times)
                continue
            match = row.regex.search(text)
            if match is None:
                continue
            if unterminated and _may_be_cut(match, text):
                continue  # a number at the very end of a cut line may be cut too
            if not ranked:
                rank, ranked = self.fmt.rank(text), True
            matched = True
            signature = signature or row.signature
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            if row.series is not None:
                key = (rank, row.series, groups.get("device"))
                if self.current.series_count.get(key, 0) != row.occurrence:
                    continue
                series_hit.add(key)
            self._apply(row, groups, number, text, rank)
            if self.overflow is not None:
                return
        for key in series_hit:
            count = self.current.series_count
            count[key] = count.get(key, 0) + 1
        self.matched += matched
        self.recognised += signature

    def _repeated(self, number: int, needle: str, times: int) -> None:
        boot = self.current
        if boot.repeated_last != number:
            boot.repeated_last = number
            boot.repeated_lines += 1
            if boot.repeated is None:
                boot.repeated = (number, needle, times)

    def _full(self, boot: Boot, number: int, rank: str | None, name: str | None) -> bool:
        """Whether ``rank`` (or figure ``name``) is one more than a boot states: then the scan
        stops, and a log read as this engine's is refused."""
        if rank not in boot.ranks_seen:
            if len(boot.ranks_seen) >= MAX_RANKS:
                self.overflow = f"line {number}: a rank past the {MAX_RANKS:,}th in one boot"
                return True
            boot.ranks_seen.add(rank)
        if name is not None and (rank, name) not in boot.hits and boot.size() >= MAX_FIGURES:
            self.overflow = f"line {number}: a figure past the {MAX_FIGURES:,}th in one boot"
            return True
        return False

    def _apply(
        self, row: Row, groups: dict[str, str], number: int, text: str, rank: str | None
    ) -> None:
        boot = self.current
        if not row.server and (_ALL in boot.second_model or rank in boot.second_model):
            return  # a second model (a draft) is loading: its lines are not this boot's
        if row.failure and boot.serving_from is not None:
            if not boot.request_errors:
                boot.notes.append(
                    f"line {number}: {groups['error'].strip()[:120]} came after the server was "
                    f"up (line {boot.serving_from}): a request's error, not a boot failure"
                )
            boot.request_errors += 1
            return
        if row.serving:
            if boot.serving_from is None:
                boot.serving_from = number
            return
        names = tuple(f.name.format(**groups) for f in row.figures if f.group in groups)
        if self._full(boot, number, rank, None):
            return
        if row.starts_boot and _has_content(boot, rank):
            boot = self._new_boot(number)
        elif row.phase is not None and row.phase < boot.phases.get(rank, row.phase):
            boot = self._new_boot(number)  # the rank went back to an earlier step: a restart
        if row.once:
            key = (rank, row.kind, names)
            identity = groups.get(row.identity) if row.identity else None
            if key in boot.once_seen:
                if row.identity is None or boot.once_seen[key] == identity:
                    boot = self._new_boot(number)
                else:
                    boot.second_model[rank] = number
                    who = f" ({rank})" if rank else ""
                    boot.notes.append(
                        f"a second model ({row.identity}={identity}) loads at line {number}{who};"
                        " its figures are not counted"
                    )
                    return
            boot.once_seen.setdefault(key, identity)
        if row.phase is not None:
            boot.phases[rank] = max(boot.phases.get(rank, row.phase), row.phase)
        if row.second_model and not boot.second_model:
            boot.second_model[rank if rank is not None else _ALL] = number
            boot.notes.append(
                f"a second model (a draft) loads from line {number}; its figures are not counted"
            )
        boot.end = number
        kept = clip(text)
        if len(boot.lines) < MAX_LINES_KEPT:
            boot.lines.append(
                LedgerLine(line=number, kind=row.kind, text=kept, source=row.source, rank=rank)
            )
        else:
            boot.dropped_lines += 1

        def hit(value: Value, printed: str | None = None, unit: str | None = None) -> Hit:
            return Hit(value, number, kept, printed, unit, rank, row.source, row.priority)

        for fig in row.figures:
            raw = groups.get(fig.group)
            if raw is None:
                continue
            name = fig.name.format(**groups)
            if self._full(boot, number, rank, name):
                return
            try:
                reading = fig.conv(raw)
            except Unreadable as why:
                _unreadable(boot, number, rank, name, raw, str(why))
                continue
            _put(boot, name, hit(reading.value, reading.printed, reading.unit))
        if row.failure:
            # the boot's failure, whichever process printed it: the first line naming the
            # cause wins; a later line of higher priority (a specific row) replaces it
            failed = Hit(True, number, kept, None, None, None, row.source, row.priority)
            _put(boot, "boot_failed", failed)
            _put(boot, "error", replace(failed, value=clip(groups["error"].strip())))
        for default in row.defaults:
            boot.defaults.setdefault(default.name, (default, number, kept))
        if not row.starts_boot:
            boot.content_ranks.add(rank)

    def _new_boot(self, number: int) -> Boot:
        finished = self.current
        finished.end = number - 1
        if finished.has_content:
            self.boots += 1
            self.previous = finished
            if self.fmt.complete(finished.stated()):
                self.last_complete = finished
        self.current = Boot(start=number)
        return self.current

    # ------------------------------------------------------------ finishing

    def finish(self, total_lines: int) -> tuple[Boot | None, list[str], int]:
        """The boot the ledger describes, the notes on that choice, and how many boots."""
        last = self.current
        last.end = total_lines
        boots = self.boots
        if last.has_content:
            boots += 1
        else:
            last = self.previous or last
        if not last.has_content:
            return None, [], boots
        notes: list[str] = []
        chosen = last
        if self.fmt.complete(last.stated()):
            if boots > 1:
                notes.append(
                    f"{boots} boots in this file; the last complete one ({last.span()}) was used"
                )
        elif self.last_complete is not None and self.last_complete is not last:
            chosen = self.last_complete
            notes.append(
                f"{boots} boots in this file; the last one ({last.span()}) stops before its KV "
                f"capacity line, so the last complete one ({chosen.span()}) was used"
            )
        else:
            where = f"the last of {boots} boots ({last.span()})" if boots > 1 else "this boot"
            notes.append(
                f"{where} stops before its KV capacity line (truncated, or still "
                "booting): its figures may be incomplete"
            )
        if chosen.dropped_lines:
            notes.append(f"{chosen.dropped_lines} more recognised lines were not listed")
        unread = list(chosen.unreadable.values())[:SHOWN_UNREADABLE]
        more = chosen.unreadable_count - len(unread)
        if more > 0:
            unread.append(f"and {more:,} more figure(s) that cannot be read, left null")
        if chosen.repeated is not None:
            line, needle, times = chosen.repeated
            others = chosen.repeated_lines - 1
            unread.append(
                f"line {line} holds {needle!r} {times:,} times, as no engine's line does: it "
                "was not read as one" + (f" (nor {others:,} more such lines)" if others else "")
            )
        return chosen, notes + chosen.notes + unread, boots


def _unreadable(boot: Boot, number: int, rank: str | None, name: str, raw: str, why: str) -> None:
    """Note a figure whose text no engine prints: it stays null, never a guess."""
    boot.unreadable_count += 1
    if name in boot.unreadable:
        return
    shown = raw if len(raw) <= 32 else f"{raw[:16]}…{raw[-8:]}"
    who = f" ({rank})" if rank else ""
    boot.unreadable[name] = f"line {number}{who}: {name} {shown!r} {why}, so it is left null"


def _put(boot: Boot, name: str, hit: Hit) -> None:
    """Keep the first statement of a figure per rank, unless a later one has priority."""
    key = (hit.rank, name)
    old = boot.hits.get(key)
    if old is None or hit.priority > old.priority:
        boot.hits[key] = hit


def _has_content(boot: Boot, rank: str | None) -> bool:
    """Whether a boot marker from ``rank`` means a new boot has begun."""
    if rank is None:
        return boot.has_content
    return rank in boot.content_ranks


def _may_be_cut(match: re.Match[str], text: str) -> bool:
    end = len(text.rstrip())
    return any(match.end(g) >= end for g in match.re.groupindex if match.group(g) is not None)


# ---------------------------------------------------------------- aggregation


@dataclass
class Aggregate:
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
    if figure is None or isinstance(figure.value, bool | str):
        return float("inf")
    return float(figure.value)


def _hashable(value: Value) -> tuple[str, Value]:
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
