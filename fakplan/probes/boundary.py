"""boundary: every slot filled to the window at once, each asked for the marker at its head.

N = ``max_num_seqs`` prompts, each sized to ``max_model_len - gen`` tokens
(gen 32, the chat template included), each starting with its own random
marker, are sent concurrently, each asking for
``gen - 8`` tokens: the answer needs ~10, and the spare cells absorb engines
that overrun max_tokens by a few. A pool that backs N full windows
answers all N and a model that attends over the whole window copies each
marker back: N/N. The report gives each slot's latency, prompt size as the
engine counted it, answer, and any refusal or preemption.

A random-weight model never retrieves; the probe reports that honestly (0/N),
while the mechanics (N prompts of the right size accepted and answered) still
show in the per-slot figures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict

from fakplan.probes.api import CHAT, Server, chat_body, excerpt, read_completion
from fakplan.probes.calibrate import Sizer
from fakplan.probes.corpus import corpus, marker, normalise
from fakplan.probes.http import Answer, AsyncEndpoint, Deadline, Endpoint, ProbeFault
from fakplan.probes.refusals import Refusal, error_message, parse_refusal
from fakplan.probes.stats import summarize

GEN = 32  # tokens each prompt leaves free in the window: a marker is ~10 tokens
# The answer asks for fewer than it leaves: llama-cpp-python 0.3.36 generates 1-5 tokens
# past max_tokens (a pending UTF-8 byte skips its check, docs/engines-on-cpu.md §5) and
# answers HTTP 500 "llama_decode returned 1" in ~40 % of requests that run into the
# window's last cell (measured on the tiny model). That is the wrapper, not the pool.
ANSWER_SLACK = 8
SIZE_TOLERANCE = (0.03, 0.01)  # an accepted prompt within -3 % .. +1 % of its target
ABORTED = {"abort", "aborted", "cancelled", "preempted"}

AsyncClientFactory = Callable[[], httpx.AsyncClient]


@dataclass(frozen=True)
class SlotPrompt:
    slot: int
    marker: str
    text: str
    text_tokens: int  # the message text's count (exact where the engine tokenizes)


class SlotResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slot: int
    marker: str
    status: Literal["answered", "refused", "preempted", "failed"]
    http_status: int | None
    latency_s: float | None
    prompt_tokens: int | None  # as the engine counted it (usage), when it says
    completion_tokens: int | None
    finish_reason: str | None
    retrieved: bool
    answer: str  # the start of the answer
    error: str | None = None
    refusal: dict[str, Any] | None = None


class BoundaryResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slots: int
    window: int
    gen: int
    max_tokens: int  # asked for each answer: gen - ANSWER_SLACK
    target_tokens: int  # per prompt, chat template included: window - gen
    sized_by: Literal["tokenize", "estimate"]
    chat_overhead_tokens: int | None
    accepted: int
    answered: int
    retrieved: int
    refused: int
    preempted: int
    failed: int
    sized_ok: bool  # every prompt the engine counted lay within tolerance of its target
    latency_s: dict[str, float | int] | None
    results: tuple[SlotResult, ...]
    notes: tuple[str, ...] = ()

    @property
    def mechanics_ok(self) -> bool:
        """N prompts of the right size accepted and answered (retrieval aside)."""
        return self.answered == self.slots and self.sized_ok


def _builder(code: str) -> Callable[[int], str]:
    head = (
        f"{code}\nThe line above is a code. Remember it: a long text follows, then a "
        "question about the code.\n\n"
    )
    tail = "\n\nWhat is the code on the first line of this message? Answer with the code only."
    return lambda n: head + corpus(n) + tail


def chat_overhead(
    endpoint: Endpoint, server: Server, sizer: Sizer, deadline: Deadline
) -> int | None:
    """Tokens the chat template adds around a message: a short chat, 1 token generated.

    On llama-cpp-python 0.3.36 this short request also clears what the
    previous request left in the cache: a near-full prompt right after
    another near-full one fails there with HTTP 500 "llama_decode returned 1"
    (its prefix-cache state, docs/engines-on-cpu.md §4), which is not the boundary.
    """
    text = "Reply with one word."
    done = read_completion(
        endpoint.post(
            CHAT, chat_body(server, text, 1), deadline, "POST /v1/chat/completions (template size)"
        ),
        "POST /v1/chat/completions (template size)",
    )
    if done.prompt_tokens is None:
        return None
    return max(0, done.prompt_tokens - sizer.count(text))


def prepare(
    endpoint: Endpoint,
    server: Server,
    sizer: Sizer,
    slots: int,
    window: int,
    deadline: Deadline,
    gen: int = GEN,
) -> tuple[list[SlotPrompt], int | None]:
    """One prompt per slot, each ``window - gen`` tokens with the template; and the template size."""
    overhead = chat_overhead(endpoint, server, sizer, deadline)
    target = window - gen - (overhead or 0)
    if target <= 64:
        raise ProbeFault(f"a window of {window} leaves no room for a boundary prompt")
    prompts = []
    for slot in range(slots):
        code = marker()
        fitted = sizer.fit(_builder(code), target)
        prompts.append(SlotPrompt(slot, code, fitted.text, fitted.tokens))
    return prompts, overhead


def _unanswered(
    prompt: SlotPrompt,
    error: str,
    http_status: int | None = None,
    latency: float | None = None,
    refusal: Refusal | None = None,
) -> SlotResult:
    """A slot with no answer to read: refused (the count it names), or failed."""
    return SlotResult(
        slot=prompt.slot,
        marker=prompt.marker,
        status="refused" if refusal is not None else "failed",
        http_status=http_status,
        latency_s=latency,
        prompt_tokens=refusal.prompt_tokens if refusal else None,
        completion_tokens=None,
        finish_reason=None,
        retrieved=False,
        answer="",
        error=error,
        refusal={
            "pattern": refusal.pattern,
            "prompt_tokens": refusal.prompt_tokens,
            "context": refusal.context,
        }
        if refusal
        else None,
    )


def _slot(prompt: SlotPrompt, answer: Answer | ProbeFault, server: Server) -> SlotResult:
    """What one slot's request came to: answered (and whether it copied its marker) or not."""
    if isinstance(answer, ProbeFault):
        return _unanswered(prompt, str(answer))
    latency = round(answer.elapsed_s, 4)
    if not answer.ok:
        refusal = parse_refusal(answer.text, server.flavour.name)
        error = f"HTTP {answer.status}: {excerpt(error_message(answer.text))}"
        return _unanswered(prompt, error, answer.status, latency, refusal)
    try:
        done = read_completion(answer, f"slot {prompt.slot}")
    except ProbeFault as exc:
        return _unanswered(prompt, str(exc), answer.status, latency)
    preempted = (done.finish_reason or "").lower() in ABORTED
    return SlotResult(
        slot=prompt.slot,
        marker=prompt.marker,
        status="preempted" if preempted else "answered",
        http_status=answer.status,
        latency_s=latency,
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        finish_reason=done.finish_reason,
        retrieved=normalise(prompt.marker) in normalise(done.text),
        answer=excerpt(done.text, 80),
    )


