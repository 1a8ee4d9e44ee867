"""The serving record types: what an engine's OpenAI-compatible server is, as plain data.

Each engine's ``server`` module fills a ``ServerFacts`` with them: its flavours (which
tokenize route counts a prompt, which request fields it takes), the evidence that tells
its server from another's, its context-overflow wordings, and where it states its KV
capacity. The probes (``fakplan.probes``) read them through the registry and do the HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenizeRoute:
    """A tokenize endpoint: POST ``path`` with the text under ``key``."""

    path: str
    key: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    count_key: str | None = "count"  # None: the count is len(tokens)


@dataclass(frozen=True)
class Flavour:
    """One server an engine ships (llama.cpp has two): the fields it takes, and where that
    was read."""

    name: str
    tokenize: tuple[TokenizeRoute, ...]
    ignore_eos: bool  # takes "ignore_eos": true
    thinking_kwargs: bool  # takes chat_template_kwargs.enable_thinking
    source: str
    engine: str | None = None  # the shape engine whose server this is (None: any)


# any OpenAI-compatible server: what every probe may send when nothing identifies it
OPENAI = Flavour("openai", (), False, False, "any OpenAI-compatible server: standard fields only")


@dataclass(frozen=True)
class Observed:
    """What the detection GETs returned (None: not asked, or not a 200 JSON answer)."""

    models: Mapping[str, Any] | None = None
    openapi_paths: frozenset[str] | None = None
    props: Mapping[str, Any] | None = None

    @property
    def model_ids(self) -> tuple[str, ...]:
        """Every model id the listing names, in its order."""
        data = (self.models or {}).get("data")
        if not isinstance(data, list):
            return ()
        return tuple(
            entry["id"]
            for entry in data
            if isinstance(entry, Mapping) and isinstance(entry.get("id"), str)
        )

    @property
    def first_model(self) -> Mapping[str, Any]:
        data = (self.models or {}).get("data")
        if isinstance(data, list) and data and isinstance(data[0], Mapping):
            return data[0]
        return {}

    def lists(self, *paths: str) -> bool:
        """Whether /openapi.json lists every one of ``paths``."""
        return self.openapi_paths is not None and all(p in self.openapi_paths for p in paths)


# the order detection rules are tried in, across engines: what /v1/models says of itself
# first, then the routes /openapi.json lists, then /props (a rule's own rank refines it)
BY_FIELD, BY_ROUTE, BY_PROPS = 100, 200, 300


@dataclass(frozen=True)
class Evidence:
    """One detection rule: the flavour it names, what shows it, and when it is tried."""

    flavour: str
    shows: str
    test: Callable[[Observed], bool]
    rank: int


_N = r"(\d[\d,]*)"  # a count, with or without thousands separators


@dataclass(frozen=True)
class RefusalPattern:
    """One engine wording of a context-overflow refusal. Named groups: prompt, context,
    completion, total, chars, max_chars, at_least."""

    id: str
    engine: str  # the flavour that words it so (vllm, llama-server, llama-cpp-python, ...)
    version: str  # the release the wording was read in
    regex: re.Pattern[str]
    note: str = ""


def refusal(id: str, engine: str, version: str, regex: str, note: str = "") -> RefusalPattern:
    """A wording row; ``{N}`` in ``regex`` stands for a count."""
    return RefusalPattern(id, engine, version, re.compile(regex.replace("{N}", _N)), note)


@dataclass(frozen=True)
class CapacityReading:
    """Where a running server states its KV capacity: a Prometheus info metric on
    ``route`` whose labels carry the figures (None: a label the server does not set)."""

    route: str
    metric: str
    tokens_label: str
    blocks_label: str | None = None
    block_size_label: str | None = None
    bytes_label: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ServerFacts:
    """An engine's server, as the probes need it."""

    flavours: tuple[Flavour, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    refusals: tuple[RefusalPattern, ...] = ()
    capacity: CapacityReading | None = None
