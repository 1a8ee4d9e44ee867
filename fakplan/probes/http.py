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
message. The pieces live beside it: the fault and the deadline in ``faults``,
the URL in ``urls``, the bounded reading in ``reading``, the worker thread in
``transport``.

    with httpx.Client() as client:
        endpoint = Endpoint(client, "http://127.0.0.1:8000", api_key=key)
        answer = endpoint.get("/v1/models", Deadline(10))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from fakplan.probes.faults import EXCERPT_CHARS, Deadline, ProbeFault, excerpt
from fakplan.probes.reading import (
    KIB,
    MAX_BODY_BYTES,
    MAX_ERROR_BYTES,
    MAX_LINE_BYTES,
    MIB,
    Answer,
    Body,
    Events,
    Lines,
    StreamAnswer,
    is_event_stream,
    to_answer,
    uncompressed,
)
from fakplan.probes.redact import Redactor
from fakplan.probes.transport import Abandoned, Stop, on_worker
from fakplan.probes.urls import check_url, display_url

# the edge's names, wherever they are defined now: callers import them from here
__all__ = [
    "EXCERPT_CHARS",
    "KIB",
    "MAX_BODY_BYTES",
    "MAX_ERROR_BYTES",
    "MAX_LINE_BYTES",
    "MIB",
    "Answer",
    "AsyncEndpoint",
    "Deadline",
    "Endpoint",
    "ProbeFault",
    "StreamAnswer",
    "check_url",
    "display_url",
    "excerpt",
]

T = TypeVar("T")
C = TypeVar("C", httpx.Client, httpx.AsyncClient)


class _Base(Generic[C]):
    """What the sync and the async endpoint share: the URL, the key, and httpx's errors."""

    def __init__(
        self,
        client: C,
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
        self.client: C = client

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


@dataclass(frozen=True)
class _Read:
    """How one answer is read: up to ``limit`` bytes, as ``doing``, within ``deadline``."""

    limit: int
    doing: str
    deadline: Deadline


class Endpoint(_Base[httpx.Client]):
    """A server reached through a caller's ``httpx.Client`` (which the caller closes)."""

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
        read: Callable[[httpx.Response, Stop, float], T],
    ) -> T:
        """Send, then ``read(response, stop, start)`` on a worker, waited for until the deadline."""
        timeout = self._timeout(deadline, doing)

        def work(stop: Stop) -> T:
            def trace(event: str, info: Mapping[str, Any]) -> None:
                if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                    stop.hold(info.get("return_value"))

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
                return read(response, stop, start)

        try:
            return on_worker(work, deadline, doing)
        except httpx.HTTPError as exc:
            raise self._fault(exc, doing, deadline) from None

    def _whole(self, response: httpx.Response, stop: Stop, start: float, how: _Read) -> Answer:
        taken = Body(response, how.limit, how.doing)
        for piece in response.iter_bytes():
            if stop.is_set():
                raise Abandoned
            if not taken.take(piece, how.deadline):
                break
        return to_answer(response.status_code, taken, time.perf_counter() - start, self.redactor)

    def _events(
        self, response: httpx.Response, stop: Stop, start: float, how: _Read
    ) -> StreamAnswer:
        """The event stream, each event stamped on arrival; broken off after one: ``broken``."""
        doing, deadline = how.doing, how.deadline
        uncompressed(response, doing)
        events = Events(start, self.redactor)
        lines = Lines(how.limit, doing)
        broken: str | None = None
        try:
            for piece in response.iter_bytes():
                if stop.is_set():
                    raise Abandoned
                for line in lines.feed(piece):
                    # stamped one by one: a burst shows as one (a buffer held it), not as 0 s
                    events.feed(line, time.perf_counter())
                deadline.check(doing)
        except (httpx.HTTPError, ProbeFault) as exc:
            fault = exc if isinstance(exc, ProbeFault) else self._fault(exc, doing, deadline)
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
        how = _Read(limit or MAX_BODY_BYTES, doing, deadline)
        return self._exchange(
            method,
            path,
            body,
            deadline,
            doing,
            lambda response, stop, start: self._whole(response, stop, start, how),
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
        how = _Read(limit or MAX_BODY_BYTES, name, deadline)

        def read(response: httpx.Response, stop: Stop, start: float) -> StreamAnswer:
            if not (200 <= response.status_code < 300 and is_event_stream(response)):
                whole = self._whole(response, stop, start, how)
                return StreamAnswer(whole.status, whole.text, whole.elapsed_s)
            return self._events(response, stop, start, how)

        return self._exchange("POST", path, body, deadline, name, read)


class AsyncEndpoint(_Base[httpx.AsyncClient]):
    """The same server through an ``httpx.AsyncClient`` (concurrent probes)."""

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
            taken = Body(response, limit, doing)
            async for piece in response.aiter_bytes():
                if not taken.take(piece, deadline):
                    break
            return to_answer(
                response.status_code, taken, time.perf_counter() - start, self.redactor
            )
