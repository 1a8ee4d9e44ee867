"""prefill: tokens per second of a cold window-sized prompt, with what bounds the figure.

Per repetition: a streamed request of 1 token on a prompt of ``window - 16``
tokens (time to first token) and the same on a short prompt; the
differential rate divides the extra tokens by the extra time. The figure is
prompt tokens over TTFT unless the short prompt's TTFT is over a quarter of
the long one's (fixed request overhead); then the differential rate is used
and ``bound_by`` says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import Server
from fakplan.probes.calibrate import Sizer
from fakplan.probes.corpus import corpus, nonce
from fakplan.probes.http import Deadline, Endpoint
from fakplan.probes.rate_report import Basis, Progress, RateResult, report, stream_once, summary_of
from fakplan.probes.stats import Summary

PREFILL_GEN = 16  # the long prefill prompt is window - PREFILL_GEN tokens
FIXED_OVERHEAD_SHARE = 0.25  # a short prompt's TTFT above this share of a long one's: bound


class PrefillRep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int
    prompt_tokens_from: Literal["usage", "fakplan"]
    ttft_s: float
    tps: float | None
    short_prompt_tokens: int
    short_ttft_s: float
    differential_tps: float | None
    engine_tps: float | None  # timings.prompt_per_second, where reported


def _prefill_builder(code: str) -> Callable[[int], str]:
    head = f"[{code}] Summarise the following text in one sentence.\n\n"
    return lambda n: head + corpus(n)


def _prefill_rep(
    endpoint: Endpoint,
    server: Server,
    sizer: Sizer,
    target: int,
    overhead: int | None,
    deadline: Deadline,
    step: str,
) -> PrefillRep:
    """A short and a ``target``-token cold prompt, 1 token each: TTFT and the differential."""
    short_text = _prefill_builder(nonce())(200)
    short = stream_once(endpoint, server, short_text, 1, False, deadline, f"{step}: short prompt")
    long_fit = sizer.fit(_prefill_builder(nonce()), target - (overhead or 0))
    long = stream_once(
        endpoint, server, long_fit.text, 1, False, deadline, f"{step}: {target:,}-token prompt"
    )
    long_tokens = long.prompt_tokens or long_fit.tokens + (overhead or 0)
    short_tokens = short.prompt_tokens or sizer.count(short_text) + (overhead or 0)
    extra_s = long.ttft_s - short.ttft_s
    return PrefillRep(
        prompt_tokens=long_tokens,
        prompt_tokens_from="usage" if long.prompt_tokens else "fakplan",
        ttft_s=round(long.ttft_s, 6),
        tps=long_tokens / long.ttft_s if long.ttft_s > 0 else None,
        short_prompt_tokens=short_tokens,
        short_ttft_s=round(short.ttft_s, 6),
        differential_tps=(long_tokens - short_tokens) / extra_s if extra_s > 0 else None,
        engine_tps=long.timings.get("prompt_per_second"),
    )


def _prefill_basis(reps: list[PrefillRep], plain: Summary | None, diff: Summary | None) -> Basis:
    """The plain figure, unless a short prompt's TTFT shows fixed request overhead bounds it."""
    share = statistics.median(r.short_ttft_s / r.ttft_s for r in reps) if reps else 0.0
    if share > FIXED_OVERHEAD_SHARE and diff:
        bound = (
            f"fixed request overhead: a short prompt's first token takes {share:.0%} of the "
            f"long prompt's; the client's round trip and the server wrapper bound the plain "
            "figure, not the engine"
        )
        return Basis("differential rate (long minus short prompt)", diff, bound)
    return Basis("prompt tokens over time to first token", plain)


def prefill(
    endpoint: Endpoint,
    server: Server,
    sizer: Sizer,
    *,
    window: int,
    repeat: int = 3,
    deadline: Deadline,
    overhead: int | None = None,
    progress: Progress = None,
) -> RateResult:
    """Prefill rate of a ``window - 16``-token cold prompt over ``repeat`` repetitions."""
    target = window - PREFILL_GEN
    reps: list[PrefillRep] = []
    notes: list[str] = []
    for index in range(repeat):
        step = f"prefill {index + 1}/{repeat}"
        reps.append(_prefill_rep(endpoint, server, sizer, target, overhead, deadline, step))
        if progress:
            progress(step)
    plain = summary_of([r.tps for r in reps])
    diff = summary_of([r.differential_tps for r in reps])
    engine = summary_of([r.engine_tps for r in reps])
    basis = _prefill_basis(reps, plain, diff)
    if engine:
        notes.append(f"the engine's own timings report {engine.median:,.1f} t/s (median)")
    if not sizer.exact:
        notes.append("the prompt was sized from chars/token (no tokenize route)")
    return report(
        "prefill",
        basis,
        {
            "plain": plain,
            "differential": diff,
            "engine_reported": engine,
        },
        tokens=target,
        repeat=repeat,
        reps=tuple(r.model_dump() for r in reps),
        notes=tuple(notes),
    )
