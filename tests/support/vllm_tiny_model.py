"""Write a tiny random HF llama (and its byte-level tokenizer) for vLLM's CPU build.

Run by the vLLM environment's own Python (it has torch, transformers and
tokenizers; fakplan's environment has none of them):

    python tests/support/vllm_tiny_model.py OUT_DIR [--layers N --hidden H --ff F]

Geometry (docs/engines-on-cpu.md §6): hidden 256, 4 heads,
2 KV heads, head_dim 64, 2 layers, a 258-token byte vocabulary, float32. The
rate benchmark (tests/bench/rates.py) asks for a larger one, ~1 GiB of float32,
so that a decode step is bound by reading the weights.
"""

from __future__ import annotations

import argparse

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)


def main(out: str, layers: int, hidden: int, ff: int) -> None:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|bos|>", "<|eos|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=258,
        hidden_size=hidden,
        intermediate_size=ff,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 128,
        max_position_embeddings=2048,
        bos_token_id=256,
        eos_token_id=257,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)  # head_dim 64, 2 heads per KV head
    parser.add_argument("--ff", type=int, default=512)
    args = parser.parse_args()
    main(args.out, args.layers, args.hidden, args.ff)
