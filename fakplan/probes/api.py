"""OpenAI-compatible request bodies and answers, per flavour (pure: no I/O here).

Bodies avoid a probe runbook's known traps: temperature 0; thinking
disabled through ``chat_template_kwargs`` where the flavour takes it; EOS
suppressed where asked (``ignore_eos`` on vLLM, SGLang and llama-server,
``logit_bias`` of -100 on known EOS ids everywhere); ``timings`` read as
optional with every rate optional (``j.get("timings") or {}``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fakplan.probes.faults import ProbeFault
from fakplan.probes.faults import excerpt as excerpt  # re-exported: quotes were made here first
from fakplan.probes.flavours import OPENAI, Flavour
from fakplan.probes.reading import KIB, MAX_BODY_BYTES, Answer, StreamAnswer
from fakplan.probes.refusals import error_message

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

# What a generation's answer may take per token asked for, above its floor: a streamed token's
# event is 100-500 bytes (vLLM's carries its id, the model path and a fingerprint; 481 with a
# 200-character model path), a non-streamed token's text at most ~16 characters, 96 bytes
# JSON-escaped. 2 KiB is 4x the largest, so --max-tokens N always fits.
ANSWER_BYTES_PER_TOKEN = 2 * KIB
# A stream's floor: its role, finish and usage events (1-2 KiB), keep-alive comments, and what
# llama-cpp-python streams past a 1-token max_tokens before it breaks off. Smaller than a whole
# answer's (MAX_BODY_BYTES): a 68-byte event parses to ~1 KiB of objects (14x, measured), so a
# flood of them at 256 KiB + 2 KiB a token (512 tokens: 1.25 MiB) holds ~18 MB.
STREAM_FLOOR_BYTES = 256 * KIB
# The longest finish_reason kept: engines say "stop", "length", "abort" and the like.
FINISH_CHARS = 64


def answer_limit(max_tokens: int, *, streamed: bool) -> int:
    """The bytes a generation of ``max_tokens`` may answer with before it is a fault."""
    floor = STREAM_FLOOR_BYTES if streamed else MAX_BODY_BYTES
    return floor + max(max_tokens, 0) * ANSWER_BYTES_PER_TOKEN


@dataclass(frozen=True)
class Server:
    """What detection found out about an endpoint."""

    flavour: Flavour = OPENAI
    model: str | None = None
    models: tuple[str, ...] = ()  # every id /v1/models lists (model is the first)
    evidence: str = ""
    context: int | None = None  # the window the server states, where it states one
    eos_ids: tuple[int, ...] = ()  # token ids to bias away (from the model's GGUF header)
    notes: tuple[str, ...] = ()
    # fields merged into every generation request: an operator's engine-specific sampling
    # parameters (a logit_bias here is merged with the EOS one)
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def eos_policy(self) -> str | None:
        """How this server is told not to stop early, in words; None when it cannot be."""
        ways = []
        if self.flavour.ignore_eos:
            ways.append("ignore_eos")
        if self.eos_ids:
            ways.append("logit_bias " + ", ".join(f"{i}: -100" for i in self.eos_ids))
        return " + ".join(ways) or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "flavour": self.flavour.name,
            "evidence": self.evidence,
            "model": self.model,
            "models": list(self.models),
            "context": self.context,
            "eos_suppression": self.eos_policy(),
            "extra_fields": sorted(self.extra_body),
            "notes": list(self.notes),
        }


def _common(server: Server, max_tokens: int, stream: bool, suppress_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if server.model:
        body["model"] = server.model
    if stream:
        body["stream_options"] = {"include_usage": True}
    if suppress_eos:
        if server.flavour.ignore_eos:
            body["ignore_eos"] = True
        if server.eos_ids:
            body["logit_bias"] = {str(i): -100 for i in server.eos_ids}
    for key, value in server.extra_body.items():
        if key == "logit_bias" and isinstance(value, Mapping):
            body[key] = {**value, **body.get(key, {})}
        else:
            body[key] = value
    return body


def chat_body(
    server: Server, text: str, max_tokens: int, *, stream: bool = False, suppress_eos: bool = False
) -> dict[str, Any]:
    """One user message; thinking off where the flavour takes chat_template_kwargs."""
    body = _common(server, max_tokens, stream, suppress_eos)
    body["messages"] = [{"role": "user", "content": text}]
    if server.flavour.thinking_kwargs:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    return body


def completion_body(server: Server, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = _common(server, max_tokens, False, False)
    body["prompt"] = prompt
    return body


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Completion:
    """A non-streamed answer, read tolerantly."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    timings: Mapping[str, float | None] = field(default_factory=dict)


