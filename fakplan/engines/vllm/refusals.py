"""What vLLM refuses at boot that a shape can cause (docs/boot-refusals.md).

Read in the released packages' sources (0.6.6.post1, 0.11.0, 0.17.0, 0.19.0, 0.33.0; the
files named in each row). A release between two read ones prints the older one's text;
config errors from 0.11 on reach the user wrapped in pydantic's ``Value error, <message>``,
and those raised in the engine core after "Engine core initialization failed".
"""

from __future__ import annotations

import math
from typing import Any

from fakplan.contract import contract_requirement
from fakplan.engines.refusals import BootInputs, BootRefusal, NotChecked, kv_split
from fakplan.engines.vllm.floor import CONTEXT_MEASURED
from fakplan.geometry import LayerKind

GIB = 1 << 30
ALLOW_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def _text(inputs: BootInputs) -> dict[str, Any]:
    config = inputs.setup.geometry.text_config
    if config is None:
        raise NotChecked("the model's config.json is not read (a GGUF, or no config)")
    return config


# vllm/config/model.py _get_and_verify_max_len (0.11.0 on; the keys of 0.6.6.post1 lack
# max_target_positions): the smallest of these the config states
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose factor is not applied (0.33.0 adds the YaRN variants, whose
# max_position_embeddings is already scaled)
_UNSCALED = ("su", "longrope", "llama3")
_UNSCALED_033 = (*_UNSCALED, "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def derived_max_len(config: dict[str, Any], version: tuple[int, ...]) -> tuple[str, int | float]:
    """(the key, the length) vLLM derives from a config: the smallest length key, times a
    RoPE factor where its type applies one (Gemma 3's is scaled already)."""
    stated = [
        (int(config[k]), k)
        for k in _MAX_LEN_KEYS
        if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)
    ]
    if not stated:
        raise NotChecked("the config states no maximum length vLLM reads (it assumes 2,048)")
    length: int | float
    length, key = min(stated)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(rope, dict) and "gemma3" not in str(config.get("model_type", "")):
        kind = str(rope.get("rope_type") or rope.get("type") or "default")
        factor = rope.get("factor")
        exempt = _UNSCALED_033 if version >= (0, 33) else _UNSCALED
        if kind not in exempt and isinstance(factor, int | float) and kind != "default":
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
                length = rope["original_max_position_embeddings"]
            length = length * float(factor)
    return key, length


def _max_model_len(inputs: BootInputs) -> str | None:
    config = _text(inputs)
    window = inputs.figures.max_model_len
    key, derived = derived_max_len(config, inputs.version)
    model_max = config.get("model_max_length")
    if window <= derived or (isinstance(model_max, int) and window <= model_max):
        return None
    if inputs.env_on(ALLOW_LONG):
        return None  # vLLM warns and serves the window
    shown = derived  # an int, or a float where a RoPE factor multiplied it: vLLM prints it so
    if inputs.version < (0, 11):
        return (
            f"User-specified max_model_len ({window}) is greater than the derived "
            f"max_model_len ({key}={shown} or model_max_length={model_max} in model's "
            "config.json). This may lead to incorrect model outputs or CUDA errors. To allow "
            f"overriding this maximum, set the env var {ALLOW_LONG}=1"
        )
    return (
        f"User-specified max_model_len ({window}) is greater than the derived max_model_len "
        f"({key}={shown} or model_max_length={model_max} in model's config.json). To allow "
        f"overriding this maximum, set the env var {ALLOW_LONG}=1. {ALLOW_LONG} must be "
        "used with extreme caution. If the model uses relative position encoding (RoPE), "
        "positions exceeding derived_max_model_len lead to nan. If the model uses absolute "
        "position encoding, positions exceeding derived_max_model_len will cause a CUDA "
        "array out-of-bounds error."
    )


def format_gib(n: int) -> str:
    """vLLM's format_gib (vllm/utils/mem_utils.py, 0.17 on): round(GiB, 2), as str prints it."""
    return str(round(n / GIB, 2))


def _one_sequence(inputs: BootInputs) -> str | None:
    f = inputs.figures
    g = inputs.setup.geometry
    uniform = all(k in (LayerKind.FULL, LayerKind.MLA) for k in g.layer_kinds)
    if not uniform or f.cost.per_seq_bytes or f.cost.fixed_bytes:
        raise NotChecked(
            "a hybrid or sliding-window model: vLLM sums each layer group's own need, "
            "not modelled here"
        )
    needed = contract_requirement(f.cost, 1, f.max_model_len).bytes
    pool = f.kv_budget_bytes  # the pool as stated, or the low end of the one predicted
    if needed <= pool:
        return None
    window = f.max_model_len
    # estimate_max_model_len: the longest window whose pages the pool still holds
    estimated = pool // f.cost.page_bytes * f.cost.page_tokens if f.cost.page_bytes else 0
    v = inputs.version
    if v < (0, 11):
        return (
            f"The model's max seq len ({window}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({f.tokens_backed}). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine."
        )
    if v < (0, 17):
        estimate = (
            f"Based on the available memory, the estimated maximum model length is {estimated}."
            if estimated > 0
            else ""
        )
        return (
            f"To serve at least one request with the models's max seq len ({window}), "
            f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({pool / GIB:.2f} GiB). {estimate} Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine."
        )
    estimate = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    model = "model's" if v >= (0, 33) else "models's"
    also = " (which also controls CPU memory on the CPU backend)" if v >= (0, 33) else ""
    return (
        f"To serve at least one request with the {model} max seq len ({window}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available "
        f"KV cache memory ({format_gib(pool)} GiB). {estimate}Try increasing "
        f"`gpu_memory_utilization`{also} or decreasing `max_model_len` when initializing the "
        "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
        "more details."
    )


def _batched_below_seqs(inputs: BootInputs) -> str | None:
    serving = inputs.setup.serving
    batched = serving.max_num_batched_tokens
    if batched is None or batched >= serving.max_num_seqs:
        return None  # vLLM's defaults keep max_num_seqs <= max_num_batched_tokens
    return (
        f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs "
        f"({serving.max_num_seqs})."
    )


def _tp_heads(inputs: BootInputs) -> str | None:
    tp = inputs.setup.parallel.tensor
    heads = inputs.setup.geometry.num_attention_heads
    if heads % tp == 0:
        return None
    return (
        f"Total number of attention heads ({heads}) must be divisible by tensor parallel "
        f"size ({tp})."
    )


def _tp_kv_heads(inputs: BootInputs) -> str | None:
    tp = inputs.setup.parallel.tensor
    attention = inputs.setup.geometry.attention
    if tp == 1 or attention is None:
        return None
    split = kv_split(attention.num_kv_heads, tp)  # QKVParallelLinear's divide()
    return None if split is None else f"{split[0]} is not divisible by {split[1]}"


def _language_model_only(inputs: BootInputs) -> str | None:
    if not inputs.setup.serving.language_model_only or inputs.version >= LANGUAGE_ONLY:
        return None
    return "unrecognized arguments: --language-model-only"


# --language-model-only arrived in 0.17.0 (vllm/engine/arg_utils.py; not in 0.16.0's
# config/multimodal.py, in 0.17.0's and 0.19.0's)
LANGUAGE_ONLY = (0, 17)


# the default --gpu-memory-utilization (vllm/config/cache.py): 0.9 to 0.19, 0.92 from 0.20
def _default_fraction(version: tuple[int, ...]) -> float:
    return 0.92 if version >= (0, 20) else 0.9


def _startup_free(inputs: BootInputs) -> str | None:
    setup = inputs.setup
    if setup.card.device == "cpu":
        return None
    key = f"tp{setup.parallel.tensor}"
    if key not in CONTEXT_MEASURED:
        raise NotChecked(
            f"no public boot measures what is in use at the worker's start at TP "
            f"{setup.parallel.tensor}"
        )
    fraction = setup.serving.gpu_memory_utilization or _default_fraction(inputs.version)
    total, _ = inputs.setup.engine_total()
    requested = math.ceil(total * fraction)
    in_use, _ = CONTEXT_MEASURED[key]  # the least measured: a refusal even then
    free = total - in_use
    if free >= requested:
        return None
    return (
        f"Free memory on device cuda:0 ({format_gib(free)}/{format_gib(total)} GiB) on startup "
        f"is less than desired GPU memory utilization ({fraction}, {format_gib(requested)} "
        "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


REFUSALS: tuple[BootRefusal, ...] = (
    BootRefusal(
        id="vllm-max-model-len",
        engine="vllm",
        releases="0.6.6.post1 (its text), 0.11.0 to 0.33.0 (read in 0.11.0, 0.17.0, 0.19.0, "
        "0.33.0)",
        first=(0, 3),
        condition="serving.max_model_len above the length vLLM derives from the config (the "
        "smallest of max_position_embeddings, n_positions, ...; times a RoPE factor where "
        "its type applies one) and above model_max_length, with launch.env not setting "
        f"{ALLOW_LONG}=1",
        message="User-specified max_model_len ({max_model_len}) is greater than the derived "
        "max_model_len ({max_len_key}={derived_max_model_len} or model_max_length="
        "{model_max_length} in model's config.json). To allow overriding this maximum, set "
        f"the env var {ALLOW_LONG}=1. {{warning}}",
        source="vllm/config/model.py _get_and_verify_max_len:2155-2182 (message 2162, raise "
        "2178) at 0.19.0; :1880-1912 at 0.11.0; :2657-2684 at 0.33.0; vllm/config.py "
        ":2377-2405 at 0.6.6.post1",
        fix="lower serving.max_model_len to what the config derives, or, extending it on "
        f"purpose, set launch.env {ALLOW_LONG}: '1' (and limits.rope_scaling: true)",
        check=_max_model_len,
    ),
    BootRefusal(
        id="vllm-one-sequence",
        engine="vllm",
        releases="0.6.6.post1 (V0 text), 0.11.0 to 0.33.0 (read in 0.11.0, 0.17.0, 0.19.0, 0.33.0)",
        first=(0, 3),
        condition="one sequence at serving.max_model_len needs more KV pages than the pool "
        "holds (budget.kv, or the pool vLLM is predicted to size)",
        message="To serve at least one request with the models's max seq len "
        "({max_model_len}), ({needed} GiB KV cache is needed, which is larger than the "
        "available KV cache memory ({available} GiB). {estimated_msg}Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
        "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
        "more details.",
        source="vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory:635-654 "
        "(message 645) at 0.19.0; :706-723 at 0.11.0; vllm/v1/core/kv_cache_planning.py "
        ":68-86 at 0.33.0; vllm/worker/worker.py raise_if_cache_size_invalid:496-503 at "
        "0.6.6.post1",
        fix="grow the pool (budget.kv or serving.gpu_memory_utilization) or lower "
        "serving.max_model_len",
        check=_one_sequence,
    ),
    BootRefusal(
        id="vllm-batched-below-seqs",
        engine="vllm",
        releases="0.6.6.post1 to 0.33.0 (read in each)",
        first=(0, 3),
        condition="serving.max_num_batched_tokens below serving.max_num_seqs",
        message="max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or "
        "equal to max_num_seqs ({max_num_seqs}).",
        source="vllm/config/scheduler.py SchedulerConfig.verify_max_model_len:272-277 at "
        "0.19.0; :245-249 at 0.11.0; :331-345 at 0.33.0; vllm/config.py:1476-1480 at "
        "0.6.6.post1",
        fix="raise serving.max_num_batched_tokens to at least serving.max_num_seqs",
        check=_batched_below_seqs,
    ),
    BootRefusal(
        id="vllm-tp-heads",
        engine="vllm",
        releases="0.6.6.post1 to 0.33.0 (read in each)",
        first=(0, 3),
        condition="the attention heads not a multiple of parallel.tensor",
        message="Total number of attention heads ({total_num_attention_heads}) must be "
        "divisible by tensor parallel size ({tensor_parallel_size}).",
        source="vllm/config/model.py ModelConfig.verify_with_parallel_config:1111-1116 at "
        "0.19.0; :1048-1052 at 0.11.0; :1559-1564 at 0.33.0; vllm/config.py:673-677 at "
        "0.6.6.post1",
        fix="choose parallel.tensor among the divisors of the attention heads",
        check=_tp_heads,
    ),
    BootRefusal(
        id="vllm-tp-kv-heads",
        engine="vllm",
        releases="0.6.6.post1 to 0.33.0 (read in each)",
        first=(0, 3),
        condition="neither the KV heads nor parallel.tensor divides the other (an "
        "AssertionError as the model is built)",
        message="{numerator} is not divisible by {denominator}",
        source="vllm/model_executor/layers/linear.py QKVParallelLinear.__init__:1012-1016 at "
        "0.19.0 (vllm/distributed/utils.py divide); :902-907 at 0.11.0; :1066-1070 at 0.33.0",
        fix="choose parallel.tensor so the KV heads divide it, or it divides them",
        check=_tp_kv_heads,
    ),
    BootRefusal(
        id="vllm-startup-free",
        engine="vllm",
        releases="0.11.0 to 0.33.0 (read in 0.11.0, 0.17.0, 0.19.0, 0.33.0); it holds with "
        "--kv-cache-memory-bytes too (request_memory runs unconditionally)",
        first=(0, 11),
        condition="what is free when the worker starts (the card less the CUDA context and, "
        "at TP > 1, NCCL: the least measured in public 0.19.0 H100 boots) below "
        "ceil(card x --gpu-memory-utilization) (serving.gpu_memory_utilization, else the "
        "default 0.9; 0.92 from 0.20)",
        message="Free memory on device {device} ({free}/{total} GiB) on startup is less than "
        "desired GPU memory utilization ({gpu_memory_utilization}, {requested} GiB). Decrease "
        "GPU memory utilization or reduce GPU memory used by other processes.",
        source="vllm/v1/worker/utils.py request_memory:403-422 (raise 413), called from "
        "gpu_worker.py Worker.init_device:283 at 0.19.0; utils.py:716-772 at 0.33.0; "
        "gpu_worker.py:183-195 at 0.11.0",
        fix="lower serving.gpu_memory_utilization so the CUDA context and NCCL stay outside it",
        check=_startup_free,
    ),
    BootRefusal(
        id="vllm-language-model-only",
        engine="vllm",
        releases="before 0.17.0 (the flag is absent from 0.16.0 and present in 0.17.0 and 0.19.0)",
        first=(0, 3),
        condition="serving.language_model_only on a release older than 0.17.0",
        message="unrecognized arguments: {argument}",
        source="CPython Lib/argparse.py ArgumentParser.parse_args (vllm serve's parser); "
        "the flag: vllm/engine/arg_utils.py EngineArgs.language_model_only:488 and its "
        "add_argument:1072 at 0.19.0",
        fix="serve 0.17.0 or later, or drop serving.language_model_only and state the pair "
        "(the towers then load)",
        check=_language_model_only,
    ),
)
