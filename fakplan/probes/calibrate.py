"""calibrate: the corpus's chars/token without paying prefill, and prompts sized from it.

Two ways to count, cheapest first (a "free token-count calibration"):

1. the engine's tokenize route (each flavour's, ``fakplan.probes.flavours``): counts, computes nothing;
2. a completion just above the window: the engine refuses it before any
   prefill and its refusal names the count (``refusals.REFUSALS``). To land
   above the window, a short prompt is sent first when the ratio is unknown;
   that one is accepted and pays a small prefill, and the report says so.

A ``Sizer`` then builds prompts of a given token count: exactly, by counting
with the tokenize route; or from the ratio with a 2 % margin where there is none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import (
    CHAT,
    COMPLETIONS,
    Server,
    chat_body,
    completion_body,
    excerpt,
    read_completion,
)
from fakplan.probes.corpus import corpus
from fakplan.probes.flavours import TokenizeRoute
from fakplan.probes.http import MAX_BODY_BYTES, Answer, Deadline, Endpoint, ProbeFault
from fakplan.probes.refusals import Refusal, error_message, parse_refusal

FIRST_CHARS = 2048  # the short opening prompt of the refusal path (~500 tokens of prose)
MIN_RETRY_CHARS = 64  # the smallest opening prompt a refused one is halved down to
ABOVE_WINDOW = 1.05  # aim this far above the window, so the estimate's error still lands above
ESTIMATE_MARGIN = 0.02  # without a tokenize route, size prompts 2 % under the target
TOKENIZE_CHARS = (4096, 262_144)  # corpus size for the tokenize route: 4 x window, clamped
# A tokenize answer may list every token: at most one a character, each an id of up to 7
# digits and a separator (9 bytes), or 16 with vLLM's token_strs. So a text of n characters
# is answered in MAX_BODY_BYTES + 16n bytes at most, which a window-sized prompt always fits.
TOKENIZE_BYTES_PER_CHAR = 16

Method = Literal["auto", "tokenize", "refusal"]


class Calibration(BaseModel):
    """The corpus's chars/token on this endpoint, and how it was counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["tokenize", "refusal", "accepted"]
    route: str  # the tokenize route, or the completion route the refusal came from
    chars: int  # the corpus text counted is corpus(chars)
    tokens: int
    chars_per_token: float
    exact: bool  # counted by the engine, not estimated
    tokenize_route: str | None = None  # a tokenize route that answered, for sizing
    refusal: dict[str, Any] | None = None
    prefill_paid_tokens: int = 0  # tokens of prompts the engine accepted (and prefilled)
    notes: tuple[str, ...] = ()


def count_tokens(
    endpoint: Endpoint, server: Server, route: TokenizeRoute, text: str, deadline: Deadline
) -> int:
    """The engine's count of ``text`` at ``route``; ``ProbeFault`` when it will not say."""
    body: dict[str, Any] = {route.key: text, **route.extra}
    if server.model:
        body["model"] = server.model
    limit = MAX_BODY_BYTES + len(text) * TOKENIZE_BYTES_PER_CHAR
    answer = endpoint.post(route.path, body, deadline, limit=limit)
    if not answer.ok:
        raise ProbeFault(
            f"POST {route.path}: HTTP {answer.status}: {excerpt(error_message(answer.text))}"
        )
    data = answer.data if isinstance(answer.data, dict) else {}
    value = data.get(route.count_key) if route.count_key else None
    if route.count_key is None and isinstance(data.get("tokens"), list):
        value = len(data["tokens"])
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProbeFault(f"POST {route.path}: no token count in {excerpt(answer.text)!r}")
    return value


def _refusal_dict(refusal: Refusal) -> dict[str, Any]:
    return {
        "pattern": refusal.pattern,
        "engine": refusal.engine,
        "version": refusal.version,
        "prompt_tokens": refusal.prompt_tokens,
        "context": refusal.context,
        "lower_bound": refusal.lower_bound,
        "message": excerpt(refusal.message, 300),
    }


def _counted(
    method: Literal["tokenize", "refusal", "accepted"],
    route: str,
    chars: int,
    tokens: int,
    notes: list[str],
    *,
    tokenize_route: str | None = None,
    refusal: dict[str, Any] | None = None,
    prefill_paid_tokens: int = 0,
) -> Calibration:
    """A calibration of ``chars`` characters counted at ``tokens``: every path ends in one."""
    return Calibration(
        method=method,
        route=route,
        chars=chars,
        tokens=tokens,
        chars_per_token=round(chars / tokens, 4),
        exact=True,
        tokenize_route=tokenize_route,
        refusal=refusal,
        prefill_paid_tokens=prefill_paid_tokens,
        notes=tuple(notes),
    )


