"""The compiled record on disk: ``DIR/<name>/plan.json`` beside the rendered files.

Writes are atomic (a temporary file in the same folder, flushed to disk, then
``os.replace``), so a reader sees the old file or the new one, never half of
either. plan.json is the record's one commit point: it is written first and the
headers, rendered from it, after it, so a writer killed in between leaves headers
that lag plan.json (never ones that show a verdict it lacks), and the next writer,
which renders every header again from plan.json, repairs them. Verdicts already
recorded for a prediction survive a re-compile while the prediction's value is
unchanged: an earlier verdict is never lost. Every writer (compile, verify, probe)
reads, merges and writes the record under a lock on its folder
(``rewrite_record``), so runs at once cannot drop each other's verdicts, and an
observation that is already recorded is not added again
(``Prediction.with_verdict``). Under the lock no writer is mid-write, so the
temporary files a killed writer left are removed then.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fakplan.errors import FakplanError, RecordError
from fakplan.files import load_json, read_bounded, sync_folder, write_atomic
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Prediction, Verdict
from fakplan.render import DIGEST_LINE, RenderedFile, record_digest, render_plan
from fakplan.shape import load_shape, shape_paths

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape

# mkstemp's random part: 8 of "abcdefghijklmnopqrstuvwxyz0123456789_"
_TEMP_TAIL = r"\.[a-z0-9_]{8}"


def reserve(path: Path) -> Path:
    """A name of its own for a file about to be written: ``path``, else ``<stem>-2<suffix>``,
    ``-3``... made empty with O_EXCL, so two writers never pick one name (the exists()
    check it replaces raced). Write it with ``write_atomic``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target, n = path, 2
    while True:
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return target
        except FileExistsError:
            target = path.with_name(f"{path.stem}-{n}{path.suffix}")
            n += 1


def remove_temporaries(folder: Path, names: Iterable[str]) -> tuple[str, ...]:
    """Remove the temporaries killed writers left in a record's folder; call under its lock.

    Only ``write_atomic``'s form, ``.<name>.<8 random>``, is removed, for ``names`` (the
    files this write makes) and the files already in the folder, so nothing else an
    operator keeps there is touched. Under the lock no writer is mid-write: each such
    file is a dead writer's. Returns the names removed.
    """
    try:
        entries = sorted(p.name for p in folder.iterdir())
    except FileNotFoundError:
        return ()
    targets = {*names, *(n for n in entries if not n.startswith("."))}
    form = re.compile(rf"\.(?:{'|'.join(map(re.escape, sorted(targets)))}){_TEMP_TAIL}")
    removed = tuple(n for n in entries if form.fullmatch(n))
    for name in removed:
        (folder / name).unlink(missing_ok=True)
    return removed


PROBES_DIR = "probes"  # <name>/probes/<run id>.json: each probe run's raw figures


def remove_unwritten(folder: Path) -> tuple[str, ...]:
    """Remove what writers killed mid-way left in a folder of raw records (``probes/``);
    call under the record's lock: their temporaries, and the empty files ``reserve`` made
    for a write that never came (under the lock no writer is between the two)."""
    removed = list(remove_temporaries(folder, ()))
    try:
        entries = sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return tuple(removed)
    for entry in entries:
        regular = entry.suffix == ".json" and not entry.is_symlink() and entry.is_file()
        if regular and entry.stat().st_size == 0:
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return tuple(removed)


def stale_headers(folder: Path) -> tuple[str, ...]:
    """The rendered files of a record whose header names another plan.json than the one
    there (a writer stopped between the two; the next write renders them again)."""
    record = folder / "plan.json"
    digest = record_digest(read_bounded(record, MAX_RECORD, RecordError, "a plan record").decode())
    stale: list[str] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.suffix not in (".sh", ".env"):
            continue
        found = DIGEST_LINE.search(
            read_bounded(entry, MAX_RECORD, RecordError, "a rendered file").decode()
        )
        if found is None or found.group(1) != digest:
            stale.append(entry.name)
    return tuple(stale)


def write_record(folder: Path, plan: Plan, files: Sequence[RenderedFile]) -> None:
    """plan.json first, the files rendered from it after; call under the folder's lock.

    plan.json is the commit point: once it is renamed into place (synced, with the
    folder) the write has happened. A kill before it leaves the old record whole; a kill
    after it leaves headers behind plan.json (showing fewer verdicts, never more), which
    the next writer renders again (``stale_headers``). So the rendered files, derived from
    the record, are renamed into place unsynced and the folder is synced once after them:
    one durable commit per folder, not one per file.
    """
    write_atomic(folder / "plan.json", plan.to_json())
    for rendered in files:
        write_atomic(
            folder / rendered.name, rendered.text, executable=rendered.executable, durable=False
        )
    for sub in {(folder / rendered.name).parent for rendered in files} - {folder}:
        sync_folder(sub)
    sync_folder(folder)


def record_path(out_dir: Path, name: str) -> Path:
    return out_dir / name / "plan.json"


MAX_RECORD = 64 << 20  # a plan with thousands of verdicts is a few MiB


def read_record(path: Path) -> Plan:
    if not path.exists() and not path.is_symlink():
        raise RecordError(f"{path}: no compiled record; run fakplan compile first")
    raw = read_bounded(path, MAX_RECORD, RecordError, "a plan record")
    data = load_json(raw, str(path), RecordError, what="plan record")
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a fakplan plan record (not a JSON object)")
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


