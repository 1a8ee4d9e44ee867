"""The checkpoint's dtype, found where vLLM looks for it, and what says so.

A quantized checkpoint (mxfp4, fp8, AWQ, NVFP4) often states no ``torch_dtype`` or
``dtype`` at its root, yet engines still serve activations — and a KV cache of
``auto`` — in 16 bits. vLLM's search order (``get_torch_dtype``,
vllm/transformers_utils/model_arch_config_convertor.py:201 at v0.33.0; ``_find_dtype``,
vllm/config/model.py:1607 at v0.11.0): the root config's dtype, the text config's, the
vision config's, the encoder config's, then the common dtype of the safetensors
parameters, and float32 when nothing states one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fakplan.geometry.hf_layouts import DTYPES

# Where a checkpoint's dtype was found (the order vLLM searches)
DtypeOrigin = Literal[
    "config", "text_config", "vision_config", "encoder_config", "safetensors", "none", "gguf"
]
_NESTED = ("text_config", "vision_config", "encoder_config")


@dataclass(frozen=True)
class _Format:
    """What vLLM's is_lossless_cast compares (torch.finfo/iinfo figures, torch 2.9)."""

    level: int  # _get_precision_level: bool 0, integer 1, float 2, complex 3
    low: float
    high: float
    resolution: float = 0.0  # floats only: finfo.resolution


# safetensors dtype names vLLM maps to torch (safetensors.torch _TYPES, safetensors 0.8);
# names it does not map (F8_E8M0, F4, ...) are skipped as vLLM skips them
SAFETENSORS_FORMATS: dict[str, tuple[str, _Format]] = {
    "BOOL": ("bool", _Format(0, 0, 1)),
    "U8": ("uint8", _Format(1, 0, 255)),
    "I8": ("int8", _Format(1, -128, 127)),
    "U16": ("uint16", _Format(1, 0, 65_535)),
    "I16": ("int16", _Format(1, -32_768, 32_767)),
    "U32": ("uint32", _Format(1, 0, 4_294_967_295)),
    "I32": ("int32", _Format(1, -2_147_483_648, 2_147_483_647)),
    "U64": ("uint64", _Format(1, 0, 18_446_744_073_709_551_615)),
    "I64": ("int64", _Format(1, -9_223_372_036_854_775_808, 9_223_372_036_854_775_807)),
    "F8_E4M3": ("fp8_e4m3", _Format(2, -448.0, 448.0, 1.0)),
    "F8_E4M3FNUZ": ("fp8_e4m3fnuz", _Format(2, -240.0, 240.0, 1.0)),
    "F8_E5M2": ("fp8_e5m2", _Format(2, -57_344.0, 57_344.0, 1.0)),
    "F8_E5M2FNUZ": ("fp8_e5m2fnuz", _Format(2, -57_344.0, 57_344.0, 1.0)),
    "F16": ("fp16", _Format(2, -65_504.0, 65_504.0, 1e-3)),
    "BF16": ("bf16", _Format(2, -3.3895313892515355e38, 3.3895313892515355e38, 1e-2)),
    "F32": ("fp32", _Format(2, -3.4028234663852886e38, 3.4028234663852886e38, 1e-6)),
    "F64": ("fp64", _Format(2, -1.7976931348623157e308, 1.7976931348623157e308, 1e-15)),
    "C64": ("complex64", _Format(3, 0, 0)),
}


@dataclass(frozen=True)
class CheckpointDtype:
    name: str  # fakplan's name (bf16, fp16, fp32, fp8_e4m3, ...) or "unstated"
    origin: DtypeOrigin
    source: str  # in words, for derivations


def _lossless(src: _Format, dst: _Format) -> bool:
    """vllm/utils/torch_utils.py:358 is_lossless_cast (v0.33.0)."""
    if src == dst:
        return True
    if src.level != dst.level:
        return src.level < dst.level
    if src.level == 2:
        return src.low >= dst.low and src.high <= dst.high and src.resolution >= dst.resolution
    return src.low >= dst.low and src.high <= dst.high


def common_dtype(names: Collection[str]) -> tuple[str, ...]:
    """vllm/utils/torch_utils.py:389 common_broadcastable_dtype (v0.33.0): the distinct
    dtype most others cast to losslessly. Ties are returned whole: vLLM's ``max`` over a
    set picks one by set order, which nothing outside the process can tell."""
    formats = {SAFETENSORS_FORMATS[n] for n in names if n in SAFETENSORS_FORMATS}
    if not formats:
        return ()
    scores = {name: sum(_lossless(f, g) for _, f in formats) for name, g in formats}
    best = max(scores.values())
    return tuple(sorted(n for n, s in scores.items() if s == best))


def _stated(config: Mapping[str, Any]) -> str | None:
    # transformers maps torch_dtype to dtype (4.56 on); either key states it
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None:
            text = str(value).removeprefix("torch.")
            return DTYPES.get(text, text)
    return None


def checkpoint_dtype(
    config: Mapping[str, Any], header_dtypes: Collection[str] | None = None
) -> CheckpointDtype:
    """The dtype vLLM finds for a config.json (and its safetensors headers, if read)."""
    stated = _stated(config)
    if stated is not None:
        return CheckpointDtype(stated, "config", f"config.json dtype {stated}")
    for key in _NESTED:
        nested = config.get(key)
        if isinstance(nested, Mapping) and (stated := _stated(nested)) is not None:
            return CheckpointDtype(stated, key, f"config.json {key}.dtype {stated}")  # type: ignore[arg-type]
    if header_dtypes:
        common = common_dtype(header_dtypes)
        if common:
            seen = ", ".join(sorted(set(header_dtypes)))
            tie = "" if len(common) == 1 else f" (a tie: vLLM picks one of {' / '.join(common)})"
            return CheckpointDtype(
                common[0],
                "safetensors",
                f"config.json states no dtype; the safetensors headers hold {seen}, whose "
                f"common lossless dtype is {common[0]}{tie} (vLLM common_broadcastable_dtype)",
            )
    return CheckpointDtype(
        "unstated",
        "none",
        "config.json states no dtype (root, text_config, vision_config, encoder_config)"
        + ("" if header_dtypes is not None else " and no safetensors headers were read"),
    )
