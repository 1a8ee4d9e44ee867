"""The capacity report: one static HTML page a person reads at a glance.

Per shape, a card's memory as one bar — the weights budget, KV pool, the engine's floor and
what is unclaimed, against the card and the ceiling, with the contract's end and the weights
the model needs marked, all to one scale (widened past the card where the plan is over) — its
gates, and its predictions with their verdict history; for a fleet, one sortable row per
endpoint; where git has the shape's history, the last change in words (``fakplan diff``).
Self-contained: inline CSS, SVG and a few lines of script, nothing fetched. Meaning is in
words as well as colours, so the page reads without them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from fakplan.diff import narrative, review, shape_changes
from fakplan.errors import FakplanError
from fakplan.plan import Plan
from fakplan.predict import amount, describe
from fakplan.render import default_templates
from fakplan.units import human

BAR_WIDTH = 1000  # the bar's SVG viewBox width: a segment's width is its bytes' share


@dataclass(frozen=True)
class Segment:
    key: str  # weights, kv, floor, unclaimed, free
    label: str
    bytes: int
    x: float
    width: float

    @property
    def text(self) -> str:
        return human(self.bytes, "GiB", 2)


@dataclass(frozen=True)
class Entry:
    """One shape in the report: its plan, or why it could not be read."""

    path: str
    plan: Plan | None = None
    error: str | None = None
    change: str = ""  # the last change's narrative, where git has it
    segments: tuple[Segment, ...] = ()
    contract_x: float | None = None
    contract_past: int = 0  # the contract's end is this far past the bar (pinned to its end)
    ceiling_x: float | None = None
    card_x: float = BAR_WIDTH  # where the card ends: short of the bar when the plan is over it
    scale_bytes: int = 0  # the bytes the bar's full width stands for
    weights_needed: int | None = None  # the weights per rank the model needs (weights-fit)
    weights_needed_x: float | None = None
    failing: int = 0
    gates: tuple[dict[str, str], ...] = field(default_factory=tuple)
    predictions: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def _x(n: int, scale: int) -> float:
    return round(n / scale * BAR_WIDTH, 3)


@dataclass(frozen=True)
class Bar:
    """A card as one bar, every segment and marker to one scale."""

    segments: tuple[Segment, ...]
    scale: int  # the bytes the full width stands for: the card, or more where the plan is over
    contract_x: float
    contract_past: int  # the contract's end lies this far past the bar: not drawn to scale
    ceiling_x: float | None
    card_x: float
    weights_needed_x: float | None


def weights_needed(plan: Plan) -> int | None:
    """The weights per rank the model needs, as the weights-fit gate counted them."""
    gate = next((g for g in plan.gates if g.id == "weights-fit"), None)
    value = gate.numbers.get("weights_per_rank_bytes") if gate is not None else None
    return value if isinstance(value, int) else None


def bar(plan: Plan) -> Bar:
    """The card's bytes as segments: weights, KV pool, then (with a ceiling) what is
    unclaimed up to it and the engine's floor above it; without one, the rest as free.

    Every segment is drawn to one scale, so nothing is clipped: where the pair or the
    weights the model needs run past the card, the bar widens to hold them and the card's
    end is marked inside it. A contract that ends past all of them is the one mark not to
    scale: pinned to the bar's end, and said so."""
    card = plan.card_total_bytes
    needed = weights_needed(plan)
    reach = max(card, plan.pair_bytes, needed or 0)
    parts: list[tuple[str, str, int]] = [
        ("weights", "weights budget", plan.weights_budget_bytes),
        ("kv", "KV pool", plan.kv_budget_bytes),
    ]
    ceiling = plan.ceiling_bytes
    if ceiling is not None:
        unclaimed = max(ceiling - plan.pair_bytes, 0)
        parts.append(("unclaimed", "unclaimed", unclaimed))
        parts.append(("floor", "engine floor", max(card - max(ceiling, plan.pair_bytes), 0)))
    else:
        parts.append(("free", "not planned (no ceiling)", max(card - plan.pair_bytes, 0)))
    segments, at = [], 0
    for key, label, size in parts:
        segments.append(Segment(key, label, size, _x(at, reach), _x(size, reach)))
        at += size
    contract_end = plan.weights_budget_bytes + plan.contract_bytes
    return Bar(
        segments=tuple(segments),
        scale=reach,
        # where the pool would have to reach: past the KV segment when the contract fails;
        # a contract past everything else is pinned to the bar's end and said so
        contract_x=_x(min(contract_end, reach), reach),
        contract_past=max(0, contract_end - reach),
        ceiling_x=None if ceiling is None else _x(ceiling, reach),
        card_x=_x(card, reach),
        weights_needed_x=None if needed is None else _x(needed, reach),
    )


