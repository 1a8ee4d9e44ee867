"""``fakplan gate``: every gate over every shape, as TAP, JUnit XML or JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fakplan.cli import gates_option
from fakplan.engines import parse_ledger
from fakplan.errors import FakplanError
from fakplan.files import write_atomic
from fakplan.fit import with_proven_fixes
from fakplan.gates.operator import gate_paths
from fakplan.gates.report import FORMATS, BadInput, GateRun
from fakplan.shape.patch import patched_text
from fakplan.shape.source import read_shape_file


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
@click.option(
    "--fix-apply",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Write the Nth proven fix of a failing shape (where nothing fails, of a warning) "
    "into its file (comments and layout kept), then gate it again. One shape file only.",
)
def gate(
    shapes: tuple[str, ...],
    format_: str,
    gates_dir: Path | None,
    ledger: Path | None,
    fix_apply: int | None,
) -> None:
    """Run every gate over shapes (files or folders of *.yaml): one line per gate per shape.

    \b
    TAP version 13 by default:
      ok 3 - frank-archon: pool ≥ contract (6,912 MiB ≥ 6,064 MiB)
      not ok 5 - frank-archon-fp8: pool ≥ contract (3,543 MiB < 5,063 MiB)
    followed, for a failure, by a YAML block with the numbers and the fixes:
    each a patch of the shape's fields that was gated before it is printed (with
    it, every gate passes), cheapest first (nothing given up, then sessions,
    window, KV precision, weight precision, cards). A
    warning is "ok ... # warning: ..."; a gate that cannot be evaluated is
    "ok ... # SKIP unknown: ...".

    A shape file that cannot be read is reported in the output and on stderr;
    the other shapes are still gated. Exit 0 every gate holds, 1 a gate
    failed, 2 some input could not be gated.
    """
    if ledger is not None:
        parse_ledger(ledger)  # an unreadable log is bad input for the whole run (exit 2)
    run = gate_paths(shapes, gates_dir, ledger, with_proven_fixes)
    if fix_apply is not None:
        _apply(shapes, run, fix_apply)
        run = gate_paths(shapes, gates_dir, ledger, with_proven_fixes)
    click.echo(FORMATS[format_](run), nl=False)
    for error in run.errors:
        click.echo(error.message, err=True)
    sys.exit(run.exit_status)


def _apply(shapes: tuple[str, ...], run: GateRun, n: int) -> None:
    """Write the ``n``th proven fix into the one shape file gated."""
    if len(shapes) != 1 or len(run.entries) != 1 or not Path(shapes[0]).is_file():
        raise click.UsageError("--fix-apply takes one shape file")
    (entry,) = run.entries
    if isinstance(entry, BadInput):
        raise FakplanError(entry.message)
    failing = [g for g in entry.gates if g.status == "fail"] or [
        g for g in entry.gates if g.status == "warn" and g.fixes
    ]  # a warning's fix once nothing fails
    if not failing:
        raise FakplanError(f"{entry.path}: every gate passes; there is no fix to apply")
    fixes = failing[0].fixes
    if not 1 <= n <= len(fixes):
        have = f"{len(fixes)} proven fix(es)" if fixes else "no proven fix"
        raise FakplanError(f"{entry.path}: --fix-apply {n}: the shape has {have}")
    fix = fixes[n - 1]
    path = Path(shapes[0])
    text = read_shape_file(path)
    write_atomic(path, patched_text(text, [(p.path, p.value) for p in fix.patch], str(path)))
    click.echo(f"fakplan gate: applied fix {n} to {path}: {fix.summary}", err=True)
