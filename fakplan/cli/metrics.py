"""``fakplan metrics``: each plan as Prometheus text (for a textfile collector or a Pushgateway)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fakplan.cli import json_option, records_option
from fakplan.metrics import exposition, exposition_json
from fakplan.plan import Plan
from fakplan.record import planned_shapes


def plans_of(shapes: tuple[str, ...], records: Path | None) -> tuple[list[Plan], list[str]]:
    """The plan of every shape that loads, and one line for each that does not."""
    planned = planned_shapes(shapes, records)
    return [p.plan for p in planned if p.plan], [p.error for p in planned if p.error]


@click.command()
@click.argument("shapes", nargs=-1, required=True)
@records_option
@json_option(
    "Print the same figures as JSON (schema fakplan.metrics/1): each family's name, type and "
    "help, and its samples' names, labels and values, read back with prometheus_client's parser."
)
def metrics(shapes: tuple[str, ...], records: Path | None, as_json: bool) -> None:
    """Print each shape's plan as Prometheus metrics (text exposition format 0.0.4).

    \b
      fakplan_plan_bytes{shape,class}        weights, kv_pool, contract, pair, card,
                                             ceiling, unclaimed (absent when unknown)
      fakplan_fit_bytes{shape,scope,kind}    kv and pair: want, budget, margin
      fakplan_kv_tokens, fakplan_sessions_at_window, fakplan_max_num_seqs {shape}
      fakplan_plan_info{shape,engine,engine_version,model,kv_cache_dtype} 1
      fakplan_gate_status{shape,gate,status} 1 for the gate's status, 0 for the others
      fakplan_prediction_<unit>{shape,prediction,bound}  value, low, high
      fakplan_prediction_verdict{shape,prediction,status} the latest verdict (or none)
      fakplan_prediction_verdicts_total{shape,prediction,status}

    For node_exporter's textfile collector: fakplan metrics shapes/ > DIR/fakplan.prom.
    A shape that does not load is one line on stderr (exit 2); the others are printed.
    """
    plans, errors = plans_of(shapes, records)
    text = exposition(plans)
    if as_json:
        click.echo(json.dumps(exposition_json(text), indent=2, ensure_ascii=False))
    else:
        click.echo(text, nl=False)
    for line in errors:
        click.echo(line, err=True)
    sys.exit(2 if errors else 0)
