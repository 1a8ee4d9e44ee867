"""The compiled record on disk: ``DIR/<name>/plan.json`` beside the rendered files.

Writes are atomic (a temporary file in the same folder, then ``os.replace``),
so a reader sees the old file or the new one, never half of either. Verdicts
already recorded for a prediction survive a re-compile while the prediction's
value is unchanged: an earlier verdict is never lost. Adding verdicts reads,
merges and writes the record under a lock on its folder, so two runs at once
(verify and probe) cannot drop each other's verdicts, and an observation that is
already recorded is not added again (``Prediction.with_verdict``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fakplan.errors import RecordError
from fakplan.plan import Plan
from fakplan.predict import Prediction, Verdict

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape


def write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temp, 0o755 if executable else 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def record_path(out_dir: Path, name: str) -> Path:
    return out_dir / name / "plan.json"


def read_record(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path}: no compiled record; run fakplan compile first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable plan record ({exc})") from None
    try:
        data["schema_"] = data.pop("schema")
        return Plan.model_validate(data)
    except Exception as exc:
        raise RecordError(
            f"{path}: not a fakplan plan record ({str(exc).splitlines()[0]})"
        ) from None


def carry_verdicts(new: Plan, old: Plan | None) -> Plan:
    """Keep the verdicts of predictions whose claim has not changed.

    A prediction that changed (the shape moved) keeps its verdicts too: the old
    prediction moves to ``retired_predictions`` rather than being dropped.
    """
    if old is None:
        return new
    previous = {p.id: p for p in old.predictions}
    kept: list[Prediction] = []
    retired: list[Prediction] = list(old.retired_predictions)
    for prediction in new.predictions:
        before = previous.pop(prediction.id, None)
        if before is not None and _same_claim(before, prediction):
            kept.append(prediction.model_copy(update={"verdicts": before.verdicts}))
        else:
            kept.append(prediction)
            if before is not None and before.verdicts:
                retired.append(before)
    retired.extend(p for p in previous.values() if p.verdicts)
    return new.model_copy(
        update={"predictions": tuple(kept), "retired_predictions": tuple(retired)}
    )


def _same_claim(a: Prediction, b: Prediction) -> bool:
    return (a.claim, a.low, a.high, a.unit) == (b.claim, b.low, b.high, b.unit)


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on a record's folder while its plan.json is read and rewritten.

    The folder itself is locked (``flock`` on its descriptor): plan.json is replaced on
    every write, so a lock on the file would guard a file that is no longer there, and a
    lock file would be one more file in the folder. Advisory, POSIX only.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class Recorded:
    """The record as written, and which verdicts it gained (the rest were already there)."""

    plan: Plan
    added: tuple[str, ...]
    already: tuple[str, ...]


def record_verdicts(
    loaded: LoadedShape,
    out_dir: Path,
    verdicts: dict[str, Verdict],
    templates: Path | None = None,
) -> Recorded:
    """Add verdicts beside their predictions in plan.json and in the rendered headers.

    The plan is compiled afresh from the shape; verdicts already recorded are
    kept (see ``carry_verdicts``) and the new ones appended, except an
    observation already recorded (same status, observed value and source): a
    log read twice is one verdict. Every file is rendered in memory first, then
    each is written atomically, under the record's lock.
    """
    from fakplan.plan import compile_plan
    from fakplan.render import render_plan

    compiled = compile_plan(loaded)
    target = record_path(out_dir, compiled.name)
    folder = target.parent
    with locked(folder):
        previous = read_record(target) if target.exists() else None
        plan = carry_verdicts(compiled, previous)
        known = {p.id for p in plan.predictions}
        unknown = sorted(set(verdicts) - known)
        if unknown:
            raise RecordError(f"{target}: no prediction {', '.join(unknown)} in this plan")
        already = tuple(
            p.id for p in plan.predictions if p.id in verdicts and p.records(verdicts[p.id])
        )
        plan = plan.model_copy(
            update={
                "predictions": tuple(
                    p.with_verdict(verdicts[p.id]) if p.id in verdicts else p
                    for p in plan.predictions
                )
            }
        )
        files = render_plan(loaded, plan, templates, folder)
        for rendered in files:
            write_atomic(folder / rendered.name, rendered.text, executable=rendered.executable)
        write_atomic(target, plan.to_json())
    added = tuple(pid for pid in verdicts if pid not in already)
    return Recorded(plan=plan, added=added, already=already)
