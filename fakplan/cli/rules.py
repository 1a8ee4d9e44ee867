"""``fakplan rules``: alert rules holding each endpoint's live engine metrics to its plan."""

from __future__ import annotations

import sys

import click
import yaml

from fakplan.alerts import prometheus_rule, rule_groups
from fakplan.cli.metrics import plans_of
from fakplan.errors import SelectorError
from fakplan.matchers import parse_matchers, render


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
@click.option(
    "--selector",
    default=None,
    metavar="MATCHERS",
    help="PromQL label matchers that pick the one endpoint's series, e.g. "
    '\'job="vllm-a",instance="10.0.0.5:8000"\' (one shape only; several shapes state '
    "monitoring.selector each) [default: the shape's monitoring.selector, else "
    'job="<shape name>"].',
)
def rules(shapes: tuple[str, ...], format_: str, name: str, selector: str | None) -> None:
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

    Each endpoint's series are picked by labels the operator sets once, never by
    the model alone (two endpoints serving one model would fire on each other's
    figures): --selector for one shape, else the shape's monitoring.selector, else
    job="<shape name>" (name the scrape job after the shape). model_name (the
    served model name) is added to them. Two shapes whose rules would pick the
    same series are refused (exit 2).

    vLLM and SGLang shapes get rules; llama.cpp and custom shapes none. Check them
    with promtool check rules. A shape that does not load is one line on stderr
    (exit 2); the others are printed.
    """
    endpoint = None
    if selector is not None:
        try:
            endpoint = render(parse_matchers(selector))
        except SelectorError as exc:
            raise click.BadParameter(str(exc), param_hint="--selector") from None
    plans, errors = plans_of(shapes, None)
    document = (
        rule_groups(plans, endpoint)
        if format_ == "prometheus"
        else prometheus_rule(plans, name, endpoint)
    )
    click.echo(yaml.safe_dump(document, sort_keys=False, width=100), nl=False)
    for line in errors:
        click.echo(line, err=True)
    sys.exit(2 if errors else 0)
