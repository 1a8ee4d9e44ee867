"""The comparison: two sides of a shape change, and every row that moved between them.

Pure: nothing here reads a file or asks git (``review`` does both, then calls
``diff_sides``). A missing or unreadable side counts as empty, so what the other
side holds is listed in full.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from fakplan.errors import FakplanError, RecordError
from fakplan.fit import with_proven_fixes
from fakplan.gates import GateResult
from fakplan.gates.operator import OperatorGate
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Prediction
from fakplan.record import read_record, record_path
from fakplan.shape import LoadedShape, Shape

Status = Literal["added", "deleted", "renamed", "changed"]


@dataclass(frozen=True)
class Change:
    """One row that moved: a declared field, a figure, a gate's status or a claim."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Side:
    """One side of a shape change: where it is, what it compiled to, or why it could not."""

    path: str
    shape: Shape | None = None
    plan: Plan | None = None
    error: str | None = None
    name_hint: str | None = None  # the ``name:`` read loosely, for a shape that did not load
    # every gate's verdict: the built-in ones of the plan, then the operator's (gates/)
    gates: tuple[GateResult, ...] = ()

    @classmethod
    def load(
        cls,
        path: str,
        loader: Callable[[], LoadedShape],
        hint: str | None = None,
        operator_gates: tuple[OperatorGate, ...] = (),
        prove: bool = False,
    ) -> Side:
        """Load, compile and gate; a shape that cannot be is kept with its one-line reason.
        ``prove``: its failing gates' fixes are proven (the new side's, which are shown)."""
        try:
            loaded = loader()
            plan = compile_plan(loaded)
        except FakplanError as exc:
            message = str(exc) if str(exc).startswith(path) else f"{path}: {exc}"
            return cls(path, error=message, name_hint=hint)
        gates = judged(plan, operator_gates)
        if prove:
            gates = with_proven_fixes(loaded, plan, gates, operator_gates)
        return cls(path, loaded.shape, plan, name_hint=hint, gates=gates)

    @property
    def verdicts(self) -> tuple[GateResult, ...]:
        """Every gate's verdict on this side (the plan's own where no gates were run)."""
        return self.gates or (self.plan.gates if self.plan else ())


def judged(plan: Plan, operator_gates: tuple[OperatorGate, ...] = ()) -> tuple[GateResult, ...]:
    """The plan's built-in verdicts, then each operator gate's that applies."""
    own = (g.run(plan) for g in operator_gates)
    return (*plan.gates, *(result for result in own if result is not None))


@dataclass(frozen=True)
class ShapeDiff:
    """A shape change as rows (``to_dict`` is ``fakplan diff --json``'s per-shape entry)."""

    name: str
    declared: tuple[Change, ...]
    derived: tuple[Change, ...]
    gates: tuple[Change, ...]
    predictions: tuple[Change, ...]
    old_plan: Plan | None
    new_plan: Plan | None
    status: Status = "changed"
    old_gates: tuple[GateResult, ...] = ()
    new_gates: tuple[GateResult, ...] = ()  # built-in and operator verdicts on the new side
    old_path: str | None = None
    new_path: str | None = None
    rev: str | None = None  # the revision the old side was read at (None: a file)
    old_error: str | None = None  # the old side exists but cannot be read anymore
    new_error: str | None = None  # the new side cannot be read: bad input
    retires: tuple[Prediction, ...] = ()  # a deleted shape's predictions, verdicts included
    record: str | None = None  # the compiled record the verdicts were read from
    record_note: str | None = None  # why no record's verdicts are listed

    @property
    def empty(self) -> bool:
        return not (self.declared or self.derived or self.gates or self.predictions)

    @property
    def failing(self) -> tuple[GateResult, ...]:
        """The gates the shape as it now stands fails, built-in and operator ones."""
        return tuple(g for g in self.new_gates if g.status == "fail")

    @property
    def failed(self) -> bool:
        """The shape as it now stands fails a gate (a deletion fails nothing)."""
        return bool(self.failing)

    def to_dict(self) -> dict[str, Any]:
        def rows(changes: tuple[Change, ...]) -> list[dict[str, Any]]:
            return [{"field": c.field, "old": c.old, "new": c.new} for c in changes]

        now = {g.id: g for g in self.new_gates}

        def verdict(g: GateResult) -> dict[str, Any]:
            return {
                "id": g.id,
                "status": g.status,
                "summary": g.summary,
                "fix": g.fix,
                "numbers": g.numbers,
            }

        def flipped(c: Change) -> dict[str, Any]:
            g = now.get(c.field)
            extra = {} if g is None else {k: v for k, v in verdict(g).items() if k != "id"}
            return {"field": c.field, "old": c.old, "new": c.new, **extra}

        return {
            "name": self.name,
            "status": self.status,
            "old_path": self.old_path,
            "new_path": self.new_path,
            "declared": rows(self.declared),
            "derived": rows(self.derived),
            "gates": [flipped(c) for c in self.gates],
            "failing": [verdict(g) for g in self.failing],
            "predictions": rows(self.predictions),
            "old_error": self.old_error,
            "new_error": self.new_error,
            "retires": [
                {
                    "id": p.id,
                    "claim": p.claim,
                    "verdicts": [v.model_dump(mode="json") for v in p.verdicts],
                }
                for p in self.retires
            ],
            "record": self.record,
        }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings and lists of them as dotted paths (``contract.per_token[0].name``),
    so a declared value that moved is named by the field a reviewer edits."""
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


def _dump(shape: Shape | None) -> dict[str, Any]:
    return {} if shape is None else _flatten(shape.model_dump(mode="json", exclude_defaults=False))


def _declared(old: Shape | None, new: Shape | None) -> tuple[Change, ...]:
    """The declared values that moved, in field order (defaults included: a value that
    starts or stops being stated shows as moving to or from its default)."""
    before, after = _dump(old), _dump(new)
    return tuple(
        Change(key, before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    )


# Derived figures a reviewer reads, in the order a narrative tells them.
FIGURES = (
    "rate_bytes_per_token",
    "contract_bytes",
    "kv_budget_bytes",
    "tokens_backed",
    "sessions_at_window",
    "whole_sessions_at_window",
    "weights_budget_bytes",
    "pair_bytes",
    "ceiling_bytes",
    "unclaimed_bytes",
    "kv_unclaimed_bytes",
    "decode_tps_at_window",
    "decode_tps_aggregate",
)


def _figure(plan: Plan | None, name: str) -> Any:
    return None if plan is None else getattr(plan, name)


def _derived(old: Plan | None, new: Plan | None) -> tuple[Change, ...]:
    """The derived figures that moved, in the narrative's order."""
    return tuple(
        Change(name, _figure(old, name), _figure(new, name))
        for name in FIGURES
        if _figure(old, name) != _figure(new, name)
    )