def rewrite_record(
    loaded: LoadedShape,
    compiled: Plan,
    out_dir: Path,
    templates: Path | None = None,
    amend: Callable[[Plan], Plan] | None = None,
    first: Callable[[Path], None] | None = None,
    rendered: tuple[Plan, list[RenderedFile]] | None = None,
) -> tuple[Plan, list[RenderedFile]]:
    """The one read-modify-write of a record, under its lock: compile, verify and probe use it.

    ``compiled`` is the plan compiled afresh from the shape. Under the lock the record
    on disk is read (so a verdict another writer added a moment ago is seen), its
    verdicts carried (``carry_verdicts``), ``amend`` applied, every file rendered in
    memory, a killed writer's temporaries removed, ``first`` given the folder (a probe
    writes its raw figures there, so they and the verdicts land under one lock), and the
    record written (``write_record``). Returns the plan written and its rendered files.
    ``rendered`` is a plan already rendered before the lock (compile stages every shape):
    its files are kept where the plan under the lock turns out the same.
    """
    target = record_path(out_dir, compiled.name)
    folder = target.parent
    try:
        with locked(folder):
            previous = read_record(target) if target.exists() else None
            plan = carry_verdicts(compiled, previous)
            if amend is not None:
                plan = amend(plan)
            if rendered is not None and rendered[0] == plan:
                files = rendered[1]
            else:
                files = render_plan(loaded, plan, templates, folder)
            remove_temporaries(folder, [target.name, *(f.name for f in files)])
            remove_unwritten(folder / PROBES_DIR)
            if first is not None:
                first(folder)
            write_record(folder, plan, files)
    except OSError as exc:  # a folder or file the system refuses (permissions, a full disk)
        where = exc.filename or folder
        raise RecordError(f"{where}: cannot write the record ({exc.strerror or exc})") from None
    return plan, files


def write_unrecorded(folder: Path, write: Callable[[Path], None]) -> None:
    """Write beside a record without changing it (a probe run that closed no prediction):
    under its lock, after clearing what killed writers left in ``probes/``."""
    try:
        with locked(folder):
            remove_unwritten(folder / PROBES_DIR)
            write(folder)
    except OSError as exc:
        where = exc.filename or folder
        raise RecordError(f"{where}: cannot write the record ({exc.strerror or exc})") from None


def record_verdicts(
    loaded: LoadedShape,
    out_dir: Path,
    verdicts: dict[str, Verdict],
    templates: Path | None = None,
    first: Callable[[Path], None] | None = None,
    prove: Callable[[LoadedShape, Plan], Plan] | None = None,
) -> Recorded:
    """Add verdicts beside their predictions in plan.json and in the rendered headers.

    The plan is compiled afresh from the shape; verdicts already recorded are
    kept (see ``carry_verdicts``) and the new ones appended, except an
    observation already recorded (same status, observed value and source): a
    log read twice is one verdict. All of it under the record's lock
    (``rewrite_record``), with ``first`` (a probe's raw figures) written before plan.json.
    """
    already: tuple[str, ...] = ()

    def add(plan: Plan) -> Plan:
        nonlocal already
        unknown = sorted(set(verdicts) - {p.id for p in plan.predictions})
        if unknown:
            target = record_path(out_dir, plan.name)
            raise RecordError(f"{target}: no prediction {', '.join(unknown)} in this plan")
        already = tuple(
            p.id for p in plan.predictions if p.id in verdicts and p.records(verdicts[p.id])
        )
        return plan.model_copy(
            update={
                "predictions": tuple(
                    p.with_verdict(verdicts[p.id]) if p.id in verdicts else p
                    for p in plan.predictions
                )
            }
        )

    compiled = compile_plan(loaded)
    if prove is not None:  # the fixes the headers print, proven as compile proves them
        compiled = prove(loaded, compiled)
    plan, _ = rewrite_record(loaded, compiled, out_dir, templates, add, first)
    added = tuple(pid for pid in verdicts if pid not in already)
    return Recorded(plan=plan, added=added, already=already)


@dataclass(frozen=True)
class Planned:
    """One shape of a fleet: its plan with the verdicts recorded for it, or why not."""

    path: str
    plan: Plan | None = None
    error: str | None = None


def planned_shapes(arguments: Sequence[str], records: Path | None) -> list[Planned]:
    """Every shape the arguments name (files or folders), compiled, with the verdicts of
    its record under ``records`` carried; a shape or record that cannot be read is an
    entry saying so, and the others are still planned (``metrics``, ``rules``, ``report``)."""
    out: list[Planned] = []
    for argument in arguments:
        try:
            paths = shape_paths(argument)
        except FakplanError as exc:
            out.append(Planned(argument, error=str(exc)))
            continue
        for path in paths:
            try:
                plan = compile_plan(load_shape(path))
                if records is not None and record_path(records, plan.name).exists():
                    plan = carry_verdicts(plan, read_record(record_path(records, plan.name)))
            except FakplanError as exc:
                out.append(Planned(str(path), error=str(exc)))
                continue
            out.append(Planned(str(path), plan))
    return _one_per_name(out)


def _one_per_name(planned: list[Planned]) -> list[Planned]:
    """A second shape with a name already planned is an entry saying so: two shapes of one
    name would be one series, one rule group and one record (compile refuses it too)."""
    first: dict[str, str] = {}
    out: list[Planned] = []
    for entry in planned:
        if entry.plan is not None and entry.plan.name in first:
            out.append(
                Planned(
                    entry.path,
                    error=f"{entry.path}: name: {entry.plan.name!r} is also the name of "
                    f"{first[entry.plan.name]}",
                )
            )
            continue
        if entry.plan is not None:
            first[entry.plan.name] = entry.path
        out.append(entry)
    return out
