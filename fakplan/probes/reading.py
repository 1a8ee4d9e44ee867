"""What comes back, read within its limits: a whole body, or an event stream line by line.

Every limit is counted on the bytes as they came: the probe asks for
uncompressed answers and refuses compressed ones (``uncompressed``), so no
body expands past the bytes counted. Every text read has the API key masked
(``redact.Redactor``) before anything can quote it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from fakplan.probes.faults import Deadline, ProbeFault, excerpt
from fakplan.probes.redact import Redactor
from fakplan.units import format_bytes

KIB = 1024
MIB = 1024 * KIB
# The most a whole answer may hold unless its request asks for more (``limit=``: a tokenize
# call sizes its own from the text it sends, a generation from its max_tokens). The routes read
# with this limit answer far below it: /v1/models and a 1-token completion under 4 KiB,
# llama-server's /props ~50 KiB (its chat template), vLLM's /openapi.json and /metrics a few
# hundred KiB. 2 MiB is 4x those. JSON parses to 4-25x its bytes (small numbers 4x, empty
# objects 25x), so even a hostile 2 MiB body holds at most ~50 MB.
MAX_BODY_BYTES = 2 * MIB
# An answer that is not 2xx is read this far and no further: it is only quoted (an excerpt)
# or parsed for a context refusal, which every engine words in under 1 KiB.
MAX_ERROR_BYTES = 64 * KIB
# One server-sent event line: a token chunk is 100-500 bytes (vLLM's carries its id, the model
# path and a fingerprint), the closing usage and timings event 1-2 KiB. 1 MiB is 500x that.
MAX_LINE_BYTES = 1 * MIB


@dataclass
class Answer:
    """A whole (non-streamed) answer."""

    status: int
    text: str
    elapsed_s: float
    data: Any = None  # the parsed JSON body, None when the body is not JSON
    truncated: bool = False  # an error body longer than MAX_ERROR_BYTES: ``text`` is its start

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class StreamAnswer:
    """A streamed (server-sent events) answer: each event with its arrival time since sending."""

    status: int
    text: str  # the body when it was not an event stream (an error, or a plain JSON answer)
    elapsed_s: float
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    done: bool = False  # saw "data: [DONE]"
    malformed: int = 0  # events whose data was not a JSON object
    broken: str | None = None  # why the stream broke off after its first event, if it did

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


def uncompressed(response: httpx.Response, doing: str) -> None:
    """ProbeFault for a compressed answer: its bytes, once inflated, could be any number.

    So ``iter_bytes`` yields the bytes as they came, counted as they came.
    """
    encoding = str(response.headers.get("content-encoding", "identity")).strip().lower()
    if encoding not in ("", "identity"):
        raise ProbeFault(
            f"{doing}: the answer came {excerpt(encoding, 40)}-encoded though the probe asked "
            "for identity; its size could not be bounded"
        )


class Body:
    """A body taken piece by piece up to its limit (an error body up to MAX_ERROR_BYTES)."""

    def __init__(self, response: httpx.Response, limit: int, doing: str) -> None:
        uncompressed(response, doing)
        self.doing = doing
        self.ok = 200 <= response.status_code < 300
        self.cap = limit if self.ok else min(limit, MAX_ERROR_BYTES)
        self.pieces: list[bytes] = []
        self.size = 0
        self.truncated = False
        declared = str(response.headers.get("content-length", "")).strip()
        if self.ok and declared.isdigit() and int(declared) > self.cap:
            raise ProbeFault(
                f"{doing}: the answer is {int(declared):,} bytes, over the {format_bytes(self.cap)} "
                "a probe reads for it"
            )

    def feed(self, piece: bytes) -> bool:
        """Take ``piece``; False once the limit is reached (an error body is then cut short)."""
        room = self.cap - self.size
        if len(piece) > room:
            self.pieces.append(piece[:room])
            self.size = self.cap
            if self.ok:
                raise self.overflow()
            self.truncated = True
            return False
        self.pieces.append(piece)
        self.size += len(piece)
        return True

    def take(self, piece: bytes, deadline: Deadline) -> bool:
        """``feed``, then the deadline: one step of the sync and the async read alike."""
        if not self.feed(piece):
            return False
        deadline.check(self.doing)
        return True

    def overflow(self) -> ProbeFault:
        start = b"".join(self.pieces)[:1024].decode("utf-8", errors="replace")
        return ProbeFault(
            f"{self.doing}: the answer ran past {format_bytes(self.cap)}, the most a probe reads "
            f"for it (it began {excerpt(start, 80)!r})"
        )

    def bytes(self) -> bytes:
        return b"".join(self.pieces)


def to_answer(status: int, body: Body, elapsed: float, redactor: Redactor) -> Answer:
    """The body as text and JSON, the key masked in both (escapes cannot hide it)."""
    text = redactor.whole(body.bytes().decode("utf-8", errors="replace"))
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if data is not None and redactor and "\\" in text:
        masked = redactor.value(data, runs=False)
        if masked is not data:  # the key was spelled in escapes: show the masked JSON instead
            data, text = masked, json.dumps(masked, ensure_ascii=False)
    return Answer(status, text, elapsed, data, body.truncated)


class Events:
    """Server-sent event lines into parsed events, each stamped with its arrival."""

    def __init__(self, start: float, redactor: Redactor) -> None:
        self.start = start
        self.redactor = redactor
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.done = False
        self.malformed = 0

    def feed(self, line: str, at: float) -> None:
        if not line.startswith("data:"):
            return  # comments, event names, blank separators
        payload = self.redactor.whole(line[5:].strip())
        if payload == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except ValueError:
            self.malformed += 1
            return
        if not isinstance(event, dict):
            self.malformed += 1
            return
        if "\\" in payload:  # an escape could spell the key where the raw text does not
            event = self.redactor.value(event, runs=False)
        self.events.append((at - self.start, event))


class Lines:
    """An event stream's bytes into lines, up to a total and a per-line limit."""

    def __init__(self, limit: int, doing: str) -> None:
        self.limit = limit
        self.line_limit = min(limit, MAX_LINE_BYTES)
        self.doing = doing
        self.size = 0
        self.pending = bytearray()

    def feed(self, piece: bytes) -> list[str]:
        """The lines ``piece`` completes; ProbeFault past the stream's or a line's limit."""
        self.size += len(piece)
        if self.size > self.limit:
            raise ProbeFault(
                f"{self.doing}: the stream ran past {format_bytes(self.limit)}, the most a probe "
                "reads for it"
            )
        self.pending += piece
        if b"\n" not in piece and b"\r" not in piece:
            if len(self.pending) > self.line_limit:
                raise self._long_line()
            return []
        whole = self.pending.endswith((b"\n", b"\r"))
        lines = self.pending.splitlines()
        self.pending = bytearray() if whole else lines.pop()
        if len(self.pending) > self.line_limit or any(len(x) > self.line_limit for x in lines):
            raise self._long_line()
        return [bytes(x).decode("utf-8", errors="replace") for x in lines]

    def _long_line(self) -> ProbeFault:
        return ProbeFault(
            f"{self.doing}: an event line ran past {format_bytes(self.line_limit)}, the most a "
            "probe reads for one"
        )
