"""A model's numeric facts, checked like a shape's before any arithmetic uses them.

A config.json or a GGUF a shape names is as hostile as the shape: ``num_hidden_layers:
1e18`` would build a list of 10^18 layer kinds, ``head_dim: 0`` divide by zero, a NaN
context reach ``int()``. Every figure the geometry reads is a whole number in a range no
real model leaves (the bounds below), every float finite; a value out of line is one
line naming the file, the key (a JSON pointer, or the GGUF key) and the expected form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fakplan.errors import GeometryError

LAYERS = (1, 4096)
HEADS = (1, 1 << 16)
DIM = (1, 1 << 20)
VOCAB = (1, 1 << 24)
CONTEXT = (1, 1 << 31)
EXPERTS = (1, 1 << 16)
WINDOW = (0, 1 << 31)
SMALL = (0, 4096)  # counts that may be 0: dense layers before the MoE ones, MTP layers
SIZE = (0, 1 << 20)  # widths a config may state as 0 where the part is absent

# config.json keys (any architecture's spelling) and the range their value must lie in
CONFIG_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": LAYERS,
    "num_layers": LAYERS,
    "n_layer": LAYERS,
    "n_layers": LAYERS,
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "num_key_value_heads": HEADS,
    "num_kv_heads": HEADS,
    "multi_query_group_num": HEADS,
    "head_dim": DIM,
    "v_head_dim": DIM,
    "qk_rope_head_dim": DIM,
    "qk_nope_head_dim": DIM,
    "kv_lora_rank": DIM,
    "q_lora_rank": SIZE,
    "hidden_size": DIM,
    "n_embd": DIM,
    "d_model": DIM,
    "intermediate_size": SIZE,
    "moe_intermediate_size": SIZE,
    "shared_expert_intermediate_size": SIZE,
    "vocab_size": VOCAB,
    "max_position_embeddings": CONTEXT,
    "n_positions": CONTEXT,
    "max_seq_len": CONTEXT,
    "seq_length": CONTEXT,
    "max_sequence_length": CONTEXT,
    "sliding_window": WINDOW,
    "num_local_experts": EXPERTS,
    "num_experts": EXPERTS,
    "n_routed_experts": EXPERTS,
    "num_experts_per_tok": EXPERTS,
    "n_shared_experts": SMALL,
    "first_k_dense_replace": SMALL,
    "num_nextn_predict_layers": SMALL,
    "linear_num_key_heads": HEADS,
    "linear_num_value_heads": HEADS,
    "linear_key_head_dim": SIZE,
    "linear_value_head_dim": SIZE,
    "linear_conv_kernel_dim": SMALL,
    "mamba_d_state": SIZE,
    "mamba_n_heads": HEADS,
    "mamba_d_head": SIZE,
}
# positive finite floats a config states (a scaling factor of 1e400 is no factor)
_FACTORS = ("factor", "rope_theta", "partial_rotary_factor")


def _expected(low: int, high: int) -> str:
    return f"a whole number from {low:,} to {high:,}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def check_int(value: Any, bounds: tuple[int, int], where: str, key: str) -> int:
    """``value`` as a whole number in ``bounds``, or one line saying what it should be."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GeometryError(f"{where}: {key}: expected {_expected(low, high)}, got {_shown(value)}")
    return value


def check_config(config: Mapping[str, Any], where: str, pointer: str = "") -> None:
    """Every bounded key of a config.json, at any depth (text_config, vision_config, ...)."""
    for key, value in config.items():
        here = f"{pointer}/{key}"
        if isinstance(value, Mapping):
            check_config(value, where, here)
            continue
        if isinstance(value, list) and key not in CONFIG_BOUNDS:
            for index, item in enumerate(value):
                if isinstance(item, Mapping):
                    check_config(item, where, f"{here}/{index}")
            continue
        if value is None:
            continue
        if key in CONFIG_BOUNDS:
            check_int(value, CONFIG_BOUNDS[key], where, here)
        elif key in _FACTORS and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
            or value > 1e12
        ):
            raise GeometryError(
                f"{where}: {here}: expected a positive finite number, got {_shown(value)}"
            )


# GGUF metadata keys (after "<arch>.") and their bounds; a per-layer array is checked
# element by element
GGUF_BOUNDS: dict[str, tuple[int, int]] = {
    "block_count": LAYERS,
    "context_length": CONTEXT,
    "embedding_length": DIM,
    "feed_forward_length": (0, 1 << 20),
    "attention.head_count": (0, 1 << 16),
    "attention.head_count_kv": (0, 1 << 16),
    "attention.key_length": DIM,
    "attention.value_length": DIM,
    "attention.key_length_mla": DIM,
    "attention.value_length_mla": DIM,
    "attention.key_length_swa": DIM,
    "attention.value_length_swa": DIM,
    "attention.kv_lora_rank": DIM,
    "attention.sliding_window": WINDOW,
    "rope.dimension_count": (0, 1 << 20),
    "expert_count": (0, 1 << 16),
    "expert_used_count": (0, 1 << 16),
    "leading_dense_block_count": SMALL,
    "nextn_predict_layers": SMALL,
    "ssm.conv_kernel": SMALL,
    "ssm.inner_size": (0, 1 << 22),
    "ssm.state_size": (0, 1 << 20),
    "ssm.group_count": (0, 1 << 16),
    "ssm.time_step_rank": (0, 1 << 20),
}


def check_gguf(metadata: Mapping[str, Any], where: str) -> None:
    """The GGUF keys the geometry reads, and every float in the metadata, finite."""
    arch = metadata.get("general.architecture")
    prefix = f"{arch}." if isinstance(arch, str) else ""
    for key, value in metadata.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise GeometryError(f"{where}: {key}: expected a finite number, got {value!r}")
        name = key.removeprefix(prefix) if prefix and key.startswith(prefix) else None
        if name is None or name not in GGUF_BOUNDS:
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            check_int(item, GGUF_BOUNDS[name], where, key)
    block_count = metadata.get(f"{prefix}block_count") if prefix else None
    if block_count is None and prefix:
        raise GeometryError(f"{where}: {prefix}block_count: the GGUF states no layers")
    heads = metadata.get(f"{prefix}attention.head_count")
    # a model with attention layers states their heads (0 only where every layer is
    # recurrent, which then states its own dimensions)
    recurrent = metadata.get(f"{prefix}ssm.inner_size") is not None
    if prefix and heads == 0 and not isinstance(heads, list) and not recurrent:
        raise GeometryError(
            f"{where}: {prefix}attention.head_count: expected {_expected(1, 1 << 16)}, got 0"
        )
