"""Weight bytes of a plain decoder, counted from its config.json when no file states them.

A catalog entry or a bare config.json has no safetensors index, so the
weights gate had no figure. For the dense families whose modules transformers
defines plainly — llama, mistral, qwen2, qwen3, phi3 — every tensor's shape follows
from the config, so the parameter count is exact, not an estimate:

    embed V×H, lm_head V×H unless tied, final norm H, and per layer
    q H×(n_heads×hd), k and v H×(n_kv×hd) each, o (n_heads×hd)×H,
    the q/k/v(/o) biases the family carries, q/k norms of hd (qwen3),
    gate/up/down 3×H×I (+ biases with mlp_bias), two norms of H.

The mixtures of experts built the same way (qwen3_moe, mixtral) replace a
layer's MLP with E experts of 3×H×I_moe and a router of H×E (qwen3_moe keeps
a dense MLP on ``mlp_only_layers`` and off its ``decoder_sparse_step``).

Bytes are that count times the checkpoint dtype's size. Anything else —
quantized checkpoints, other mixtures of experts, MLA, vision towers — stays unknown.
The count is checked against published ``model.safetensors.index.json``
totals in the tests.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fakplan.dtypes import element_type

# phi3 (Phi-3, Phi-4): the llama layout with q/k/v and gate/up fused in the checkpoint,
# the same tensors' elements (vLLM's Phi3ForCausalLM is a LlamaForCausalLM); granite: the
# llama layout (models/granite.py, v0.19.0: q/k/v and o biased by attention_bias, gate_up and
# down by mlp_bias; its multipliers are scalars of the config, not tensors)
DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "granite")
MOE_FAMILIES = ("qwen3_moe", "mixtral")
# where a config names its routed experts (vLLM's model_config get_num_experts reads these)
ROUTED_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")
CHECKPOINT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def stated_dtype(config: dict[str, Any]) -> str | None:
    """The dtype a config states (torch_dtype, or dtype in newer transformers), in
    fakplan's spelling; None where it states none fakplan reads."""
    return CHECKPOINT_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))


class CountedWeights(NamedTuple):
    bytes: int
    derivation: str
    params: int


def counted_weight_bytes(text: dict[str, Any], model_type: str) -> CountedWeights | None:
    """(bytes, derivation) for a plain decoder's checkpoint, or None when not derivable."""
    if model_type not in (*DENSE_FAMILIES, *MOE_FAMILIES) or "quantization_config" in text:
        return None
    dtype = stated_dtype(text)
    if dtype is None:
        return None
    try:
        vocab = int(text["vocab_size"])
        hidden = int(text["hidden_size"])
        layers = int(text["num_hidden_layers"])
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        inter = int(text["intermediate_size"])
        head_dim = int(text.get("head_dim") or hidden // heads)
    except (KeyError, TypeError, ValueError):
        return None
    tied = bool(text.get("tie_word_embeddings", False))
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    biases = ""
    if model_type == "qwen2":
        # Qwen2Attention: q, k and v carry biases, o does not
        attention += q_width + 2 * kv_width
        biases = " + q/k/v biases"
    elif text.get("attention_bias"):
        attention += q_width + 2 * kv_width + hidden
        biases = " + q/k/v/o biases"
    if model_type in ("qwen3", "qwen3_moe"):
        attention += 2 * head_dim  # q_norm and k_norm over one head
        biases += " + q/k norms"
    dense_mlp = 3 * hidden * inter + (2 * inter + hidden if text.get("mlp_bias") else 0)
    mlps, mlp_text = [dense_mlp] * layers, f"mlp 3x{hidden:,}x{inter:,}"
    if model_type in MOE_FAMILIES:
        experts = moe_layout(text, model_type)
        if experts is None:
            return None
        count, moe_inter, sparse = experts
        moe_mlp = count * 3 * hidden * moe_inter + hidden * count
        mlps = [moe_mlp if i in sparse else dense_mlp for i in range(layers)]
        mlp_text = f"{count} experts x 3x{hidden:,}x{moe_inter:,} + router {hidden:,}x{count}"
        if len(sparse) < layers:
            mlp_text += f" on {len(sparse)} layers, dense 3x{hidden:,}x{inter:,} on the rest"
    embed = vocab * hidden
    body = sum(attention + mlp + 2 * hidden for mlp in mlps)
    total = embed * (1 if tied else 2) + hidden + body
    size = element_type(dtype).block_bytes
    text_out = (
        f"derived from config.json ({model_type}): embed {vocab:,}x{hidden:,}"
        f"{' (tied to lm_head)' if tied else ' + lm_head'} + final norm + {layers} layers x "
        f"(attention {hidden:,}x({heads}+2x{kv_heads}+{heads})x{head_dim}{biases} + "
        f"{mlp_text} + 2 norms) = {total:,} parameters x {size} B ({dtype}) = {total * size:,} B"
    )
    return CountedWeights(total * size, text_out, total)


def moe_layout(text: dict[str, Any], model_type: str) -> tuple[int, int, frozenset[int]] | None:
    """(experts, expert intermediate size, the sparse layers), as transformers builds them."""
    layers = int(text["num_hidden_layers"])
    try:
        if model_type == "mixtral":
            return (
                int(text["num_local_experts"]),
                int(text["intermediate_size"]),
                frozenset(range(layers)),
            )
        count, moe_inter = int(text["num_experts"]), int(text["moe_intermediate_size"])
        step = int(text.get("decoder_sparse_step") or 1)
        dense_only = {int(i) for i in text.get("mlp_only_layers") or ()}
    except (KeyError, TypeError, ValueError):
        return None
    # Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, on every step-th layer
    sparse = frozenset(
        i for i in range(layers) if i not in dense_only and count > 0 and (i + 1) % step == 0
    )
    return count, moe_inter, sparse


# the configs of the towers a multimodal checkpoint builds beside its text model
TOWER_CONFIGS = ("vision_config", "audio_config")


def towers(text: dict[str, Any]) -> list[str]:
    """The towers ("vision", "audio") a text model's config carries beside it."""
    return [k.removesuffix("_config") for k in TOWER_CONFIGS if isinstance(text.get(k), dict)]


def without_towers(text: dict[str, Any]) -> dict[str, Any]:
    """The text model's config alone: what the engine builds served text-only."""
    return {k: v for k, v in text.items() if k not in TOWER_CONFIGS}