RATE_UNIT = "tokens/s"


def rate_plot(
    low: float | int | None, high: float | int | None, observed: list[float]
) -> dict[str, Any] | None:
    """A rate prediction drawn to scale: its interval as a band and every figure a probe
    measured as a tick, on an axis from 0 to 1.15x the largest of them (BAR_WIDTH wide)."""
    if low is None or high is None:
        return None
    top = max([float(high), *observed]) * 1.15 or 1.0
    return {
        "x": _share(low, top),
        "width": max(_share(high, top) - _share(low, top), 2.0),
        "ticks": [round(_share(v, top), 1) for v in observed],
        "top": amount(round(top, 1), RATE_UNIT),
    }


def _share(value: float | int, top: float) -> float:
    return round(float(value) / top * BAR_WIDTH, 1)


def _verdicts(plan: Plan) -> tuple[dict[str, Any], ...]:
    out = []
    for p in plan.predictions:
        history = [
            {
                "status": v.status,
                "observed": v.observed
                if not isinstance(v.observed, int | float)
                else amount(v.observed, p.unit),
                "source": v.source,
                "at": v.at or "—",
                "note": v.note,
            }
            for v in reversed(p.verdicts)  # most recent first
        ]
        measured = [
            float(v.observed)
            for v in p.verdicts
            if isinstance(v.observed, int | float) and not isinstance(v.observed, bool)
        ]
        plot = rate_plot(p.low, p.high, measured) if p.unit == RATE_UNIT else None
        out.append(
            {"id": p.id, "claim": p.claim, "range": describe(p), "history": history, "plot": plot}
        )
    return tuple(out)


def last_change(path: Path) -> str:
    """The narrative of the last commit that touched ``path`` (empty outside git)."""
    path = path.resolve()
    try:
        proc = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    commit = proc.stdout.strip()
    if proc.returncode != 0 or not commit:
        return ""
    try:
        git, changes, _ = shape_changes(f"{commit}^", [str(path)], path.parent)
        texts = [narrative(review(c, git, path.parent, path.parent)) for c in changes]
    except FakplanError:
        return ""
    return "\n\n".join(t for t in texts if t)


def entry(path: str, plan: Plan, change: str = "") -> Entry:
    drawn = bar(plan)
    gates = tuple(
        {"id": g.id, "title": g.title, "status": g.status, "summary": g.summary} for g in plan.gates
    )
    return Entry(
        path=path,
        plan=plan,
        change=change,
        segments=drawn.segments,
        contract_x=drawn.contract_x,
        contract_past=drawn.contract_past,
        ceiling_x=drawn.ceiling_x,
        card_x=drawn.card_x,
        scale_bytes=drawn.scale,
        weights_needed=weights_needed(plan),
        weights_needed_x=drawn.weights_needed_x,
        failing=sum(1 for g in plan.gates if g.status == "fail"),
        gates=gates,
        predictions=_verdicts(plan),
    )


def render_report(entries: list[Entry]) -> str:
    """The page: every value a shape or a record holds is HTML-escaped (autoescape)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(default_templates() / "report")),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        keep_trailing_newline=True,
    )
    env.filters["gib"] = lambda n: human(n, "GiB", 2)
    return env.get_template("report.html.j2").render(entries=entries, bar_width=BAR_WIDTH)
