"""The ``fakplan`` command: argument handling and output only.

Exit status, the one place it is decided: 0 ok, 1 a gate or prediction failed,
2 bad input (one line on stderr naming file, line and field; no traceback).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.errors import FakplanError
from fakplan.plan import Plan, compile_plan
from fakplan.record import carry_verdicts, read_record, record_path, write_atomic
from fakplan.render import render_plan
from fakplan.shape import LoadedShape, Shape, load_shape
from fakplan.units import human

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class _Group(click.Group):
    """Maps fakplan's errors to exit 2 with one line, in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FakplanError as exc:
            click.echo(str(exc), err=True)
            ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fakplan")
def main() -> None:
    """fakplan: a capacity compiler for LLM inference endpoints.

    Write an endpoint's shape in YAML (model, card, the weights/KV pair, slots,
    window, KV dtype, engine); fakplan derives the KV arithmetic, refuses
    shapes that cannot work, renders the launch files and records predictions
    that the boot ledger and live probes later hold or kill.

    \b
    Start with:
      fakplan plan shapes/example.yaml         the derivation, gates, predictions
      fakplan compile shapes/ -o out           plan.json + env file per shape
      fakplan schema > shape.schema.json       for editor completion

    Exit status: 0 ok, 1 a gate or prediction failed, 2 bad input.
    """


def _shape_files(paths: tuple[str, ...]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                raise FakplanError(f"{path}: no *.yaml shapes in this folder")
            yield from found
        else:
            yield path


@main.command()
@click.argument("shape", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as JSON (schema fakplan.plan/1)."
)
def plan(shape: Path, as_json: bool) -> None:
    """Print a shape's derivation: rate, contract, tokens backed, pair, ceiling, gates.

    Nothing is written. Exit 1 when a gate fails (e.g. pool < contract).
    """
    compiled = compile_plan(load_shape(shape))
    if as_json:
        click.echo(compiled.to_json(), nl=False)
    else:
        _print_plan(compiled)
    sys.exit(EXIT_FAILED if compiled.failed else EXIT_OK)


@main.command(name="compile")
@click.argument("shapes", nargs=-1, required=True)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Folder that receives <name>/plan.json and the rendered files.",
)
@click.option(
    "--templates",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Your own templates folder (same layout as the built-in templates/).",
)
def compile_(shapes: tuple[str, ...], out_dir: Path, templates: Path | None) -> None:
    """Compile shapes (files or folders of *.yaml) into DIR/<name>/.

    Every shape is loaded and rendered before anything is written, so a bad
    shape leaves no half-written output. Re-running is byte-identical; verdicts
    already recorded are kept. Exit 1 when a gate fails (files are still
    written, with the failure in their header).
    """
    loaded = [load_shape(p) for p in _shape_files(shapes)]
    names: dict[str, Path] = {}
    for item in loaded:
        if item.shape.name in names:
            raise FakplanError(
                f"{item.path}: name {item.shape.name!r} is also the name of {names[item.shape.name]}"
            )
        names[item.shape.name] = item.path
    staged: list[tuple[LoadedShape, Plan, list[Any]]] = []
    for item in loaded:
        compiled = compile_plan(item)
        target = record_path(out_dir, compiled.name)
        previous = read_record(target) if target.exists() else None
        compiled = carry_verdicts(compiled, previous)
        staged.append((item, compiled, render_plan(item, compiled, templates)))
    failed = False
    for _item, compiled, files in staged:
        folder = out_dir / compiled.name
        for rendered in files:
            write_atomic(folder / rendered.name, rendered.text, executable=rendered.executable)
        write_atomic(folder / "plan.json", compiled.to_json())
        status = (
            "FAILS " + ", ".join(g.title for g in compiled.gates if g.status == "fail")
            if compiled.failed
            else "ok"
        )
        click.echo(f"{folder}/: {', '.join(['plan.json', *(f.name for f in files)])} ({status})")
        failed = failed or compiled.failed
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


@main.command()
def schema() -> None:
    """Print the JSON Schema of a shape file (point your editor's YAML plugin at it)."""
    document = Shape.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "fakplan shape"
    click.echo(json.dumps(document, indent=2))


_MARK = {
    "pass": "[green]ok[/]",
    "fail": "[red]FAILS[/]",
    "warn": "[yellow]warn[/]",
    "unknown": "[yellow]unknown[/]",
}


def _print_plan(p: Plan) -> None:
    console = Console(highlight=False, soft_wrap=False)
    console.print(
        f"[bold]{p.name}[/]  engine {p.engine}  model {p.model}  KV {p.kv_cache_dtype}", markup=True
    )
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("derivation", overflow="fold")
    sessions = f"{p.sessions_at_window:.2f}"
    rows: list[tuple[str, str, str]] = [
        ("rate", f"{p.rate_bytes_per_token:,} B/token", p.derivations["rate_bytes_per_token"]),
        ("contract", human(p.contract_bytes, "MiB", 2), p.derivations["contract_bytes"]),
        ("KV pool", human(p.kv_budget_bytes), "budget.kv"),
        ("tokens backed", f"{p.tokens_backed:,}", p.derivations["tokens_backed"]),
        ("sessions at window", sessions, p.derivations["sessions_at_window"]),
        ("pair", human(p.pair_bytes), p.derivations["pair_bytes"]),
        (
            "ceiling",
            "unknown" if p.ceiling_bytes is None else human(p.ceiling_bytes),
            p.derivations["ceiling_bytes"],
        ),
        (
            "unclaimed",
            "unknown" if p.unclaimed_bytes is None else human(p.unclaimed_bytes),
            p.derivations["unclaimed_bytes"],
        ),
    ]
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    for gate in p.gates:
        console.print(f"{_MARK[gate.status]} {gate.title} ({gate.summary})", markup=True)
        if gate.fix:
            console.print(f"    fix: {gate.fix}", markup=False)
    console.print("predictions:", markup=False)
    for pred in p.predictions:
        console.print(f"  {pred.id}: {pred.claim}  [closed by {pred.closed_by}]", markup=False)
