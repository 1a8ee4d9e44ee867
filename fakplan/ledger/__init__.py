"""Boot-ledger parsers: what an engine says it allocated, as one typed ``Ledger``.

The engine's boot log is the referee of every capacity prediction. Each engine's
log-line format is a data table in the engine's own folder
(``fakplan/engines/<name>/bootlog.py``), each row tagged with the engine version it came
from; the registry hands them to ``read_ledger`` (``fakplan.engines.parse_ledger``). This
package is engine-neutral: the reader, the row machinery, the scan and the aggregation,
and one format of its own, ``table`` (a VRAM budget table, no engine's).

    >>> from fakplan.engines import parse_ledger
    >>> ledger = parse_ledger("boot.log")            # engine="auto" detects it
    >>> ledger.kv_tokens, ledger.figure("kv_tokens").line
    (567978, 2)

A file the parser cannot use (empty, binary, from no known engine) raises one
``LedgerError`` whose message is the one line the user sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fakplan.errors import LedgerError
from fakplan.ledger import table
from fakplan.ledger.aggregate import Derivations, aggregate
from fakplan.ledger.boot import Boot
from fakplan.ledger.model import (
    DEVICE_KEYS,
    FIGURE_FIELDS,
    LEDGER_SCHEMA,
    Ledger,
    LedgerFigure,
    LedgerLine,
)
from fakplan.ledger.patterns import LedgerFormat
from fakplan.ledger.reader import MAX_RUN, Prefilter, ReadStats, scan_file
from fakplan.ledger.scan import EngineScan

__all__ = [
    "DEVICE_KEYS",
    "FIGURE_FIELDS",
    "LEDGER_SCHEMA",
    "TABLE",
    "Ledger",
    "LedgerFigure",
    "LedgerFormat",
    "LedgerLine",
    "read_ledger",
]

TABLE = table.FORMAT  # the one format that is no engine's: a VRAM budget table

_KNOWN = "vLLM, SGLang, llama.cpp or a VRAM budget table"


def read_ledger(
    path: str | Path, formats: Mapping[str, LedgerFormat], engine: str = "auto"
) -> Ledger:
    """Read a boot log (plain or gzip) into a ``Ledger`` with ``formats`` (name -> format);
    ``engine`` forces one of them, ``auto`` lets what each recognised decide."""
    if engine != "auto" and engine not in formats:
        choices = ", ".join(("auto", *formats))
        raise LedgerError(f"unknown engine {engine!r}; expected one of {choices}")
    path = Path(path)
    scans, stats = _scan(path, formats)
    name, notes = _choose(path, engine, scans, stats)
    scan = scans[name]
    boot, boot_notes, boots = _boot(path, scan, stats)
    agg = aggregate(boot)
    scan.fmt.derive(Derivations(agg, boot))
    _draft_figures(agg.figures, boot)
    figures = _ordered(agg.figures)
    data: dict[str, object] = {
        "file": str(path),
        "engine": name,
        "engine_detected": engine == "auto",
        "boots": boots,
        "boot_lines": (boot.start, boot.end),
        "budget_rows": {},
        "devices": {},
        "binding_rank": agg.binding,
        "ranks": agg.ranks,
        "figures": figures,
        # a figure another line of the boot states readably is that figure, not unreadable
        "unreadable": {k: why for k, why in boot.unreadable.items() if k not in figures},
        "lines": tuple(boot.lines),
        "notes": tuple(notes + boot_notes + agg.notes + _read_notes(stats)),
    }
    _place(data, figures)
    return Ledger.model_validate(data)


def _draft_figures(figures: dict[str, LedgerFigure], boot: Boot) -> None:
    """A draft's KV as its cache lines printed it, summed: beside the pool, not in it."""
    if not boot.draft_kv:
        return
    first, _, text = boot.draft_kv[0]
    total = sum(size for _, size, _ in boot.draft_kv)
    lines = len(boot.draft_kv)
    how = f"the draft's {lines} cache size line(s) summed, from line {first}"
    figures["draft_kv_bytes"] = LedgerFigure(
        value=total, line=first, text=text, derived=True, derivation=how, unit="B"
    )
    figures["draft_kv_contexts"] = LedgerFigure(
        value=lines, line=first, text=text, derived=True, derivation=how
    )


def _scan(
    path: Path, formats: Mapping[str, LedgerFormat]
) -> tuple[dict[str, EngineScan], ReadStats]:
    """Stream the file once through every format's rows: which engine wrote it is decided
    by what each recognised, so all of them read every line."""
    scans = {name: EngineScan(fmt) for name, fmt in formats.items()}

    def on_line(number: int, text: str, unterminated: bool) -> None:
        for scan in scans.values():
            scan.feed(number, text, unterminated)

    # a prefilter of its own for each file: it plans its passes on the file's first block
    needles = (row.needle for fmt in formats.values() for row in fmt.rows)
    stats = scan_file(path, Prefilter(needles), on_line)
    if stats.lines == 0:
        raise LedgerError(f"{path}: the file is empty; expected an engine's boot log ({_KNOWN})")
    return scans, stats


