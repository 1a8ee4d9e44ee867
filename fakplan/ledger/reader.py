"""Stream a log file in fixed-size chunks and hand on only the lines worth reading.

Logs run to hundreds of MB (a server that has been up for weeks), so the file
is never held whole: it is read in ``CHUNK`` blocks, a ``Prefilter`` finds the
lines that hold any row's needle by scanning each block in C, and only those
lines are decoded and given to the parsers. Memory stays flat whatever the
file's size.

Handled here, so the parsers see clean text: gzip (by its magic bytes), CRLF,
ANSI colour codes, a last line cut mid-way (a truncated file), a compressed
stream that ends early, lines too long to be log lines, and binary data.
"""

from __future__ import annotations

import gzip
import io
import re
import string
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fakplan.errors import LedgerError

CHUNK = 4 << 20
MAX_LINE = 1 << 20  # a longer "line" is data, not a log line: it is skipped whole
MAX_TEXT = 1000  # characters of a recognised line kept for the record
SNIFF = 64 << 10

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\r\x1b\x0c") + b"\x7f"

# Characters rare in log prose: a needle is found fastest from one of them (sre scans for a
# single literal at memchr speed, while one big alternation tries every needle at every byte).
_ANCHORS = frozenset(string.ascii_uppercase + "_#(=:,")
_MIN_ANCHORED = 6


class Prefilter:
    """Finds the lines that hold any of ``needles``, scanning a block a few times in C.

    Needles with a rare character are grouped by it: one regex per group, the
    literal anchor first, so sre scans at memchr speed and checks the rest of
    each needle in C. The others are found with ``bytes.find``.
    """

    def __init__(self, needles: Iterable[str]) -> None:
        groups: dict[str, set[str]] = {}
        plain: set[bytes] = set()
        for needle in needles:
            token = _anchored(needle)
            if token is None:
                plain.add(needle.encode())
            else:
                groups.setdefault(token[0], set()).add(token[1:])
        self._patterns = [
            re.compile(
                re.escape(anchor.encode())
                + b"(?:"
                + b"|".join(
                    re.escape(t.encode()) for t in sorted(tails, key=lambda t: (-len(t), t))
                )
                + b")"
            )
            for anchor, tails in sorted(groups.items())
        ]
        self._plain = sorted(n for n in plain if not any(o != n and o in n for o in plain))

    def line_starts(self, block: bytes, start: int = 0) -> list[int]:
        """Offsets of the lines of ``block`` (from ``start``) that hold a needle, in order."""
        found: set[int] = set()
        for pattern in self._patterns:
            for match in pattern.finditer(block, start):
                found.add(block.rfind(b"\n", 0, match.start()) + 1)
        for needle in self._plain:
            pos = block.find(needle, start)
            while pos != -1:
                found.add(block.rfind(b"\n", 0, pos) + 1)
                end = block.find(b"\n", pos)
                if end == -1:
                    break
                pos = block.find(needle, end)
        return sorted(found)


def _anchored(needle: str) -> str | None:
    """The needle from its first rare character on, if enough of it is left to be selective."""
    for index, char in enumerate(needle):
        if char in _ANCHORS and len(needle) - index >= _MIN_ANCHORED:
            return needle[index:]
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


def _open(path: Path) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """The stream to read (decompressed if gzip) and the file under it (to close)."""
    try:
        handle: io.BufferedIOBase = open(path, "rb")  # noqa: SIM115 - closed by scan_file
    except FileNotFoundError:
        raise LedgerError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LedgerError(f"{path}: is a folder, expected a boot log file") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read ({exc.strerror or exc})") from None
    magic = handle.read(2)
    handle.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=handle, mode="rb"), handle
    return handle, handle


def scan_file(path: Path, prefilter: Prefilter, on_line: OnLine) -> ReadStats:
    """Stream ``path``; call ``on_line`` for each line that holds a pre-filter hit."""
    stream, raw = _open(path)
    stats = ReadStats(compressed=stream is not raw)
    carry = b""
    skipping = False  # inside a line longer than MAX_LINE
    line_base = 0  # complete lines before the current block
    with raw, stream:
        for block in _blocks(stream, path, stats):
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
            line_base = _scan_block(complete, start, line_base, prefilter, on_line, stats)
            if len(carry) > MAX_LINE:
                carry, skipping = _hold(carry, skipping, line_base + 1, stats)
    if carry and not skipping:
        number = line_base + 1
        stats.unterminated_line = number
        if prefilter.line_starts(carry):
            on_line(number, clean(carry), True)
        line_base = number
    elif skipping:
        line_base += 1
    stats.lines = line_base
    return stats


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
