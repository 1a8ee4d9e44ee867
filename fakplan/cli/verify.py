"""``fakplan verify``: close a shape's ledger predictions with verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.cli import EXIT_FAILED, EXIT_OK, out_option, templates_option
from fakplan.ledger import ENGINE_CHOICES, parse_ledger
from fakplan.record import record_verdicts
from fakplan.shape import load_shape
from fakplan.verify import ledger_verdicts


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
    type=click.Choice(ENGINE_CHOICES),
    default=None,
    help="The log's format: default the shape's engine (auto for engine: custom); auto detects it.",
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
    verdicts. Exit 1 if any prediction is killed.
    """
    loaded = load_shape(shape)
    if engine is None:
        # the shape names its engine: a log that died before any engine-specific line
        # (a refused flag) still parses as that engine's failure
        engine = loaded.shape.engine if loaded.shape.engine in ENGINE_CHOICES else "auto"
    ledger = parse_ledger(ledger_path, engine)
    from fakplan.plan import compile_plan

    floor = loaded.shape.ceiling.engine_floor if loaded.shape.ceiling else None
    verdicts = ledger_verdicts(compile_plan(loaded), ledger, floor)
    plan = record_verdicts(loaded, out_dir, verdicts, templates)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "schema": "fakplan.verify/1",
                    "name": plan.name,
                    "ledger": str(ledger_path),
                    "engine": ledger.engine,
                    "record": str(out_dir / plan.name / "plan.json"),
                    "verdicts": {k: v.model_dump(mode="json") for k, v in verdicts.items()},
                },
                indent=2,
            )
        )
    else:
        console = Console(highlight=False)
        console.print(Text(f"{plan.name}: {ledger_path} ({ledger.engine})", style="bold"))
        table = Table(show_header=True, header_style="bold")
        for column in ("prediction", "verdict", "predicted", "observed", "source"):
            table.add_column(column, overflow="fold")
        claims = {p.id: p for p in plan.predictions}
        for pid, verdict in verdicts.items():
            p = claims[pid]
            predicted = (
                f"{p.low if p.low is not None else '…'}..{p.high if p.high is not None else '…'}"
            )
            observed = (
                "—"
                if verdict.observed is None
                else f"{verdict.observed:,}"
                if isinstance(verdict.observed, int)
                else str(verdict.observed)
            )
            table.add_row(
                Text(pid),
                Text(verdict.status),
                Text(predicted),
                Text(observed),
                Text(verdict.source + (f" — {verdict.note}" if verdict.note else "")),
            )
        console.print(table)
        for line in ledger.notes:
            console.print(Text(f"  note: {line}"))
        console.print(Text(f"verdicts written to {out_dir / plan.name}/"))
    killed = any(v.status == "killed" for v in verdicts.values())
    sys.exit(EXIT_FAILED if killed else EXIT_OK)
