"""Each Hugging Face ``model_type``'s KV layout: which config fields hold its layers, KV
heads and head sizes, and how its layers alternate.

One reader per layout (``READERS``); an architecture fakplan does not model has no reader,
or one that refuses with the reason. Class defaults that published configs leave out
are data here (``CLASS_DEFAULTS``), each with the transformers file it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fakplan.errors import GeometryError
from fakplan.geometry.model import (
    AttentionHeads,
    LayerKind,
    LinearAttentionDims,
    MambaDims,
    MlaDims,
)

Config = dict[str, Any]

# Values a published config may omit because the transformers class supplies them.
CLASS_DEFAULTS: dict[str, tuple[Config, str]] = {
    "gemma3_text": (
        {
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 131072,
            "sliding_window": 4096,
        },
        "transformers models/gemma3/configuration_gemma3.py Gemma3TextConfig defaults",
    ),
    "gemma2": (
        {"head_dim": 256, "sliding_window": 4096, "max_position_embeddings": 8192},
        "transformers models/gemma2/configuration_gemma2.py Gemma2Config defaults",
    ),
}

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}


def dtype_name(value: Any) -> str | None:
    """A config's dtype (``torch.bfloat16``, ``half``) as fakplan names it (``bf16``)."""
    if value is None:
        return None
    return DTYPES.get(str(value).removeprefix("torch."), str(value))


class Fields:
    """Reads config fields, remembering which were missing for one clear error."""

    def __init__(self, config: Config, model_type: str, where: str) -> None:
        defaults, self.default_source = CLASS_DEFAULTS.get(model_type, ({}, ""))
        self.config = {**defaults, **config}
        self.model_type = model_type
        self.where = where
        self.used_defaults = sorted(k for k in defaults if k not in config)

    def get(self, *names: str) -> Any:
        for name in names:
            value = self.config.get(name)
            if value is not None:
                return value
        return None

    def need(self, *names: str) -> Any:
        value = self.get(*names)
        if value is None:
            raise GeometryError(
                f"{self.where}: model_type {self.model_type!r} needs {' or '.join(names)}, "
                "which the config does not state"
            )
        return value


def _head_dim(f: Fields) -> int:
    """``head_dim`` where stated, else hidden_size / heads (transformers' fallback)."""
    explicit = f.get("head_dim")
    if explicit is not None:
        return int(explicit)
    return int(f.need("hidden_size")) // int(f.need("num_attention_heads"))


def _heads(f: Fields) -> AttentionHeads:
    """The attention heads most layouts share: KV heads default to the query heads (MHA)."""
    heads = int(f.need("num_attention_heads"))
    kv = int(f.get("num_key_value_heads", "num_kv_heads") or heads)
    dim = _head_dim(f)
    return AttentionHeads(num_kv_heads=kv, head_dim=dim, v_head_dim=int(f.get("v_head_dim") or dim))


_LAYER_TYPE_NAMES = {
    "full_attention": LayerKind.FULL,
    "sliding_attention": LayerKind.SLIDING,
    "linear_attention": LayerKind.LINEAR,
    "chunked_attention": LayerKind.SLIDING,
}


def _from_layer_types(f: Fields, count: int) -> tuple[LayerKind, ...] | None:
    """Each layer's kind from ``layer_types``, where the config lists them; None where not."""
    types = f.get("layer_types")
    if types is None:
        return None
    if len(types) < count:
        raise GeometryError(f"{f.where}: layer_types lists {len(types)} layers, expected {count}")
    try:
        return tuple(_LAYER_TYPE_NAMES[t] for t in types[:count])
    except KeyError as exc:
        raise GeometryError(f"{f.where}: layer_types has {exc.args[0]!r}, not modelled") from None


def _dense(f: Fields) -> dict[str, Any]:
    """Llama-style decoders; Mistral/Qwen sliding windows when the config switches them on."""
    layers = int(f.need("num_hidden_layers"))
    heads = _heads(f)
    kinds = _from_layer_types(f, layers)
    window = f.get("sliding_window")
    if kinds is None:
        kinds = (LayerKind.FULL,) * layers
        uses_window = window is not None and f.get("use_sliding_window") is not False
        if uses_window and f.model_type in {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}:
            # transformers Qwen2: layers from max_window_layers on use the window.
            start = int(f.get("max_window_layers") or 0)
            kinds = tuple(
                LayerKind.SLIDING if i >= start else LayerKind.FULL for i in range(layers)
            )
        elif uses_window and f.model_type in {"mistral", "mixtral"}:
            kinds = (LayerKind.SLIDING,) * layers
    has_sliding = LayerKind.SLIDING in kinds
    return {
        "num_layers": layers,
        "layer_kinds": kinds,
        "attention": heads,
        "sliding": heads if has_sliding else None,
        "sliding_window": int(window) if has_sliding and window else None,
    }


