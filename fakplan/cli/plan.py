"""``fakplan plan``: the derivation on a terminal, or as JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fakplan.cli import EXIT_FAILED, EXIT_OK
from fakplan.plan import Plan, compile_plan
from fakplan.shape import load_shape
from fakplan.units import human


@click.command()
@click.argument("shape", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as JSON (schema fakplan.plan/1)."
)
def plan(shape: Path, as_json: bool) -> None:
    """Print a shape's derivation: rate, contract, tokens backed, pair, ceiling, gates.

    Nothing is written. Exit 1 when a gate fails (e.g. pool < contract).
    """
    loaded = load_shape(shape)
    compiled = compile_plan(loaded)
    if any(g.status in ("fail", "warn") for g in compiled.gates):
        from fakplan.fit import proven_plan  # the search loads only where a fix is proven

        compiled = proven_plan(loaded, compiled)
    if as_json:
        click.echo(compiled.to_json(), nl=False)
    else:
        print_plan(compiled)
    sys.exit(EXIT_FAILED if compiled.failed else EXIT_OK)


_MARK = {
    "pass": "[green]ok[/]",
    "fail": "[red]FAILS[/]",
    "warn": "[yellow]warn[/]",
    "unknown": "[yellow]unknown[/]",
}


def print_plan(p: Plan) -> None:
    from rich.console import Console  # rich loads only for the terminal, never for --json
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=False)
    console.print(
        Text(f"{p.name}  engine {p.engine}  model {p.model}  KV {p.kv_cache_dtype}", style="bold")
    )
    resolution = p.model_resolution()
    if resolution:
        console.print(Text(f"model: {resolution}"))
    for notice in p.notices:
        console.print(Text(f"note: {notice}", style="yellow"))
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("derivation", overflow="fold")
    rows: list[tuple[str, str, str]] = [
        ("rate", f"{p.rate_bytes_per_token:,} B/token", p.derivations["rate_bytes_per_token"]),
        *(
            [("engine rules", "", p.derivations["engine_rules"])]
            if "engine_rules" in p.derivations
            else []
        ),
        ("contract", human(p.contract_bytes, "MiB", 2), p.derivations["contract_bytes"]),
        ("KV pool", human(p.kv_budget_bytes), p.derivations.get("kv_budget_bytes", "budget.kv")),
        ("tokens backed", f"{p.tokens_backed:,}", p.derivations["tokens_backed"]),
        (
            "sessions at window",
            f"{p.sessions_at_window:.2f}",
            p.derivations["sessions_at_window"],
        ),
        ("pair", human(p.pair_bytes), p.derivations["pair_bytes"]),
        ("card", human(p.card_total_bytes), p.derivations["card_total_bytes"]),
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
    if p.kv_unclaimed_bytes is not None:
        rows.append(
            ("unclaimed KV", human(p.kv_unclaimed_bytes), p.derivations["kv_unclaimed_bytes"])
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    for gate in p.gates:
        console.print(f"{_MARK[gate.status]} ", end="")
        console.print(Text(f"{gate.title} ({gate.summary})"))
        if gate.fix:
            console.print(Text(f"    fix: {gate.fix}"))
    console.print("predictions:")
    for pred in p.predictions:
        console.print(Text(f"  {pred.id}: {pred.claim}  [closed by {pred.closed_by}]"))
    for reason in p.rates.not_predicted if p.rates else ():
        console.print(Text(f"  rates not predicted: {reason}"))
