"""vLLM's OpenAI-compatible server as the probes meet it: its flavour, how to tell it, its
context-overflow wordings (docs/engines.md §1.11, §1.12) and the metric that states its
KV capacity."""

from __future__ import annotations

from fakplan.engines.serving import (
    BY_FIELD,
    BY_ROUTE,
    CapacityReading,
    Evidence,
    Flavour,
    ServerFacts,
    TokenizeRoute,
    refusal,
)

FLAVOUR = Flavour(
    "vllm",
    # add_special_tokens: count the prompt as /v1/completions will (docs/engines.md §1.12)
    (TokenizeRoute("/tokenize", "prompt", {"add_special_tokens": True}),),
    ignore_eos=True,
    thinking_kwargs=True,
    source="vLLM v0.6.6-v0.33.0 (docs/engines.md §1.12)",
    engine="vllm",
)

EVIDENCE = (
    Evidence(
        "vllm",
        "/v1/models owned_by 'vllm'",
        lambda o: o.first_model.get("owned_by") == "vllm",
        BY_FIELD,
    ),
    Evidence(
        "vllm",
        "/openapi.json lists /tokenize and /version",
        lambda o: o.lists("/tokenize", "/version"),
        BY_ROUTE + 2,  # after llama-cpp-python's and SGLang's more specific routes
    ),
)

# Order matters only where two rows could match one text: the more specific first.
CONTEXT_REFUSALS = (
    refusal(
        "vllm-prompt-contains",
        "vllm",
        "v0.33.0 vllm/renderers/params.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, your prompt contains "
        r"(?P<at_least>at least )?(?P<prompt>{N}) input tokens",
        "'at least' when the tokenizer stopped at max_model_len + 1: a lower bound, not a count",
    ),
    refusal(
        "vllm-prompt-characters",
        "vllm",
        "v0.33.0 vllm/renderers/params.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, your prompt contains "
        r"(?P<chars>{N}) characters \(more than (?P<max_chars>{N}) characters",
        "a character pre-check on very long text: names characters, no token count",
    ),
    refusal(
        "vllm-engine-prompt-length",
        "vllm",
        "v0.33.0 vllm/v1/engine/input_processor.py",
        r"The (?:decoder|encoder) prompt \(length (?P<prompt>{N})\) (?:plus the number of "
        r"requested output tokens \(at least 1\) )?is longer than the maximum model length of "
        r"(?P<context>{N})",
    ),
    refusal(
        "vllm-input-length",
        "vllm",
        "v0.33.0 vllm/entrypoints/serve/utils/api_utils.py",
        r"Input length \((?P<prompt>{N})\) exceeds model's maximum context length "
        r"\((?P<context>{N})\)",
    ),
    refusal(
        "vllm-request-has",
        "vllm",
        "v0.11.0 serving_engine.py _validate_input",
        r"maximum context length is (?P<context>{N}) tokens\. However, your request has "
        r"(?P<prompt>{N}) input tokens",
    ),
    refusal(
        "vllm-max-tokens-too-large",
        "vllm",
        "v0.11.0 serving_engine.py _validate_input",
        r"'max_tokens' or 'max_completion_tokens' is too large: (?P<completion>{N})\. This "
        r"model's maximum context length is (?P<context>{N}) tokens and your request has "
        r"(?P<prompt>{N}) input tokens",
    ),
    refusal(
        "vllm-requested-input-for",
        "vllm",
        "v0.11.0 serving_engine.py (embedding, score, classify)",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<prompt>{N}) tokens in the input for",
    ),
    refusal(
        "vllm-classic",
        "vllm",
        "v0.3.3-v0.8.5.post1 serving_engine.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<total>{N}) tokens \((?P<prompt>{N}) in the messages, (?P<completion>{N}) in the "
        r"completion\)",
    ),
    refusal(
        "vllm-classic-no-max-tokens",
        "vllm",
        "v0.6.6-v0.8.5.post1 serving_engine.py",
        r"maximum context length is (?P<context>{N}) tokens\. However, you requested "
        r"(?P<prompt>{N}) tokens in the messages, Please reduce",
    ),
)

# vllm:cache_config_info{block_size="128",kv_cache_size_tokens="524288",num_gpu_blocks=
# "4096",kv_cache_memory_bytes="1073741824",...} 1.0: kv_cache_size_tokens is the very
# number the boot line "KV cache size: N tokens" prints (kv_cache_utils
# .update_kv_cache_capacity, read in the 0.32 CPU build; older releases leave it None)
CAPACITY = CapacityReading(
    route="/metrics",
    metric="vllm:cache_config_info",
    tokens_label="kv_cache_size_tokens",
    blocks_label="num_gpu_blocks",
    block_size_label="block_size",
    bytes_label="kv_cache_memory_bytes",
    source="vLLM 0.32 kv_cache_utils.update_kv_cache_capacity",
)

SERVER = ServerFacts((FLAVOUR,), EVIDENCE, CONTEXT_REFUSALS, CAPACITY)
