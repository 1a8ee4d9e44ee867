"""KV-cache element types and their exact storage sizes.

Engine knowledge as data: each row says how many elements share how many bytes
and where that came from. Block-quantized types are exact only per whole block,
so sizes are kept as (elements, bytes) pairs, never as a float per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class ElementType:
    """Storage of one KV element type: ``block_bytes`` for every ``block_elems`` elements."""

    name: str
    block_elems: int
    block_bytes: int
    source: str

    @property
    def bytes_per_element(self) -> Fraction:
        return Fraction(self.block_bytes, self.block_elems)

    def row_bytes(self, elements: int) -> int:
        """Bytes of one row of ``elements`` values (ggml_row_size); must be whole blocks."""
        if elements % self.block_elems:
            raise ValueError(
                f"{self.name} stores blocks of {self.block_elems} elements; "
                f"a row of {elements} is not a whole number of blocks"
            )
        return elements // self.block_elems * self.block_bytes


_VLLM = "vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE (v0.33.0): fp8 stored as uint8"
_GGML = "ggml/src/ggml-common.h static asserts (llama.cpp 0c1e57098)"

ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        ElementType("fp32", 1, 4, "IEEE binary32"),
        ElementType("bf16", 1, 2, "bfloat16"),
        ElementType("fp16", 1, 2, "IEEE binary16"),
        ElementType("fp8", 1, 1, _VLLM),
        ElementType("q8_0", 32, 34, _GGML + ": fp16 scale + 32 x int8"),
        ElementType("q5_1", 32, 24, _GGML),
        ElementType("q5_0", 32, 22, _GGML),
        ElementType("q4_1", 32, 20, _GGML),
        ElementType("q4_0", 32, 18, _GGML + ": fp16 scale + 32 x 4 bit"),
        ElementType("iq4_nl", 32, 18, _GGML),
    )
}

# Spellings engines accept for the same storage. Each engine module decides
# which of them its CLI takes; this table only says what they cost.
ALIASES: dict[str, str] = {
    "f32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
}


def element_type(name: str) -> ElementType:
    """The storage of a dtype name or alias; KeyError if unknown."""
    key = name.lower()
    return ELEMENT_TYPES[ALIASES.get(key, key)]


def known_dtype(name: str) -> bool:
    key = name.lower()
    return ALIASES.get(key, key) in ELEMENT_TYPES


# The weights' --dtype spellings vLLM and SGLang share (vllm ModelDType, v0.32.0; SGLang's
# _STR_DTYPE_TO_TORCH_DTYPE): the storage each names, None for "as the engine decides".
MODEL_DTYPES: dict[str, str | None] = {
    "auto": None,
    "half": "fp16",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float": "fp32",
    "float32": "fp32",
}
