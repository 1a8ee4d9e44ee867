"""The narrative: a ``ShapeDiff`` in the words a commit message or a review comment uses.

Seed 004's commit message is the model: the declared values that moved, what
they cost, the gates that flipped and the predictions the change makes. A shape
with nothing to compare against is told in full; a deleted one by what it retires.
"""

from __future__ import annotations

from typing import Any

from fakplan.diff.compare import FIGURES, ShapeDiff
from fakplan.errors import UnitsError
from fakplan.plan import Plan
from fakplan.predict import PredictionVerdict
from fakplan.units import human, parse_bytes

_LABELS = {
    "rate_bytes_per_token": "rate (B/token/rank)",
    "contract_bytes": "contract",
    "kv_budget_bytes": "KV pool",
    "tokens_backed": "tokens backed",
    "sessions_at_window": "sessions at window",
    "whole_sessions_at_window": "whole sessions at window",
    "weights_budget_bytes": "weights budget",
    "pair_bytes": "pair",
    "ceiling_bytes": "ceiling",
    "unclaimed_bytes": "unclaimed",
    "kv_unclaimed_bytes": "idle KV (budget.kv the cache leaves unused)",
    "decode_tps_at_window": "decode per session, every slot at the window (tokens/s, slow end)",
    "decode_tps_aggregate": "decode in all, every slot at the window (tokens/s, slow end)",
}

# the figures a reviewer wants the ratio of: fp8 -> bf16 can be 1.89x the rate, not 2x
_RATIOS = (
    "rate_bytes_per_token",
    "tokens_backed",
    "decode_tps_at_window",
    "decode_tps_aggregate",
)

_REFEREE = "(the ledger and the probes are the referee)"


def _declared_value(value: Any) -> str:
    """A declared value as a reviewer reads it: byte sizes in one unit, so they compare."""
    if value is None or value == "":
        return "(unset)"
    if isinstance(value, str):
        try:
            return human(parse_bytes(value))
        except UnitsError:
            return value
    return str(value)


def _show(field: str, value: Any) -> str:
    """A derived figure: bytes in one unit, counts with separators, ``unknown`` for none."""
    if value is None:
        return "unknown"
    if isinstance(value, int) and not isinstance(value, bool) and field.endswith("_bytes"):
        return human(value)
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _ratio(old: Any, new: Any) -> str:
    if isinstance(old, int | float) and isinstance(new, int | float) and old and new:
        return f" ({new / old:.2f}x)"
    return ""


def _observed(value: float | int | str | None) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,g}"
    return value


def _verdict(v: PredictionVerdict) -> str:
    at = f" at {v.at}" if v.at else ""
    note = f"; {v.note}" if v.note else ""
    return f"    {v.status}: observed {_observed(v.observed)} ({v.source}){at}{note}"


def _unreadable(d: ShapeDiff) -> str:
    return f"{d.old_path} at {d.rev} cannot be read anymore ({d.old_error})"


def _in_full(d: ShapeDiff, plan: Plan) -> list[str]:
    """A shape with nothing to compare against: every figure, gate and prediction."""
    if d.status == "added":
        head = f"{d.name}: added ({d.new_path})"
    elif d.status == "renamed":
        head = f"{d.name}: renamed {d.old_path} -> {d.new_path}; {_unreadable(d)}"
    else:
        head = f"{d.name}: {_unreadable(d)}"
    lines = [f"{head}; gated in full", "what it costs:"]
    for name in FIGURES:
        if name == "kv_unclaimed_bytes" and plan.kv_unclaimed_bytes is None:
            continue  # engines whose pool is budget.kv leave none idle
        if name.startswith("decode_tps") and getattr(plan, name) is None:
            continue  # no rate predicted (rates.not_predicted says why)
        lines.append(f"  {_LABELS[name]}: {_show(name, getattr(plan, name))}")
    lines.append(f"  rate: {plan.derivations['rate_bytes_per_token']}")
    lines.append("gates:")
    for g in d.new_gates or plan.gates:
        lines.append(f"  {g.id}: {g.status} ({g.summary})")
        if g.fix and g.status != "pass":
            lines.append(f"    fix: {g.fix}")
    lines.append(f"predictions this shape makes {_REFEREE}:")
    lines.extend(f"  {p.id}: {p.claim}" for p in plan.predictions)
    return lines


