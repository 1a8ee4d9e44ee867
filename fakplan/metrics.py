"""A plan as Prometheus metrics: the bytes it plans, its fit, its gates and its predictions.

For node_exporter's textfile collector or a Pushgateway, so a dashboard and the alert
rules (``fakplan.alerts``) can set what an endpoint does beside what its shape planned.
Names follow Prometheus' conventions: the unit in the name (``_bytes``, ``_tokens``),
``_total`` only on counters, an ``_info`` gauge for identity; labels are the shape and
a bounded set of classes, never a free-form value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from fakplan.plan import Plan

GATE_STATUSES = ("pass", "fail", "warn", "unknown")
VERDICT_STATUSES = ("held", "killed", "unverifiable", "inside noise", "none")
UNIT_NAMES = {"B": "bytes", "tokens/s": "tokens_per_second"}


def unit_name(unit: str) -> str:
    """A prediction's unit as a metric name's suffix: "B" is bytes, "tokens/s" per second."""
    if unit in UNIT_NAMES:
        return UNIT_NAMES[unit]
    return re.sub(r"[^a-z0-9]+", "_", unit.lower()).strip("_") or "value"


def _status(value: str) -> str:
    return value.replace(" ", "_")


def _plan_bytes(plans: Sequence[Plan]) -> Iterator[Metric]:
    bytes_ = GaugeMetricFamily(
        "fakplan_plan_bytes",
        "Bytes a plan gives each memory class on one card (rank)",
        labels=["shape", "class"],
    )
    fit = GaugeMetricFamily(
        "fakplan_fit_bytes",
        "What a scope wants, its budget, and the margin between (budget - want)",
        labels=["shape", "scope", "kind"],
    )
    for p in plans:
        classes = {
            "weights": p.weights_budget_bytes,
            "kv_pool": p.kv_budget_bytes,
            "contract": p.contract_bytes,
            "pair": p.pair_bytes,
            "card": p.card_total_bytes,
            "ceiling": p.ceiling_bytes,
            "unclaimed": p.unclaimed_bytes,
        }
        for name, value in classes.items():
            if value is not None:  # unknown is absent, never a guessed 0
                bytes_.add_metric([p.name, name], value)
        rows = [("kv", p.contract_bytes, p.kv_budget_bytes)]
        if p.ceiling_bytes is not None:
            rows.append(("pair", p.pair_bytes, p.ceiling_bytes))
        for scope, want, budget in rows:
            fit.add_metric([p.name, scope, "want"], want)
            fit.add_metric([p.name, scope, "budget"], budget)
            fit.add_metric([p.name, scope, "margin"], budget - want)
    yield bytes_
    yield fit


def _capacity(plans: Sequence[Plan]) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "fakplan_plan_info",
        "A compiled plan: its engine, release, model and KV dtype (always 1)",
        labels=["shape", "engine", "engine_version", "model", "kv_cache_dtype"],
    )
    tokens = GaugeMetricFamily(
        "fakplan_kv_tokens", "KV tokens the planned pool backs, as the engine counts them",
        labels=["shape"],
    )  # fmt: skip
    sessions = GaugeMetricFamily(
        "fakplan_sessions_at_window",
        "Sequences the pool backs at once, each at the full window",
        labels=["shape"],
    )
    slots = GaugeMetricFamily(
        "fakplan_max_num_seqs", "Sequence slots the shape serves at once", labels=["shape"]
    )
    for p in plans:
        info.add_metric([p.name, p.engine, p.engine_version or "", p.model, p.kv_cache_dtype], 1)
        tokens.add_metric([p.name], p.tokens_backed)
        sessions.add_metric([p.name], p.whole_sessions_at_window)
        slots.add_metric([p.name], p.max_num_seqs)
    yield from (info, tokens, sessions, slots)


def _gates(plans: Sequence[Plan]) -> Iterator[Metric]:
    gate = GaugeMetricFamily(
        "fakplan_gate_status",
        "1 for each gate's current status (pass, fail, warn, unknown), 0 for the others",
        labels=["shape", "gate", "status"],
    )
    for p in plans:
        for g in p.gates:
            for status in GATE_STATUSES:
                gate.add_metric([p.name, g.id, status], 1 if g.status == status else 0)
    yield gate


def _predictions(plans: Sequence[Plan]) -> Iterator[Metric]:
    by_unit: dict[str, GaugeMetricFamily] = {}
    verdict = GaugeMetricFamily(
        "fakplan_prediction_verdict",
        "1 for each prediction's latest verdict (none: not yet observed), 0 for the others",
        labels=["shape", "prediction", "status"],
    )
    counted = CounterMetricFamily(
        "fakplan_prediction_verdicts",
        "Verdicts recorded on each prediction, by status",
        labels=["shape", "prediction", "status"],
    )
    for p in plans:
        for pred in p.predictions:
            # keyed by the family's name: two units that name one family ("tokens/s",
            # "tokens_s") share it, so the exposition never has two TYPE lines for it
            family = by_unit.setdefault(unit_name(pred.unit), _bound_family(pred.unit))
            for bound, value in (("value", pred.value), ("low", pred.low), ("high", pred.high)):
                if value is not None:
                    family.add_metric([p.name, pred.id, bound], value)
            latest = pred.latest.status if pred.latest else "none"
            for status in VERDICT_STATUSES:
                verdict.add_metric([p.name, pred.id, _status(status)], 1 if status == latest else 0)
            for status in VERDICT_STATUSES[:-1]:
                n = sum(1 for v in pred.verdicts if v.status == status)
                counted.add_metric([p.name, pred.id, _status(status)], n)
    yield from by_unit.values()
    yield verdict
    yield counted


def _bound_family(unit: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        f"fakplan_prediction_{unit_name(unit)}",
        f"A prediction in {unit}: its value and the low and high bounds that hold it",
        labels=["shape", "prediction", "bound"],
    )


class _Plans(Collector):
    def __init__(self, plans: Sequence[Plan]) -> None:
        self.plans = plans

    def collect(self) -> Iterable[Metric]:
        for part in (_plan_bytes, _capacity, _gates, _predictions):
            yield from part(self.plans)


def exposition(plans: Sequence[Plan]) -> str:
    """The plans in Prometheus' text exposition format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Plans(plans))
    return generate_latest(registry).decode("utf-8")


def exposition_json(text: str) -> dict[str, Any]:
    """``fakplan.metrics/1``: the exposition read back by prometheus_client's own parser, so
    the JSON and the text cannot say different things."""
    return {
        "schema": "fakplan.metrics/1",
        "families": [
            {
                "name": family.name,
                "type": family.type,
                "help": family.documentation,
                "samples": [
                    {"name": s.name, "labels": dict(s.labels), "value": s.value}
                    for s in family.samples
                ],
            }
            for family in text_string_to_metric_families(text)
        ],
    }