def _windowed(f: Fields, global_layer: Callable[[int], bool] | None) -> dict[str, Any]:
    """Models that mix sliding-window and global layers of one head layout.

    ``layer_types`` wins when the config lists it; otherwise ``global_layer(i)``
    says which layers are global (None: the config must list them).
    """
    layers = int(f.need("num_hidden_layers"))
    heads = _heads(f)
    kinds = _from_layer_types(f, layers)
    if kinds is None:
        if global_layer is None:
            raise GeometryError(
                f"{f.where}: {f.model_type} needs layer_types (alternating windows)"
            )
        kinds = tuple(
            LayerKind.FULL if global_layer(i) else LayerKind.SLIDING for i in range(layers)
        )
    return {
        "num_layers": layers,
        "layer_kinds": kinds,
        "attention": heads,
        "sliding": heads,
        "sliding_window": int(f.need("sliding_window")),
    }


def _gemma2(f: Fields) -> dict[str, Any]:
    # transformers Gemma2: even layers (0, 2, ...) are sliding, odd layers global.
    return _windowed(f, lambda i: i % 2 == 1)


def _gemma3(f: Fields) -> dict[str, Any]:
    pattern = int(f.need("sliding_window_pattern"))
    # transformers Gemma3: layer i is global when (i + 1) % sliding_window_pattern == 0.
    return _windowed(f, lambda i: (i + 1) % pattern == 0)


def _gpt_oss(f: Fields) -> dict[str, Any]:
    """gpt-oss lists its alternating windows in layer_types."""
    return _windowed(f, None)


def _gemma4(f: Fields) -> dict[str, Any]:
    """Gemma 4: full-attention layers have heads of their own, and the last
    ``num_kv_shared_layers`` layers read an earlier layer's cache.

    transformers models/gemma4/configuration_gemma4.py (5.19) gives every full layer
    ``global_head_dim`` (default 512) and, where ``attention_k_eq_v`` holds,
    ``num_global_key_value_heads``; vLLM loads a K=V layer's K weights into both the K
    and the V slot (vllm/model_executor/models/gemma4.py:421, v0.33.0), so the cache
    still holds K and V. Shared layers allocate nothing (``kv_sharing_target_layer_name``).
    """
    parts = _windowed(f, None)
    layers = parts["num_layers"]
    first_shared = layers - int(f.get("num_kv_shared_layers") or 0)
    parts["layer_kinds"] = tuple(
        k if i < first_shared else LayerKind.NONE for i, k in enumerate(parts["layer_kinds"])
    )
    sliding = parts["sliding"]
    global_dim = int(f.get("global_head_dim") or 512)
    global_kv = f.get("num_global_key_value_heads")
    # Gemma4TextConfig declares attention_k_eq_v: bool = False, so a config without the
    # key keeps the sliding layers' KV heads on its full layers
    k_eq_v = f.get("attention_k_eq_v") is True
    parts["attention"] = AttentionHeads(
        num_kv_heads=int(global_kv) if global_kv and k_eq_v else sliding.num_kv_heads,
        head_dim=global_dim,
        v_head_dim=global_dim,
    )
    return parts


def _mimo_v2(f: Fields) -> dict[str, Any]:
    """MiMo-V2: its sliding layers have heads of their own (swa_*)."""
    layers = int(f.need("num_hidden_layers"))
    pattern = f.need("hybrid_layer_pattern")
    # MiMo-V2-Flash: 1 marks a sliding-window layer, 0 a full-attention layer.
    kinds = tuple(LayerKind.SLIDING if p else LayerKind.FULL for p in pattern[:layers])
    full = _heads(f)
    swa_dim = int(f.need("swa_head_dim"))
    sliding = AttentionHeads(
        num_kv_heads=int(f.need("swa_num_key_value_heads")),
        head_dim=swa_dim,
        v_head_dim=int(f.get("swa_v_head_dim") or swa_dim),
    )
    return {
        "num_layers": layers,
        "layer_kinds": kinds,
        "attention": full,
        "sliding": sliding,
        "sliding_window": int(f.need("sliding_window", "sliding_window_size")),
    }


def _mla(f: Fields) -> dict[str, Any]:
    """DeepSeek-style MLA: one compressed latent per token in every layer."""
    layers = int(f.need("num_hidden_layers"))
    dims = MlaDims(
        kv_lora_rank=int(f.need("kv_lora_rank")),
        qk_rope_head_dim=int(f.need("qk_rope_head_dim")),
        qk_nope_head_dim=int(f.need("qk_nope_head_dim")),
        v_head_dim=int(f.need("v_head_dim")),
    )
    return {
        "num_layers": layers,
        "layer_kinds": (LayerKind.MLA,) * layers,
        "mla": dims,
        "num_nextn_layers": int(f.get("num_nextn_predict_layers") or 0),
    }