async def send(
    endpoint: AsyncEndpoint,
    server: Server,
    prompts: list[SlotPrompt],
    deadline: Deadline,
    gen: int = GEN,
) -> list[SlotResult]:
    """All prompts at once; each slot's answer, refusal or fault."""

    async def one(prompt: SlotPrompt) -> Answer | ProbeFault:
        body = chat_body(server, prompt.text, max(1, gen - ANSWER_SLACK))
        try:
            return await endpoint.post(CHAT, body, deadline, f"slot {prompt.slot}")
        except ProbeFault as exc:
            return exc

    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(one(p) for p in prompts)), timeout=max(deadline.remaining(), 0.001) + 1
        )
    except TimeoutError:
        raise ProbeFault(
            f"the {len(prompts)} boundary prompts did not finish within the probe's "
            f"{deadline.total_s:g} s timeout"
        ) from None
    return [_slot(p, a, server) for p, a in zip(prompts, answers, strict=True)]


def summarise(
    results: list[SlotResult],
    *,
    window: int,
    gen: int,
    overhead: int | None,
    exact: bool,
    notes: list[str],
) -> BoundaryResult:
    target = window - gen
    low, high = SIZE_TOLERANCE
    counted = [r.prompt_tokens for r in results if r.status != "failed" and r.prompt_tokens]
    sized_ok = all(target * (1 - low) <= c <= target * (1 + high) for c in counted)
    if not counted:
        notes.append("the engine reported no prompt sizes; the sizes are fakplan's own count")
    if not sized_ok:
        sizes = ", ".join(f"{c:,}" for c in counted)
        notes.append(f"prompts were counted at {sizes} tokens against a target of {target:,}")
    latencies = [r.latency_s for r in results if r.latency_s is not None and r.status == "answered"]
    if len(latencies) > 1 and max(latencies) > 1.8 * min(latencies):
        notes.append(
            f"latencies {min(latencies):.2f}..{max(latencies):.2f} s: the slots were served "
            "one after another (queued), not all at once"
        )
    return BoundaryResult(
        slots=len(results),
        window=window,
        gen=gen,
        max_tokens=max(1, gen - ANSWER_SLACK),
        target_tokens=target,
        sized_by="tokenize" if exact else "estimate",
        chat_overhead_tokens=overhead,
        accepted=sum(r.status in ("answered", "preempted") for r in results),
        answered=sum(r.status == "answered" for r in results),
        retrieved=sum(r.retrieved for r in results),
        refused=sum(r.status == "refused" for r in results),
        preempted=sum(r.status == "preempted" for r in results),
        failed=sum(r.status == "failed" for r in results),
        sized_ok=sized_ok,
        latency_s=summarize(latencies).to_dict() if latencies else None,
        results=tuple(results),
        notes=tuple(notes),
    )


def boundary(
    endpoint: Endpoint,
    async_client: AsyncClientFactory,
    server: Server,
    sizer: Sizer,
    *,
    slots: int,
    window: int,
    deadline: Deadline,
    gen: int = GEN,
) -> BoundaryResult:
    """Size the prompts (sync), then send them concurrently on a fresh async client.

    ``async_client`` makes the client inside the probe's event loop and the
    probe closes it there: an async client outliving its loop leaks sockets.
    """
    prompts, overhead = prepare(endpoint, server, sizer, slots, window, deadline, gen)
    notes: list[str] = []
    if overhead is None:
        notes.append("the engine reported no prompt_tokens; the chat template was not counted")

    async def run() -> list[SlotResult]:
        async with async_client() as client:
            return await send(endpoint.concurrent(client), server, prompts, deadline, gen)

    results = asyncio.run(run())
    return summarise(
        results, window=window, gen=gen, overhead=overhead, exact=sizer.exact, notes=notes
    )
