"""A rate probe's report, and what decode and prefill build it from alike.

Both probes summarise their repetitions the same way, judge on one of those
summaries (``Basis``), and time a cold streamed request the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import CHAT, Server, Streamed, answer_limit, chat_body, read_stream
from fakplan.probes.http import Deadline, Endpoint
from fakplan.probes.stats import NOISE_FLOOR_PCT, Summary, summarize

Progress = Callable[[str], None] | None  # told each finished step


class RateResult(BaseModel):
    """A rate probe's report; ``figure`` is what a prediction is judged on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: Literal["decode", "decode-load", "prefill"]
    figure: float | None  # tokens/s, the median of the basis
    basis: str  # which measurement the figure is
    noise_pct: float
    spread: dict[str, float | int] | None
    bound_by: str | None  # what, other than the engine, bounds the plain figure
    figures: dict[str, dict[str, float | int] | None]  # every measurement's summary
    tokens: int  # max_tokens (decode) or the long prompt's target (prefill)
    repeat: int
    eos_suppression: str | None = None
    short: bool = False  # decode: the engine stopped before MIN_DECODE_TOKENS
    reps: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Basis:
    """Which measurement a rate is judged on, and what bounds the plain one when it is not that."""

    name: str
    chosen: Summary | None
    bound: str | None = None


def summary_of(values: list[float | None]) -> Summary | None:
    """The repetitions' summary over those that gave a figure; None when none did."""
    present = [v for v in values if v is not None]
    return summarize(present) if present else None


def as_dict(summary: Summary | None) -> dict[str, float | int] | None:
    return summary.to_dict() if summary else None


def stream_once(
    endpoint: Endpoint,
    server: Server,
    text: str,
    max_tokens: int,
    suppress: bool,
    deadline: Deadline,
    doing: str,
) -> Streamed:
    """One streamed chat of ``text``, read as chunk arrival times."""
    body = chat_body(server, text, max_tokens, stream=True, suppress_eos=suppress)
    # one token asked for is a time-to-first-token read: what follows it does not count
    # (llama-cpp-python may run on past max_tokens into the window's end and break off)
    whole = max_tokens > 1
    limit = answer_limit(max_tokens, streamed=True)
    return read_stream(
        endpoint.stream(CHAT, body, deadline, doing, limit=limit), doing, whole=whole
    )


def report(
    probe: Literal["decode", "decode-load", "prefill"],
    basis: Basis,
    figures: dict[str, Summary | None],
    *,
    tokens: int,
    repeat: int,
    reps: tuple[dict[str, Any], ...],
    notes: tuple[str, ...],
    eos_suppression: str | None = None,
    short: bool = False,
) -> RateResult:
    """The report, judged on ``basis.chosen`` (the noise floor where no figure came out).

    ``figures`` are every measurement's summary, the chosen one among them.
    """
    chosen = basis.chosen
    return RateResult(
        probe=probe,
        figure=round(chosen.median, 2) if chosen else None,
        basis=basis.name,
        noise_pct=chosen.noise_pct if chosen else NOISE_FLOOR_PCT,
        spread=as_dict(chosen),
        bound_by=basis.bound,
        figures={name: as_dict(summary) for name, summary in figures.items()},
        tokens=tokens,
        repeat=repeat,
        eos_suppression=eos_suppression,
        short=short,
        reps=reps,
        notes=notes,
    )
