"""Context-overflow refusals: the engines' own wordings, as data, parsed for their numbers.

An engine refuses a prompt longer than its window *before* any prefill, and
most say how many tokens the prompt had: a free token count.
Each row of ``REFUSALS`` is one wording, tagged with the engine and version it
was read in (``docs/engines.md`` §1.11, §2.7, §3.8;
``docs/engines-on-cpu.md`` §4, §6). The regexes match on the numbers, not
on the prose around them, because engines reword the prose between releases.

    >>> parse_refusal('{"error": {"message": "request (1500 tokens) exceeds the '
    ...               'available context size (1024 tokens), try increasing it"}}').prompt_tokens
    1500
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_N = r"(\d[\d,]*)"  # a count, with or without thousands separators


@dataclass(frozen=True)
class RefusalPattern:
    """One engine wording. Named groups: prompt, context, completion, total, chars."""

    id: str
    engine: str  # vllm, sglang, llama-server, llama-cpp-python, radiance
    version: str  # the release the wording was read in
    regex: re.Pattern[str]
    note: str = ""


def _p(id: str, engine: str, version: str, regex: str, note: str = "") -> RefusalPattern:
    return RefusalPattern(id, engine, version, re.compile(regex.replace("{N}", _N)), note)


# Order matters only where two rows could match one text: the more specific first.
REFUSALS: tuple[RefusalPattern, ...] = (
    # --- vLLM (docs/engines.md §1.11)
    _p(
        "vllm-prompt-contains",
        "vllm",
        "v0.33.0 vllm/renderers/params.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, your prompt contains "
        r"(?P<at_least>at least )?(?P<prompt>{N}) input tokens",
        "'at least' when the tokenizer stopped at max_model_len + 1: a lower bound, not a count",
    ),
    _p(
        "vllm-prompt-characters",
        "vllm",
        "v0.33.0 vllm/renderers/params.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, your prompt contains "
        r"(?P<chars>{N}) characters \(more than (?P<max_chars>{N}) characters",
        "a character pre-check on very long text: names characters, no token count",
    ),
    _p(
        "vllm-engine-prompt-length",
        "vllm",
        "v0.33.0 vllm/v1/engine/input_processor.py",
        r"The (?:decoder|encoder) prompt \(length (?P<prompt>{N})\) (?:plus the number of "
        r"requested output tokens \(at least 1\) )?is longer than the maximum model length of "
        r"(?P<context>{N})",
    ),
    _p(
        "vllm-input-length",
        "vllm",
        "v0.33.0 vllm/entrypoints/serve/utils/api_utils.py",
        r"Input length \((?P<prompt>{N})\) exceeds model's maximum context length "
        r"\((?P<context>{N})\)",
    ),
    _p(
        "vllm-request-has",
        "vllm",
        "v0.11.0 serving_engine.py _validate_input",
        r"maximum context length is (?P<context>{N}) tokens\. However, your request has "
        r"(?P<prompt>{N}) input tokens",
    ),
    _p(
        "vllm-max-tokens-too-large",
        "vllm",
        "v0.11.0 serving_engine.py _validate_input",
        r"'max_tokens' or 'max_completion_tokens' is too large: (?P<completion>{N})\. This "
        r"model's maximum context length is (?P<context>{N}) tokens and your request has "
        r"(?P<prompt>{N}) input tokens",
    ),
    _p(
        "vllm-requested-input-for",
        "vllm",
        "v0.11.0 serving_engine.py (embedding, score, classify)",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<prompt>{N}) tokens in the input for",
    ),
    _p(
        "vllm-classic",
        "vllm",
        "v0.3.3-v0.8.5.post1 serving_engine.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in the messages, (?P<completion>{N}) in the "
        r"completion\)",
    ),
    _p(
        "vllm-classic-no-max-tokens",
        "vllm",
        "v0.6.6-v0.8.5.post1 serving_engine.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<prompt>{N}) tokens in the messages, Please reduce",
    ),
    # --- llama-cpp-python 0.3.36 (docs/engines-on-cpu.md §4): chat reuses vLLM's classic wording
    _p(
        "llama-cpp-python-completion",
        "llama-cpp-python",
        "0.3.36 /v1/completions",
        r"maximum context length is (?P<context>{N}) tokens, however you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in your prompt; (?P<completion>{N}) for the "
        r"completion\)",
    ),
    _p(
        "llama-cpp-python-chat",
        "llama-cpp-python",
        "0.3.36 /v1/chat/completions",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in the messages, (?P<completion>{N}) in the "
        r"completion\)",
        "the same wording as vLLM v0.3.3-v0.8.5 (the classic family)",
    ),
    # --- SGLang (docs/engines.md §2.7)
    _p(
        "sglang-input-longer",
        "sglang",
        "v0.4.6-v0.5.23 tokenizer_manager.py",
        r"The input \((?P<prompt>{N}) tokens\) is longer than the model's context length "
        r"\((?P<context>{N}) tokens\)",
        "v0.5.23 counts any reserved tokens in the input",
    ),
    _p(
        "sglang-requested-total",
        "sglang",
        "v0.4.6-v0.5.23 tokenizer_manager.py",
        r"maximum context length of (?P<context>{N}) tokens\. You requested a total of "
        r"(?P<total>{N}) tokens: (?P<prompt>{N}) tokens from the input messages and "
        r"(?P<completion>{N}) tokens for the completion",
    ),
    _p(
        "sglang-max-req-input",
        "sglang",
        "v0.5.23 managers/utils.py",
        r"Input length \((?P<prompt>{N}) tokens\) exceeds the maximum allowed length "
        r"\((?P<context>{N}) tokens\)",
    ),
    # --- llama-server (docs/engines.md §3.8)
    _p(
        "llama-server-request-exceeds",
        "llama-server",
        "0c1e57098 server-context.cpp",
        r"request \((?P<prompt>{N}) tokens\) exceeds the available context size "
        r"\((?P<context>{N}) tokens\)",
    ),
    _p(
        "llama-server-input-larger",
        "llama-server",
        "0c1e57098 server-context.cpp (embeddings, rerank)",
        r"input \((?P<prompt>{N}) tokens\) is larger than the max context size "
        r"\((?P<context>{N}) tokens\)",
    ),
    _p(
        "llama-server-exceeds-2025",
        "llama-server",
        "mid/late 2025 (UNCONFIRMED commit)",
        r"the request exceeds the available context size, try increasing it",
        "the counts are in the body's n_prompt_tokens and n_ctx fields",
    ),
    _p(
        "llama-server-exceeds-2024",
        "llama-server",
        "74d73dc examples/server/server.cpp",
        r"the request exceeds the available context size\. try increasing the context size or "
        r"enable context shift",
        "names no count",
    ),
    _p(
        "llama-server-input-larger-2024",
        "llama-server",
        "74d73dc examples/server/server.cpp",
        r"input is larger than the max context size\. skipping",
        "names no count",
    ),
    # --- radiance: the engine an operator's KV/VRAM resize runbook quotes this wording from
    _p(
        "radiance-does-not-fit",
        "radiance",
        "an operator's resize runbook",
        r"(?P<prompt>{N}) prompt tokens does not fit the (?P<context>{N}) token context",
    ),
)


@dataclass(frozen=True)
class Refusal:
    """What a context-overflow refusal says. ``prompt_tokens`` is None when it names no count."""

    pattern: str
    engine: str
    version: str
    message: str
    prompt_tokens: int | None
    context: int | None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    lower_bound: bool = False
    chars: int | None = None
    max_chars: int | None = None

    @property
    def exact_count(self) -> int | None:
        """The prompt's token count when the engine named it exactly."""
        return None if self.lower_bound else self.prompt_tokens


