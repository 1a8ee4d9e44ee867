"""llama.cpp's two servers as the probes meet them, llama-server and llama-cpp-python: their
flavours, how to tell them and their context-overflow wordings (docs/engines.md §3.8, §3.9;
docs/engines-on-cpu.md §4)."""

from __future__ import annotations

from fakplan.engines.serving import (
    BY_FIELD,
    BY_PROPS,
    BY_ROUTE,
    Evidence,
    Flavour,
    ServerFacts,
    TokenizeRoute,
    refusal,
)

LLAMA_SERVER = Flavour(
    "llama-server",
    # add_special defaults to false there; a completion adds BOS (docs/engines.md §3.9)
    (TokenizeRoute("/tokenize", "content", {"add_special": True}, count_key=None),),
    ignore_eos=True,
    thinking_kwargs=True,  # with --jinja; other builds ignore the field
    source="llama.cpp 0c1e57098 tools/server (docs/engines.md §3.9)",
    engine="llamacpp",
)
LLAMA_CPP_PYTHON = Flavour(
    "llama-cpp-python",
    # counts with BOS, as a completion does (docs/engines-on-cpu.md §4)
    (TokenizeRoute("/extras/tokenize/count", "input"),),
    ignore_eos=False,  # no such parameter: EOS is suppressed by logit_bias only
    thinking_kwargs=False,
    source="llama-cpp-python 0.3.36 (docs/engines-on-cpu.md §4)",
    engine="llamacpp",
)

EVIDENCE = (
    Evidence(
        "llama-server",
        "/v1/models owned_by 'llamacpp' or a meta block",
        lambda o: o.first_model.get("owned_by") == "llamacpp" or "meta" in o.first_model,
        BY_FIELD + 2,
    ),
    Evidence(
        "llama-cpp-python",
        "/openapi.json lists /extras/tokenize/count",
        lambda o: o.lists("/extras/tokenize/count"),
        BY_ROUTE,
    ),
    Evidence(
        "llama-server",
        "/props has default_generation_settings",
        lambda o: "default_generation_settings" in (o.props or {}),
        BY_PROPS,
    ),
)

CONTEXT_REFUSALS = (
    # llama-cpp-python 0.3.36 (docs/engines-on-cpu.md §4): chat reuses vLLM's classic wording
    refusal(
        "llama-cpp-python-completion",
        "llama-cpp-python",
        "0.3.36 /v1/completions",
        r"maximum context length is (?P<context>{N}) tokens, however you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in your prompt; (?P<completion>{N}) for the "
        r"completion\)",
    ),
    refusal(
        "llama-cpp-python-chat",
        "llama-cpp-python",
        "0.3.36 /v1/chat/completions",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in the messages, (?P<completion>{N}) in the "
        r"completion\)",
        "the same wording as vLLM v0.3.3-v0.8.5 (the classic family)",
    ),
    # llama-server (docs/engines.md §3.8)
    refusal(
        "llama-server-request-exceeds",
        "llama-server",
        "0c1e57098 server-context.cpp",
        r"request \((?P<prompt>{N}) tokens\) exceeds the available context size "
        r"\((?P<context>{N}) tokens\)",
    ),
    refusal(
        "llama-server-input-larger",
        "llama-server",
        "0c1e57098 server-context.cpp (embeddings, rerank)",
        r"input \((?P<prompt>{N}) tokens\) is larger than the max context size "
        r"\((?P<context>{N}) tokens\)",
    ),
    refusal(
        "llama-server-exceeds-2025",
        "llama-server",
        "mid/late 2025 (UNCONFIRMED commit)",
        r"the request exceeds the available context size, try increasing it",
        "the counts are in the body's n_prompt_tokens and n_ctx fields",
    ),
    refusal(
        "llama-server-exceeds-2024",
        "llama-server",
        "74d73dc examples/server/server.cpp",
        r"the request exceeds the available context size\. try increasing the context size or "
        r"enable context shift",
        "names no count",
    ),
    refusal(
        "llama-server-input-larger-2024",
        "llama-server",
        "74d73dc examples/server/server.cpp",
        r"input is larger than the max context size\. skipping",
        "names no count",
    ),
)

SERVER = ServerFacts((LLAMA_SERVER, LLAMA_CPP_PYTHON), EVIDENCE, CONTEXT_REFUSALS)