def _finish(value: Any) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("type")  # SGLang: {"type": "abort", ...}
    return excerpt(value, FINISH_CHARS) if isinstance(value, str) else None


def _choice_text(choice: Mapping[str, Any]) -> str:
    message = choice.get("message")
    if isinstance(message, Mapping):
        return str(message.get("content") or "")
    delta = choice.get("delta")
    if isinstance(delta, Mapping):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


def timings_of(data: Mapping[str, Any]) -> dict[str, float | None]:
    """llama-server's ``timings`` block; missing, null, or with null rates is all fine."""
    raw = data.get("timings") or {}
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): _number(v) for k, v in raw.items()}


def read_completion(answer: Answer, doing: str) -> Completion:
    """A 2xx answer as a ``Completion``; ``ProbeFault`` naming what is wrong otherwise."""
    if not answer.ok:
        raise ProbeFault(f"{doing}: HTTP {answer.status}: {excerpt(error_message(answer.text))}")
    data = answer.data
    if not isinstance(data, Mapping):
        raise ProbeFault(f"{doing}: the answer is not a JSON object: {excerpt(answer.text)!r}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ProbeFault(f"{doing}: the answer has no choices: {excerpt(answer.text)!r}")
    raw_usage = data.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, Mapping) else {}
    return Completion(
        text=_choice_text(choices[0]),
        finish_reason=_finish(choices[0].get("finish_reason")),
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        timings=timings_of(data),
    )


@dataclass(frozen=True)
class Streamed:
    """A streamed answer as timings: when each token chunk arrived."""

    ttft_s: float
    chunk_times: tuple[float, ...]  # arrival of each token-bearing chunk, since sending
    tokens: int  # usage.completion_tokens when the stream carried usage, else chunks
    tokens_from_usage: bool
    finish_reason: str | None
    prompt_tokens: int | None
    timings: Mapping[str, float | None]
    elapsed_s: float

    @property
    def decode_tps(self) -> float | None:
        """Tokens after the first over the time from the first chunk to the last."""
        if len(self.chunk_times) < 2 or self.tokens < 2:
            return None
        span = self.chunk_times[-1] - self.chunk_times[0]
        return (self.tokens - 1) / span if span > 0 else None

    @property
    def gaps_s(self) -> tuple[float, ...]:
        t = self.chunk_times
        return tuple(b - a for a, b in itertools.pairwise(t))


def read_stream(answer: StreamAnswer, doing: str, *, whole: bool = True) -> Streamed:
    """An event stream as ``Streamed``; a fault when it is an error, malformed or cut short.

    ``whole=False`` reads a stream only for its first token (time to first
    token): one that breaks off after that token still answers.
    """
    if answer.broken and whole:
        raise ProbeFault(answer.broken)
    if not answer.ok:
        raise ProbeFault(f"{doing}: HTTP {answer.status}: {excerpt(error_message(answer.text))}")
    if not answer.events and answer.text:
        raise ProbeFault(f"{doing}: asked to stream, the server answered with one body instead")
    if answer.malformed:
        raise ProbeFault(f"{doing}: {answer.malformed} event(s) in the stream were not JSON")
    chunk_times: list[float] = []
    finish: str | None = None
    usage: Mapping[str, Any] = {}
    timings: dict[str, float | None] = {}
    for at, event in answer.events:
        if isinstance(event.get("usage"), Mapping):
            usage = event["usage"]
        if event.get("timings") is not None:
            timings = timings_of(event)
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            continue
        choice = choices[0]
        finish = _finish(choice.get("finish_reason")) or finish
        # A token chunk carries a text field (even ""): llama-cpp-python sends "" for a
        # token whose bytes do not yet make a character. A role-only delta is no token.
        delta = choice.get("delta")
        carries = "text" in choice or (isinstance(delta, Mapping) and "content" in delta)
        if carries and (choice.get("finish_reason") is None or _choice_text(choice)):
            chunk_times.append(at)
    if whole and not answer.done and finish is None:
        raise ProbeFault(
            f"{doing}: the stream stopped after {len(chunk_times)} chunk(s) with no "
            "finish_reason and no [DONE] (cut short)"
        )
    if not chunk_times:
        raise ProbeFault(f"{doing}: the stream carried no tokens")
    counted = _count(usage.get("completion_tokens"))
    return Streamed(
        ttft_s=chunk_times[0],
        chunk_times=tuple(chunk_times),
        tokens=counted if counted is not None else len(chunk_times),
        tokens_from_usage=counted is not None,
        finish_reason=finish,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        timings=timings,
        elapsed_s=answer.elapsed_s,
    )
