"""The HTTP edge: one sync and one async endpoint over a caller's httpx client.

Every request is bounded three ways:

- time: the probe's ``Deadline`` is a total for the whole exchange (connect,
  headers, the whole body or stream), not a per-read timeout that a server
  restarts with every byte it trickles. A sync request runs on a worker
  thread that the caller waits for until the deadline, then abandons (shutting
  its connection's socket, so the worker stops too); an async one runs under
  ``asyncio.wait_for``.
- size: a body is read up to a limit (``MAX_BODY_BYTES`` unless the request
  asks for more with ``limit=``), an error body up to ``MAX_ERROR_BYTES``, one
  event line up to ``MAX_LINE_BYTES``, and every quote of a body is an
  ``excerpt``. The probe asks for uncompressed answers and refuses compressed
  ones, so no body expands past the bytes counted.
- secrets: the API key goes out as a bearer token, and every text that comes
  back has the key masked (``redact.Redactor``) before anything can quote it.

httpx's errors are translated here, once, into ``ProbeFault`` with a one-line
message.

    with httpx.Client() as client:
        endpoint = Endpoint(client, "http://127.0.0.1:8000", api_key=key)
        answer = endpoint.get("/v1/models", Deadline(10))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from fakplan.errors import ProbeError
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
# A quote of what a server said: refusals are worded in 100-250 characters, enough to
# recognise any of them; more of a body has no place in a one-line report.
EXCERPT_CHARS = 200

T = TypeVar("T")


class ProbeFault(Exception):
    """One probe could not finish: the message is the one line its report shows.

    Not a ``FakplanError``: a fault fails one probe and the run goes on.
    """


class Deadline:
    """A probe's total time budget; every request gets what is left of it."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self.end = time.monotonic() + total_s

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def check(self, doing: str) -> None:
        if self.remaining() <= 0:
            raise ProbeFault(f"{doing}: the probe's {self.total_s:g} s timeout ran out")

    def ran_out(self, doing: str) -> ProbeFault:
        """The fault of a request still unfinished when the deadline passed."""
        return ProbeFault(
            f"{doing}: the probe's {self.total_s:g} s timeout ran out before the answer was whole"
        )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """One line of at most ``limit`` characters, read from the start of ``text`` only."""
    head = text[: limit * 8]  # whitespace runs collapse; never split a whole body into words
    line = " ".join(head.split())
    if len(line) <= limit and len(head) == len(text):
        return line
    return line[: limit - 1] + "…"


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


def check_url(url: str) -> httpx.URL:
    """The endpoint's base URL, or ProbeError naming what is wrong with it."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ProbeError(f"--url {display_url(url)!r}: not a URL ({exc})") from None
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        raise ProbeError(
            f"--url {display_url(url)!r}: expected http://HOST:PORT or https://HOST:PORT "
            "(the server's root or its /v1)"
        )
    path = parsed.path.rstrip("/")
    path = path.removesuffix("/v1")
    return parsed.copy_with(path=path or "/", query=None, fragment=None)


def display_url(url: str) -> str:
    """The URL without user, password or query: what reports and records show."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<unparseable URL>"
    if not parsed.host:
        return str(parsed.copy_with(query=None, fragment=None)) if not parsed.userinfo else "<URL>"
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


def _uncompressed(response: httpx.Response, doing: str) -> None:
    """ProbeFault for a compressed answer: its bytes, once inflated, could be any number.

    So ``iter_bytes`` below yields the bytes as they came, counted as they came.
    """
    encoding = str(response.headers.get("content-encoding", "identity")).strip().lower()
    if encoding not in ("", "identity"):
        raise ProbeFault(
            f"{doing}: the answer came {excerpt(encoding, 40)}-encoded though the probe asked "
            "for identity; its size could not be bounded"
        )


class _Body:
    """A body taken piece by piece up to its limit (an error body up to MAX_ERROR_BYTES)."""

    def __init__(self, response: httpx.Response, limit: int, doing: str) -> None:
        _uncompressed(response, doing)
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

    def overflow(self) -> ProbeFault:
        start = b"".join(self.pieces)[:1024].decode("utf-8", errors="replace")
        return ProbeFault(
            f"{self.doing}: the answer ran past {format_bytes(self.cap)}, the most a probe reads "
            f"for it (it began {excerpt(start, 80)!r})"
        )

    def bytes(self) -> bytes:
        return b"".join(self.pieces)


class _Events:
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


class _Lines:
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


