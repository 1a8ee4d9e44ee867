"""Context-overflow refusals: the engines' own wordings, as data, parsed for their numbers.

An engine refuses a prompt longer than its window *before* any prefill, and
most say how many tokens the prompt had: a free token count.
Each engine's ``server`` module lists its wordings, each row tagged with the version it
was read in (``docs/engines.md`` §1.11, §2.7, §3.8;
``docs/engines-on-cpu.md`` §4, §6); ``refusals`` joins them. The regexes match on the numbers, not
on the prose around them, because engines reword the prose between releases.

    >>> parse_refusal('{"error": {"message": "request (1500 tokens) exceeds the '
    ...               'available context size (1024 tokens), try increasing it"}}').prompt_tokens
    1500
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fakplan.engines import RefusalPattern, context_refusals

__all__ = ["Refusal", "RefusalPattern", "error_message", "parse_refusal", "refusals"]


def refusals() -> tuple[RefusalPattern, ...]:
    """Every engine's wordings (each engine's ``server`` module), in registry order."""
    return context_refusals()


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
    rows = sorted(refusals(), key=lambda r: r.engine != engine) if engine else refusals()
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
