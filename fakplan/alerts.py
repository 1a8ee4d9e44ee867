"""Prometheus alert rules that hold an endpoint's live engine metrics to its plan.

Each rule compares what the engine exports (vLLM v0.32.0 vllm/v1/metrics/loggers.py,
SGLang v0.5.2 srt/metrics/collector.py) with a figure of the plan: the KV the running
sequences should need at most, the slots the pool should serve, no preemption where the
contract holds, and the engine's own KV token count against the ``kv-tokens``
prediction. Series are selected by the endpoint's own labels (``monitoring.selector``,
or ``--selector``; by default the scrape job named after the shape), never by the model
alone: two endpoints serving one model would fire on each other's figures. The engine's
``model_name`` label (the served model name) is added to them; vLLM's
``cache_config_info`` has none, so it is selected by the endpoint's labels and joined on
``instance``.
A llama.cpp or custom shape has no rules: their servers export no such figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from fakplan.errors import SelectorError
from fakplan.plan import Plan
from fakplan.predict import KV_TOKENS

FOR = "5m"


def quoted(value: str) -> str:
    """A PromQL string literal (Go escapes: a quote or backslash in a name stays inert)."""
    return json.dumps(value, ensure_ascii=False)


def range_regex(low: int, high: int) -> str:
    """An RE2 alternation matching exactly the integers low..high (label values are text)."""
    if low > high:
        return "(?!)"
    parts: list[str] = []
    start = low
    while start <= high:
        # the widest block start..start+10^k-1 that is aligned and stays within high
        step = 1
        while start % (step * 10) == 0 and start + step * 10 - 1 <= high:
            step *= 10
        end = start + step - 1
        digits = len(str(step)) - 1
        head = str(start)[: len(str(start)) - digits] if digits else str(start)
        parts.append(head + r"[0-9]" * digits)
        start = end + 1
    return "|".join(parts)


def _rule(alert: str, expr: str, plan: Plan, summary: str, why: str) -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": FOR,
        "labels": {"severity": "warning", "shape": plan.name},
        "annotations": {"summary": summary, "description": why},
    }


def _selector(plan: Plan, endpoint: str | None) -> tuple[str, str]:
    """(the selector of the engine's model series, the endpoint's own matchers)."""
    own = endpoint or plan.metrics_selector or f"job={quoted(plan.name)}"
    return f"{{{own},model_name={quoted(_served(plan))}}}", own


def _served(plan: Plan) -> str:
    """The name the engine serves (``launch.served_name``; a record written before it was
    kept: the model)."""
    return plan.launch.served_name or plan.model


def _per_seq_tokens(plan: Plan) -> int:
    pages = -(-plan.max_model_len // plan.page_tokens)
    return pages * plan.page_tokens


def _vllm_rules(plan: Plan, endpoint: str | None = None) -> list[dict[str, Any]]:
    sel, own = _selector(plan, endpoint)
    window = _per_seq_tokens(plan)
    ratio = window / plan.tokens_backed
    rules = [
        _rule(
            "FakplanKvUsageAbovePlan",
            f"vllm:kv_cache_usage_perc{sel} > vllm:num_requests_running{sel} * {ratio:.9g}",
            plan,
            f"{plan.name}: KV usage above what its running sequences should need",
            f"each running sequence needs at most {window:,} tokens of the {plan.tokens_backed:,} "
            "the plan backs: more means a sequence costs more than the plan's rate",
        ),
        _rule(
            "FakplanRequestsWaitingBelowSlots",
            f"vllm:num_requests_waiting{sel} > 0 and vllm:num_requests_running{sel} < "
            f"{plan.max_num_seqs}",
            plan,
            f"{plan.name}: requests wait while slots are free",
            f"fewer than max_num_seqs {plan.max_num_seqs} run and requests wait: the pool is "
            "smaller than planned",
        ),
    ]
    if _contract_holds(plan):
        rules.append(
            _rule(
                "FakplanPreemptionDespiteContract",
                f"increase(vllm:num_preemptions_total{sel}[10m]) > 0",
                plan,
                f"{plan.name}: a preemption on a shape whose contract holds",
                "the pool covers every slot at the full window, so no sequence should be preempted",
            )
        )
    blocks = _block_range(plan)
    if blocks is not None:
        low, high = blocks
        rules.append(
            _rule(
                "FakplanKvTokensDiffer",
                f'vllm:cache_config_info{{{own},num_gpu_blocks!~"{range_regex(low, high)}"}} '
                f"and on(instance) vllm:num_requests_running{sel}",
                plan,
                f"{plan.name}: the engine's KV pool is not the predicted one",
                f"kv-tokens predicts {low:,}..{high:,} blocks of {plan.page_tokens} tokens",
            )
        )
    return rules


def _block_range(plan: Plan) -> tuple[int, int] | None:
    """The block counts the kv-tokens prediction allows, where tokens = blocks x page."""
    tokens = next((p for p in plan.predictions if p.id == KV_TOKENS), None)
    if tokens is None or tokens.low is None or tokens.high is None:
        return None
    if plan.tokens_backed % plan.page_tokens or plan.page_bytes == 0:
        return None
    if plan.kv_budget_bytes // plan.page_bytes * plan.page_tokens != plan.tokens_backed:
        return None  # a hybrid's groups: its printed tokens are not blocks x page
    return -(-int(tokens.low) // plan.page_tokens), int(tokens.high) // plan.page_tokens


def _contract_holds(plan: Plan) -> bool:
    return any(g.id == "pool-contract" and g.status == "pass" for g in plan.gates)


def _sglang_rules(plan: Plan, endpoint: str | None = None) -> list[dict[str, Any]]:
    sel, _ = _selector(plan, endpoint)
    window = _per_seq_tokens(plan)
    rules = [
        _rule(
            "FakplanKvUsageAbovePlan",
            f"sglang:num_used_tokens{sel} > sglang:num_running_reqs{sel} * {window}",
            plan,
            f"{plan.name}: KV tokens used above what its running requests should need",
            f"each running request holds at most {window:,} tokens",
        ),
        _rule(
            "FakplanRequestsWaitingBelowSlots",
            f"sglang:num_queue_reqs{sel} > 0 and sglang:num_running_reqs{sel} < "
            f"{plan.max_num_seqs}",
            plan,
            f"{plan.name}: requests queue while slots are free",
            f"fewer than {plan.max_num_seqs} run and requests queue: the pool is smaller than planned",
        ),
    ]
    if _contract_holds(plan):
        rules.append(
            _rule(
                "FakplanPreemptionDespiteContract",
                f"sglang:num_retracted_reqs{sel} > 0",
                plan,
                f"{plan.name}: a retracted request on a shape whose contract holds",
                "the pool covers every slot at the full window, so none should be retracted",
            )
        )
    tokens = next((p for p in plan.predictions if p.id == KV_TOKENS), None)
    if tokens is not None and tokens.low is not None and tokens.high is not None:
        total = f"(sglang:num_used_tokens{sel} / sglang:token_usage{sel})"
        rules.append(
            _rule(
                "FakplanKvTokensDiffer",
                f"{total} < {int(tokens.low)} or {total} > {int(tokens.high)}",
                plan,
                f"{plan.name}: the engine's KV pool is not the predicted one",
                f"used / usage is the pool's tokens; kv-tokens predicts {int(tokens.low):,}.."
                f"{int(tokens.high):,}",
            )
        )
    return rules


RULES: dict[str, Callable[[Plan, str | None], list[dict[str, Any]]]] = {
    "vllm": _vllm_rules,
    "sglang": _sglang_rules,
}


def rule_groups(plans: Sequence[Plan], selector: str | None = None) -> dict[str, Any]:
    """A Prometheus rules file: one group per shape whose engine exports the figures.

    ``selector`` (rendered matchers) replaces the one plan's own; two plans whose series
    the same matchers pick are refused: their rules would fire on each other's figures."""
    if selector is not None and len(plans) > 1:
        raise SelectorError("--selector names one endpoint: give one shape, or state each "
                          "shape's monitoring.selector")  # fmt: skip
    picked: dict[tuple[str, str], str] = {}
    for p in plans:
        if p.engine not in RULES:
            continue
        key = (_selector(p, selector)[0], p.engine)
        if key in picked:
            raise SelectorError(
                f"shapes {picked[key]} and {p.name} select the same series ({key[0]}): give "
                "each a monitoring.selector naming its own endpoint (job, instance, ...)"
            )
        picked[key] = p.name
    groups = [
        {"name": f"fakplan-{p.name}", "rules": RULES[p.engine](p, selector)}
        for p in plans
        if p.engine in RULES
    ]
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
