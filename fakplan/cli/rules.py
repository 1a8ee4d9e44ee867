"""``fakplan rules``: alert rules holding each endpoint's live engine metrics to its plan."""

from __future__ import annotations

import sys

import click
import yaml

from fakplan.alerts import prometheus_rule, rule_groups
from fakplan.cli.metrics import plans_of


@click.command()
@click.argument("shapes", nargs=-1, required=True)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["prometheus", "operator"]),
    default="prometheus",
    show_default=True,
    help="prometheus: a rules file (rule_files:); operator: a PrometheusRule "
    "(monitoring.coreos.com/v1) for the Prometheus operator.",
)
@click.option(
    "--name",
    default="fakplan",
    show_default=True,
    help="The PrometheusRule's metadata.name (--format operator).",
)
def rules(shapes: tuple[str, ...], format_: str, name: str) -> None:
    """Print Prometheus alert rules comparing each endpoint's engine metrics with its plan.

    \b
      FakplanKvUsageAbovePlan          KV in use above what the running sequences
                                       need at most (max_model_len each)
      FakplanRequestsWaitingBelowSlots requests wait while fewer than max_num_seqs
                                       run: the pool is smaller than planned
      FakplanPreemptionDespiteContract a preemption (SGLang: a retraction) on a
                                       shape whose pool ≥ contract gate holds
      FakplanKvTokensDiffer            the engine's KV pool (vLLM cache_config_info
                                       blocks; SGLang used / usage) outside kv-tokens

    Series are selected by model_name (the served model name). vLLM and SGLang shapes
    get rules; llama.cpp and custom shapes none. Check them with promtool check rules.
    A shape that does not load is one line on stderr (exit 2); the others are printed.
    """
    plans, errors = plans_of(shapes, None)
    document = rule_groups(plans) if format_ == "prometheus" else prometheus_rule(plans, name)
    click.echo(yaml.safe_dump(document, sort_keys=False, width=100), nl=False)
    for line in errors:
        click.echo(line, err=True)
    sys.exit(2 if errors else 0)