def _deleted(d: ShapeDiff) -> list[str]:
    """A deleted shape: the predictions it retires, with the verdicts its record holds."""
    lines = [f"{d.name}: deleted ({d.old_path}, at {d.rev})"]
    if d.old_error:
        lines.append(f"  {_unreadable(d)}")
    if d.record:
        lines.append(f"  it retires these predictions and their verdicts ({d.record}):")
    elif d.retires:
        lines.append(f"  {d.record_note}; the predictions it retires, from the shape at {d.rev}:")
    else:
        lines.append(f"  {d.record_note}; no predictions to list")
    for p in d.retires:
        lines.append(f"  {p.id}: {p.claim}")
        if d.record:
            lines.extend([_verdict(v) for v in p.verdicts] or ["    no verdict recorded"])
    return lines


def _costs(d: ShapeDiff, plan: Plan) -> list[str]:
    """The derived figures that moved; a new rate with its derivation, and the components
    that keep it from simply doubling or halving with the KV dtype."""
    if not d.derived:
        return []
    lines = ["what it costs:"]
    for c in d.derived:
        ratio = _ratio(c.old, c.new) if c.field in _RATIOS else ""
        lines.append(
            f"  {_LABELS[c.field]}: {_show(c.field, c.old)} -> {_show(c.field, c.new)}{ratio}"
        )
    if any(c.field == "rate_bytes_per_token" for c in d.derived):
        lines.append(f"  rate now: {plan.derivations['rate_bytes_per_token']}")
        fixed = [c.name for c in plan.components if c.bytes_per_token and not c.scales_with_dtype]
        if fixed:
            lines.append(
                f"  ({', '.join(fixed)} does not scale with the KV dtype: the rate does not "
                "simply double or halve)"
            )
    return lines


def _flipped(d: ShapeDiff) -> list[str]:
    """The gates whose status moved, with the new side's summary and, where it does not
    hold, its fix."""
    if not d.gates:
        return []
    by_id = {g.id: g for g in d.new_gates}
    lines = ["gates that flipped:"]
    for c in d.gates:
        g = by_id.get(c.field)
        summary = f" ({g.summary})" if g is not None else ""
        lines.append(f"  {c.field}: {c.old or 'absent'} -> {c.new or 'absent'}{summary}")
        if g is not None and g.fix and g.status != "pass":
            lines.append(f"    fix: {g.fix}")
    return lines


def _still_failing(d: ShapeDiff) -> list[str]:
    """The gates the new side fails that did not flip: a review names every one."""
    flipped = {c.field for c in d.gates}
    left = [g for g in d.failing if g.id not in flipped]
    if not left:
        return []
    lines = ["gates failing before and after the change:"]
    for g in left:
        lines.append(f"  {g.id}: {g.title} ({g.summary})")
        if g.fix:
            lines.append(f"    fix: {g.fix}")
    return lines


def _predictions_made(d: ShapeDiff) -> list[str]:
    """The predictions the change makes, and those it withdraws."""
    if not d.predictions:
        return []
    lines = [f"predictions this change makes {_REFEREE}:"]
    lines.extend(
        f"  {c.field}: {c.new if c.new is not None else 'withdrawn'}" for c in d.predictions
    )
    return lines


def _changed(d: ShapeDiff, plan: Plan) -> list[str]:
    """A changed or renamed shape whose two sides compiled: what moved, then what it costs."""
    head = (
        f"{d.name}: renamed {d.old_path} -> {d.new_path};"
        if d.status == "renamed"
        else f"{d.name}:"
    )
    if d.empty:
        return [f"{head} no change in the shape or in anything derived from it", *_still_failing(d)]
    moved = len(d.declared)
    lines = [f"{head} {moved} declared {'value' if moved == 1 else 'values'} moved"]
    lines.extend(
        f"  {c.field}: {_declared_value(c.old)} -> {_declared_value(c.new)}" for c in d.declared
    )
    return [*lines, *_costs(d, plan), *_flipped(d), *_still_failing(d), *_predictions_made(d)]


def narrative(d: ShapeDiff) -> str:
    """The change in words, for a commit message or a review comment.

    Empty for a new side that cannot be read: that is bad input, said on stderr.
    """
    if d.new_error:
        return ""
    if d.status == "deleted":
        lines = _deleted(d)
    elif d.new_plan is not None and d.old_plan is None:
        lines = _in_full(d, d.new_plan)
    else:
        assert d.new_plan is not None  # changed or renamed, both sides compiled
        lines = _changed(d, d.new_plan)
    return "\n".join(lines) + "\n"
