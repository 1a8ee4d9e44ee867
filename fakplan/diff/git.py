"""The git side: which shape files a change touched since a revision, and their bytes.

Only git is asked (``git diff --name-status``, ``ls-files``, ``cat-file``); no shape is
loaded here. A deleted and an added file that hold the same shape are paired as a
rename, so a shape cannot slip past review by moving.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fakplan.diff.compare import Status
from fakplan.errors import FakplanError, ShapeError
from fakplan.files import read_bounded
from fakplan.shape.source import MAX_BYTES, read_yaml

# what stands for a blob larger than a shape can be: its size is refused when it is read
TOO_LARGE = b"#" * (MAX_BYTES + 1)


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
        if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", self.commit_id):
            # "^HEAD" parses as an exclusion, "A..B" as a range: neither is one commit
            raise FakplanError(
                f"--rev {rev}: names no single commit (an exclusion or a range); give one "
                "revision, e.g. HEAD~1 or origin/main"
            )

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
        """The file at the revision; a blob larger than a shape can be is not fetched (its
        first bytes stand for it, so the side is refused as too large)."""
        if self.kind(relative) != "blob":
            return None
        spec = f"{self.commit_id}:{relative}"
        if int(self._run("cat-file", "-s", spec).decode().strip() or 0) > MAX_BYTES:
            return TOO_LARGE
        return self._run("cat-file", "blob", spec)

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
    """The file as a YAML mapping, read with a shape's bounds (size, nesting, aliases), or
    None (not YAML, not a mapping, or past a shape's bounds)."""
    if data is None or len(data) > MAX_BYTES:
        return None
    try:
        loaded, _ = read_yaml(Path("shape.yaml"), data.decode("utf-8"))
    except (UnicodeDecodeError, ShapeError):
        return None
    return loaded


def name_of(data: bytes | None) -> str | None:
    """The ``name:`` a file states, read loosely: records and verdicts go by it."""
    name = (_mapping(data) or {}).get("name")
    return name if isinstance(name, str) and name else None


def _looks_like_shape(change: Touched) -> bool:
    """A YAML mapping with an ``engine:`` key on either side: what a shape always has."""
    return any("engine" in (_mapping(b) or {}) for b in (change.old_bytes, change.new_bytes))


def _read(path: Path, top: Path) -> bytes | None:
    """The working tree's file, bounded as a shape is read; None where it cannot be read:
    not a regular file (a FIFO blocks, a device never ends), or a symlink out of the
    repository (a review reads the repository's shapes, not the machine's files)."""
    try:
        if not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(top)):
            return None
        return read_bounded(path, MAX_BYTES + 1, ShapeError, "a shape file", head=True)
    except (ShapeError, OSError, ValueError):
        return None


def _pair_renames(added: list[Touched], deleted: list[Touched]) -> list[Touched]:
    """A deleted and an added file holding the same bytes or the same ``name:`` are one
    shape that moved: its record, its predictions and its verdicts go with the name."""
    out: list[Touched] = []
    free = list(added)
    for gone in deleted:
        same = (a for a in free if gone.old_bytes is not None and a.new_bytes == gone.old_bytes)
        match = next(same, None)
        name = name_of(gone.old_bytes)
        if match is None and name is not None:
            match = next((a for a in free if name_of(a.new_bytes) == name), None)
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


def _order(change: Touched) -> str:
    return change.new or change.old or ""


@dataclass(frozen=True)
class _Selection:
    """The selectors as repository-relative paths: files (each with the selector as
    typed, for messages) and folders."""

    files: dict[str, str]
    folders: list[str]

    def holds(self, path: str | None) -> bool:
        """A named file, or a ``*.yaml``/``*.yml`` right in a named folder (not below it,
        as ``fakplan gate`` reads a folder)."""
        if path is None:
            return False
        in_folder = PurePosixPath(path).parent.as_posix() in self.folders
        return path in self.files or (in_folder and path.endswith((".yaml", ".yml")))


def _select(git: GitRevision, selectors: Sequence[str], cwd: Path) -> _Selection:
    """Sort the selectors into files and folders; one outside the repository is bad input."""
    files: dict[str, str] = {}
    folders: list[str] = []
    for selector in selectors:
        absolute = (cwd / selector).resolve()
        try:
            relative = absolute.relative_to(git.top).as_posix()
        except ValueError:
            raise ShapeError(
                f"outside the repository {git.top.as_posix()}", file=selector
            ) from None
        if absolute.is_dir() or git.kind(relative) == "tree":
            folders.append(relative)
        else:
            files.setdefault(relative, selector)
    return _Selection(files, folders)


def _touched(git: GitRevision, named: Sequence[str]) -> list[Touched]:
    """Every YAML file the change touched, and every ``named`` file, with both sides' bytes;
    a deletion and an addition of one shape paired as a rename."""
    specs = ["*.yaml", "*.yml", *(f":(literal){f}" for f in named)]
    added, deleted, modified = git.touched(specs)
    top = git.top
    changes = [Touched("changed", p, p, git.show(p), _read(top / p, top)) for p in modified]
    return changes + _pair_renames(
        [Touched("added", None, p, None, _read(top / p, top)) for p in added],
        [Touched("deleted", p, None, git.show(p), None) for p in deleted],
    )


def _untouched(git: GitRevision, files: dict[str, str], kept: list[Touched]) -> list[Touched]:
    """The named files the change did not touch: reported anyway (a reviewer asked for
    them), so each is compared with itself; one that exists neither now nor then is bad input."""
    out: list[Touched] = []
    for relative, selector in files.items():
        if any(relative in (c.old, c.new) for c in kept):
            continue
        then, now = git.show(relative), _read(git.top / relative, git.top)
        if then is None and now is None:
            raise ShapeError(f"no such file, now or at {git.rev}", file=selector)
        status: Status = "added" if then is None else "deleted" if now is None else "changed"
        old = None if then is None else relative
        new = None if now is None else relative
        out.append(Touched(status, old, new, then, now))
    return out


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
    selection = _select(git, selectors, cwd)
    changes = _touched(git, list(selection.files))
    if not selectors:
        kept = [c for c in changes if _looks_like_shape(c)]
        skipped = sorted(c.new or c.old or "" for c in changes if c not in kept)
        return git, sorted(kept, key=_order), skipped
    kept = [c for c in changes if selection.holds(c.old) or selection.holds(c.new)]
    kept += _untouched(git, selection.files, kept)
    return git, sorted(kept, key=_order), []
