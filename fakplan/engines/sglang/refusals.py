"""What SGLang refuses at boot that a shape can cause (docs/boot-refusals.md).

Read in the released packages' sources of 0.4.6.post5, 0.5.2 and 0.5.23 (the files named
in each row). A pool smaller than one context SGLang does not refuse: it lowers the longest
request it takes (managers/tp_worker.py), which the pool ≥ contract gate covers.
"""

from __future__ import annotations

from typing import Any

from fakplan.engines.refusals import BootInputs, BootRefusal, NotChecked, kv_split

ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
# get_context_length (srt/hf_transformers_utils.py:236-262 at 0.5.2; the same text at
# 0.4.6.post5 and in 0.5.23's srt/utils/hf_transformers/common.py): the first key stated
_CONTEXT_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


# bare asserts: SGLang's traceback shows the failing line, with no message of its own
HEADS_ASSERT = "AssertionError: assert self.total_num_heads % tp_size == 0"
KV_HEADS_ASSERT = "AssertionError: assert self.total_num_kv_heads % tp_size == 0"
KV_REPLICA_ASSERT = "AssertionError: assert tp_size % self.total_num_kv_heads == 0"


def derived_context_length(config: dict[str, Any]) -> int:
    """The context SGLang derives: the first length key, times the RoPE factor unless the
    scaling states its original length or is Llama 3's (then 1)."""
    rope = config.get("rope_scaling")
    factor: float = 1
    if isinstance(rope, dict) and rope:
        stated = rope.get("factor", 1)
        factor = stated if isinstance(stated, int | float) else 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in _CONTEXT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(factor * value)
    return 2048


def _context_length(inputs: BootInputs) -> str | None:
    config = inputs.setup.geometry.text_config
    if config is None:
        raise NotChecked("the model's config.json is not read")
    window = inputs.figures.max_model_len
    derived = derived_context_length(config)
    if window <= derived or inputs.env_on(ALLOW_LONGER):
        return None
    return (
        f"Warning: User-specified context_length ({window}) is greater than the derived "
        f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        f"model's config. To allow overriding this maximum, set the env var {ALLOW_LONGER}=1"
    )


def _tp_heads(inputs: BootInputs) -> str | None:
    g = inputs.setup.geometry
    tp = inputs.setup.parallel.tensor
    if g.num_attention_heads % tp == 0:
        return None
    return HEADS_ASSERT


def _tp_kv_heads(inputs: BootInputs) -> str | None:
    attention = inputs.setup.geometry.attention
    tp = inputs.setup.parallel.tensor
    if attention is None or tp == 1:
        return None
    kv = attention.num_kv_heads
    if kv_split(kv, tp) is None:
        return None
    return KV_HEADS_ASSERT if kv >= tp else KV_REPLICA_ASSERT


REFUSALS: tuple[BootRefusal, ...] = (
    BootRefusal(
        id="sglang-context-length",
        engine="sglang",
        releases="0.5.2 and 0.5.23 (read in each); 0.4.6.post5 only warns unless "
        f"{ALLOW_LONGER} is false",
        first=(0, 5),
        condition="serving.max_model_len (--context-length) above the context SGLang derives "
        "(the first of max_sequence_length, seq_length, max_seq_len, model_max_length, "
        "max_position_embeddings; times a RoPE factor unless the scaling states its "
        f"original length or is Llama 3's), with launch.env not setting {ALLOW_LONGER}=1",
        message="Warning: User-specified context_length ({context_length}) is greater than "
        "the derived context_length ({derived_context_len}). This may lead to incorrect model "
        "outputs or CUDA errors. Note that the derived context_length may differ from "
        "max_position_embeddings in the model's config. To allow overriding this maximum, "
        f"set the env var {ALLOW_LONGER}=1",
        source="python/sglang/srt/configs/model_config.py ModelConfig.__init__:177-198 "
        "(raise 192) at 0.5.2; ModelConfig._derive_context_length:1291-1318 (raise 1314) "
        "at 0.5.23",
        fix="lower serving.max_model_len to the derived context, or, extending it on "
        f"purpose, set launch.env {ALLOW_LONGER}: '1' (and limits.rope_scaling: true)",
        check=_context_length,
    ),
    BootRefusal(
        id="sglang-tp-heads",
        engine="sglang",
        releases="0.4.6.post5, 0.5.2, 0.5.23 (a bare assert in each model's attention)",
        first=(0, 4),
        condition="the attention heads not a multiple of parallel.tensor",
        message=HEADS_ASSERT,
        source="python/sglang/srt/models/llama.py LlamaAttention.__init__:129 at 0.5.2 (:121 "
        "at 0.4.6.post5, :183 at 0.5.23; the same assert in qwen2.py, qwen3.py, mixtral.py)",
        fix="choose parallel.tensor among the divisors of the attention heads",
        check=_tp_heads,
    ),
    BootRefusal(
        id="sglang-tp-kv-heads",
        engine="sglang",
        releases="0.4.6.post5, 0.5.2, 0.5.23 (a bare assert in each model's attention)",
        first=(0, 4),
        condition="neither the KV heads nor parallel.tensor divides the other",
        message=f"{KV_HEADS_ASSERT}, or where the KV heads are fewer than TP: {KV_REPLICA_ASSERT}",
        source="python/sglang/srt/models/llama.py LlamaAttention.__init__:132-139 at 0.5.2 "
        "(:124-131 at 0.4.6.post5, :186-193 at 0.5.23)",
        fix="choose parallel.tensor so the KV heads divide it, or it divides them",
        check=_tp_kv_heads,
    ),
)
