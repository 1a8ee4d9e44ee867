"""decode: tokens per second generated, streamed and not, with what bounds the figure.

Per repetition: one non-streamed request of 1 token and one of
``max_tokens`` on prompts of the same size, and (after all those pairs) one
streamed request of ``max_tokens`` (the inter-token cadence a client sees:
tokens after the first over first-to-last chunk). The non-streamed
*differential* rate, (tokens - 1) / (wall - wall of 1 token), takes out HTTP,
prefill and the first token. EOS is suppressed so every run generates the
same length; fewer than 128 tokens is refused up front (at 8-9 tokens the
inter-token time is first-token noise).

The figure is the streamed rate unless it falls below the non-streamed
differential by more than the noise band (per-chunk overhead, e.g.
llama-cpp-python's ~6-8 ms per SSE chunk, docs/engines-on-cpu.md §4) or runs
``BURST_FACTOR`` above it (buffered bursts); then the non-streamed figure is
used and ``bound_by`` says why.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import (
    CHAT,
    Completion,
    Server,
    Streamed,
    answer_limit,
    chat_body,
    read_completion,
)
from fakplan.probes.corpus import corpus, nonce
from fakplan.probes.http import Deadline, Endpoint, ProbeFault
from fakplan.probes.rate_report import Basis, Progress, RateResult, report, stream_once, summary_of
from fakplan.probes.stats import Summary

MIN_DECODE_TOKENS = 128  # >= 128 generated tokens for any decode figure: fewer is TTFT noise
DEFAULT_DECODE_TOKENS = 512
# a streamed rate this many times the non-streamed one is chunks arriving in bursts: seen
# against vLLM 0.32 on a loaded 2-core machine, 15,283 t/s streamed against ~330 t/s
BURST_FACTOR = 3.0


def _decode_prompt() -> str:
    return (
        f"[{nonce()}] Continue the following text for as long as you can, in the same "
        f"style.\n\n{corpus(240)}"
    )


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class DecodeRep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    streamed_tps: float | None
    ttft_s: float
    streamed_tokens: int
    streamed_tokens_from: Literal["usage", "chunks"]
    gap_median_ms: float | None
    gap_p90_ms: float | None
    nonstream_tokens: int | None
    nonstream_wall_s: float
    end_to_end_tps: float | None
    baseline_wall_s: float
    differential_tps: float | None
    engine_tps: float | None  # timings.predicted_per_second, where the server reports it
    prompt_tokens: int | None
    finish_reasons: tuple[str | None, str | None]


def _p90(values: tuple[float, ...]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def _check_length(max_tokens: int) -> None:
    """Refuse a run too short to measure decode before a request is sent."""
    if max_tokens < MIN_DECODE_TOKENS:
        raise ProbeFault(
            f"max_tokens {max_tokens} is under {MIN_DECODE_TOKENS}: at 8-9 tokens the "
            "inter-token time is first-token noise; ask for 512"
        )


def _eos_notes(server: Server) -> list[str]:
    """Say up front when nothing can stop the engine ending early (the run may come out short)."""
    if server.eos_policy() is not None:
        return []
    return [
        f"{server.flavour.name} takes no ignore_eos and the EOS id is unknown (give the "
        "GGUF in the shape): EOS is not suppressed, and an early stop shortens the run"
    ]


@dataclass(frozen=True)
class _Pair:
    """One non-streamed repetition: the wall of 1 token, the wall of all, and the answer."""

    wall1: float
    wall: float
    whole: Completion


def _pair(
    endpoint: Endpoint,
    server: Server,
    max_tokens: int,
    deadline: Deadline,
    window: int | None,
    step: str,
) -> _Pair:
    """A 1-token and a ``max_tokens`` request on like prompts: the differential rate's walls."""
    base_answer = endpoint.post(
        CHAT, chat_body(server, _decode_prompt(), 1), deadline, f"{step}: 1 token"
    )
    base = read_completion(base_answer, f"{step}: 1 token")
    if window and base.prompt_tokens and base.prompt_tokens + max_tokens > window:
        raise ProbeFault(
            f"{max_tokens} tokens after a {base.prompt_tokens}-token prompt do not fit the "
            f"{window}-token window; lower --max-tokens"
        )
    whole_answer = endpoint.post(
        CHAT,
        chat_body(server, _decode_prompt(), max_tokens, suppress_eos=True),
        deadline,
        f"{step}: {max_tokens} tokens",
        limit=answer_limit(max_tokens, streamed=False),
    )
    whole = read_completion(whole_answer, f"{step}: {max_tokens} tokens")
    return _Pair(base_answer.elapsed_s, whole_answer.elapsed_s, whole)


def _decode_rep(pair: _Pair, streamed: Streamed) -> DecodeRep:
    """One repetition's figures: the stream's cadence beside the non-streamed pair's rates."""
    n, wall, wall1, whole = pair.whole.completion_tokens, pair.wall, pair.wall1, pair.whole
    return DecodeRep(
        streamed_tps=streamed.decode_tps,
        ttft_s=round(streamed.ttft_s, 6),
        streamed_tokens=streamed.tokens,
        streamed_tokens_from="usage" if streamed.tokens_from_usage else "chunks",
        gap_median_ms=_ms(statistics.median(streamed.gaps_s)) if streamed.gaps_s else None,
        gap_p90_ms=_ms(p) if (p := _p90(streamed.gaps_s)) is not None else None,
        nonstream_tokens=n,
        nonstream_wall_s=round(wall, 6),
        end_to_end_tps=n / wall if n and wall > 0 else None,
        baseline_wall_s=round(wall1, 6),
        differential_tps=(n - 1) / (wall - wall1) if n and n > 1 and wall > wall1 else None,
        engine_tps=whole.timings.get("predicted_per_second"),
        prompt_tokens=whole.prompt_tokens,
        finish_reasons=(whole.finish_reason, streamed.finish_reason),
    )


