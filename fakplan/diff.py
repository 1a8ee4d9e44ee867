"""A shape change as a reviewed narrative: what moved, and what it costs.

Seed 004's commit message is the model: every declared value that moved, then
every derived figure that moved with it (rate, contract, tokens backed,
sessions, pair, ceiling, unclaimed), the gates that flipped and the
predictions the change makes. Pure: two compiled plans and their shapes in,
text and a JSON-able record out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakplan.errors import UnitsError
from fakplan.plan import Plan
from fakplan.shape import Shape
from fakplan.units import human, parse_bytes


@dataclass(frozen=True)
class Change:
    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ShapeDiff:
    name: str
    declared: tuple[Change, ...]
    derived: tuple[Change, ...]
    gates: tuple[Change, ...]
    predictions: tuple[Change, ...]
    old_plan: Plan
    new_plan: Plan

    @property
    def empty(self) -> bool:
        return not (self.declared or self.derived or self.gates or self.predictions)

    def to_dict(self) -> dict[str, Any]:
        def rows(changes: tuple[Change, ...]) -> list[dict[str, Any]]:
            return [{"field": c.field, "old": c.old, "new": c.new} for c in changes]

        return {
            "name": self.name,
            "declared": rows(self.declared),
            "derived": rows(self.derived),
            "gates": rows(self.gates),
            "predictions": rows(self.predictions),
        }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and (not value or any(isinstance(i, dict | list) for i in value)):
        out = {}
        for index, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}[{index}]"))
        return out
    return {prefix: value}


def _declared(old: Shape, new: Shape) -> tuple[Change, ...]:
    before = _flatten(old.model_dump(mode="json", exclude_defaults=False))
    after = _flatten(new.model_dump(mode="json", exclude_defaults=False))
    changes = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changes.append(Change(key, before.get(key), after.get(key)))
    return tuple(changes)


# Derived figures a reviewer reads, in the order a narrative tells them.
_FIGURES = (
    "rate_bytes_per_token",
    "contract_bytes",
    "kv_budget_bytes",
    "tokens_backed",
    "sessions_at_window",
    "weights_budget_bytes",
    "pair_bytes",
    "ceiling_bytes",
    "unclaimed_bytes",
)


def diff_plans(old_shape: Shape, old: Plan, new_shape: Shape, new: Plan) -> ShapeDiff:
    derived = tuple(
        Change(name, getattr(old, name), getattr(new, name))
        for name in _FIGURES
        if getattr(old, name) != getattr(new, name)
    )
    old_gates = {g.id: g for g in old.gates}
    new_gates = {g.id: g for g in new.gates}
    gates = tuple(
        Change(
            gate_id,
            old_gates[gate_id].status if gate_id in old_gates else None,
            new_gates[gate_id].status if gate_id in new_gates else None,
        )
        for gate_id in dict.fromkeys([*old_gates, *new_gates])
        if (old_gates.get(gate_id) and old_gates[gate_id].status)
        != (new_gates.get(gate_id) and new_gates[gate_id].status)
    )
    old_claims = {p.id: p.claim for p in old.predictions}
    new_claims = {p.id: p.claim for p in new.predictions}
    predictions = tuple(
        Change(pid, old_claims.get(pid), new_claims.get(pid))
        for pid in dict.fromkeys([*old_claims, *new_claims])
        if old_claims.get(pid) != new_claims.get(pid)
    )
    return ShapeDiff(
        name=new.name,
        declared=_declared(old_shape, new_shape),
        derived=derived,
        gates=gates,
        predictions=predictions,
        old_plan=old,
        new_plan=new,
    )


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


_LABELS = {
    "rate_bytes_per_token": "rate (B/token/rank)",
    "contract_bytes": "contract",
    "kv_budget_bytes": "KV pool",
    "tokens_backed": "tokens backed",
    "sessions_at_window": "sessions at window",
    "weights_budget_bytes": "weights budget",
    "pair_bytes": "pair",
    "ceiling_bytes": "ceiling",
    "unclaimed_bytes": "unclaimed",
}


def narrative(d: ShapeDiff) -> str:
    """The change in words, for a commit message or a review comment."""
    if d.empty:
        return f"{d.name}: no change in the shape or in anything derived from it\n"
    lines = [f"{d.name}: {len(d.declared)} declared value(s) moved"]
    for c in d.declared:
        lines.append(f"  {c.field}: {_declared_value(c.old)} -> {_declared_value(c.new)}")
    if d.derived:
        lines.append("what it costs:")
        for c in d.derived:
            lines.append(
                f"  {_LABELS[c.field]}: {_show(c.field, c.old)} -> {_show(c.field, c.new)}"
                f"{_ratio(c.old, c.new) if c.field in ('rate_bytes_per_token', 'tokens_backed') else ''}"
            )
        new_rate = d.new_plan.derivations["rate_bytes_per_token"]
        if any(c.field == "rate_bytes_per_token" for c in d.derived):
            lines.append(f"  rate now: {new_rate}")
            fixed = [
                c.name
                for c in d.new_plan.components
                if c.bytes_per_token and not c.scales_with_dtype
            ]
            if fixed:
                lines.append(
                    f"  ({', '.join(fixed)} does not scale with the KV dtype: the rate does not "
                    "simply double or halve)"
                )
    if d.gates:
        lines.append("gates that flipped:")
        new_by_id = {g.id: g for g in d.new_plan.gates}
        for c in d.gates:
            summary = f" ({new_by_id[c.field].summary})" if c.field in new_by_id else ""
            lines.append(f"  {c.field}: {c.old or 'absent'} -> {c.new or 'absent'}{summary}")
    if d.predictions:
        lines.append("predictions this change makes (the ledger and the probes are the referee):")
        for c in d.predictions:
            lines.append(f"  {c.field}: {c.new if c.new is not None else 'withdrawn'}")
    return "\n".join(lines) + "\n"
