"""PromQL label matchers, read strictly: what picks one endpoint's series.

An alert rule that selects by the served model alone also selects every other endpoint
serving that model, and each then fires on the other's figures. ``fakplan rules``
selects by the matchers an operator states once (``monitoring.selector`` or
``--selector``), written in PromQL's own form:

    >>> render(parse_matchers('job="vllm-a", instance=~"10\\\\.0\\\\.0\\\\.5:.*"'))
    'job="vllm-a",instance=~"10\\\\.0\\\\.0\\\\.5:.*"'

Nothing is passed through as typed: each matcher is parsed into a label name (Prometheus'
``[a-zA-Z_][a-zA-Z0-9_]*``), an operator and a value, and written back with the value
quoted anew, so a value cannot end its string or the selector.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from fakplan.errors import SelectorError

MAX_TEXT = 1_000  # characters: a selector is a few labels
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATORS = ("=~", "!~", "!=", "=")
# a double-quoted string literal with backslash escapes (PromQL's Go-style strings, as far
# as JSON reads them: \" \\ \n \t \uXXXX)
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
# labels fakplan's rules set themselves: a selector naming them would contradict the rule
RESERVED = frozenset({"__name__", "model_name", "num_gpu_blocks"})


@dataclass(frozen=True)
class Matcher:
    label: str
    operator: str
    value: str

    def __str__(self) -> str:
        return f"{self.label}{self.operator}{json.dumps(self.value, ensure_ascii=False)}"


EXPECTED = 'PromQL label matchers, e.g. job="vllm-a",instance="10.0.0.5:8000"'


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """``name op "value"`` pairs separated by commas, optionally inside ``{}``."""
    if len(text) > MAX_TEXT:
        raise SelectorError(f"{len(text):,} characters: a selector is a few labels ({EXPECTED})")
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    found: list[Matcher] = []
    at = 0
    while True:
        at = _skip_space(body, at)
        if at == len(body):
            break
        label = _LABEL.match(body, at)
        if label is None:
            raise SelectorError(f"expected a label name at {body[at : at + 20]!r} ({EXPECTED})")
        at = _skip_space(body, label.end())
        operator = next((op for op in _OPERATORS if body.startswith(op, at)), None)
        if operator is None:
            raise SelectorError(f"expected =, !=, =~ or !~ after {label.group()!r} ({EXPECTED})")
        at = _skip_space(body, at + len(operator))
        literal = _STRING.match(body, at)
        if literal is None:
            raise SelectorError(
                f"expected a double-quoted value after {label.group()}{operator} ({EXPECTED})"
            )
        value = _decode(literal.group(), label.group())
        found.append(_checked(Matcher(label.group(), operator, value)))
        at = _skip_space(body, literal.end())
        if at < len(body):
            if body[at] != ",":
                raise SelectorError(
                    f"expected ',' between matchers at {body[at : at + 20]!r} ({EXPECTED})"
                )
            at += 1
    if not found:
        raise SelectorError(f"no matchers ({EXPECTED})")
    return tuple(found)


def render(matchers: tuple[Matcher, ...]) -> str:
    """The matchers as a selector's inside, each value quoted anew."""
    return ",".join(str(m) for m in matchers)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t":
        at += 1
    return at


def _decode(literal: str, label: str) -> str:
    try:
        value = json.loads(literal)
    except json.JSONDecodeError:
        raise SelectorError(
            f"the value of {label} is not a string literal PromQL reads: {literal[:40]!r}"
        ) from None
    assert isinstance(value, str)
    return value


def _checked(matcher: Matcher) -> Matcher:
    if matcher.label in RESERVED:
        raise SelectorError(
            f"{matcher.label!r} is a label fakplan's rules select themselves; name the "
            "endpoint by the labels its scrape sets (job, instance, namespace, pod, ...)"
        )
    if any(ord(c) < 0x20 for c in matcher.value):
        raise SelectorError(f"the value of {matcher.label} holds a control character")
    if matcher.operator in ("=~", "!~"):
        try:
            re.compile(matcher.value)
        except re.error as exc:
            raise SelectorError(f"the regex of {matcher.label} does not compile: {exc}") from None
    return matcher
