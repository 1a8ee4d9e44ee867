"""decode and prefill: tokens per second, repeated, with what bounds each figure.

Every prompt is cold (a random nonce at its head: prefix caches survive
restarts) and has thinking disabled where the engine takes it.

decode, per repetition: one non-streamed request of 1 token and one of
``max_tokens`` on prompts of the same size, and (after all those pairs) one
streamed request of ``max_tokens`` (the inter-token cadence a client sees:
tokens after the first over first-to-last chunk). The non-streamed
*differential* rate, (tokens - 1) / (wall - wall of 1 token), takes out HTTP,
prefill and the first token. EOS is suppressed so every run generates the
same length; fewer than 128 tokens is refused up front (at 8-9 tokens the
inter-token time is first-token noise).

prefill, per repetition: a streamed request of 1 token on a prompt of
``window - 16`` tokens (time to first token) and the same on a short prompt;
the differential rate divides the extra tokens by the extra time.

The figure is the plain one (streamed decode; prompt tokens over TTFT)
unless the probe shows the client or the server wrapper bounds it: streamed
decode below the non-streamed differential by more than the noise band
(per-chunk overhead, e.g. llama-cpp-python's ~6-8 ms per SSE chunk,
docs/engines-on-cpu.md §4), or a short prompt's TTFT over a quarter of a long
one's (fixed request overhead). Then the differential figure is used and
``bound_by`` says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import (
    CHAT,
    Completion,
    Server,
    Streamed,
    answer_limit,
    chat_body,
    read_completion,
    read_stream,
)
from fakplan.probes.calibrate import Sizer
from fakplan.probes.corpus import corpus, nonce
from fakplan.probes.http import Deadline, Endpoint, ProbeFault
from fakplan.probes.stats import NOISE_FLOOR_PCT, Summary, summarize

MIN_DECODE_TOKENS = 128  # >= 128 generated tokens for any decode figure: fewer is TTFT noise
DEFAULT_DECODE_TOKENS = 512
PREFILL_GEN = 16  # the long prefill prompt is window - PREFILL_GEN tokens
FIXED_OVERHEAD_SHARE = 0.25  # a short prompt's TTFT above this share of a long one's: bound

Progress = Callable[[str], None] | None  # told each finished step


def _decode_prompt() -> str:
    return (
        f"[{nonce()}] Continue the following text for as long as you can, in the same "
        f"style.\n\n{corpus(240)}"
    )


# a streamed rate this many times the non-streamed one is chunks arriving in bursts: seen
# against vLLM 0.32 on a loaded 2-core machine, 15,283 t/s streamed against ~330 t/s
BURST_FACTOR = 3.0


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


class RateResult(BaseModel):
    """A rate probe's report; ``figure`` is what a prediction is judged on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: Literal["decode", "prefill"]
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


def _summary(values: list[float | None]) -> Summary | None:
    present = [v for v in values if v is not None]
    return summarize(present) if present else None


def _dict(summary: Summary | None) -> dict[str, float | int] | None:
    return summary.to_dict() if summary else None


