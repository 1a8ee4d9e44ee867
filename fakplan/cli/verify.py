"""``fakplan verify``: close a shape's ledger predictions with verdicts."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from fakplan.ceiling import above_card, ceiling_from_ledger
from fakplan.cli import EXIT_FAILED, EXIT_OK, out_option, templates_option
from fakplan.engines import ENGINES, parse_ledger
from fakplan.fit import proven_plan
from fakplan.ledger import Ledger
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Prediction, PredictionVerdict, amount, describe, miss
from fakplan.record import record_verdicts
from fakplan.shape import load_shape
from fakplan.verify import ledger_verdicts, printed_pool_counts


@click.command()
@click.argument("shape", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--ledger",
    "ledger_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The engine's boot log (plain or gzip).",
)
@click.option(
    "--engine",
    default=None,
    help="The log's format (an engine's name, or table): default the shape's engine's "
    "(auto where it has none fakplan reads); auto detects it.",
)
@out_option("The compiled record to write verdicts into (as fakplan compile -o).")
@templates_option
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
def verify(
    shape: Path,
    ledger_path: Path,
    engine: str | None,
    out_dir: Path,
    templates: Path | None,
    as_json: bool,
) -> None:
    """Close SHAPE's ledger predictions against the boot log LOG.

    Each prediction the ledger can close (KV tokens within tolerance, sessions
    at the full window, weights within budget, the pair under the measured
    ceiling) gets a verdict — held, killed or unverifiable — with the observed
    value and the log line. Verdicts are written beside the predictions in
    DIR/<name>/plan.json and the rendered headers, atomically, keeping earlier
    verdicts; the same observation from the same line is recorded once. Exit 1
    if any prediction is killed.
    """
    loaded = load_shape(shape)
    if engine is None:
        # the shape names its engine: a log that died before any engine-specific line
        # (a refused flag) still parses as that engine's failure
        bootlog = ENGINES[loaded.shape.engine].boot_format()
        engine = bootlog.name if bootlog is not None else "auto"
    ledger = parse_ledger(ledger_path, engine)

    floor = loaded.shape.ceiling.engine_floor if loaded.shape.ceiling else None
    # a log of a larger card is bad input at the shape's card.total, as gate --ledger says
    problem = above_card(ceiling_from_ledger(ledger, floor), loaded.shape.card.total, ledger_path)
    if problem:
        raise loaded.error(problem, "card", "total")
    verdicts = ledger_verdicts(
        compile_plan(loaded), ledger, floor, at_printed_pool=printed_pool_counts(loaded, ledger)
    )
    recorded = record_verdicts(loaded, out_dir, verdicts, templates, prove=proven_plan)
    plan = recorded.plan
    claims = {p.id: p for p in plan.predictions}
    if as_json:
        report = _verify_json(plan, ledger, ledger_path, out_dir, verdicts, claims, recorded.added)
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _report(ledger, ledger_path, verdicts, claims, recorded.already, out_dir / plan.name)
    killed = any(v.status == "killed" for v in verdicts.values())
    sys.exit(EXIT_FAILED if killed else EXIT_OK)


def _verify_json(
    plan: Plan,
    ledger: Ledger,
    ledger_path: Path,
    out_dir: Path,
    verdicts: dict[str, PredictionVerdict],
    claims: dict[str, Prediction],
    added: tuple[str, ...],
) -> dict[str, object]:
    """``fakplan.verify/1``: each verdict with how far it missed and whether it is new."""
    return {
        "schema": "fakplan.verify/1",
        "name": plan.name,
        "ledger": str(ledger_path),
        "engine": ledger.engine,
        "record": str(out_dir / plan.name / "plan.json"),
        "verdicts": {
            pid: {**v.model_dump(mode="json"), "miss": _miss(claims[pid], v), "new": pid in added}
            for pid, v in verdicts.items()
        },
    }


def _miss(prediction: Prediction, verdict: PredictionVerdict) -> dict[str, object] | None:
    observed = verdict.observed
    if verdict.status != "killed" or not isinstance(observed, int | float):
        return None
    found = miss(prediction, observed)
    return None if found is None else found.to_dict()


# ----------------------------------------------------------------------- output

_STYLE = {"held": "green", "killed": "bold red", "unverifiable": "yellow", "inside noise": "yellow"}
_INDENT = 4


def _observed(prediction: Prediction, verdict: PredictionVerdict) -> str:
    observed = verdict.observed
    if observed is None:
        return "—"
    if isinstance(observed, int | float):
        return amount(observed, prediction.unit)
    return observed.partition(":")[0]  # "boot failed: <why>": the why is in the note below


def _report(
    ledger: Ledger,
    ledger_path: Path,
    verdicts: dict[str, PredictionVerdict],
    claims: dict[str, Prediction],
    already: tuple[str, ...],
    folder: Path,
) -> None:
    """A table of the verdicts, then each one's note and log line, fitted to the terminal."""
    console = Console(highlight=False, soft_wrap=False)
    console.print(Text(f"{folder.name}: {ledger_path} ({ledger.engine})", style="bold"))
    rows = [
        (pid, verdict.status, describe(claims[pid]), _observed(claims[pid], verdict))
        for pid, verdict in verdicts.items()
    ]
    if console.width >= _table_width(rows):
        table = Table(
            box=box.SIMPLE_HEAD,
            show_header=True,
            header_style="bold",
            show_edge=False,
            pad_edge=False,
        )
        for column in ("prediction", "verdict", "predicted", "observed"):
            table.add_column(column, no_wrap=True)
        for pid, status, predicted, seen in rows:
            table.add_row(Text(pid), Text(status, style=_STYLE.get(status, "")), predicted, seen)
        console.print(table)
    else:
        # too narrow for the table (a phone, a split pane): one verdict a line, wrapped,
        # so the verdict is never the column that gives way
        for pid, status, predicted, seen in rows:
            row = Text(f"{pid}: ")
            row.append(status, style=_STYLE.get(status, ""))
            row.append(f" (predicted {predicted}, observed {seen})")
            console.print(row)
    error = ledger.figure("error")
    if ledger.boot_failed and error is not None:  # once, not under every verdict it kills
        console.print(Text(f"boot failed, {ledger.file}:{error.line}: {ledger.error}"))
    for pid, verdict in verdicts.items():
        observed = verdict.observed
        why = observed if isinstance(observed, str) and not ledger.boot_failed else ""
        note = "; ".join(part for part in (why, verdict.note) if part)
        console.print(Padding(Text(f"{pid}: {note}" if note else pid), (0, 0, 0, 2), expand=False))
        line = _fit_source(verdict, ledger, console.width - _INDENT)
        console.print(Text(" " * _INDENT + line), no_wrap=True, overflow="ellipsis", crop=True)
    for line in ledger.notes:
        console.print(Text(f"note: {line}"))
    console.print(Text(_written(len(verdicts), already, folder)))


