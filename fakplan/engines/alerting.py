"""What an engine's alert rules are built from: a plan's figures as plain values, and PromQL
that keeps a shape's text inert.

``fakplan.alerts`` turns each plan into ``AlertFacts`` and asks the plan's engine for its
rules (``Engine.alert_rules``, written in the engine's ``cluster`` module with its own
metric names); it adds the labels and the ``for`` every rule gets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


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


@dataclass(frozen=True)
class AlertFacts:
    """A plan's figures an alert compares live metrics with."""

    name: str  # the shape's
    selector: str  # {endpoint matchers, model_name="served name"}: the engine's model series
    endpoint: str  # the endpoint's own matchers alone (series with no model_name label)
    window_tokens: int  # one sequence at the full window, in whole pages
    tokens_backed: int
    max_num_seqs: int
    page_tokens: int
    contract_holds: bool  # the pool covers every slot at the full window
    tokens_range: tuple[int, int] | None  # what kv-tokens predicts the engine prints
    blocks_range: tuple[int, int] | None  # the same in blocks, where tokens = blocks x page


@dataclass(frozen=True)
class AlertRule:
    """One rule: its name, the PromQL that fires, a summary and why it matters."""

    alert: str
    expr: str
    summary: str
    description: str