def _p90(values: tuple[float, ...]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def _stream(
    endpoint: Endpoint,
    server: Server,
    text: str,
    max_tokens: int,
    suppress: bool,
    deadline: Deadline,
    doing: str,
) -> Streamed:
    body = chat_body(server, text, max_tokens, stream=True, suppress_eos=suppress)
    # one token asked for is a time-to-first-token read: what follows it does not count
    # (llama-cpp-python may run on past max_tokens into the window's end and break off)
    whole = max_tokens > 1
    limit = answer_limit(max_tokens, streamed=True)
    return read_stream(
        endpoint.stream(CHAT, body, deadline, doing, limit=limit), doing, whole=whole
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
    if max_tokens < MIN_DECODE_TOKENS:
        raise ProbeFault(
            f"max_tokens {max_tokens} is under {MIN_DECODE_TOKENS}: at 8-9 tokens the "
            "inter-token time is first-token noise; ask for 512"
        )
    notes: list[str] = []
    if server.eos_policy() is None:
        notes.append(
            f"{server.flavour.name} takes no ignore_eos and the EOS id is unknown (give the "
            "GGUF in the shape): EOS is not suppressed, and an early stop shortens the run"
        )
    # The non-streamed pairs first, then the streams: on llama-cpp-python a request right
    # after a long stream waits on the wrapper (a 1-token request took 0.45 s, measured),
    # which would poison the differential rate.
    pairs: list[tuple[float, float, Completion]] = []  # (wall of 1 token, wall, whole)
    for index in range(repeat):
        step = f"decode {index + 1}/{repeat}, non-streamed"
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
        pairs.append((base_answer.elapsed_s, whole_answer.elapsed_s, whole))
        if progress:
            progress(step)
    reps: list[DecodeRep] = []
    for index, (wall1, wall, whole) in enumerate(pairs):
        step = f"decode {index + 1}/{repeat}, streamed"
        streamed = _stream(
            endpoint,
            server,
            _decode_prompt(),
            max_tokens,
            True,
            deadline,
            f"{step}: {max_tokens} tokens",
        )
        n = whole.completion_tokens
        reps.append(
            DecodeRep(
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
        )
        if progress:
            progress(step)
    streamed_s = _summary([r.streamed_tps for r in reps])
    e2e = _summary([r.end_to_end_tps for r in reps])
    diff = _summary([r.differential_tps for r in reps])
    engine = _summary([r.engine_tps for r in reps])
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
    basis, chosen, bound = "streamed inter-token rate", streamed_s, None
    reference, name = (diff, "non-streamed differential") if diff else (e2e, "non-streamed")
    if streamed_s and reference:
        band = max(streamed_s.noise_pct, reference.noise_pct)
        if streamed_s.median < reference.median * (1 - band / 100):
            bound = (
                f"streaming: {streamed_s.median:,.1f} t/s streamed against {reference.median:,.1f} "
                f"t/s {name}; per-chunk overhead in the server wrapper or the client bounds the "
                "streamed rate, not the engine"
            )
            basis, chosen = f"{name} rate", reference
        elif streamed_s.median > reference.median * BURST_FACTOR:
            # chunks that arrive together measure the buffer that held them, not the engine
            bound = (
                f"buffering: {streamed_s.median:,.1f} t/s streamed against "
                f"{reference.median:,.1f} t/s {name}; the chunks arrived in bursts (a proxy "
                "buffer, or a client starved of CPU), so their gaps are not the engine's"
            )
            basis, chosen = f"{name} rate", reference
    elif chosen is None:
        basis, chosen = f"{name} rate", reference
    if (
        e2e
        and reps
        and statistics.median(r.baseline_wall_s / r.nonstream_wall_s for r in reps) > 0.5
    ):
        notes.append(
            "a 1-token request takes over half of a full one: fixed per-request cost dominates; "
            "raise --max-tokens"
        )
    return RateResult(
        probe="decode",
        figure=round(chosen.median, 2) if chosen else None,
        basis=basis,
        noise_pct=chosen.noise_pct if chosen else NOISE_FLOOR_PCT,
        spread=_dict(chosen),
        bound_by=bound,
        figures={
            "streamed": _dict(streamed_s),
            "non_streamed": _dict(e2e),
            "non_streamed_differential": _dict(diff),
            "engine_reported": _dict(engine),
        },
        tokens=max_tokens,
        repeat=repeat,
        eos_suppression=server.eos_policy(),
        short=short,
        reps=tuple(r.model_dump() for r in reps),
        notes=tuple(notes),
    )


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
    text_target = target - (overhead or 0)
    reps: list[PrefillRep] = []
    notes: list[str] = []
    for index in range(repeat):
        step = f"prefill {index + 1}/{repeat}"
        short_text = _prefill_builder(nonce())(200)
        short = _stream(endpoint, server, short_text, 1, False, deadline, f"{step}: short prompt")
        long_fit = sizer.fit(_prefill_builder(nonce()), text_target)
        long = _stream(
            endpoint, server, long_fit.text, 1, False, deadline, f"{step}: {target:,}-token prompt"
        )
        long_tokens = long.prompt_tokens or long_fit.tokens + (overhead or 0)
        short_tokens = short.prompt_tokens or sizer.count(short_text) + (overhead or 0)
        extra_s = long.ttft_s - short.ttft_s
        reps.append(
            PrefillRep(
                prompt_tokens=long_tokens,
                prompt_tokens_from="usage" if long.prompt_tokens else "fakplan",
                ttft_s=round(long.ttft_s, 6),
                tps=long_tokens / long.ttft_s if long.ttft_s > 0 else None,
                short_prompt_tokens=short_tokens,
                short_ttft_s=round(short.ttft_s, 6),
                differential_tps=(long_tokens - short_tokens) / extra_s if extra_s > 0 else None,
                engine_tps=long.timings.get("prompt_per_second"),
            )
        )
        if progress:
            progress(step)
    plain = _summary([r.tps for r in reps])
    diff = _summary([r.differential_tps for r in reps])
    engine = _summary([r.engine_tps for r in reps])
    basis, chosen, bound = "prompt tokens over time to first token", plain, None
    share = statistics.median(r.short_ttft_s / r.ttft_s for r in reps) if reps else 0.0
    if share > FIXED_OVERHEAD_SHARE and diff:
        bound = (
            f"fixed request overhead: a short prompt's first token takes {share:.0%} of the "
            f"long prompt's; the client's round trip and the server wrapper bound the plain "
            "figure, not the engine"
        )
        basis, chosen = "differential rate (long minus short prompt)", diff
    if engine:
        notes.append(f"the engine's own timings report {engine.median:,.1f} t/s (median)")
    if not sizer.exact:
        notes.append("the prompt was sized from chars/token (no tokenize route)")
    return RateResult(
        probe="prefill",
        figure=round(chosen.median, 2) if chosen else None,
        basis=basis,
        noise_pct=chosen.noise_pct if chosen else NOISE_FLOOR_PCT,
        spread=_dict(chosen),
        bound_by=bound,
        figures={
            "plain": _dict(plain),
            "differential": _dict(diff),
            "engine_reported": _dict(engine),
        },
        tokens=target,
        repeat=repeat,
        reps=tuple(r.model_dump() for r in reps),
        notes=tuple(notes),
    )
