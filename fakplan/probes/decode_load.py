"""decode-load: every slot decoding at once, each from a prompt that fills its window.

N = ``max_num_seqs`` prompts of ``window - max_tokens - LOAD_SLACK`` tokens (the chat
template counted, as boundary sizes them), each asked for ``max_tokens`` with EOS
suppressed, streamed at once (a thread each: their prefills overlap, the decode after
them is what is timed). A session's rate is its tokens after the first over its first
to last chunk; the figure is the median over sessions: tokens/s a session sees with
every slot running near the full window, the condition the plan's ``decode-tps``
predicts (fakplan.rate_plan). The streams overlap only where the engine batches them:
a server that runs one request at a time shows it in the spread, and the report says
how many sessions gave a rate.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fakplan.probes.api import Server, Streamed
from fakplan.probes.boundary import prepare
from fakplan.probes.calibrate import Sizer
from fakplan.probes.decode_rate import MIN_DECODE_TOKENS
from fakplan.probes.http import Deadline, Endpoint, ProbeFault
from fakplan.probes.rate_report import Basis, Progress, RateResult, report, stream_once, summary_of

# tokens the prompt leaves past the answer: engines that overrun max_tokens by a few
# (llama-cpp-python, boundary.ANSWER_SLACK) must not run into the window's last cell
LOAD_SLACK = 16
MAX_STREAMS = 256  # threads a run opens at once: past it, sessions queue in the client


def decode_load(
    endpoint: Endpoint,
    server: Server,
    sizer: Sizer,
    *,
    slots: int,
    window: int,
    max_tokens: int,
    deadline: Deadline,
    progress: Progress = None,
) -> RateResult:
    """Tokens/s per session with ``slots`` sessions decoding at once near ``window``."""
    if max_tokens < MIN_DECODE_TOKENS:
        raise ProbeFault(
            f"max_tokens {max_tokens} is under {MIN_DECODE_TOKENS}: at 8-9 tokens the "
            "inter-token time is first-token noise; ask for 512"
        )
    prompts, overhead = prepare(
        endpoint, server, sizer, slots, window, deadline, gen=max_tokens + LOAD_SLACK
    )

    def one(index: int) -> Streamed:
        prompt = prompts[index]
        return stream_once(
            endpoint,
            server,
            prompt.text,
            max_tokens,
            True,
            deadline,
            f"decode-load: session {prompt.slot + 1}/{slots}",
        )

    with ThreadPoolExecutor(max_workers=min(slots, MAX_STREAMS)) as pool:
        streams = list(pool.map(one, range(len(prompts))))
    if progress:
        progress(f"decode-load: {slots} session(s) streamed")
    rates = [s.decode_tps for s in streams]
    per_session = summary_of(rates)
    counted = sum(1 for r in rates if r is not None)
    notes = [f"{counted} of {slots} session(s) gave a rate, each from a ~{window:,}-token window"]
    if slots > MAX_STREAMS:
        notes.append(f"{MAX_STREAMS} streams at once: the sessions past them queued in the client")
    generated = sorted(s.tokens for s in streams)
    short = generated[len(generated) // 2] < MIN_DECODE_TOKENS
    reps = tuple(
        {
            "session": prompt.slot + 1,
            # the engine's count where the stream states it, else the sizer's with the template
            "prompt_tokens": s.prompt_tokens or prompt.text_tokens + (overhead or 0),
            "prompt_tokens_from": "usage" if s.prompt_tokens else "fakplan",
            "tokens": s.tokens,
            "ttft_s": round(s.ttft_s, 6),
            "streamed_tps": s.decode_tps,
        }
        for prompt, s in zip(prompts, streams, strict=True)
    )
    return report(
        "decode-load",
        Basis("streamed inter-token rate per session", per_session),
        {"per_session": per_session},
        tokens=max_tokens,
        repeat=1,
        reps=reps,
        notes=tuple(notes),
        eos_suppression=server.eos_policy(),
        short=short,
    )