def _measure_decode(
    endpoint: Endpoint,
    server: Server,
    max_tokens: int,
    repeat: int,
    deadline: Deadline,
    window: int | None,
    progress: Progress,
) -> list[DecodeRep]:
    """Every non-streamed pair first, then every stream, one rep per pair and stream.

    On llama-cpp-python a request right after a long stream waits on the
    wrapper (a 1-token request took 0.45 s, measured), which would poison the
    differential rate.
    """
    pairs: list[_Pair] = []
    for index in range(repeat):
        step = f"decode {index + 1}/{repeat}, non-streamed"
        pairs.append(_pair(endpoint, server, max_tokens, deadline, window, step))
        if progress:
            progress(step)
    reps: list[DecodeRep] = []
    for index, pair in enumerate(pairs):
        step = f"decode {index + 1}/{repeat}, streamed"
        streamed = stream_once(
            endpoint,
            server,
            _decode_prompt(),
            max_tokens,
            True,
            deadline,
            f"{step}: {max_tokens} tokens",
        )
        reps.append(_decode_rep(pair, streamed))
        if progress:
            progress(step)
    return reps


def _decode_notes(reps: list[DecodeRep], engine: Summary | None) -> tuple[bool, list[str]]:
    """Whether the run came out short of a decode figure, and what the reps say about it."""
    notes: list[str] = []
    generated = [r.nonstream_tokens or 0 for r in reps] + [r.streamed_tokens for r in reps]
    short = statistics.median(generated) < MIN_DECODE_TOKENS
    if short:
        notes.append(
            f"the engine stopped at a median of {statistics.median(generated):g} tokens, under "
            f"{MIN_DECODE_TOKENS}: the figure is first-token noise, not a decode rate"
        )
    if not all(r.streamed_tokens_from == "usage" for r in reps):
        notes.append("the stream carried no usage: streamed tokens are counted as chunks")
    if engine:
        notes.append(f"the engine's own timings report {engine.median:,.1f} t/s (median)")
    return short, notes


def decode_basis(streamed: Summary | None, diff: Summary | None, e2e: Summary | None) -> Basis:
    """The figure decode is judged on, and what bounds the streamed one when it is not that.

    The streamed rate unless it misses the non-streamed one by more than the
    noise band (per-chunk overhead) or beats it by ``BURST_FACTOR`` (buffered bursts).
    """
    reference, name = (diff, "non-streamed differential") if diff else (e2e, "non-streamed")
    if streamed and reference:
        band = max(streamed.noise_pct, reference.noise_pct)
        if streamed.median < reference.median * (1 - band / 100):
            bound = (
                f"streaming: {streamed.median:,.1f} t/s streamed against {reference.median:,.1f} "
                f"t/s {name}; per-chunk overhead in the server wrapper or the client bounds the "
                "streamed rate, not the engine"
            )
            return Basis(f"{name} rate", reference, bound)
        if streamed.median > reference.median * BURST_FACTOR:
            # chunks that arrive together measure the buffer that held them, not the engine
            bound = (
                f"buffering: {streamed.median:,.1f} t/s streamed against "
                f"{reference.median:,.1f} t/s {name}; the chunks arrived in bursts (a proxy "
                "buffer, or a client starved of CPU), so their gaps are not the engine's"
            )
            return Basis(f"{name} rate", reference, bound)
    elif streamed is None:
        return Basis(f"{name} rate", reference)
    return Basis("streamed inter-token rate", streamed)


def _fixed_cost_dominates(reps: list[DecodeRep]) -> bool:
    """A 1-token request over half of a full one: the rate measures the request, not decode."""
    return (
        bool(reps) and statistics.median(r.baseline_wall_s / r.nonstream_wall_s for r in reps) > 0.5
    )


def decode(
    endpoint: Endpoint,
    server: Server,
    *,
    max_tokens: int = DEFAULT_DECODE_TOKENS,
    repeat: int = 3,
    deadline: Deadline,
    window: int | None = None,
    progress: Progress = None,
) -> RateResult:
    """The decode rate over ``repeat`` repetitions of ``max_tokens`` tokens each."""
    _check_length(max_tokens)
    notes = _eos_notes(server)
    reps = _measure_decode(endpoint, server, max_tokens, repeat, deadline, window, progress)
    streamed = summary_of([r.streamed_tps for r in reps])
    e2e = summary_of([r.end_to_end_tps for r in reps])
    diff = summary_of([r.differential_tps for r in reps])
    engine = summary_of([r.engine_tps for r in reps])
    short, more = _decode_notes(reps, engine)
    notes += more
    basis = decode_basis(streamed, diff, e2e)
    if e2e and _fixed_cost_dominates(reps):
        notes.append(
            "a 1-token request takes over half of a full one: fixed per-request cost dominates; "
            "raise --max-tokens"
        )
    return report(
        "decode",
        basis,
        {
            "streamed": streamed,
            "non_streamed": e2e,
            "non_streamed_differential": diff,
            "engine_reported": engine,
        },
        tokens=max_tokens,
        repeat=repeat,
        eos_suppression=server.eos_policy(),
        short=short,
        reps=tuple(r.model_dump() for r in reps),
        notes=tuple(notes),
    )
