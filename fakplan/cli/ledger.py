"""``fakplan ledger``: what a boot allocated, every number with its log line."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.engines import bootlog_formats, parse_ledger
from fakplan.ledger import Ledger, LedgerFigure


@click.command()
@click.argument("log", type=click.Path(path_type=Path))
@click.option(
    "--engine",
    default="auto",
    show_default=True,
    help="The engine that wrote the log (an engine's name, or table for a VRAM budget "
    "table); auto detects it from the lines it recognises.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the ledger as JSON (schema fakplan.ledger/1)."
)
def ledger(log: Path, engine: str, as_json: bool) -> None:
    """Read an engine's boot log (plain or gzip): KV tokens and bytes, weights, free memory.

    Every number is shown with the log line it came from; a number the log does not
    state is left out, never guessed. Exit 2 when the file is not a boot log.
    """
    parsed = parse_ledger(log, engine=engine)
    if as_json:
        click.echo(parsed.to_json(), nl=False)
    else:
        print_ledger(parsed)


def _value(figure: LedgerFigure) -> str:
    value = figure.value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return value


def _clip(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def print_ledger(ledger: Ledger) -> None:
    console = Console(highlight=False, soft_wrap=False)
    how = "detected" if ledger.engine_detected else "as given"
    start, end = ledger.boot_lines
    console.print(Text(f"{ledger.file}", style="bold"))
    console.print(
        Text(
            f"engine {ledger.engine} ({bootlog_formats()[ledger.engine].title}, {how}); "
            f"boot lines {start}-{end}; {len(ledger.lines)} lines recognised"
        )
    )
    if ledger.boot_failed:
        console.print(
            Text(
                f"BOOT FAILED (line {ledger.figures['error'].line}): {ledger.error}",
                style="bold red",
            )
        )
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("as printed", justify="right")
    table.add_column("line", justify="right")
    derived: list[tuple[str, LedgerFigure]] = []
    for name, figure in ledger.figures.items():
        if name in {"error", "boot_failed"}:
            continue
        unit = " B" if name.endswith("_bytes") else ""
        if figure.derived:
            derived.append((name, figure))
        table.add_row(
            Text(name),
            Text(_value(figure) + unit),
            Text(figure.printed or ("derived" if figure.derived else "")),
            Text(f"{figure.line}{'*' if figure.derived else ''}"),
        )
    console.print(table)
    for name, figure in derived:
        console.print(Text(f"* {name}: {figure.derivation}"))
    if ledger.ranks:
        binds = f" ({ledger.binding_rank} binds: its figures are the ones above)"
        console.print(Text(f"ranks differ{binds if ledger.binding_rank else ''}:", style="bold"))
    for rank, figures in ledger.ranks.items():
        for name, figure in figures.items():
            unit = " B" if name.endswith("_bytes") else ""
            shown = f" ({figure.printed})" if figure.printed else ""
            console.print(
                Text(f"  {rank}: {name} = {_value(figure)}{unit}{shown}, line {figure.line}")
            )
    lines = Table(show_header=True, header_style="bold", expand=False)
    lines.add_column("line", justify="right")
    lines.add_column("kind")
    lines.add_column("text", overflow="fold")
    for line in ledger.lines:
        lines.add_row(Text(str(line.line)), Text(line.kind), Text(_clip(line.text)))
    console.print(Text("recognised lines:", style="bold"))
    console.print(lines)
    for note in ledger.notes:
        console.print(Text(f"note: {note}"))
