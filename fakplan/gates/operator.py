"""Operator gates: a repository's own checks, as Python files in its ``gates/`` folder.

    # gates/headroom.py
    from fakplan import Plan
    from fakplan.gates.operator import gate


    @gate(
        id="contract-headroom",
        title="pool ≥ contract + 10 %",
        rationale="a pool cut to the byte has no room for a longer prompt template",
    )
    def headroom(plan: Plan) -> tuple[bool, str, str]:
        need = plan.contract_bytes * 11 // 10
        ok = plan.kv_budget_bytes >= need
        return ok, f"{plan.kv_budget_bytes:,} B vs {need:,} B", "grow budget.kv"

A gate function takes the compiled ``Plan`` and returns one of

- ``(ok, summary)`` or ``(ok, summary, fix)``: ``ok`` is True (holds), False
  (fails) or None (could not be evaluated: reported as unknown, never passed);
- a ``GateVerdict`` (also importable as ``Verdict``, its documented name), which adds
  ``detail``, ``numbers`` and ``warn``;
- a ``GateResult`` whose ``id`` is the gate's, for full control;
- ``None``: the gate does not apply to this shape, nothing is reported.

A gate that raises, or returns anything else, is reported as a failing gate
that names the problem; the run goes on. A gates file that cannot be imported,
or an id used twice (or a built-in's id), is bad input: ``FakplanError``.

Discovery (``load_gates``): every ``*.py`` in the folder except ``conftest.py``,
``test_*.py``, ``*_test.py`` and names starting with ``_``, in name order; in
each file the ``@gate`` functions in definition order. Without ``--gates DIR``
the folder is ``gates/`` next to the folder that holds the shape
(``shapes/x.yaml`` → ``gates/``), when there is one.

``gate_paths`` runs the built-in and operator gates over shape arguments (files
or folders) and returns a ``GateRun`` for ``fakplan.gates.report``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from fakplan.errors import FakplanError, GatesError, ShapeError
from fakplan.gates import BUILTIN_GATES, GateResult
from fakplan.gates.report import BadInput, GateRun, ShapeGates
from fakplan.plan import Plan, compile_plan
from fakplan.shape import LoadedShape, load_shape, shape_paths

__all__ = [
    "Check",
    "GateVerdict",
    "OperatorGate",
    "Outcome",
    "Verdict",
    "gate",
    "gate_paths",
    "gate_shape",
    "gates_folder",
    "load_gates",
]

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class GateVerdict:
    """What an operator gate found, with the numbers behind it (not a prediction's verdict,
    ``fakplan.predict.PredictionVerdict``)."""

    ok: bool | None
    summary: str
    fix: str | None = None
    detail: str = ""
    numbers: Mapping[str, int | float | str | None] = field(default_factory=dict)
    warn: bool = False  # holds, but worth a look (status ``warn``)


# The name the manual and the gates ``fakplan init`` writes import: kept for every gates file.
Verdict = GateVerdict

Outcome = (
    GateResult | GateVerdict | tuple[bool | None, str] | tuple[bool | None, str, str | None] | None
)
Check = Callable[[Plan], Outcome]


@dataclass(frozen=True)
class OperatorGate:
    """One ``@gate`` function; ``source`` is the file it was loaded from."""

    id: str
    title: str
    rationale: str
    check: Check
    source: str = ""

    def __call__(self, plan: Plan) -> Outcome:
        return self.check(plan)

    def run(self, plan: Plan) -> GateResult | None:
        """The verdict on ``plan``; never raises (a raising gate is a failing one)."""
        try:
            outcome = self.check(plan)
        except Exception as exc:
            return self._failed(
                f"raised {type(exc).__name__}: {_one_line(str(exc))}",
                detail=f"{self.check.__name__}() raised at "
                f"{self.source or 'its file'}{_raise_line(exc, self.source)}",
                fix=f"fix the gate function {self.check.__name__} in {self.source or 'its file'}; "
                "the shape was not judged",
            )
        return self._result(outcome)

    def _result(self, outcome: object) -> GateResult | None:
        if outcome is None:
            return None
        if isinstance(outcome, GateResult):
            if outcome.id != self.id:
                return self._failed(f"returned a GateResult for gate {outcome.id!r}")
            return outcome
        if isinstance(outcome, tuple) and _is_verdict_tuple(outcome):
            outcome = GateVerdict(*outcome)
        if not isinstance(outcome, GateVerdict):
            return self._failed(
                f"returned {type(outcome).__name__}, expected (ok, summary[, fix]), "
                "a Verdict, a GateResult or None"
            )
        status = (
            "unknown"
            if outcome.ok is None
            else "fail"
            if not outcome.ok
            else "warn"
            if outcome.warn
            else "pass"
        )
        return GateResult(
            id=self.id,
            title=self.title,
            status=status,
            summary=outcome.summary,
            detail=outcome.detail,
            rationale=self.rationale,
            fix=None if status == "pass" else outcome.fix,
            numbers=dict(outcome.numbers),
        )

    def _failed(self, summary: str, *, detail: str = "", fix: str | None = None) -> GateResult:
        return GateResult(
            id=self.id,
            title=self.title,
            status="fail",
            summary=summary,
            detail=detail or f"operator gate {self.check.__name__} in {self.source}",
            rationale=self.rationale,
            fix=fix or f"fix the gate function {self.check.__name__} in {self.source}",
        )


def _is_verdict_tuple(value: tuple[object, ...]) -> bool:
    if len(value) not in (2, 3):
        return False
    ok, summary, *rest = value
    fix = rest[0] if rest else None
    return (
        (ok is None or isinstance(ok, bool))
        and isinstance(summary, str)
        and (fix is None or isinstance(fix, str))
    )


def gate(*, id: str, title: str, rationale: str) -> Callable[[Check], OperatorGate]:
    """Declare an operator gate: ``@gate(id=..., title=..., rationale=...)``."""
    if not _ID.match(id):
        raise ValueError(
            f"gate id {id!r}: lower-case letters, digits, '.', '_' and '-', 63 at most"
        )
    if not title.strip() or not rationale.strip():
        raise ValueError(f"gate {id!r}: title and rationale must not be empty")

    def decorate(check: Check) -> OperatorGate:
        return OperatorGate(id=id, title=title, rationale=rationale, check=check)

    return decorate


# --- discovery ------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no message)"


def _display(path: Path) -> str:
    """A path as a person reads it: relative to the working folder when inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _raise_line(exc: BaseException, source: str) -> str:
    """``:LINE`` of the deepest frame in ``source``, or nothing."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return f":{exc.lineno}"
    line = ""
    target = os.path.realpath(source) if source else None
    for frame in traceback.extract_tb(exc.__traceback__):
        if target and os.path.realpath(frame.filename) == target:
            line = f":{frame.lineno}"
    return line


def _gate_files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.glob("*.py")
        if p.is_file()
        and p.name != "conftest.py"
        and not p.name.startswith(("test_", "_"))
        and not p.name.endswith("_test.py")
    )


def _import(path: Path) -> dict[str, object]:
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"_fakplan_gates_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - *.py always has a loader
        raise GatesError(f"{_display(path)}: cannot import operator gates")
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs: dataclasses and typing look their module up there.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise GatesError(
            f"{_display(path)}{_raise_line(exc, str(path))}: cannot import operator gates: "
            f"{type(exc).__name__}: {_one_line(message)}"
        ) from None
    return vars(module)


def load_gates(folder: Path) -> tuple[OperatorGate, ...]:
    """The operator gates defined in ``folder``; ``FakplanError`` when one cannot be used."""
    if not folder.is_dir():
        raise GatesError(f"{_display(folder)}: gates folder not found")
    builtin = {g.id for g in BUILTIN_GATES}
    seen: dict[str, str] = {}
    out: list[OperatorGate] = []
    for path in _gate_files(folder):
        shown = _display(path)
        found: list[OperatorGate] = []
        for value in _import(path).values():
            if isinstance(value, OperatorGate) and all(value is not g for g in found):
                found.append(value)
        for found_gate in found:
            where = f"{shown}:{found_gate.check.__code__.co_firstlineno}"
            if found_gate.id in builtin:
                raise GatesError(
                    f"{where}: gate id {found_gate.id!r} is a built-in gate's id; choose another"
                )
            if found_gate.id in seen:
                raise GatesError(
                    f"{where}: gate id {found_gate.id!r} is also defined at {seen[found_gate.id]}"
                )
            seen[found_gate.id] = where
            out.append(replace(found_gate, source=shown))
    return tuple(out)


def gates_folder(shape: Path) -> Path | None:
    """``gates/`` next to the folder holding ``shape``, when it exists."""
    folder = Path(os.path.normpath(os.path.join(shape.parent, os.pardir, "gates")))
    return folder if folder.is_dir() else None


# --- the run --------------------------------------------------------------------


def expand_shapes(args: Sequence[str | Path]) -> Iterator[Path | BadInput]:
    """Shape files from arguments; an empty folder is bad input, and the others still run."""
    for raw in args:
        try:
            yield from shape_paths(raw)
        except ShapeError as exc:
            yield BadInput(Path(raw).as_posix(), str(exc))


# what proves the fixes of a failing or warned shape's gates (fakplan.fit.with_proven_fixes): given
# the shape, its plan, its verdicts, the operator gates and the ledger, the verdicts again
Prover = Callable[
    [LoadedShape, Plan, tuple[GateResult, ...], Sequence["OperatorGate"], Path | None],
    tuple[GateResult, ...],
]


def gate_shape(
    path: Path,
    gates: Sequence[OperatorGate] = (),
    ledger: Path | None = None,
    prove: Prover | None = None,
) -> ShapeGates | BadInput:
    """Load, compile and gate one shape file; a file that cannot be read is ``BadInput``.

    ``ledger`` is a boot log whose ceiling replaces the shape's own; ``prove`` replaces
    the fixes of failing (or warning) gates with proven ones.
    """
    shown = path.as_posix()
    try:
        loaded = load_shape(path)
        plan = compile_plan(loaded, ledger)
    except ShapeError as exc:
        return BadInput(shown, str(exc), exc.line, exc.field)
    except FakplanError as exc:
        message = str(exc) if str(exc).startswith(shown) else f"{shown}: {exc}"
        return BadInput(shown, message)
    results = list(plan.gates)
    sources: dict[str, str] = {}
    for operator_gate in gates:
        result = operator_gate.run(plan)
        if result is not None:
            results.append(result)
            sources[result.id] = operator_gate.source
    verdicts = tuple(results)
    if prove is not None and any(r.status in ("fail", "warn") for r in verdicts):
        verdicts = prove(loaded, plan, verdicts, gates, ledger)
    return ShapeGates(plan.name, shown, verdicts, sources, plan.notices)


class GatesCache:
    """Operator gates per folder, each folder imported once per run."""

    def __init__(self) -> None:
        self._loaded: dict[Path, tuple[OperatorGate, ...]] = {}

    def for_folder(self, folder: Path) -> tuple[OperatorGate, ...]:
        key = folder.resolve()
        if key not in self._loaded:
            self._loaded[key] = load_gates(folder)
        return self._loaded[key]

    def for_shape(self, shape: Path, gates_dir: Path | None = None) -> tuple[OperatorGate, ...]:
        folder = gates_dir or gates_folder(shape)
        return self.for_folder(folder) if folder is not None else ()


def gate_paths(
    args: Sequence[str | Path],
    gates_dir: Path | None = None,
    ledger: Path | None = None,
    prove: Prover | None = None,
) -> GateRun:
    """Every gate over every shape in ``args``; ``gates_dir`` replaces discovery;
    ``ledger`` gives every shape the ceiling that boot log measured.

    A shape that cannot be read becomes a ``BadInput`` entry and the others are
    still gated; a gates file that cannot be imported raises ``FakplanError``.
    """
    cache = GatesCache()
    if gates_dir is not None:
        cache.for_folder(gates_dir)
    entries: list[ShapeGates | BadInput] = []
    names: dict[str, str] = {}
    for item in expand_shapes(args):
        if isinstance(item, BadInput):
            entries.append(item)
            continue
        entry = gate_shape(item, cache.for_shape(item, gates_dir), ledger, prove)
        if isinstance(entry, ShapeGates):
            if entry.name in names:
                entry = BadInput(
                    entry.path,
                    f"{entry.path}: name: {entry.name!r} is also the name of {names[entry.name]}",
                    field="name",
                )
            else:
                names[entry.name] = entry.path
        entries.append(entry)
    return GateRun(tuple(entries))
