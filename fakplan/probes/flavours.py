"""What each serving engine's OpenAI-compatible server takes, as data, and how to tell them apart.

A flavour says which tokenize route counts a prompt for free, whether the
server takes ``ignore_eos`` and ``chat_template_kwargs``, and where that was
read. ``classify`` names the flavour from what a few GETs returned; the GETs
themselves are the HTTP edge's (``fakplan.probes.http``).
"""

from __future__ import annotations

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
    name: str
    tokenize: tuple[TokenizeRoute, ...]
    ignore_eos: bool  # takes "ignore_eos": true
    thinking_kwargs: bool  # takes chat_template_kwargs.enable_thinking
    source: str
    engine: str | None = None  # the shape engine whose server this is (None: any)


FLAVOURS: dict[str, Flavour] = {
    "vllm": Flavour(
        "vllm",
        # add_special_tokens: count the prompt as /v1/completions will (docs/engines.md §1.12)
        (TokenizeRoute("/tokenize", "prompt", {"add_special_tokens": True}),),
        ignore_eos=True,
        thinking_kwargs=True,
        source="vLLM v0.6.6-v0.33.0 (docs/engines.md §1.12)",
        engine="vllm",
    ),
    "sglang": Flavour(
        "sglang",
        # v0.5.23 has both routes; v0.5.2 has neither (docs/engines.md §2.8)
        (TokenizeRoute("/v1/tokenize", "prompt"), TokenizeRoute("/tokenize", "prompt")),
        ignore_eos=True,
        thinking_kwargs=True,
        source="SGLang v0.5.23 (docs/engines.md §2.8)",
        engine="sglang",
    ),
    "llama-server": Flavour(
        "llama-server",
        # add_special defaults to false there; a completion adds BOS (docs/engines.md §3.9)
        (TokenizeRoute("/tokenize", "content", {"add_special": True}, count_key=None),),
        ignore_eos=True,
        thinking_kwargs=True,  # with --jinja; other builds ignore the field
        source="llama.cpp 0c1e57098 tools/server (docs/engines.md §3.9)",
        engine="llamacpp",
    ),
    "llama-cpp-python": Flavour(
        "llama-cpp-python",
        # counts with BOS, as a completion does (docs/engines-on-cpu.md §4)
        (TokenizeRoute("/extras/tokenize/count", "input"),),
        ignore_eos=False,  # no such parameter: EOS is suppressed by logit_bias only
        thinking_kwargs=False,
        source="llama-cpp-python 0.3.36 (docs/engines-on-cpu.md §4)",
        engine="llamacpp",
    ),
    "openai": Flavour(
        "openai",
        (),
        ignore_eos=False,
        thinking_kwargs=False,
        source="any OpenAI-compatible server: standard fields only",
    ),
}


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


@dataclass(frozen=True)
class Evidence:
    """One detection rule: the flavour it names and what shows it."""

    flavour: str
    shows: str
    test: Callable[[Observed], bool]


def _paths(o: Observed, *paths: str) -> bool:
    return o.openapi_paths is not None and all(p in o.openapi_paths for p in paths)


# Tried in order; the first that holds names the flavour.
DETECTION: tuple[Evidence, ...] = (
    Evidence(
        "vllm", "/v1/models owned_by 'vllm'", lambda o: o.first_model.get("owned_by") == "vllm"
    ),
    Evidence(
        "sglang",
        "/v1/models owned_by 'sglang'",
        lambda o: o.first_model.get("owned_by") == "sglang",
    ),
    Evidence(
        "llama-server",
        "/v1/models owned_by 'llamacpp' or a meta block",
        lambda o: o.first_model.get("owned_by") == "llamacpp" or "meta" in o.first_model,
    ),
    Evidence(
        "llama-cpp-python",
        "/openapi.json lists /extras/tokenize/count",
        lambda o: _paths(o, "/extras/tokenize/count"),
    ),
    Evidence(
        "sglang", "/openapi.json lists /get_model_info", lambda o: _paths(o, "/get_model_info")
    ),
    Evidence(
        "vllm",
        "/openapi.json lists /tokenize and /version",
        lambda o: _paths(o, "/tokenize", "/version"),
    ),
    Evidence(
        "llama-server",
        "/props has default_generation_settings",
        lambda o: "default_generation_settings" in (o.props or {}),
    ),
)


def classify(observed: Observed) -> tuple[str, str]:
    """(flavour, evidence); ``openai`` with the reason when nothing identifies the server."""
    for rule in DETECTION:
        if rule.test(observed):
            return rule.flavour, rule.shows
    return "openai", "no engine-specific route or field answered"


def served_context(observed: Observed) -> int | None:
    """The window the server states about itself, where it states one."""
    model = observed.first_model
    for value in (
        model.get("max_model_len"),  # vLLM, SGLang
        (model.get("meta") or {}).get("n_ctx") if isinstance(model.get("meta"), Mapping) else None,
        ((observed.props or {}).get("default_generation_settings") or {}).get("n_ctx")
        if isinstance((observed.props or {}).get("default_generation_settings"), Mapping)
        else None,
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
