"""A shape change as a reviewed narrative: what moved, and what it costs.

Seed 004's commit message is the model: every declared value that moved, then
every derived figure that moved with it (rate, contract, tokens backed,
sessions, pair, ceiling, unclaimed), the gates that flipped and the
predictions the change makes. A shape that is new is gated in full, a deleted
one lists the predictions (and recorded verdicts) it retires, and a rename is
diffed as a change: no shape slips past review by moving, appearing or going.

``diff_sides`` and ``narrative`` are pure; ``shape_changes`` asks git which
shapes changed since a revision, and ``review`` loads and compiles both sides.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from fakplan.errors import FakplanError, RecordError, ShapeError, UnitsError
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Prediction, Verdict
from fakplan.record import read_record, record_path
from fakplan.shape import LoadedShape, Shape, load_shape_text
from fakplan.units import human, parse_bytes

Status = Literal["added", "deleted", "renamed", "changed"]


@dataclass(frozen=True)
class Change:
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

    @classmethod
    def load(cls, path: str, loader: Callable[[], LoadedShape], hint: str | None = None) -> Side:
        """Load and compile; a shape that cannot be is kept with its one-line reason."""
        try:
            loaded = loader()
            return cls(path, loaded.shape, compile_plan(loaded), name_hint=hint)
        except FakplanError as exc:
            message = str(exc) if str(exc).startswith(path) else f"{path}: {exc}"
            return cls(path, error=message, name_hint=hint)


@dataclass(frozen=True)
class ShapeDiff:
    name: str
    declared: tuple[Change, ...]
    derived: tuple[Change, ...]
    gates: tuple[Change, ...]
    predictions: tuple[Change, ...]
    old_plan: Plan | None
    new_plan: Plan | None
    status: Status = "changed"
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
    def failed(self) -> bool:
        """The shape as it now stands fails a gate (a deletion fails nothing)."""
        return self.new_plan is not None and self.new_plan.failed

    def to_dict(self) -> dict[str, Any]:
        def rows(changes: tuple[Change, ...]) -> list[dict[str, Any]]:
            return [{"field": c.field, "old": c.old, "new": c.new} for c in changes]

        return {
            "name": self.name,
            "status": self.status,
            "old_path": self.old_path,
            "new_path": self.new_path,
            "declared": rows(self.declared),
            "derived": rows(self.derived),
            "gates": rows(self.gates),
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
    before, after = _dump(old), _dump(new)
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
    "whole_sessions_at_window",
    "weights_budget_bytes",
    "pair_bytes",
    "ceiling_bytes",
    "unclaimed_bytes",
    "kv_unclaimed_bytes",
)


def diff_sides(
    old: Side | None, new: Side | None, *, status: Status, rev: str | None = None
) -> ShapeDiff:
    """Compare two sides; a missing or unreadable side counts as empty, so what the
    other holds is listed in full (every gate and prediction of an added shape)."""
    old_plan = old.plan if old else None
    new_plan = new.plan if new else None

    def figure(plan: Plan | None, name: str) -> Any:
        return None if plan is None else getattr(plan, name)

    derived = tuple(
        Change(name, figure(old_plan, name), figure(new_plan, name))
        for name in _FIGURES
        if figure(old_plan, name) != figure(new_plan, name)
    )
    old_gates = {g.id: g.status for g in (old_plan.gates if old_plan else ())}
    new_gates = {g.id: g.status for g in (new_plan.gates if new_plan else ())}
    gates = tuple(
        Change(gate_id, old_gates.get(gate_id), new_gates.get(gate_id))
        for gate_id in dict.fromkeys([*old_gates, *new_gates])
        if old_gates.get(gate_id) != new_gates.get(gate_id)
    )
    old_claims = {p.id: p.claim for p in (old_plan.predictions if old_plan else ())}
    new_claims = {p.id: p.claim for p in (new_plan.predictions if new_plan else ())}
    predictions = tuple(
        Change(pid, old_claims.get(pid), new_claims.get(pid))
        for pid in dict.fromkeys([*old_claims, *new_claims])
        if old_claims.get(pid) != new_claims.get(pid)
    )
    names = [
        new_plan and new_plan.name,
        old_plan and old_plan.name,
        new and new.name_hint,
        old and old.name_hint,
    ]
    either = new or old
    fallback = PurePosixPath(either.path).stem if either else "shape"
    return ShapeDiff(
        name=next((n for n in names if n), fallback),
        declared=_declared(old.shape if old else None, new.shape if new else None),
        derived=derived,
        gates=gates,
        predictions=predictions,
        old_plan=old_plan,
        new_plan=new_plan,
        status=status,
        old_path=old.path if old else None,
        new_path=new.path if new else None,
        rev=rev,
        old_error=old.error if old else None,
        new_error=new.error if new else None,
    )


def diff_plans(old_shape: Shape, old: Plan, new_shape: Shape, new: Plan) -> ShapeDiff:
    """Two compiled shapes, compared as a change."""
    return diff_sides(
        Side(old.shape, old_shape, old), Side(new.shape, new_shape, new), status="changed"
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


# --- the narrative ---


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
    "whole_sessions_at_window": "whole sessions at window",
    "weights_budget_bytes": "weights budget",
    "pair_bytes": "pair",
    "ceiling_bytes": "ceiling",
    "unclaimed_bytes": "unclaimed",
    "kv_unclaimed_bytes": "idle KV (budget.kv the cache leaves unused)",
}


def _observed(value: float | int | str | None) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,g}"
    return value


def _verdict(v: Verdict) -> str:
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
    for name in _FIGURES:
        if name == "kv_unclaimed_bytes" and plan.kv_unclaimed_bytes is None:
            continue  # engines whose pool is budget.kv leave none idle
        lines.append(f"  {_LABELS[name]}: {_show(name, getattr(plan, name))}")
    lines.append(f"  rate: {plan.derivations['rate_bytes_per_token']}")
    lines.append("gates:")
    for g in plan.gates:
        lines.append(f"  {g.id}: {g.status} ({g.summary})")
        if g.fix and g.status != "pass":
            lines.append(f"    fix: {g.fix}")
    lines.append("predictions this shape makes (the ledger and the probes are the referee):")
    lines.extend(f"  {p.id}: {p.claim}" for p in plan.predictions)
    return lines


def _deleted(d: ShapeDiff) -> list[str]:
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


def narrative(d: ShapeDiff) -> str:
    """The change in words, for a commit message or a review comment.

    Empty for a new side that cannot be read: that is bad input, said on stderr.
    """
    if d.new_error:
        return ""
    if d.status == "deleted":
        return "\n".join(_deleted(d)) + "\n"
    if d.new_plan is not None and d.old_plan is None:
        return "\n".join(_in_full(d, d.new_plan)) + "\n"
    assert d.new_plan is not None  # changed or renamed, both sides compiled
    head = d.name
    if d.status == "renamed":
        head += f": renamed {d.old_path} -> {d.new_path};"
    else:
        head += ":"
    if d.empty:
        return f"{head} no change in the shape or in anything derived from it\n"
    lines = [f"{head} {len(d.declared)} declared value(s) moved"]
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


# --- which shapes changed since a revision (git) ---


@dataclass(frozen=True)
class Touched:
    """A shape file a change touched: repository-relative paths and their contents
    (``None`` for the side it lacks)."""

    status: Status
    old: str | None
    new: str | None
    old_bytes: bytes | None = None
    new_bytes: bytes | None = None


class GitRevision:
    """The repository around ``anchor`` and one revision of it, read through git."""

    def __init__(self, rev: str, anchor: Path) -> None:
        if rev.startswith("-"):
            raise FakplanError(f"--rev {rev!r}: a git revision does not start with '-'")
        self.rev = rev
        self.top = Path(self._run("rev-parse", "--show-toplevel", cwd=anchor).decode().strip())
        self.top = self.top.resolve()
        try:
            commit = self._run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        except FakplanError:
            raise FakplanError(
                f"--rev {rev}: git knows no such commit in {self.top.as_posix()}"
            ) from None
        self.commit_id = commit.decode().strip()

    def _run(self, *args: str, cwd: Path | None = None) -> bytes:
        try:
            proc = subprocess.run(
                ["git", "-c", "core.quotepath=off", *args],
                cwd=cwd or self.top,
                capture_output=True,
                check=False,
            )
        except FileNotFoundError:
            raise FakplanError("fakplan diff --rev needs git on PATH") from None
        if proc.returncode != 0:
            text = proc.stderr.decode(errors="replace").strip().splitlines() or ["git failed"]
            raise FakplanError(f"git {args[0]}: {text[-1]}")
        return proc.stdout

    def kind(self, relative: str) -> str | None:
        """``blob`` or ``tree`` at the revision, ``None`` where the path did not exist."""
        try:
            return self._run("cat-file", "-t", f"{self.commit_id}:{relative}").decode().strip()
        except FakplanError:
            return None

    def show(self, relative: str) -> bytes | None:
        if self.kind(relative) != "blob":
            return None
        return self._run("cat-file", "blob", f"{self.commit_id}:{relative}")

    def touched(self, pathspecs: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
        """Paths added, deleted and modified between the revision and the working
        tree (committed, staged or not), untracked files counted as added."""
        out = self._run(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--name-status",
            "-z",
            self.commit_id,
            "--",
            *pathspecs,
        )
        words = [w.decode("utf-8", "surrogateescape") for w in out.split(b"\0") if w]
        added: list[str] = []
        deleted: list[str] = []
        modified: list[str] = []
        for status, path in zip(words[::2], words[1::2], strict=True):
            {"A": added, "D": deleted}.get(status[:1], modified).append(path)
        untracked = self._run("ls-files", "--others", "--exclude-standard", "-z", "--", *pathspecs)
        added += [w.decode("utf-8", "surrogateescape") for w in untracked.split(b"\0") if w]
        return added, deleted, modified


def _mapping(data: bytes | None) -> dict[str, Any] | None:
    """The file as a YAML mapping, or None (not YAML, not a mapping)."""
    if data is None:
        return None
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _name_of(data: bytes | None) -> str | None:
    name = (_mapping(data) or {}).get("name")
    return name if isinstance(name, str) and name else None


def _looks_like_shape(change: Touched) -> bool:
    """A YAML mapping with an ``engine:`` key on either side: what a shape always has."""
    return any("engine" in (_mapping(b) or {}) for b in (change.old_bytes, change.new_bytes))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _pair_renames(added: list[Touched], deleted: list[Touched]) -> list[Touched]:
    """A deleted and an added file holding the same bytes or the same ``name:`` are one
    shape that moved: its record, its predictions and its verdicts go with the name."""
    out: list[Touched] = []
    free = list(added)
    for gone in deleted:
        same = (a for a in free if gone.old_bytes is not None and a.new_bytes == gone.old_bytes)
        match = next(same, None)
        name = _name_of(gone.old_bytes)
        if match is None and name is not None:
            match = next((a for a in free if _name_of(a.new_bytes) == name), None)
        if match is None:
            out.append(gone)
            continue
        free.remove(match)
        out.append(Touched("renamed", gone.old, match.new, gone.old_bytes, match.new_bytes))
    return out + free


def _anchor(selectors: Sequence[str], cwd: Path) -> Path:
    """Where to ask git for the repository: the first named shape's folder, else cwd."""
    if not selectors:
        return cwd
    folder = (cwd / selectors[0]).absolute()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