class _Stop:
    """The caller's word to a worker it stopped waiting for: set, and its sockets shut."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    def is_set(self) -> bool:
        return self._set.is_set()

    def hold(self, stream: object) -> None:
        """The network stream the request uses: shut at once when already stopped."""
        get = getattr(stream, "get_extra_info", None)
        sock = get("socket") if callable(get) else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            if self._set.is_set():
                _shut(sock)

    def set(self) -> None:
        with self._lock:
            self._set.set()
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Wake a read blocked on ``sock`` in another thread (close alone does not, on Linux)."""
    with contextlib.suppress(OSError):  # already closed: nothing is blocked on it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, under any TLS


class _Abandoned(Exception):
    """The caller stopped waiting: the worker just ends."""


class _Base:
    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        base = check_url(url)
        self._base = str(base).rstrip("/")
        self.url = display_url(self._base)
        self._key = api_key or None
        self.redactor = Redactor(self._key)
        self.connect_timeout_s = connect_timeout_s

    def scrub(self, text: str) -> str:
        """``text`` with the API key masked, in any form a server may have echoed it."""
        return self.redactor.text(text)

    def redact(self, value: T) -> T:
        """``value`` (a parsed body, a model's dump) with the API key masked in every string."""
        masked: T = self.redactor.value(value)
        return masked

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Accept-Encoding": "identity"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _timeout(self, deadline: Deadline, doing: str) -> httpx.Timeout:
        deadline.check(doing)
        left = max(deadline.remaining(), 0.001)
        return httpx.Timeout(
            connect=min(self.connect_timeout_s, left), read=left, write=left, pool=left
        )

    def _fault(self, exc: BaseException, doing: str, deadline: Deadline) -> ProbeFault:
        """httpx's error as one line, naming the endpoint and what was being done."""
        detail = excerpt(self.scrub(str(exc))) or type(exc).__name__
        if isinstance(exc, httpx.ConnectTimeout):
            text = f"cannot connect to {self.url}: no answer within {self.connect_timeout_s:g} s"
        elif isinstance(exc, httpx.ConnectError):
            text = f"cannot connect to {self.url}: {detail}"
        elif isinstance(exc, httpx.TimeoutException):
            text = (
                f"{doing}: the server sent nothing more before the probe's "
                f"{deadline.total_s:g} s timeout"
            )
        elif isinstance(exc, httpx.RemoteProtocolError):
            text = f"{doing}: the server broke off the answer ({detail})"
        else:
            text = f"{doing}: {type(exc).__name__}: {detail}"
        return ProbeFault(text)

    def _answer(self, status: int, body: _Body, elapsed: float) -> Answer:
        """The body as text and JSON, the key masked in both (escapes cannot hide it)."""
        text = self.redactor.whole(body.bytes().decode("utf-8", errors="replace"))
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if data is not None and self.redactor and "\\" in text:
            masked = self.redactor.value(data, runs=False)
            if masked is not data:  # the key was spelled in escapes: show the masked JSON instead
                data, text = masked, json.dumps(masked, ensure_ascii=False)
        return Answer(status, text, elapsed, data, body.truncated)