def _gated_deltanet(f: Fields) -> dict[str, Any]:
    """Qwen3-Next style: full attention every interval-th layer, Gated DeltaNet between."""
    layers = int(f.need("num_hidden_layers"))
    kinds = _from_layer_types(f, layers)
    if kinds is None:
        interval = int(f.need("full_attention_interval"))
        # Qwen3-Next: every interval-th layer (3, 7, ... for 4) is full attention.
        kinds = tuple(
            LayerKind.FULL if (i + 1) % interval == 0 else LayerKind.LINEAR for i in range(layers)
        )
    linear = LinearAttentionDims(
        num_k_heads=int(f.need("linear_num_key_heads")),
        num_v_heads=int(f.need("linear_num_value_heads")),
        head_k_dim=int(f.need("linear_key_head_dim")),
        head_v_dim=int(f.need("linear_value_head_dim")),
        conv_kernel=int(f.need("linear_conv_kernel_dim")),
        ssm_dtype=dtype_name(f.get("mamba_ssm_dtype")),
    )
    return {
        "num_layers": layers,
        "layer_kinds": kinds,
        "attention": _heads(f),
        "linear": linear,
        "num_nextn_layers": int(f.get("mtp_num_hidden_layers", "num_nextn_predict_layers") or 0),
    }


def _nemotron_h(f: Fields) -> dict[str, Any]:
    """Nemotron-H: a per-layer pattern of Mamba2, attention and cache-less layers."""
    pattern = str(f.need("hybrid_override_pattern"))
    layers = int(f.need("num_hidden_layers"))
    if len(pattern) != layers:
        raise GeometryError(
            f"{f.where}: hybrid_override_pattern has {len(pattern)} layers, expected {layers}"
        )
    # Nemotron-H: 'M' Mamba2, '*' attention, '-' MLP and 'E' MoE hold no cache.
    kinds = tuple(
        LayerKind.MAMBA if c == "M" else LayerKind.FULL if c == "*" else LayerKind.NONE
        for c in pattern
    )
    heads = int(f.need("mamba_num_heads"))
    head_dim = int(f.need("mamba_head_dim"))
    mamba = MambaDims(
        version=2,
        intermediate_size=heads * head_dim,
        state_size=int(f.need("ssm_state_size")),
        n_groups=int(f.need("n_groups")),
        num_heads=heads,
        head_dim=head_dim,
        conv_kernel=int(f.need("conv_kernel")),
        ssm_dtype=dtype_name(f.get("mamba_ssm_cache_dtype")),
    )
    return {"num_layers": layers, "layer_kinds": kinds, "attention": _heads(f), "mamba": mamba}


def _jamba(f: Fields) -> dict[str, Any]:
    """Jamba: one attention layer per period, Mamba1 in the others."""
    layers = int(f.need("num_hidden_layers"))
    period = int(f.need("attn_layer_period"))
    offset = int(f.need("attn_layer_offset"))
    # transformers Jamba: layer i is attention when i % period == offset, else Mamba1.
    kinds = tuple(
        LayerKind.FULL if i % period == offset else LayerKind.MAMBA for i in range(layers)
    )
    hidden = int(f.need("hidden_size"))
    inner = int(f.need("mamba_expand")) * hidden
    mamba = MambaDims(
        version=1,
        intermediate_size=inner,
        state_size=int(f.need("mamba_d_state")),
        n_groups=1,
        num_heads=1,
        head_dim=inner,
        conv_kernel=int(f.need("mamba_d_conv")),
    )
    return {"num_layers": layers, "layer_kinds": kinds, "attention": _heads(f), "mamba": mamba}


def _refuse(reason: str) -> Callable[[Fields], dict[str, Any]]:
    """A reader for an architecture fakplan knows but does not model: it says why."""

    def reader(f: Fields) -> dict[str, Any]:
        raise GeometryError(f"{f.where}: model_type {f.model_type!r}: {reason}")

    return reader


READERS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "phi3",
            "phimoe",
            "opt",
            "gemma",
            "granite",
            "olmo2",
            "cohere",
            "starcoder2",
            "internlm2",
            "glm4",
            "exaone",
            "ministral",
            "smollm3",
            "llama4_text",
            "mistral3_text",
        ),
        _dense,
    ),
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
    "gpt_oss": _gpt_oss,
    "mimo_v2_flash": _mimo_v2,
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "kimi_k2"), _mla),
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        _gated_deltanet,
    ),
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "gemma4_text": _gemma4,
    "gemma4": _gemma4,
    "falcon_h1": _refuse("parallel attention + Mamba in every layer is not modelled yet"),
}
