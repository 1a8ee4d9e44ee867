"""Bounded reads of what a shape points at: one reader for every file fakplan opens.

A shape comes from a pull request, and so do the files it names: a config.json, a
safetensors index or header, a GGUF, a boot log, a record. Each is read here under the
same rules, so none can hang fakplan, exhaust its memory or reach a traceback:

- only a regular file is read: a FIFO (opening one waits for a writer), a device
  (/dev/zero never ends), a socket or a folder is refused with one line; the path is
  checked before it is opened and the opened file again (O_NONBLOCK, so a FIFO swapped
  in between opens at once instead of blocking);
- a symlink is followed at most ``MAX_HOPS`` times, and a loop is refused;
- at most ``limit`` bytes are read: a larger file is refused before it is parsed;
- JSON is parsed with bounded nesting (checked on the bytes, before the recursive
  parser runs), no ``Infinity``/``NaN`` (not JSON), integers of at most
  ``MAX_DIGITS`` digits and finite floats only.

Each refusal names the file and is raised as the caller's own error class, so a config
is a ``GeometryError``, a record a ``RecordError``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from fakplan.errors import FakplanError

# O_NONBLOCK: a FIFO swapped in after the check opens at once instead of waiting for a
# writer (on a regular file it changes nothing); both flags are POSIX-only.
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
MAX_HOPS = 32  # symlinks followed from one path (Linux's own is 40)
MAX_DEPTH = 64  # JSON nesting: a config is a few levels of objects
MAX_DIGITS = 30  # digits of a JSON integer: no count a model states is longer
_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "named pipe (FIFO)"),
    (stat.S_ISSOCK, "socket"),
)


def not_a_file(path: Path, mode: int, error: type[FakplanError], what: str) -> FakplanError | None:
    """Why ``path`` is not read, unless it is a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return error(f"{path}: is a folder, expected {what}")
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    return error(f"{path}: is a {kind}, not a file: {what} is read from a regular file")


def cannot(
    path: Path, exc: OSError | ValueError | RuntimeError, error: type[FakplanError]
) -> FakplanError:
    """One line for a failed open or read."""
    if isinstance(exc, FileNotFoundError):
        return error(f"{path}: no such file")
    if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
        return error(
            f"{path}: a symlink loop (or more than {MAX_HOPS} links); give the file itself"
        )
    if isinstance(exc, ValueError):  # a NUL byte in the path
        return error(f"{str(path)!r}: cannot read ({exc})")
    return error(f"{path}: cannot read ({exc.strerror or exc})")


def resolved(path: Path, error: type[FakplanError]) -> Path:
    """``path`` with its symlinks followed, at most ``MAX_HOPS`` of them, loops refused."""
    current = Path(os.path.abspath(path))
    for _ in range(MAX_HOPS):
        try:
            if not current.is_symlink():
                return current
            target = Path(os.readlink(current))
        except (OSError, ValueError) as exc:
            raise cannot(path, exc, error) from None
        # a relative target is read from the folder the link is really in: through a
        # symlinked folder, `..` climbs from where the folder points, as the kernel does
        current = Path(os.path.normpath(Path(os.path.realpath(current.parent)) / target))
    raise cannot(path, RuntimeError("too many links"), error)


def open_regular(path: Path, error: type[FakplanError], what: str) -> tuple[int, int]:
    """An open descriptor of the regular file ``path`` names, and its size."""
    real = resolved(path, error)
    try:
        refused = not_a_file(path, os.stat(real).st_mode, error, what)
        if refused is not None:
            raise refused
        fd = os.open(real, READ_FLAGS)
    except (OSError, ValueError, RuntimeError) as exc:
        raise cannot(path, exc, error) from None
    try:
        info = os.fstat(fd)
        refused = not_a_file(path, info.st_mode, error, what)
        if refused is not None:
            raise refused
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_bounded(
    path: Path, limit: int, error: type[FakplanError], what: str, *, head: bool = False
) -> bytes:
    """The bytes of the regular file ``path``: all of them, at most ``limit`` (a larger
    file is refused), or with ``head`` only its first ``limit`` bytes."""
    fd, size = open_regular(path, error, what)
    try:
        if size > limit and not head:
            raise error(
                f"{path}: {size:,} bytes, more than the {limit:,} {what} can be; "
                "is it the right file?"
            )
        chunks: list[bytes] = []
        left = limit if head else limit + 1
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 20))
            except OSError as exc:
                raise cannot(path, exc, error) from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit and not head:  # it grew while read
        raise error(f"{path}: more than the {limit:,} bytes {what} can be")
    return data


# the closing quote optional: an unterminated string ends the text in one match, where a
# required one made every escaped quote rescan to the end (a 60 KB config took 12 s)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?')
_BRACKET = re.compile(r"[\[\]{}]")


def _depth(data: str | bytes) -> int:
    """The deepest nesting of JSON arrays and objects, strings skipped (by regex: a
    safetensors index of a few MiB is scanned in milliseconds)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def load_json(
    data: str | bytes,
    where: str,
    error: type[FakplanError],
    *,
    max_depth: int = MAX_DEPTH,
    what: str = "JSON document",
) -> Any:
    """JSON with bounded nesting, finite numbers and integers of plausible length."""

    def constant(name: str) -> Any:
        raise error(f"{where}: {name} is not a JSON number (a count or size is finite)")

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > MAX_DIGITS:
            raise error(
                f"{where}: an integer of {len(text):,} digits; no figure a model states "
                f"has more than {MAX_DIGITS}"
            )
        return int(text)

    def real(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise error(f"{where}: {text[:40]} is out of a number's range")
        return value

    deepest = _depth(data)
    if deepest > max_depth:
        raise error(f"{where}: nested {deepest:,} levels deep, more than {max_depth}: not a {what}")
    try:
        return json.loads(data, parse_constant=constant, parse_int=integer, parse_float=real)
    except FakplanError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not a readable {what} ({str(exc)[:120]})") from None


def write_atomic(path: Path, text: str, *, executable: bool = False, durable: bool = True) -> None:
    """Replace ``path`` whole: a temporary ``.<name>.<8 random>`` beside it, renamed.

    Durable (the default): the data is on disk before the name points at it and the
    rename before this returns, so a later write cannot reach the disk ahead of this one.
    ``durable=False`` leaves both to the caller's one ``sync_folder`` (files derived from
    a record, which a crash can only leave stale, never half-written: still renamed
    whole). A writer killed before the rename leaves the old file and its temporary
    (``remove_temporaries``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, 0o755 if executable else 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if durable:
        sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; Windows cannot open a folder to sync it)."""
    if sys.platform == "win32":  # pragma: no cover - no directory descriptors
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
