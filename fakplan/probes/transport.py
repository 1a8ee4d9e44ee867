"""A sync request on a worker thread, waited for until the probe's deadline and no longer.

httpx's timeouts are per read, which a server restarts with every byte it
trickles; the deadline is a total. So the caller waits for the worker until
the deadline, then abandons it, shutting the sockets it holds so the worker
stops too instead of reading on in the background.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from fakplan.probes.faults import Deadline

T = TypeVar("T")


class Stop:
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


class Abandoned(Exception):
    """The caller stopped waiting: the worker just ends."""


def on_worker(work: Callable[[Stop], T], deadline: Deadline, doing: str) -> T:
    """``work(stop)`` on a daemon thread: its value or its exception, or the deadline's fault.

    When the deadline passes first, ``stop`` is set (its sockets shut) and the
    worker is left to end on its own.
    """
    stop = Stop()
    finished = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work(stop)))
        except BaseException as exc:  # handed to the caller, who re-raises or has left
            outcome.append((False, exc))
        finally:
            finished.set()

    threading.Thread(target=run, name=f"fakplan probe: {doing}", daemon=True).start()
    if not finished.wait(max(deadline.remaining(), 0.0)):
        stop.set()
        raise deadline.ran_out(doing)
    ok, value = outcome[0]
    if ok:
        result: T = value
        return result
    raise value
