"""Weight bytes of a dense decoder, counted from its config.json when no file states them.

A catalog entry or a bare config.json has no safetensors index, so the
weights gate had no figure. For the dense families whose modules transformers
defines plainly — llama, mistral, qwen2, qwen3 — every tensor's shape follows
from the config, so the parameter count is exact, not an estimate:

    embed V×H, lm_head V×H unless tied, final norm H, and per layer
    q H×(n_heads×hd), k and v H×(n_kv×hd) each, o (n_heads×hd)×H,
    the q/k/v(/o) biases the family carries, q/k norms of hd (qwen3),
    gate/up/down 3×H×I (+ biases with mlp_bias), two norms of H.

Bytes are that count times the checkpoint dtype's size. Anything else —
quantized checkpoints, mixtures of experts, MLA, vision towers — stays unknown.
The count is checked against published ``model.safetensors.index.json``
totals in the tests.
"""

from __future__ import annotations

from typing import Any

from fakplan.dtypes import element_type

DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
CHECKPOINT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def dense_weight_bytes(text: dict[str, Any], model_type: str) -> tuple[int, str] | None:
    """(bytes, derivation) for a plain dense decoder's checkpoint, or None when not derivable."""
    if model_type not in DENSE_FAMILIES or "quantization_config" in text:
        return None
    dtype = CHECKPOINT_DTYPES.get(str(text.get("torch_dtype") or text.get("dtype") or ""))
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
    if model_type == "qwen3":
        attention += 2 * head_dim  # q_norm and k_norm over one head
        biases += " + q/k norms"
    mlp = 3 * hidden * inter + (2 * inter + hidden if text.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    embed = vocab * hidden
    total = embed * (1 if tied else 2) + hidden + layers * per_layer
    size = element_type(dtype).block_bytes
    text_out = (
        f"derived from config.json ({model_type}, dense): embed {vocab:,}x{hidden:,}"
        f"{' (tied to lm_head)' if tied else ' + lm_head'} + final norm + {layers} layers x "
        f"(attention {hidden:,}x({heads}+2x{kv_heads}+{heads})x{head_dim}{biases} + "
        f"mlp 3x{hidden:,}x{inter:,} + 2 norms = {per_layer:,}) = {total:,} parameters "
        f"x {size} B ({dtype}) = {total * size:,} B"
    )
    return total * size, text_out
