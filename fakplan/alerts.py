"""Prometheus alert rules that hold an endpoint's live engine metrics to its plan.

Each rule compares what the engine exports (its metric names are its own, in its
``cluster`` module: ``Engine.alert_rules``) with a figure of the plan: the KV the running
sequences should need at most, the slots the pool should serve, no preemption where the
contract holds, and the engine's own KV token count against the ``kv-tokens``
prediction. Series are selected by the endpoint's own labels (``monitoring.selector``,
or ``--selector``; by default the scrape job named after the shape), never by the model
alone: two endpoints serving one model would fire on each other's figures. The engine's
``model_name`` label (the served model name) is added to them (``AlertFacts.selector``);
an info metric without one is selected by the endpoint's labels alone
(``AlertFacts.endpoint``). An engine whose server exports no such figures has no rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fakplan.engines import ENGINES, AlertFacts, AlertRule, quoted, range_regex
from fakplan.errors import SelectorError
from fakplan.plan import Plan
from fakplan.predict import KV_TOKENS

__all__ = ["FOR", "facts", "prometheus_rule", "quoted", "range_regex", "rule_groups"]

FOR = "5m"


def _rule(rule: AlertRule, plan: Plan) -> dict[str, Any]:
    return {
        "alert": rule.alert,
        "expr": rule.expr,
        "for": FOR,
        "labels": {"severity": "warning", "shape": plan.name},
        "annotations": {"summary": rule.summary, "description": rule.description},
    }


def _selector(plan: Plan, endpoint: str | None) -> tuple[str, str]:
    """(the selector of the engine's model series, the endpoint's own matchers)."""
    own = endpoint or plan.metrics_selector or f"job={quoted(plan.name)}"
    return f"{{{own},model_name={quoted(_served(plan))}}}", own


def _served(plan: Plan) -> str:
    """The name the engine serves (``launch.served_name``; a record written before it was
    kept: the model)."""
    return plan.launch.served_name or plan.model


def _tokens_range(plan: Plan) -> tuple[int, int] | None:
    tokens = next((p for p in plan.predictions if p.id == KV_TOKENS), None)
    if tokens is None or tokens.low is None or tokens.high is None:
        return None
    return int(tokens.low), int(tokens.high)


def _block_range(plan: Plan) -> tuple[int, int] | None:
    """The block counts the kv-tokens prediction allows, where tokens = blocks x page."""
    tokens = _tokens_range(plan)
    if tokens is None:
        return None
    if plan.tokens_backed % plan.page_tokens or plan.page_bytes == 0:
        return None
    if plan.kv_budget_bytes // plan.page_bytes * plan.page_tokens != plan.tokens_backed:
        return None  # a hybrid's groups: its printed tokens are not blocks x page
    return -(-tokens[0] // plan.page_tokens), tokens[1] // plan.page_tokens


def facts(plan: Plan, endpoint: str | None = None) -> AlertFacts:
    """The plan's figures an engine's rules compare its live metrics with."""
    selector, own = _selector(plan, endpoint)
    pages = -(-plan.max_model_len // plan.page_tokens)
    return AlertFacts(
        name=plan.name,
        selector=selector,
        endpoint=own,
        window_tokens=pages * plan.page_tokens,
        tokens_backed=plan.tokens_backed,
        max_num_seqs=plan.max_num_seqs,
        page_tokens=plan.page_tokens,
        contract_holds=any(g.id == "pool-contract" and g.status == "pass" for g in plan.gates),
        tokens_range=_tokens_range(plan),
        blocks_range=_block_range(plan),
    )


def _rules(plan: Plan, endpoint: str | None) -> list[dict[str, Any]]:
    engine = ENGINES.get(plan.engine)
    if engine is None:
        return []
    return [_rule(rule, plan) for rule in engine.alert_rules(facts(plan, endpoint))]


def rule_groups(plans: Sequence[Plan], selector: str | None = None) -> dict[str, Any]:
    """A Prometheus rules file: one group per shape whose engine exports the figures.

    ``selector`` (rendered matchers) replaces the one plan's own; two plans whose series
    the same matchers pick are refused: their rules would fire on each other's figures."""
    if selector is not None and len(plans) > 1:
        raise SelectorError("--selector names one endpoint: give one shape, or state each "
                          "shape's monitoring.selector")  # fmt: skip
    ruled = [(p, _rules(p, selector)) for p in plans]
    picked: dict[tuple[str, str], str] = {}
    for p, rules in ruled:
        if not rules:
            continue
        key = (_selector(p, selector)[0], p.engine)
        if key in picked:
            raise SelectorError(
                f"shapes {picked[key]} and {p.name} select the same series ({key[0]}): give "
                "each a monitoring.selector naming its own endpoint (job, instance, ...)"
            )
        picked[key] = p.name
    groups = [{"name": f"fakplan-{p.name}", "rules": rules} for p, rules in ruled if rules]
    return {"groups": groups}


def prometheus_rule(
    plans: Sequence[Plan], name: str, selector: str | None = None
) -> dict[str, Any]:
    """The same groups as the Prometheus operator's PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fakplan"}},
        "spec": rule_groups(plans, selector),
    }
