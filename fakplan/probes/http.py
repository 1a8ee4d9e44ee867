"""The HTTP edge: one sync and one async endpoint over a caller's httpx client.

Every request is bounded: the connect timeout is short, and reads and writes
get what is left of the probe's ``Deadline``; bodies and streams are read
piece by piece with the deadline checked between pieces, so a server that
trickles bytes cannot stretch a probe either. httpx's errors are translated
here, once, into ``ProbeFault`` with a one-line message. The API key is sent
as a bearer token and scrubbed from every text that leaves this module (an
echoing server must not leak it into a report).

    with httpx.Client() as client:
        endpoint = Endpoint(client, "http://127.0.0.1:8000", api_key=key)
        answer = endpoint.get("/v1/models", Deadline(10))
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from fakplan.errors import ProbeError


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


@dataclass
class Answer:
    """A whole (non-streamed) answer."""

    status: int
    text: str
    elapsed_s: float
    data: Any = None  # the parsed JSON body, None when the body is not JSON

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
        self.connect_timeout_s = connect_timeout_s

    def scrub(self, text: str) -> str:
        """``text`` with the API key replaced, wherever a server echoed it."""
        if self._key:
            text = text.replace(self._key, "***")
        return text

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
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
        detail = self.scrub(str(exc)).strip() or type(exc).__name__
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

    def _answer(self, status: int, body: bytes, elapsed: float) -> Answer:
        text = self.scrub(body.decode("utf-8", errors="replace"))
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return Answer(status=status, text=text, elapsed_s=elapsed, data=data)


class _Events:
    """Server-sent event lines into parsed events, each stamped on arrival."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.done = False
        self.malformed = 0

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # comments, event names, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except ValueError:
            self.malformed += 1
            return
        if isinstance(event, dict):
            self.events.append((time.perf_counter() - self.start, event))
        else:
            self.malformed += 1


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


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

    @contextmanager
    def _open(
        self, method: str, path: str, body: Any, deadline: Deadline, doing: str
    ) -> Iterator[httpx.Response]:
        try:
            with self.client.stream(
                method,
                self._base + path,
                json=body,
                headers=self._headers(),
                timeout=self._timeout(deadline, doing),
            ) as response:
                yield response
        except httpx.HTTPError as exc:
            raise self._fault(exc, doing, deadline) from None

    def request(self, method: str, path: str, body: Any, deadline: Deadline, doing: str) -> Answer:
        start = time.perf_counter()
        with self._open(method, path, body, deadline, doing) as response:
            pieces: list[bytes] = []
            for piece in response.iter_bytes():
                pieces.append(piece)
                deadline.check(doing)
            return self._answer(response.status_code, b"".join(pieces), time.perf_counter() - start)

    def get(self, path: str, deadline: Deadline, doing: str | None = None) -> Answer:
        return self.request("GET", path, None, deadline, doing or f"GET {path}")

    def post(self, path: str, body: Any, deadline: Deadline, doing: str | None = None) -> Answer:
        return self.request("POST", path, body, deadline, doing or f"POST {path}")

    def stream(
        self, path: str, body: Any, deadline: Deadline, doing: str | None = None
    ) -> StreamAnswer:
        """POST ``body`` and read the event stream, stamping each event on arrival."""
        doing = doing or f"POST {path} (streamed)"
        start = time.perf_counter()
        with self._open("POST", path, body, deadline, doing) as response:
            if not (200 <= response.status_code < 300 and _is_event_stream(response)):
                pieces: list[bytes] = []
                for piece in response.iter_bytes():
                    pieces.append(piece)
                    deadline.check(doing)
                whole = self._answer(
                    response.status_code, b"".join(pieces), time.perf_counter() - start
                )
                return StreamAnswer(whole.status, whole.text, whole.elapsed_s)
            events = _Events(start)
            broken: str | None = None
            try:
                for line in response.iter_lines():
                    events.feed(self.scrub(line))
                    deadline.check(doing)
            except httpx.HTTPError as exc:
                if not events.events:
                    raise self._fault(exc, doing, deadline) from None
                broken = str(self._fault(exc, doing, deadline))  # the caller decides
            return StreamAnswer(
                response.status_code,
                "",
                time.perf_counter() - start,
                events.events,
                events.done,
                events.malformed,
                broken,
            )


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
        self, path: str, body: Any, deadline: Deadline, doing: str | None = None
    ) -> Answer:
        doing = doing or f"POST {path}"
        start = time.perf_counter()
        try:
            async with self.client.stream(
                "POST",
                self._base + path,
                json=body,
                headers=self._headers(),
                timeout=self._timeout(deadline, doing),
            ) as response:
                pieces: list[bytes] = []
                async for piece in response.aiter_bytes():
                    pieces.append(piece)
                    deadline.check(doing)
                return self._answer(
                    response.status_code, b"".join(pieces), time.perf_counter() - start
                )
        except httpx.HTTPError as exc:
            raise self._fault(exc, doing, deadline) from None
