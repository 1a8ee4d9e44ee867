"""Stream a log file in fixed-size chunks and hand on only the lines worth reading.

Logs run to hundreds of MB (a server that has been up for weeks), so the file
is never held whole: it is read in ``CHUNK`` blocks, a ``Prefilter`` finds the
lines that hold any row's needle by scanning each block in C, and only those
lines are decoded and given to the parsers. Memory stays flat whatever the
file's size.

Handled here, so the parsers see clean text: gzip (by its magic bytes), CRLF,
ANSI colour codes, a last line cut mid-way (a truncated file), a compressed
stream that ends early, lines too long to be log lines, and binary data.

The work is bounded whatever the file holds: only a regular file is read (a
device or a FIFO has no end, and opening a FIFO waits for a writer), and only
up to the size it had when opened (a server still writing it cannot keep the
reader going); a run of ``MAX_RUN`` bytes without a line ending ends the read
(a 10 GiB file of NULs, a gzip bomb); each line is looked at once; and a file with
more than ``MAX_HITS`` lines that hold a needle is refused (the parsers' work is per
such line, about 10-40 µs: 356 KB of gzip holding a million of them took 28 s).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fakplan.errors import FakplanError, LedgerError
from fakplan.files import READ_FLAGS, cannot, not_a_file

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

CHUNK = 4 << 20
MAX_LINE = 1 << 20  # a longer "line" is data, not a log line: it is skipped whole
MAX_RUN = 64 << 20  # this far without a line ending, the file is no log: reading stops
MAX_TEXT = 1000  # characters of a recognised line kept for the record
SNIFF = 64 << 10
# Lines holding a row's needle, per file: a boot states 20-2,000 (a TP 8 boot with every
# rank's lines), so this is 50 such boots or thousands of small ones, and about 4 s of
# parsing at worst on a laptop core.
MAX_HITS = 100_000

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\r\x1b\x0c") + b"\x7f"

# The prefilter's plan: a pass costs about a memchr over the block (37 ms over 50 MB,
# measured), and each occurrence of its anchor byte 27 ns more, so a pass over 4 MiB is
# worth about 110,000 occurrences; a needle's tail from its anchor is at least this long.
_PASS_COST = 1.0
_HIT_COST = 1 / 110_000
_MIN_TAIL = 8
_SAMPLE = 256 << 10  # the bytes of the first block the anchors are counted in


class Prefilter:
    """Finds the lines that hold any of ``needles`` in a few passes over a block, in C.

    Each pass is one regex, an anchor byte and the needles' tails from it
    (``a(?:vailable KV|ttention ...)``): sre finds the anchor at memchr speed and tries
    the tails in C. Which bytes anchor which needles is planned on the file's first
    block: the fewest, rarest anchors that cover every needle (a greedy weighted cover,
    each byte counted in the first ``_SAMPLE`` bytes), so a log of JSON, of prose or of
    stack traces each gets its own few passes. A line found holds a needle's tail: the
    rows' own regexes then decide.
    """

    def __init__(self, needles: Iterable[str]) -> None:
        unique = sorted({n.encode() for n in needles if n})
        # a needle holding another is found by the other
        self._needles = [n for n in unique if not any(o != n and o in n for o in unique)]
        self._patterns: list[re.Pattern[bytes]] | None = None

    def _plan(self, sample: bytes) -> list[re.Pattern[bytes]]:
        tails: dict[int, dict[bytes, bytes]] = {}  # anchor byte -> needle -> its tail
        for needle in self._needles:
            for c in set(needle):
                tail = _tail(needle, c)
                if tail is not None:
                    tails.setdefault(c, {})[needle] = tail
        scale = (4 << 20) / max(len(sample), 1)
        cost = {c: _PASS_COST + _HIT_COST * sample.count(bytes((c,))) * scale for c in tails}
        uncovered = set(self._needles)
        passes: list[tuple[int, set[bytes]]] = []
        while uncovered:
            # the anchor that finds the most uncovered needles for its cost (ties: the byte)
            c = min(
                (c for c in tails if not uncovered.isdisjoint(tails[c])),
                key=lambda c: (cost[c] / len(uncovered.intersection(tails[c])), c),
            )
            found = uncovered.intersection(tails[c])
            passes.append((c, {tails[c][n] for n in found}))
            uncovered -= found
        return [
            re.compile(
                re.escape(bytes((c,)))
                + b"(?:"
                + b"|".join(re.escape(t) for t in sorted(found, key=lambda t: (-len(t), t)))
                + b")"
            )
            for c, found in passes
        ]

    def line_starts(self, block: bytes, start: int = 0) -> list[int]:
        """Offsets of the lines of ``block`` (from ``start``) that hold a needle's tail, in
        order. After a hit the search goes on from the next line: a line holding a needle
        100,000 times is looked back over once, not once per hit (quadratic)."""
        if self._patterns is None:
            self._patterns = self._plan(block[start : start + _SAMPLE])
        found: set[int] = set()
        for pattern in self._patterns:
            pos = start
            while (match := pattern.search(block, pos)) is not None:
                found.add(block.rfind(b"\n", 0, match.start()) + 1)
                end = block.find(b"\n", match.end())
                if end == -1:
                    break
                pos = end + 1
        return sorted(found)


def _tail(needle: bytes, anchor: int) -> bytes | None:
    """The needle from the first ``anchor`` byte that leaves ``_MIN_TAIL`` bytes (or the
    whole of a shorter needle) after it, without the anchor; None if no such byte."""
    need = min(_MIN_TAIL, len(needle))
    index = needle.find(bytes((anchor,)))
    while index != -1:
        if len(needle) - index >= need:
            return needle[index + 1 :]
        index = needle.find(bytes((anchor,)), index + 1)
    return None


OnLine = Callable[[int, str, bool], None]
"""Called with (1-based line number, clean text, True if the line has no line ending)."""


@dataclass
class ReadStats:
    """What reading the file found besides its lines."""

    lines: int = 0
    compressed: bool = False
    looks_binary: bool = False
    unterminated_line: int | None = None
    stream_error: str | None = None
    overlong_lines: list[int] = field(default_factory=list)
    stopped_at: tuple[int, int] | None = None  # (line, bytes read): a run past MAX_RUN
    hits: int = 0  # lines handed on (they hold a needle)


def clean(raw: bytes) -> str:
    """A line as text: UTF-8 (bad bytes replaced), no ANSI codes, no line ending."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.rstrip("\r\n").rstrip("\r")


def clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _looks_binary(sample: bytes) -> bool:
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    controls = len(sample) - len(sample.translate(None, _CONTROL))
    bad_utf8 = sample[: len(sample) - 4].decode("utf-8", "replace").count("\ufffd")
    return (controls + bad_utf8) > len(sample) * 0.02


class _Snapshot(io.RawIOBase):
    """A regular file read up to the size it had when opened: a log a server is still
    writing is read as it was, so a writer faster than the reader cannot keep it going."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self._file = io.FileIO(fd, "rb")
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        if self._left <= 0:
            return 0
        with memoryview(buffer) as view:
            count = self._file.readinto(view[: self._left]) or 0
        self._left -= count
        return count

    def close(self) -> None:
        self._file.close()
        super().close()


def _not_a_file(path: Path, mode: int) -> FakplanError | None:
    """Why ``path`` is not read, unless it is a regular file. A device or a FIFO is
    refused rather than read: it has no end to find the last boot at (/dev/zero never
    answered), and opening a FIFO waits for a writer that may never come."""
    refused = not_a_file(path, mode, LedgerError, "a boot log file")
    if refused is None or "folder" in str(refused):
        return refused
    return LedgerError(f"{refused} (save the log to one, plain or gzip, and give that)")


def _cannot(path: Path, exc: OSError | ValueError) -> FakplanError:
    return cannot(path, exc, LedgerError)


def _open(path: Path) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """The stream to read (decompressed if gzip) and the file under it (to close).

    The path is checked before it is opened (opening a FIFO blocks, opening some devices
    acts), and the opened file again: it is the one read, whatever the path names now."""
    try:
        refused = _not_a_file(path, os.stat(path).st_mode)
        if refused is not None:
            raise refused
        fd = os.open(path, READ_FLAGS)
    except (OSError, ValueError) as exc:
        raise _cannot(path, exc) from None
    try:
        info = os.fstat(fd)
        refused = _not_a_file(path, info.st_mode)
        if refused is not None:
            raise refused
        handle = io.BufferedReader(_Snapshot(fd, info.st_size))
    except BaseException:
        os.close(fd)
        raise
    try:
        magic = handle.peek(2)[:2]
    except OSError as exc:
        handle.close()
        raise _cannot(path, exc) from None
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=handle, mode="rb"), handle
    return handle, handle


def scan_file(path: Path, prefilter: Prefilter, on_line: OnLine) -> ReadStats:
    """Stream ``path``; call ``on_line`` for each line that holds a pre-filter hit."""
    stream, raw = _open(path)
    stats = ReadStats(compressed=stream is not raw)
    counted = _counting(path, on_line, stats)
    carry = b""
    skipping = False  # inside a line longer than MAX_LINE
    line_base = 0  # complete lines before the current block
    run = read = 0  # bytes since the last line ending; bytes read
    with raw, stream:
        for block in _blocks(stream, path, stats):
            read += len(block)
            last = block.rfind(b"\n")
            run = run + len(block) if last == -1 else len(block) - last - 1
            if run > MAX_RUN:  # no log line is this long: what follows is not a log either
                stats.stopped_at = (line_base + 1, read)
                break
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry, skipping = _hold(data, skipping, line_base + 1, stats)
                continue
            complete, carry = data[:cut], data[cut:]
            start = 0
            if skipping:  # an overlong line ends in this block: read from the next one
                start = complete.index(b"\n") + 1
                skipping = False
            line_base = _scan_block(complete, start, line_base, prefilter, counted, stats)
            if len(carry) > MAX_LINE:
                carry, skipping = _hold(carry, skipping, line_base + 1, stats)
    if carry and not skipping:
        number = line_base + 1
        stats.unterminated_line = number
        if prefilter.line_starts(carry):
            counted(number, clean(carry), True)
        line_base = number
    elif skipping:
        line_base += 1
    stats.lines = line_base
    return stats


def _counting(path: Path, on_line: OnLine, stats: ReadStats) -> OnLine:
    """``on_line``, refusing the file at its ``MAX_HITS``-th line past the bound."""

    def counted(number: int, text: str, unterminated: bool) -> None:
        stats.hits += 1
        if stats.hits > MAX_HITS:
            raise LedgerError(
                f"{path}: line {number:,} is past the first {MAX_HITS:,} lines that name a "
                "figure an engine prints, more than a boot log holds (a boot has 20-2,000); "
                "give a log of just the boots to read"
            )
        on_line(number, text, unterminated)

    return counted


def _blocks(stream: io.BufferedIOBase, path: Path, stats: ReadStats) -> Iterator[bytes]:
    """Blocks of about ``CHUNK`` bytes. A stream that breaks off (a truncated gzip) ends
    them after the last good byte, noted in ``stats``; one that yields nothing is an error."""
    pending: list[bytes] = []
    size = total = 0
    while True:
        try:
            piece = stream.read1(CHUNK - size)
        except (OSError, EOFError, zlib.error) as exc:
            if total + size == 0:
                what = "the gzip data is damaged" if stats.compressed else "cannot read"
                raise LedgerError(f"{path}: {what} ({exc})") from None
            stats.stream_error = str(exc) or type(exc).__name__
            break
        if not piece:
            break
        if total == 0 and size == 0:
            stats.looks_binary = _looks_binary(piece[:SNIFF])
        pending.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield b"".join(pending)
            total += size
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def _hold(data: bytes, skipping: bool, number: int, stats: ReadStats) -> tuple[bytes, bool]:
    """Keep a partial line for the next block, or give up on one longer than MAX_LINE."""
    if skipping or len(data) > MAX_LINE:
        if not skipping:
            stats.overlong_lines.append(number)
        return b"", True
    return data, False


def _scan_block(
    block: bytes,
    start: int,
    line_base: int,
    prefilter: Prefilter,
    on_line: OnLine,
    stats: ReadStats,
) -> int:
    """Hand on the hit lines of ``block`` (whole lines from ``start``); return lines counted."""
    counted_to = 0
    counted = 0
    for begin in prefilter.line_starts(block, start):
        counted += block.count(b"\n", counted_to, begin)
        counted_to = begin
        end = block.index(b"\n", begin)
        number = line_base + counted + 1
        if end - begin > MAX_LINE:
            stats.overlong_lines.append(number)
        else:
            on_line(number, clean(block[begin:end]), False)
    return line_base + block.count(b"\n")
