"""``fakplan cards``: the card table a shape names its card from (card.sku)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.cards import CARDS
from fakplan.cuda_totals import cuda_total

_DTYPES = ("bf16", "fp8", "int8", "fp4")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema fakplan.cards/1).")
def cards(as_json: bool) -> None:
    """The cards fakplan knows by card.sku: CUDA total, bandwidth, peaks, SMs, capability, link.

    CC is the CUDA compute capability. Memory bandwidth bounds decode, the dense tensor peak per dtype bounds prefill
    (int8 in TOPS); the link (NVLink, PCIe) joins tensor ranks. Each row names the
    vendor documents it comes from (--json).

    \b
    Dense peaks: where a vendor prints only the with-sparsity figure, half of it.
    A figure the vendor does not publish is shown as "—", never filled in. A CPU host
    or a card not listed states card.bandwidth instead (e.g. "21 GB/s", measured).
    """
    if as_json:
        rows = [
            {
                "sku": c.sku,
                "name": c.name,
                "memory": c.memory,
                "memory_type": c.memory_type,
                "bandwidth_bytes_per_s": c.bandwidth,
                "dense_tflops": dict(c.tflops),
                "dense_from_sparse": c.dense_from_sparse,
                "sms": c.sms,
                "capability": c.capability,
                "link": c.link,
                "nvml_names": list(c.nvml_names),
                "sources": list(c.sources),
                "checked": c.checked,
                "cuda_total": _cuda_json(c.sku),
            }
            for c in CARDS
        ]
        click.echo(json.dumps({"schema": "fakplan.cards/1", "cards": rows}, indent=2))
        return
    table = Table(show_header=True, header_style="bold")
    for column in ("sku", "memory", "CUDA", "GB/s", *_DTYPES, "SMs", "CC", "link"):
        table.add_column(
            column, justify="left" if column in ("sku", "link") else "right", no_wrap=True
        )
    for c in CARDS:
        peaks = [f"{c.tflops[d]:,g}" if d in c.tflops else "—" for d in _DTYPES]
        table.add_row(
            Text(c.sku),
            Text(c.memory),
            _cuda_text(c.sku),
            f"{c.bandwidth / 1e9:,.0f}",
            *peaks,
            str(c.sms) if c.sms else "—",
            c.capability,
            c.link,
        )
    console = Console(highlight=False)
    Console(highlight=False, width=max(console.width, 112)).print(table)
    click.echo(
        "dense TFLOP/s (int8: TOPS); CC: CUDA compute capability; CUDA: the total CUDA "
        "reports in GiB, as public logs print it, or their span (* one under a setting of its "
        "own, e.g. WSL2), which "
        "card.total takes where a shape leaves it out; sources and how each row was "
        "checked: --json"
    )


def _cuda_text(sku: str) -> str:
    """The figure its prints read, or their span; * where one was printed under a setting."""
    found = cuda_total(sku)
    if found is None:
        return "—"
    figures = sorted({p.printed.removesuffix(" GiB") for p in found.prints}, key=float)
    mark = "*" if any(p.setting for p in found.prints) else ""
    return (figures[0] if len(figures) == 1 else f"{figures[0]}–{figures[-1]}") + mark


def _cuda_json(sku: str) -> dict[str, object] | None:
    found = cuda_total(sku)
    if found is None:
        return None
    low, high = found.interval
    return {
        "range_bytes": [low, high],
        "card_total": found.plain,
        "prints": [
            {"printed": p.printed, "line": p.line, "source": p.source, "setting": p.setting or None}
            for p in found.prints
        ],
    }