def _moved(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[Change, ...]:
    """The ids whose value moved, appeared or went; old ids first, each once, so gates
    and predictions read in the order the plans list them."""
    return tuple(
        Change(key, old.get(key), new.get(key))
        for key in dict.fromkeys([*old, *new])
        if old.get(key) != new.get(key)
    )


def _gate_statuses(side: Side | None) -> dict[str, str]:
    return {g.id: g.status for g in (side.verdicts if side else ())}


def _claims(plan: Plan | None) -> dict[str, str]:
    return {p.id: p.claim for p in (plan.predictions if plan else ())}


def _name(old: Side | None, new: Side | None) -> str:
    """The shape's name: as compiled (new first), else as read loosely, else the file's stem."""
    names = [
        new and new.plan and new.plan.name,
        old and old.plan and old.plan.name,
        new and new.name_hint,
        old and old.name_hint,
    ]
    either = new or old
    fallback = PurePosixPath(either.path).stem if either else "shape"
    return next((n for n in names if n), fallback)


def diff_sides(
    old: Side | None, new: Side | None, *, status: Status, rev: str | None = None
) -> ShapeDiff:
    """Compare two sides; a missing or unreadable side counts as empty, so what the
    other holds is listed in full (every gate and prediction of an added shape)."""
    old_plan = old.plan if old else None
    new_plan = new.plan if new else None
    return ShapeDiff(
        name=_name(old, new),
        declared=_declared(old.shape if old else None, new.shape if new else None),
        derived=_derived(old_plan, new_plan),
        gates=_moved(_gate_statuses(old), _gate_statuses(new)),
        predictions=_moved(_claims(old_plan), _claims(new_plan)),
        old_plan=old_plan,
        new_plan=new_plan,
        status=status,
        old_path=old.path if old else None,
        new_path=new.path if new else None,
        rev=rev,
        old_error=old.error if old else None,
        new_error=new.error if new else None,
        old_gates=old.verdicts if old else (),
        new_gates=new.verdicts if new else (),
    )


def diff_plans(
    old_shape: Shape,
    old: Plan,
    new_shape: Shape,
    new: Plan,
    operator_gates: tuple[OperatorGate, ...] = (),
    new_loaded: LoadedShape | None = None,
) -> ShapeDiff:
    """Two compiled shapes, compared as a change, each judged by every gate; with
    ``new_loaded``, the new side's fixes are proven."""
    new_gates = judged(new, operator_gates)
    if new_loaded is not None:
        new_gates = with_proven_fixes(new_loaded, new, new_gates, operator_gates)
    return diff_sides(
        Side(old.shape, old_shape, old, gates=judged(old, operator_gates)),
        Side(new.shape, new_shape, new, gates=new_gates),
        status="changed",
    )


def retire(d: ShapeDiff, out_dir: Path) -> ShapeDiff:
    """A deleted shape with what it retires: the predictions of its compiled record
    (``out_dir/<name>/plan.json``) and their verdicts, else the shape's own at the
    old revision, whose verdicts were never recorded here."""
    target = record_path(out_dir, d.name)
    shown = target.as_posix()
    fallback = d.old_plan.predictions if d.old_plan else ()
    if not target.exists():
        note = f"no compiled record at {shown}: no verdicts to retire"
        return replace(d, retires=fallback, record_note=note)
    try:
        record = read_record(target)
    except RecordError as exc:
        return replace(d, retires=fallback, record_note=str(exc))
    return replace(d, retires=record.predictions, record=shown)
