"""``fakplan diff``: a shape change as a reviewed narrative."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fakplan.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, gates_option, out_option
from fakplan.diff import ShapeDiff, diff_plans, narrative, review, shape_changes
from fakplan.gates.operator import GatesCache, OperatorGate
from fakplan.plan import compile_plan
from fakplan.shape import load_shape


@click.command()
@click.argument("shapes", nargs=-1)
@click.option(
    "--rev",
    default=None,
    help="Compare with this git revision: every shape changed, added, deleted or renamed "
    "since it (committed or not, untracked included), or only the SHAPE files and folders named.",
)
@out_option("Compiled records: a deleted shape's verdicts are read from DIR/<name>/plan.json.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (schema fakplan.diff/1): per shape its status "
    "(added, deleted, renamed, changed), old_path and new_path, and the rows that moved.",
)
@gates_option
def diff(
    shapes: tuple[str, ...],
    rev: str | None,
    out_dir: Path,
    as_json: bool,
    gates_dir: Path | None,
) -> None:
    """What a shape change moves and what it costs, in words a reviewer reads.

    \b
      fakplan diff OLD.yaml NEW.yaml           two shapes
      fakplan diff --rev HEAD~1 shapes/x.yaml  a shape against its earlier revision
      fakplan diff --rev main shapes/          every shape in shapes/ touched since main
      fakplan diff --rev main                  every shape touched since main

    A changed shape: declared values that moved, the derived figures that moved
    with them (rate, contract, tokens backed, sessions, pair, unclaimed), gates
    that flipped and the predictions the change makes. An added shape is gated
    in full: every figure, gate and prediction. A deleted shape lists the
    predictions it retires with the verdicts its record (-o DIR) holds. A
    shape that moved (same name: or same bytes at another path) is diffed as a
    change. A shape that cannot be read at REV anymore is reported beside the
    shape as it is now. With no SHAPE, a YAML file counts as a shape when it is
    a mapping with an engine: key on either side (others are named on stderr).

    Every gate judges both sides: the built-in ones and the operator's own
    (gates/ beside the shapes' folder, or --gates DIR), as fakplan gate runs them.
    A gate that flipped is printed with its fix, and every gate the new side
    fails is named, flipped or not (--json: "gates" and "failing", each with its
    status, summary, fix and numbers).

    Exit 0 every new or changed shape passes its gates, 1 one fails a gate,
    2 bad input (a shape as it is now cannot be read; a revision git does not know).
    """
    diffs: list[ShapeDiff] = []
    cache = GatesCache()

    def gates_for(shape: Path) -> tuple[OperatorGate, ...]:
        return cache.for_shape(shape, gates_dir)

    if rev is None:
        if len(shapes) != 2:
            raise click.UsageError("give OLD and NEW shapes, or --rev REV [SHAPE...]")
        old, new = load_shape(shapes[0]), load_shape(shapes[1])  # either unreadable: exit 2
        diffs.append(
            diff_plans(
                old.shape,
                compile_plan(old),
                new.shape,
                compile_plan(new),
                gates_for(Path(shapes[1])),
                new_loaded=new,
            )
        )
    else:
        cwd = Path.cwd()
        git, changes, skipped = shape_changes(rev, shapes, cwd)
        for path in skipped:
            click.echo(
                f"fakplan diff: skipped {path} (not a YAML mapping with an engine: key)", err=True
            )
        diffs = [review(change, git, cwd, out_dir, gates_for) for change in changes]
    if as_json:
        click.echo(
            json.dumps(
                {"schema": "fakplan.diff/1", "shapes": [d.to_dict() for d in diffs]},
                indent=2,
                allow_nan=False,
            )
        )
    else:
        click.echo("\n".join(text for d in diffs if (text := narrative(d))), nl=False)
    for d in diffs:
        if d.new_error:
            click.echo(d.new_error, err=True)
    if any(d.new_error for d in diffs):
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(EXIT_FAILED if any(d.failed for d in diffs) else EXIT_OK)
