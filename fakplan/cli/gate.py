"""``fakplan gate``: every gate over every shape, as TAP, JUnit XML or JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fakplan.cli import gates_option
from fakplan.gates.operator import gate_paths
from fakplan.gates.report import FORMATS
from fakplan.ledger import parse_ledger


@click.command()
@click.argument("shapes", nargs=-1, required=True)
@click.option(
    "--format",
    "format_",
    type=click.Choice(sorted(FORMATS)),
    default="tap",
    show_default=True,
    help="tap for people and prove, junit for CI test views, json (fakplan.gates/1) for tools.",
)
@gates_option
@click.option(
    "--ledger",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A boot log: pair ≤ ceiling uses the ceiling it measured instead of the shape's.",
)
def gate(
    shapes: tuple[str, ...], format_: str, gates_dir: Path | None, ledger: Path | None
) -> None:
    """Run every gate over shapes (files or folders of *.yaml): one line per gate per shape.

    \b
    TAP version 13 by default:
      ok 3 - frank-archon: pool ≥ contract (6,912 MiB ≥ 6,064 MiB)
      not ok 5 - frank-archon-fp8: pool ≥ contract (3,543 MiB < 5,063 MiB)
    followed, for a failure, by a YAML block with the numbers and the fix. A
    warning is "ok ... # warning: ..."; a gate that cannot be evaluated is
    "ok ... # SKIP unknown: ...".

    A shape file that cannot be read is reported in the output and on stderr;
    the other shapes are still gated. Exit 0 every gate holds, 1 a gate
    failed, 2 some input could not be gated.
    """
    if ledger is not None:
        parse_ledger(ledger)  # an unreadable log is bad input for the whole run (exit 2)
    run = gate_paths(shapes, gates_dir, ledger)
    click.echo(FORMATS[format_](run), nl=False)
    for error in run.errors:
        click.echo(error.message, err=True)
    sys.exit(run.exit_status)
