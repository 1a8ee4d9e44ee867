"""A probe's faults and its time budget, and the one-line quote every fault message uses.

Kept apart from the HTTP edge because every layer of a probe raises these: the
request bodies and refusal parsing (pure) as much as the transport.
"""

from __future__ import annotations

import time

# A quote of what a server said: refusals are worded in 100-250 characters, enough to
# recognise any of them; more of a body has no place in a one-line report.
EXCERPT_CHARS = 200


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
