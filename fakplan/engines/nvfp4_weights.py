"""A ModelOpt NVFP4 linear layer as vLLM holds it after the load, by the card's kernel.

Read in vLLM 0.19.0's ``quantization/modelopt.py`` (``ModelOptNvFp4LinearMethod``) and
``quantization/utils/nvfp4_utils.py`` and ``marlin_utils_fp4.py``:

- the load creates, per linear layer of N outputs and K inputs on the rank:
  - ``weight``, two fp4 values a byte: N x K/2 B;
  - ``input_scale`` and ``weight_scale_2``: one float32 per fused width;
  - ``weight_scale``: one float8 per 16 inputs (``group_size``), N x K/16 B;
- after the load, ``process_weights_after_loading``:
  - keeps four float32 scalars (the input and weight global scales, ``alpha`` and the
    input scale's inverse);
  - deletes the two per-width scales;
  - converts the layer for the kernel ``select_nvfp4_linear_backend`` picks, which sets
    what stays:
- from compute capability 10.0 (``cutlass_scaled_mm_supports_fp4``: 10.0 on, CUDA 12.8;
  FlashInfer's CUTLASS where FlashInfer is installed, vLLM's own otherwise, with the same
  layout), the kernel takes:
  - the weight, padded to 32 rows and 32 inputs (``pad_nvfp4_weight_for_cutlass``);
  - the block scales swizzled into a new tensor padded to 128 rows and 4 columns
    (``swizzle_blockscale``);
- from 7.5 to 9.x, Marlin, in weight-only mode (``prepare_fp4_layer_for_marlin``):
  - the weight repacked into a new tensor of the same size;
  - the scales rewritten as float8 in a new tensor of the same count;
  - a new weight global scale;
  - an int32 workspace word per SM.

"Model loading took" counts what is allocated once this is done
(``platforms/cuda.py`` ``get_current_memory_usage`` after ``empty_cache``), so the
originals a conversion replaces are not counted. Which freed blocks the new tensors reuse
decides a last few MiB (``gpt_oss``'s MXFP4 experts are counted the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.engines.packed_weights import capability_number
from fakplan.engines.rank_weights import round_up

NVFP4_GROUP = 16  # ModelOptNvFp4Config group_size default; the block scale's inputs
FP32 = 4
INT32 = 4
CUTLASS_ALIGN = 32  # pad_nvfp4_weight_for_cutlass: N and K to 32
SCALE_ROWS, SCALE_COLUMNS = 128, 4  # swizzle_blockscale: M to 128, K/16 to 4
CUTLASS_FROM = 100  # cutlass_scaled_mm_supports_fp4: compute capability 10.0 on
MARLIN_FROM = 75  # is_fp4_marlin_supported


@dataclass(frozen=True)
class Nvfp4Kernel:
    """The kernel an NVFP4 linear layer goes to on the card (``marlin``: Marlin's
    weight-only path; else CUTLASS), with the SMs Marlin's workspace takes."""

    marlin: bool
    capability: str
    sms: int | None = None

    @property
    def text(self) -> str:
        return (
            f"Marlin (weight-only) on compute capability {self.capability}"
            if self.marlin
            else f"CUTLASS on compute capability {self.capability}"
        )


def nvfp4_kernel(capability: str | None, sms: int | None) -> Nvfp4Kernel | str:
    """The kernel, or why it is not known (a sentence)."""
    if capability is None:
        return (
            "NVFP4 weights take the layout of the kernel vLLM picks for the card "
            "(select_nvfp4_linear_backend, v0.19.0): give the card's compute capability "
            "(CUTLASS from 10.0, Marlin from 7.5)"
        )
    cap = capability_number(capability)
    if cap >= CUTLASS_FROM:
        return Nvfp4Kernel(False, capability)
    if cap < MARLIN_FROM:
        return f"NVFP4 weights on compute capability {capability}: vLLM has no kernel for them"
    if sms is None:
        return "NVFP4 weights on Marlin keep a workspace per SM: give the card's SM count"
    return Nvfp4Kernel(True, capability, sms)


@dataclass(frozen=True)
class Nvfp4Layer:
    """One layer's tensors in bytes: created by the load (``loaded``, in order), created
    after it (``converted``), and the created ones' bytes the conversion frees."""

    loaded: tuple[int, ...]
    converted: tuple[int, ...]
    freed: int

    @property
    def live(self) -> int:
        return sum(self.loaded) + sum(self.converted) - self.freed


def nvfp4_layer(rows: int, inputs: int, widths: int, kernel: Nvfp4Kernel) -> Nvfp4Layer | None:
    """A linear layer of ``rows`` outputs and ``inputs`` inputs on the rank, ``widths``
    logical widths fused in it; None where vLLM refuses its shape (inputs not a multiple of
    16: ModelOptNvFp4LinearMethod.create_weights)."""
    if inputs % NVFP4_GROUP:
        return None
    weight, scales = rows * inputs // 2, rows * (inputs // NVFP4_GROUP)
    loaded = (weight, widths * FP32, widths * FP32, scales)
    converted = [FP32] * 4  # input/weight global scales, alpha, the input scale's inverse
    freed = 2 * widths * FP32
    if kernel.marlin:
        # the workspace, the repacked weight, the float8 scales, the new weight global scale
        converted += [(kernel.sms or 0) * INT32, weight, scales, FP32]
        freed += weight + scales + FP32
    else:
        padded = round_up(rows, CUTLASS_ALIGN) * round_up(inputs, CUTLASS_ALIGN) // 2
        if padded != weight:
            converted.append(padded)
            freed += weight
        converted.append(
            round_up(rows, SCALE_ROWS) * round_up(inputs // NVFP4_GROUP, SCALE_COLUMNS)
        )
        freed += scales
    return Nvfp4Layer(loaded, tuple(converted), freed)