def shape_changes(
    rev: str, selectors: Sequence[str], cwd: Path
) -> tuple[GitRevision, list[Touched], list[str]]:
    """The shapes changed, added, deleted or renamed since ``rev``, committed or not,
    untracked included; and the YAML files passed over as not shapes.

    With no ``selectors`` every YAML file in the repository that is a shape on
    either side (a mapping with ``engine:``) counts; a selector names a shape
    file (reported even when unchanged) or a folder (its changed ``*.yaml`` and
    ``*.yml``, not its subfolders, as ``fakplan gate`` reads a folder).
    """
    git = GitRevision(rev, _anchor(selectors, cwd))
    top = git.top
    files: dict[str, str] = {}  # repository-relative path -> the selector as typed
    folders: list[str] = []
    for selector in selectors:
        absolute = (cwd / selector).resolve()
        try:
            relative = absolute.relative_to(top).as_posix()
        except ValueError:
            raise ShapeError(f"outside the repository {top.as_posix()}", file=selector) from None
        if absolute.is_dir() or git.kind(relative) == "tree":
            folders.append(relative)
        else:
            files.setdefault(relative, selector)
    specs = ["*.yaml", "*.yml", *(f":(literal){f}" for f in files)]
    added, deleted, modified = git.touched(specs)
    changes = [Touched("changed", p, p, git.show(p), _read(top / p)) for p in modified]
    changes += _pair_renames(
        [Touched("added", None, p, None, _read(top / p)) for p in added],
        [Touched("deleted", p, None, git.show(p), None) for p in deleted],
    )
    if not selectors:
        kept = [c for c in changes if _looks_like_shape(c)]
        skipped = sorted(c.new or c.old or "" for c in changes if c not in kept)
        return git, sorted(kept, key=_order), skipped

    def selected(path: str | None) -> bool:
        if path is None:
            return False
        in_folder = PurePosixPath(path).parent.as_posix() in folders
        return path in files or (in_folder and path.endswith((".yaml", ".yml")))

    kept = [c for c in changes if selected(c.old) or selected(c.new)]
    for relative, selector in files.items():
        if any(relative in (c.old, c.new) for c in kept):
            continue
        then, now = git.show(relative), _read(top / relative)
        if then is None and now is None:
            raise ShapeError(f"no such file, now or at {rev}", file=selector)
        status: Status = "added" if then is None else "deleted" if now is None else "changed"
        old = None if then is None else relative
        new = None if now is None else relative
        kept.append(Touched(status, old, new, then, now))
    return git, sorted(kept, key=_order), []