def _boot(path: Path, scan: EngineScan, stats: ReadStats) -> tuple[Boot, list[str], int]:
    """The boot the ledger describes, its notes and the boots counted, or the refusal: a
    scan that stopped on more than a boot states, or a boot with no figure to report."""
    if scan.overflow is not None:
        raise LedgerError(
            f"{path}: {scan.overflow}, more than any {scan.fmt.title} boot states: not read "
            "as a boot log"
        )
    boot, boot_notes, boots = scan.finish(stats.lines)
    if boot is None or not boot.hits:
        unread = next(iter(boot.unreadable.values()), None) if boot is not None else None
        why = f" that can be read ({unread})" if unread else ""
        raise LedgerError(
            f"{path}: {scan.matched} {scan.fmt.title} line(s) recognised, but none states a "
            f"figure{why}; expected the engine's boot log"
        )
    return boot, boot_notes, boots


def _place(data: dict[str, object], figures: dict[str, LedgerFigure]) -> None:
    """Each figure's value where the Ledger holds it: ``devices.<name>.<leaf>`` under its
    device, ``budget_rows.<row>`` under its row, any other as the field of its name."""
    for key, figure in figures.items():
        head, _, rest = key.partition(".")
        if head == "devices":
            device, _, leaf = rest.rpartition(".")
            devices = data["devices"]
            assert isinstance(devices, dict)
            devices.setdefault(device, {})[leaf] = figure.value
        elif head == "budget_rows":
            rows = data["budget_rows"]
            assert isinstance(rows, dict)
            rows[rest] = figure.value
        else:
            data[key] = figure.value


def _choose(
    path: Path, engine: str, scans: dict[str, EngineScan], stats: ReadStats
) -> tuple[str, list[str]]:
    """The engine whose lines the file holds (most recognised lines wins), or an error."""
    found = {name: scan.recognised for name, scan in scans.items() if scan.recognised}
    lines = f"{stats.lines:,} line{'s' if stats.lines != 1 else ''}"
    if engine != "auto":
        if scans[engine].matched:
            return engine, []
        others = ", ".join(sorted(found))
        hint = f" (it has {others} lines: try --engine auto)" if others else ""
        title = scans[engine].fmt.title
        raise LedgerError(f"{path}: no {title} boot-ledger line in {lines}{hint}")
    if not found:
        if stats.looks_binary:
            raise LedgerError(
                f"{path}: not a text log (binary data); expected an engine's boot log ({_KNOWN})"
                + _stopped(stats)
            )
        generic = max(scan.matched for scan in scans.values())
        hint = (
            f"; {generic} failure line(s) name no engine (a refused command line, an "
            "exception): give --engine to read them as that engine's failed boot"
            if generic
            else ""
        )
        raise LedgerError(
            f"{path}: no boot-ledger line of {_KNOWN} in {lines}; "
            f"expected the engine's boot log (its stdout/stderr){hint}{_stopped(stats)}"
        )
    best = max(found, key=lambda name: found[name])  # ties: the registry's order
    notes = [
        f"also recognised {count} {scans[other].fmt.title} line(s); read as "
        f"{scans[best].fmt.title}, which has more"
        for other, count in found.items()
        if other != best
    ]
    return best, notes


def _ordered(figures: dict[str, LedgerFigure]) -> dict[str, LedgerFigure]:
    """Figures in the Ledger's field order, then per-device and per-row ones by name."""
    order = {name: index for index, name in enumerate(FIGURE_FIELDS)}
    return dict(sorted(figures.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def _stopped(stats: ReadStats) -> str:
    """Where reading stopped, for a refusal: the reason nothing was found may lie past it."""
    if stats.stopped_at is None:
        return ""
    return (
        f"; line {stats.stopped_at[0]} runs past {MAX_RUN >> 20} MiB with no line ending, "
        "where reading stopped"
    )


def _read_notes(stats: ReadStats) -> list[str]:
    """How the file was read, where that bears on the figures: compressed, cut, skipped."""
    notes: list[str] = []
    if stats.compressed:
        notes.append("the file is gzip-compressed; it was read decompressed")
    if stats.stream_error is not None:
        notes.append(
            f"the gzip stream ends early ({stats.stream_error}): the file looks truncated; "
            f"its first {stats.lines:,} lines were read"
        )
    if stats.unterminated_line is not None:
        notes.append(
            f"line {stats.unterminated_line} has no line ending: the file may be cut there, so a "
            "figure at the very end of that line was not read"
        )
    if stats.overlong_lines:
        first = stats.overlong_lines[0]
        notes.append(
            f"{len(stats.overlong_lines)} line(s) longer than 1 MiB were skipped (first: line {first})"
        )
    if stats.looks_binary:
        notes.append("the file holds binary data; only its text lines were read")
    if stats.stopped_at is not None:
        line, read = stats.stopped_at
        notes.append(
            f"line {line} runs past {MAX_RUN >> 20} MiB with no line ending: reading stopped "
            f"there, {read:,} bytes in, so nothing after it was read (a later boot included)"
        )
    return notes