def error_message(body: str) -> str:
    """The human message inside an error body: ``{"error": {"message"}}``, flat, or text."""
    data = _json(body)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return body.strip()


def parse_refusal(body: str, engine: str | None = None) -> Refusal | None:
    """The refusal in an error body, or None when the body is not a context refusal.

    ``engine`` prefers that engine's rows where two engines share a wording
    (llama-cpp-python's chat text is vLLM's classic one).
    """
    message = error_message(body)
    rows = sorted(REFUSALS, key=lambda r: r.engine != engine) if engine else REFUSALS
    for row in rows:
        match = row.regex.search(message)
        if match is None:
            continue
        groups = match.groupdict()
        fields = _fields(body)
        prompt = _int(groups.get("prompt"))
        context = _int(groups.get("context"))
        if prompt is None:
            prompt = fields.get("n_prompt_tokens")
        if context is None:
            context = fields.get("n_ctx")
        return Refusal(
            pattern=row.id,
            engine=row.engine,
            version=row.version,
            message=message,
            prompt_tokens=prompt,
            context=context,
            completion_tokens=_int(groups.get("completion")),
            total_tokens=_int(groups.get("total")),
            lower_bound=bool(groups.get("at_least")),
            chars=_int(groups.get("chars")),
            max_chars=_int(groups.get("max_chars")),
        )
    return None


def _int(text: str | None) -> int | None:
    return None if text is None else int(text.replace(",", ""))


def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _fields(body: str) -> dict[str, int]:
    """llama-server attaches ``n_prompt_tokens`` and ``n_ctx`` to its error object."""
    data = _json(body)
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return {}
    return {
        key: value
        for key in ("n_prompt_tokens", "n_ctx")
        if isinstance(value := error.get(key), int) and not isinstance(value, bool)
    }