def _order(change: Touched) -> str:
    return change.new or change.old or ""


def _text(data: bytes, path: str, rev: str | None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        at = f" at {rev}" if rev else ""
        raise ShapeError(f"cannot read{at}: not UTF-8 text", file=path) from None


def review(change: Touched, git: GitRevision, cwd: Path, out_dir: Path) -> ShapeDiff:
    """Load and compile both sides of one touched shape and compare them.

    Paths are shown relative to ``cwd``. The old side is read from the revision
    (relative references resolve against today's tree); a side that cannot be
    read is reported in the diff, never raised.
    """

    def shown(relative: str) -> str:
        return Path(os.path.relpath(git.top / relative, cwd)).as_posix()

    def side(relative: str | None, data: bytes | None, rev: str | None) -> Side | None:
        if relative is None:
            return None
        path = shown(relative)
        if data is None:
            return Side(path, error=f"{path}: cannot read", name_hint=None)
        return Side.load(
            path,
            lambda: load_shape_text(_text(data, path, rev), Path(path)),
            _name_of(data),
        )

    d = diff_sides(
        side(change.old, change.old_bytes, git.rev),
        side(change.new, change.new_bytes, None),
        status=change.status,
        rev=git.rev,
    )
    return retire(d, out_dir) if d.status == "deleted" else d
