"""Tiny random-weight GGUF models written with the gguf package's own writer.

The llama layout follows docs/engines-on-cpu.md §2: llama.cpp
loads it, and its byte-level GPT-2 vocabulary needs at least one merge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class TinyLlama:
    layers: int = 2
    embd: int = 64
    heads: int = 4
    kv_heads: int = 2
    ff: int = 128
    ctx: int = 2048
    sliding_window: int | None = None
    swa_pattern: int | None = None

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads


def byte_tokens() -> list[str]:
    """GPT-2 bytes_to_unicode: every byte is one printable character."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, map(chr, cs), strict=True))
    return [table[b] for b in range(256)]


def write_tiny_llama(
    path: Path,
    spec: TinyLlama = TinyLlama(),
    *,
    arch: str = "llama",
    split_max_tensors: int = 0,
) -> Path:
    rng = np.random.default_rng(0)
    toks = [*byte_tokens(), "Ġt", "he", "<|bos|>", "<|eos|>"]
    types = [gguf.TokenType.NORMAL] * (len(toks) - 2) + [gguf.TokenType.CONTROL] * 2
    n_vocab = len(toks)
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    w.add_name("tiny-random-llama")
    w.add_context_length(spec.ctx)
    w.add_embedding_length(spec.embd)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.ff)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    if spec.sliding_window:
        w.add_sliding_window(spec.sliding_window)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(["Ġ t", "h e"])
    w.add_bos_token_id(n_vocab - 2)
    w.add_eos_token_id(n_vocab - 1)
    w.add_add_bos_token(True)
    w.add_chat_template(
        "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
    )

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    t("token_embd.weight", n_vocab, spec.embd)
    ones("output_norm.weight", spec.embd)
    t("output.weight", n_vocab, spec.embd)
    hd = spec.head_dim
    for i in range(spec.layers):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", spec.embd)
        t(p + "attn_q.weight", spec.heads * hd, spec.embd)
        t(p + "attn_k.weight", spec.kv_heads * hd, spec.embd)
        t(p + "attn_v.weight", spec.kv_heads * hd, spec.embd)
        t(p + "attn_output.weight", spec.embd, spec.heads * hd)
        ones(p + "ffn_norm.weight", spec.embd)
        t(p + "ffn_gate.weight", spec.ff, spec.embd)
        t(p + "ffn_up.weight", spec.ff, spec.embd)
        t(p + "ffn_down.weight", spec.embd, spec.ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_weight_bytes(spec: TinyLlama = TinyLlama(), n_vocab: int = 260) -> int:
    """All tensors are f32: 4 bytes per element, counted by hand from the layout above."""
    hd = spec.head_dim
    per_layer = (
        spec.embd  # attn_norm
        + spec.heads * hd * spec.embd  # q
        + 2 * spec.kv_heads * hd * spec.embd  # k, v
        + spec.embd * spec.heads * hd  # o
        + spec.embd  # ffn_norm
        + 3 * spec.ff * spec.embd  # gate, up, down
    )
    return 4 * (2 * n_vocab * spec.embd + spec.embd + spec.layers * per_layer)


def write_gguf_header(
    path: Path,
    metadata: dict[str, int],
    tensors: list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]],
    *,
    arch: str = "llama",
    strings: dict[str, list[str]] | None = None,
) -> Path:
    """A GGUF of the header alone: ``metadata`` under the architecture's prefix, string
    arrays under their own keys (a vocabulary), and a tensor table of (name, shape in
    elements as numpy orders it, ggml type), no tensor data. fakplan reads only the header,
    so a 12 GB model's table costs a few kilobytes here."""
    w = gguf.GGUFWriter(path, arch)
    for key, value in metadata.items():
        w.add_uint32(f"{arch}.{key}", value)
    for key, values in (strings or {}).items():
        w.add_array(key, values)
    for name, shape, kind in tensors:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        elements = int(np.prod(shape))
        w.add_tensor_info(name, shape, np.dtype(np.float32), elements // block * size, kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path
