"""``fakplan budget``: the device budget and where it came from."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.budget import probe_budget
from fakplan.units import human


@click.command()
@click.option(
    "--device",
    type=click.Choice(["gpu", "cpu"]),
    default="gpu",
    show_default=True,
    help="cpu: host RAM, as card.total: auto reads it for a card.device: cpu shape.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema fakplan.budget/1).")
def budget(device: str, as_json: bool) -> None:
    """What this machine's cards hold (NVML), or host RAM without a GPU.

    FAKPLAN_DEVICE_BUDGET_BYTES (bytes, e.g. 85899345920, or a size such as "80 GiB")
    overrides the probe: a container limit or a shared card fakplan cannot see. A budget is a snapshot to plan card.total
    against (card.total: auto reads it); the ceiling a pair must fit is the
    engine's, from its boot ledger.
    """
    result = probe_budget(gpu=device == "gpu")
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
        return
    console = Console(highlight=False)
    if result.devices:
        table = Table(show_header=True, header_style="bold")
        for column in ("gpu", "name", "sku", "CC", "total", "free", "used"):
            table.add_column(column, justify="right" if column not in ("name", "sku") else "left")
        for d in result.devices:
            table.add_row(
                str(d.index),
                Text(d.name),
                Text(d.sku or "—"),
                d.capability or "—",
                human(d.total_bytes, "MiB"),
                human(d.free_bytes, "MiB"),
                human(d.used_bytes, "MiB"),
            )
        console.print(table)
    console.print(Text(result.sentence))
    skus = sorted({d.sku for d in result.devices if d.sku})
    if skus:
        console.print(Text(f"card.sku: {', '.join(skus)} (the card table: fakplan cards)"))
    capabilities = sorted({d.capability for d in result.devices if d.capability})
    if capabilities and not skus:
        console.print(Text(f"card.capability: {', '.join(capabilities)} (CUDA, as NVML states it)"))
