"""``fakplan report``: one self-contained HTML page of every shape's plan, gates and verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fakplan.cli import json_option, records_option
from fakplan.errors import FakplanError
from fakplan.files import write_atomic
from fakplan.record import planned_shapes
from fakplan.report import Entry, entry, last_change, render_report


def _entries(shapes: tuple[str, ...], records: Path | None) -> list[Entry]:
    """One entry a shape; a shape or record that cannot be read is an entry saying so."""
    return [
        entry(p.path, p.plan, last_change(Path(p.path)))
        if p.plan is not None
        else Entry(path=p.path, error=p.error)
        for p in planned_shapes(shapes, records)
    ]


@click.command()
@click.argument("shapes", nargs=-1, required=True)
@records_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The page to write.",
)
@json_option(
    "Print what was written as JSON (schema fakplan.report/1): the page, and per shape its "
    "name and failing gates, or why it could not be read."
)
def report(shapes: tuple[str, ...], records: Path | None, output: Path, as_json: bool) -> None:
    """Write one static HTML page: per shape, its card as a bar, its gates and verdicts.

    The bar is weights, KV pool, unclaimed and the engine's floor against the card and
    the ceiling, the contract marked; every gate, and every prediction with its verdict
    history (--records); a fleet table sortable by unclaimed bytes and failing gates;
    the last change in words where git has the shape's history.

    Self-contained (inline CSS and SVG, no network). A shape or record that cannot be
    read is one line on stderr and a marked section; the others are still shown (exit 2).
    """
    entries = _entries(shapes, records)
    try:
        write_atomic(output, render_report(entries))
    except OSError as exc:
        raise FakplanError(f"{output}: cannot write the report ({exc.strerror or exc})") from None
    errors = [e for e in entries if e.error]
    for bad in errors:
        click.echo(bad.error, err=True)
    code = 2 if errors else 0
    if as_json:
        document = {
            "schema": "fakplan.report/1",
            "output": output.as_posix(),
            "shapes": [
                {"path": e.path, "name": e.plan.name, "failing": e.failing}
                if e.plan is not None
                else {"path": e.path, "error": e.error}
                for e in entries
            ],
            "exit": code,
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        read = len(entries) - len(errors)
        click.echo(f"{output}: {read} shape{'' if read == 1 else 's'}, {len(errors)} unreadable")
    sys.exit(code)