class Endpoint(_Base):
    """A server reached through a caller's ``httpx.Client`` (which the caller closes)."""

    def __init__(
        self,
        client: httpx.Client,
        url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(url, api_key=api_key, connect_timeout_s=connect_timeout_s)
        self.client = client

    def concurrent(self, client: httpx.AsyncClient) -> AsyncEndpoint:
        """The same server, key and timeouts through an async client."""
        return AsyncEndpoint(
            client, self._base, api_key=self._key, connect_timeout_s=self.connect_timeout_s
        )

    def _exchange(
        self,
        method: str,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str,
        read: Callable[[httpx.Response, _Stop, float], T],
    ) -> T:
        """Send, then ``read(response, stop, start)`` on a worker, waited for until the deadline."""
        timeout = self._timeout(deadline, doing)
        stop = _Stop()
        finished = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def trace(event: str, info: Mapping[str, Any]) -> None:
            if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                stop.hold(info.get("return_value"))

        def work() -> None:
            try:
                start = time.perf_counter()
                with self.client.stream(
                    method,
                    self._base + path,
                    json=body,
                    headers=self._headers(),
                    timeout=timeout,
                    extensions={"trace": trace},
                ) as response:
                    stop.hold(response.extensions.get("network_stream"))
                    outcome.append((True, read(response, stop, start)))
            except BaseException as exc:  # handed to the caller, who re-raises or has left
                outcome.append((False, exc))
            finally:
                finished.set()

        threading.Thread(target=work, name=f"fakplan probe: {doing}", daemon=True).start()
        if not finished.wait(max(deadline.remaining(), 0.0)):
            stop.set()
            raise deadline.ran_out(doing)
        ok, value = outcome[0]
        if ok:
            result: T = value
            return result
        if isinstance(value, httpx.HTTPError):
            raise self._fault(value, doing, deadline) from None
        raise value

    def _whole(
        self,
        response: httpx.Response,
        stop: _Stop,
        start: float,
        limit: int,
        doing: str,
        deadline: Deadline,
    ) -> Answer:
        taken = _Body(response, limit, doing)
        for piece in response.iter_bytes():
            if stop.is_set():
                raise _Abandoned
            if not taken.feed(piece):
                break
            deadline.check(doing)
        return self._answer(response.status_code, taken, time.perf_counter() - start)

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str,
        *,
        limit: int | None = None,
    ) -> Answer:
        """One whole answer, read up to ``limit`` bytes (``MAX_BODY_BYTES`` when None)."""
        cap = limit or MAX_BODY_BYTES
        return self._exchange(
            method,
            path,
            body,
            deadline,
            doing,
            lambda response, stop, start: self._whole(response, stop, start, cap, doing, deadline),
        )

    def get(
        self, path: str, deadline: Deadline, doing: str | None = None, *, limit: int | None = None
    ) -> Answer:
        return self.request("GET", path, None, deadline, doing or f"GET {path}", limit=limit)

    def post(
        self,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str | None = None,
        *,
        limit: int | None = None,
    ) -> Answer:
        return self.request("POST", path, body, deadline, doing or f"POST {path}", limit=limit)

    def stream(
        self,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str | None = None,
        *,
        limit: int | None = None,
    ) -> StreamAnswer:
        """POST ``body`` and read the event stream, stamping each event on arrival.

        The stream is read up to ``limit`` bytes (``MAX_BODY_BYTES`` when None);
        one that runs past it, or past ``MAX_LINE_BYTES`` in one line, after
        its first event is ``broken`` (the caller decides), before it a fault.
        """
        name = doing or f"POST {path} (streamed)"
        cap = limit or MAX_BODY_BYTES

        def read(response: httpx.Response, stop: _Stop, start: float) -> StreamAnswer:
            if not (200 <= response.status_code < 300 and _is_event_stream(response)):
                whole = self._whole(response, stop, start, cap, name, deadline)
                return StreamAnswer(whole.status, whole.text, whole.elapsed_s)
            _uncompressed(response, name)
            events = _Events(start, self.redactor)
            lines = _Lines(cap, name)
            broken: str | None = None
            try:
                for piece in response.iter_bytes():
                    if stop.is_set():
                        raise _Abandoned
                    for line in lines.feed(piece):
                        # stamped one by one: a burst shows as one (a buffer held it), not as 0 s
                        events.feed(line, time.perf_counter())
                    deadline.check(name)
            except (httpx.HTTPError, ProbeFault) as exc:
                fault = exc if isinstance(exc, ProbeFault) else self._fault(exc, name, deadline)
                if not events.events:
                    raise fault from None
                broken = str(fault)  # the caller decides
            return StreamAnswer(
                response.status_code,
                "",
                time.perf_counter() - start,
                events.events,
                events.done,
                events.malformed,
                broken,
            )

        return self._exchange("POST", path, body, deadline, name, read)


class AsyncEndpoint(_Base):
    """The same server through an ``httpx.AsyncClient`` (concurrent probes)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(url, api_key=api_key, connect_timeout_s=connect_timeout_s)
        self.client = client

    async def post(
        self,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str | None = None,
        *,
        limit: int | None = None,
    ) -> Answer:
        """One whole answer, read up to ``limit`` bytes, all of it within the deadline."""
        doing = doing or f"POST {path}"
        timeout = self._timeout(deadline, doing)
        try:
            return await asyncio.wait_for(
                self._post(path, body, deadline, doing, timeout, limit or MAX_BODY_BYTES),
                max(deadline.remaining(), 0.001),
            )
        except TimeoutError:
            raise deadline.ran_out(doing) from None
        except httpx.HTTPError as exc:
            raise self._fault(exc, doing, deadline) from None

    async def _post(
        self,
        path: str,
        body: Any,
        deadline: Deadline,
        doing: str,
        timeout: httpx.Timeout,
        limit: int,
    ) -> Answer:
        start = time.perf_counter()
        async with self.client.stream(
            "POST", self._base + path, json=body, headers=self._headers(), timeout=timeout
        ) as response:
            taken = _Body(response, limit, doing)
            async for piece in response.aiter_bytes():
                if not taken.feed(piece):
                    break
                deadline.check(doing)
            return self._answer(response.status_code, taken, time.perf_counter() - start)
