"""SGLang's OpenAI-compatible server as the probes meet it: its flavour, how to tell it and
its context-overflow wordings (docs/engines.md §2.7, §2.8)."""

from __future__ import annotations

from fakplan.engines.serving import (
    BY_FIELD,
    BY_ROUTE,
    Evidence,
    Flavour,
    ServerFacts,
    TokenizeRoute,
    refusal,
)

FLAVOUR = Flavour(
    "sglang",
    # v0.5.23 has both routes; v0.5.2 has neither (docs/engines.md §2.8)
    (TokenizeRoute("/v1/tokenize", "prompt"), TokenizeRoute("/tokenize", "prompt")),
    ignore_eos=True,
    thinking_kwargs=True,
    source="SGLang v0.5.23 (docs/engines.md §2.8)",
    engine="sglang",
)

EVIDENCE = (
    Evidence(
        "sglang",
        "/v1/models owned_by 'sglang'",
        lambda o: o.first_model.get("owned_by") == "sglang",
        BY_FIELD + 1,
    ),
    Evidence(
        "sglang",
        "/openapi.json lists /get_model_info",
        lambda o: o.lists("/get_model_info"),
        BY_ROUTE + 1,
    ),
)

CONTEXT_REFUSALS = (
    refusal(
        "sglang-input-longer",
        "sglang",
        "v0.4.6-v0.5.23 tokenizer_manager.py",
        r"The input \((?P<prompt>{N}) tokens\) is longer than the model's context length "
        r"\((?P<context>{N}) tokens\)",
        "v0.5.23 counts any reserved tokens in the input",
    ),
    refusal(
        "sglang-requested-total",
        "sglang",
        "v0.4.6-v0.5.23 tokenizer_manager.py",
        r"maximum context length of (?P<context>{N}) tokens\. You requested a total of "
        r"(?P<total>{N}) tokens: (?P<prompt>{N}) tokens from the input messages and "
        r"(?P<completion>{N}) tokens for the completion",
    ),
    refusal(
        "sglang-max-req-input",
        "sglang",
        "v0.5.23 managers/utils.py",
        r"Input length \((?P<prompt>{N}) tokens\) exceeds the maximum allowed length "
        r"\((?P<context>{N}) tokens\)",
    ),
)

SERVER = ServerFacts((FLAVOUR,), EVIDENCE, CONTEXT_REFUSALS)