def _table_width(rows: Sequence[tuple[str, str, str, str]]) -> int:
    """The columns' widest cells, headers included, and the table's separators."""
    headers = ("prediction", "verdict", "predicted", "observed")
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    return sum(widths) + 3 * (len(widths) - 1)


def _written(count: int, already: tuple[str, ...], folder: Path) -> str:
    """What the run added to the record: a verify run again on the same log adds nothing."""
    fresh = count - len(already)
    if not already:
        return f"verdicts written to {folder}/"
    if not fresh:
        return f"nothing new: every verdict is already recorded in {folder}/ (same observations)"
    return (
        f"{fresh} verdict{'s' if fresh != 1 else ''} written to {folder}/; "
        f"{', '.join(already)} already recorded (same observation)"
    )


_SOURCE = re.compile(r"(?P<lines>\d+(?:,\d+)*)(?:: (?P<text>.*))?", re.DOTALL)


def _fit_source(verdict: PredictionVerdict, ledger: Ledger, width: int) -> str:
    """``file:LINE: …text…`` in ``width`` characters, the observed figure kept in view.

    The log line is cut on both sides around the figure the verdict observed (its
    tail, the engine's message, when no figure is found); the file is shown by its
    name when its path would take more than a third of the width. ``--json`` keeps
    the whole source.
    """
    file = ledger.file
    rest = verdict.source.removeprefix(f"{file}:")
    match = _SOURCE.fullmatch(rest) if rest != verdict.source else None
    name = file if len(file) <= width // 3 else "…/" + Path(file).name
    if verdict.source == file:
        return name
    if match is None:
        return _cut(verdict.source, None, width)
    head = f"{name}:{match['lines']}"
    text = match["text"]
    if text is None:
        return head
    head += ": "
    return head + _cut(
        text,
        _anchor(verdict, ledger, int(match["lines"].partition(",")[0]), text),
        width - len(head),
    )


def _anchor(
    verdict: PredictionVerdict, ledger: Ledger, line: int, text: str
) -> tuple[int, int] | None:
    """Where on the line the figure the verdict observed is printed (else any figure of it)."""
    stated = [f for f in ledger.figures.values() if f.line == line and f.printed]
    stated += [f for per in ledger.ranks.values() for f in per.values() if f.line == line]
    stated.sort(key=lambda f: f.value != verdict.observed)  # the observed figure first
    for figure in stated:
        found = _printed_at(text, figure.printed)
        if found is not None:
            return found
    return None


def _printed_at(text: str, printed: str | None) -> tuple[int, int] | None:
    """Where ``printed`` ("1.89 GiB", as the ledger normalises it) stands in the engine's
    own text, which may write it "1.89GiB" or "1.89 GiB": the number not inside another."""
    if not printed:
        return None
    number, _, unit = printed.partition(" ")
    pattern = rf"(?<![\d.]){re.escape(number)}\s*{re.escape(unit)}" if unit else re.escape(number)
    found = re.search(pattern, text)
    return None if found is None else found.span()


def _cut(text: str, span: tuple[int, int] | None, width: int) -> str:
    """``text`` in ``width`` characters around ``span``, an ellipsis where it was cut."""
    if len(text) <= width:
        return text
    if width < 3:
        return "…"[:width]
    start, end = span if span is not None else (len(text), len(text))
    room = width - 2  # the text between two ellipses
    first = start - max(0, room - (end - start)) // 2
    if first <= 0:
        return text[: width - 1] + "…"
    if first + room >= len(text):
        return "…" + text[len(text) - (width - 1) :]
    return "…" + text[first : first + room] + "…"