def _by_tokenize(
    endpoint: Endpoint, server: Server, window: int, deadline: Deadline
) -> tuple[Calibration | None, list[str]]:
    """The first tokenize route that counts the corpus; a note for each that did not."""
    notes: list[str] = []
    low, high = TOKENIZE_CHARS
    chars = min(max(window * 4, low), high)
    text = corpus(chars)
    for route in server.flavour.tokenize:
        try:
            tokens = count_tokens(endpoint, server, route, text, deadline)
        except ProbeFault as exc:
            notes.append(f"{route.path} did not count ({exc})")
            continue
        if tokens <= 0:
            notes.append(f"{route.path} counted {tokens} tokens")
            continue
        found = _counted("tokenize", route.path, chars, tokens, notes, tokenize_route=route.path)
        return found, notes
    return None, notes


def _send(endpoint: Endpoint, server: Server, route: str, text: str, deadline: Deadline) -> Answer:
    body = completion_body(server, text, 1) if route == COMPLETIONS else chat_body(server, text, 1)
    return endpoint.post(route, body, deadline, f"POST {route} ({len(text):,} chars)")


@dataclass
class _Refusals:
    """The refusal path's search: what each answer teaches about the next prompt to send.

    Each step answers a ``Calibration`` (a refusal named the count), True to
    send again (``chars`` and ``route`` say what), or False to stop and count
    from the largest accepted prompt.
    """

    server: Server
    window: int
    notes: list[str]
    route: str = COMPLETIONS
    chars: int = FIRST_CHARS
    accepted: tuple[int, int] | None = None  # (chars, tokens) of the largest accepted prompt
    paid: int = 0
    bound_only: bool = False  # a refusal named only a lower bound: an accepted count is the answer

    def take(self, answer: Answer) -> Calibration | bool:
        if answer.status in (404, 405) and self.route == COMPLETIONS:
            self.notes.append(f"{COMPLETIONS} answered {answer.status}; counted through {CHAT}")
            self.route = CHAT
            return True
        if answer.ok:
            return self._accepted(answer)
        return self._refused(answer)

    def _accepted(self, answer: Answer) -> bool:
        """Count the accepted prompt; aim the next one above the window, from its ratio."""
        done = read_completion(answer, f"POST {self.route}")
        if done.prompt_tokens is None or done.prompt_tokens <= 0:
            raise ProbeFault(f"POST {self.route}: accepted, but the answer names no prompt_tokens")
        self.paid += done.prompt_tokens
        self.accepted = (self.chars, done.prompt_tokens)
        if self.bound_only:
            return False
        ratio = self.chars / done.prompt_tokens
        self.chars = math.ceil(self.window * ABOVE_WINDOW * ratio) + 64
        return True

    def _refused(self, answer: Answer) -> Calibration | bool:
        """The count a refusal names; else its character bound, or a smaller opening prompt."""
        refusal = parse_refusal(answer.text, self.server.flavour.name)
        if refusal is None:
            raise ProbeFault(
                f"POST {self.route}: HTTP {answer.status} is not a context refusal fakplan knows: "
                f"{excerpt(error_message(answer.text))}"
            )
        count = refusal.exact_count
        if count is not None:
            return _counted(
                "refusal",
                self.route,
                self.chars,
                count,
                self.notes,
                refusal=_refusal_dict(refusal),
                prefill_paid_tokens=self.paid,
            )
        if refusal.max_chars is not None and refusal.max_chars < self.chars:
            self.notes.append(
                f"refused on characters ({refusal.pattern}); retried at its bound of "
                f"{refusal.max_chars:,} characters"
            )
            self.chars = refusal.max_chars
            return True
        self.notes.append(
            f"the refusal ({refusal.pattern}, {refusal.engine} {refusal.version}) names "
            + ("only a lower bound" if refusal.lower_bound else "no token count")
        )
        return self._halve()

    def _halve(self) -> bool:
        """Even the opening prompt was over the window: halve it until one is accepted."""
        if self.accepted is not None or self.chars <= MIN_RETRY_CHARS:
            return False
        self.bound_only = True
        self.chars = max(MIN_RETRY_CHARS, min(self.chars // 2, self.window // 2))
        self.notes.append(
            f"the opening prompt was above the window; retried at {self.chars:,} characters"
        )
        return True

    def from_accepted(self) -> Calibration:
        """The count of the largest accepted prompt (its prefill paid), or the fault of none."""
        if self.accepted is None:
            raise ProbeFault(
                "no count: the endpoint neither tokenizes nor names the count when it refuses "
                f"({'; '.join(self.notes) or 'no refusal seen'})"
            )
        a_chars, a_tokens = self.accepted
        self.notes.append(
            f"counted from an accepted prompt of {a_tokens:,} tokens (its prefill was paid)"
        )
        return _counted(
            "accepted", self.route, a_chars, a_tokens, self.notes, prefill_paid_tokens=self.paid
        )


def _by_refusal(
    endpoint: Endpoint, server: Server, window: int, deadline: Deadline, notes: list[str]
) -> Calibration:
    """Count from refusals (free) where they name the count, else from an accepted prompt."""
    search = _Refusals(server, window, notes)
    for _ in range(6):  # bounded: opening prompt, above-window prompt, retries
        answer = _send(endpoint, server, search.route, corpus(search.chars), deadline)
        step = search.take(answer)
        if isinstance(step, Calibration):
            return step
        if not step:
            break
    return search.from_accepted()


def calibrate(
    endpoint: Endpoint,
    server: Server,
    window: int,
    deadline: Deadline,
    method: Method = "auto",
) -> Calibration:
    """Count the probe corpus on this endpoint; ``window`` is the context the refusal path tops."""
    notes: list[str] = []
    tokenize_route: str | None = None
    if method in ("auto", "tokenize"):
        found, notes = _by_tokenize(endpoint, server, window, deadline)
        if found is not None:
            return found
        if method == "tokenize":
            raise ProbeFault(
                f"{server.flavour.name} has no tokenize route that answered"
                + (f" ({'; '.join(notes)})" if notes else "")
            )
    elif server.flavour.tokenize:
        tokenize_route = _working_route(endpoint, server, deadline)
    result = _by_refusal(endpoint, server, window, deadline, notes)
    return result.model_copy(update={"tokenize_route": tokenize_route})


def _working_route(endpoint: Endpoint, server: Server, deadline: Deadline) -> str | None:
    for route in server.flavour.tokenize:
        try:
            count_tokens(endpoint, server, route, "probe", deadline)
        except ProbeFault:
            continue
        return route.path
    return None


@dataclass(frozen=True)
class Fitted:
    """A prompt built to a token count."""

    text: str
    tokens: int  # the text's count (exact) or the estimate from chars/token
    exact: bool


class Sizer:
    """Texts of a given token count on one endpoint."""

    def __init__(
        self, endpoint: Endpoint, server: Server, calibration: Calibration, deadline: Deadline
    ) -> None:
        self.endpoint = endpoint
        self.server = server
        self.chars_per_token = calibration.chars_per_token
        self.deadline = deadline
        self.route = next(
            (r for r in server.flavour.tokenize if r.path == calibration.tokenize_route), None
        )

    @property
    def exact(self) -> bool:
        return self.route is not None

    def count(self, text: str) -> int:
        """The engine's count where it tokenizes, else the estimate from chars/token."""
        if self.route is None:
            return round(len(text) / self.chars_per_token)
        return count_tokens(self.endpoint, self.server, self.route, text, self.deadline)

    def fit(self, build: Callable[[int], str], target: int) -> Fitted:
        """The largest ``build(n)`` whose count is at most ``target`` (within 0.2 %)."""
        base = len(build(0))
        guess = max(0, round(target * self.chars_per_token) - base)
        if self.route is None:
            text = build(max(0, math.floor(guess * (1 - ESTIMATE_MARGIN))))
            return Fitted(text, round(len(text) / self.chars_per_token), exact=False)
        tolerance = max(1, target // 500)
        best: Fitted | None = None
        n = guess
        for _ in range(8):  # bounded search; each step is one tokenize call
            text = build(n)
            count = self.count(text)
            if count <= target and (best is None or count > best.tokens):
                best = Fitted(text, count, exact=True)
            if target - tolerance <= count <= target:
                break
            local = len(text) / count if count else self.chars_per_token
            step = round((target - count) * local)
            n = max(0, n + (step or (1 if count < target else -1)))
        if best is None:
            raise ProbeFault(f"cannot build a prompt of at most {target:,} tokens")
        return best
