"""``fakplan diff``: a shape change as a reviewed narrative."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from fakplan.cli import EXIT_FAILED, EXIT_OK
from fakplan.diff import ShapeDiff, diff_plans, narrative
from fakplan.errors import FakplanError
from fakplan.plan import compile_plan
from fakplan.shape import LoadedShape, load_shape, load_shape_text


def _git(*args: str, cwd: Path) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise FakplanError("fakplan diff --rev needs git on PATH") from None
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["git failed"])[-1]
        raise FakplanError(f"git {' '.join(args)}: {message}")
    return proc.stdout


def _at_revision(rev: str, path: Path) -> LoadedShape | None:
    """The shape as it was at ``rev``, or None where it did not exist yet."""
    folder = path.resolve().parent
    top = Path(_git("rev-parse", "--show-toplevel", cwd=folder).strip())
    relative = path.resolve().relative_to(top).as_posix()
    listed = _git("ls-tree", "--name-only", rev, "--", relative, cwd=top).strip()
    if not listed:
        return None
    return load_shape_text(_git("show", f"{rev}:{relative}", cwd=top), path)


def _changed_shapes(rev: str) -> list[Path]:
    top = Path(_git("rev-parse", "--show-toplevel", cwd=Path.cwd()).strip())
    names = _git("diff", "--name-only", rev, "--", "*.yaml", "*.yml", cwd=top).splitlines()
    names += _git(
        "ls-files", "--others", "--exclude-standard", "--", "*.yaml", "*.yml", cwd=top
    ).splitlines()
    return [top / name for name in dict.fromkeys(names) if (top / name).exists()]


@click.command()
@click.argument("shapes", nargs=-1)
@click.option("--rev", default=None, help="Compare each SHAPE with itself at this git revision.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema fakplan.diff/1).")
def diff(shapes: tuple[str, ...], rev: str | None, as_json: bool) -> None:
    """What a shape change moves and what it costs, in words a reviewer reads.

    \b
      fakplan diff OLD.yaml NEW.yaml           two shapes
      fakplan diff --rev HEAD~1 shapes/x.yaml  a shape against its earlier revision
      fakplan diff --rev main                  every shape changed since main

    Declared values that moved, the derived figures that moved with them (rate,
    contract, tokens backed, sessions, pair, unclaimed), gates that flipped and
    the predictions the change makes. Exit 1 when the new shape fails a gate.
    """
    pairs: list[tuple[LoadedShape, LoadedShape]] = []
    if rev is None:
        if len(shapes) != 2:
            raise click.UsageError("give OLD and NEW shapes, or --rev REV [SHAPE...]")
        pairs.append((load_shape(shapes[0]), load_shape(shapes[1])))
    else:
        paths = [Path(s) for s in shapes] or _changed_shapes(rev)
        for path in paths:
            new = load_shape(path)
            old = _at_revision(rev, path)
            if old is None:
                click.echo(f"{path}: new since {rev}; nothing to compare", err=True)
                continue
            pairs.append((old, new))
    diffs: list[ShapeDiff] = [
        diff_plans(old.shape, compile_plan(old), new.shape, compile_plan(new)) for old, new in pairs
    ]
    if as_json:
        click.echo(
            json.dumps(
                {"schema": "fakplan.diff/1", "shapes": [d.to_dict() for d in diffs]}, indent=2
            )
        )
    else:
        click.echo("\n".join(narrative(d) for d in diffs), nl=False)
    failed = any(d.new_plan.failed for d in diffs)
    sys.exit(EXIT_FAILED if failed else EXIT_OK)
