"""One touched shape reviewed: both sides loaded and compiled, then compared."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from fakplan.diff.compare import ShapeDiff, Side, diff_sides, retire
from fakplan.diff.git import GitRevision, Touched, name_of
from fakplan.errors import ShapeError
from fakplan.gates.operator import OperatorGate
from fakplan.shape import load_shape_text
from fakplan.shape.source import MAX_BYTES


def _text(data: bytes, path: str, rev: str | None) -> str:
    """The file as text; bytes that are not UTF-8, or more than a shape can be, are a shape
    that cannot be read."""
    if len(data) > MAX_BYTES:
        at = f" at {rev}" if rev else ""
        raise ShapeError(
            f"larger than {MAX_BYTES // 1024:,} KiB{at}: a shape is a short YAML file", file=path
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        at = f" at {rev}" if rev else ""
        raise ShapeError(f"cannot read{at}: not UTF-8 text", file=path) from None


GatesFor = Callable[[Path], tuple[OperatorGate, ...]]


def review(
    change: Touched,
    git: GitRevision,
    cwd: Path,
    out_dir: Path,
    gates_for: GatesFor | None = None,
) -> ShapeDiff:
    """Load, compile and gate both sides of one touched shape and compare them.

    Paths are shown relative to ``cwd``. The old side is read from the revision
    (relative references resolve against today's tree); a side that cannot be
    read is reported in the diff, never raised. ``gates_for`` names the operator
    gates of a shape path (today's ``gates/``, for both sides: a review judges the old
    and the new shape by the same rules).
    """

    def shown(relative: str) -> str:
        return Path(os.path.relpath(git.top / relative, cwd)).as_posix()

    judge = (change.new or change.old) or ""
    operator_gates = gates_for(git.top / judge) if gates_for and judge else ()

    def side(relative: str | None, data: bytes | None, rev: str | None) -> Side | None:
        if relative is None:
            return None
        path = shown(relative)
        if data is None:
            return Side(path, error=f"{path}: cannot read", name_hint=None)
        return Side.load(
            path,
            lambda: load_shape_text(_text(data, path, rev), Path(path)),
            name_of(data),
            operator_gates,
            prove=rev is None,  # the new side: its fixes are the ones shown
        )

    d = diff_sides(
        side(change.old, change.old_bytes, git.rev),
        side(change.new, change.new_bytes, None),
        status=change.status,
        rev=git.rev,
    )
    return retire(d, out_dir) if d.status == "deleted" else d
