"""The cards fakplan knows by name: bandwidth, dense peaks and SMs, each row sourced.

A shape names its card by SKU (``card.sku: H100-SXM-80GB``) so the rates it will
serve at can be predicted before it boots (``fakplan.rates``): decode is bound by
the memory bandwidth, prefill by the dense tensor peak. Every figure is the
vendor's (datasheet, product page or architecture whitepaper, URLs in
``sources``); where the vendor prints only a with-sparsity peak the dense one is
half of it (``dense_from_sparse``). ``checked`` says how each row was checked
against the vendor's table: ``verified`` (matched a word-for-word copy of it) or
``partial`` (some cells matched, the rest from the same document, to re-check).
A figure the vendor does not publish is absent, never filled in. The compute capability
is NVIDIA's CUDA table's (``CUDA_CAPABILITIES``).

Bandwidth is decimal, as vendors print it (3.35 TB/s is 3,350 x 10^9 bytes/s).
A CPU host has no row: its bandwidth is measured and stated (``card.bandwidth``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

GB = 10**9
# where each row's compute capability comes from (major.minor, as torch.cuda reports it)
CUDA_CAPABILITIES = "https://developer.nvidia.com/cuda-gpus"
CAPABILITY_PATTERN = r"^[1-9][0-9]?\.[0-9]$"  # major.minor, "9.0", "12.1"
# torch's device properties of an H200 and a B200, printed in one file:
# "_CudaDeviceProperties(name='NVIDIA H200', major=9, minor=0, total_memory=143156MB,
# multi_processor_count=132, ..." and "(name='NVIDIA B200', major=10, minor=0,
# total_memory=182642MB, multi_processor_count=148, ..."
ACHATBOT_DEVICE_PROPERTIES = (
    "https://github.com/ai-bot-pro/achatbot/blob/859e21612de769164d8d1802d794ef8f87ace3c8/"
    "deploy/modal/src/llm/vllm/vlm/skywork_r1v.py"
)


@dataclass(frozen=True)
class CardSku:
    """One card as its vendor states it."""

    sku: str
    name: str
    memory: str  # as marketed ("80GB"): the shape's card.total stays the figure to plan with
    memory_type: str
    bandwidth: int  # bytes/s
    tflops: dict[str, float] = field(hash=False)  # dense, per compute dtype (int8: TOPS)
    dense_from_sparse: bool
    sms: int | None
    # CUDA compute capability, major.minor (NVIDIA's table, CUDA_CAPABILITIES): which
    # kernels an engine loads a weight-only quantized checkpoint into
    capability: str
    link: str  # what joins two cards: nvlink, pcie, nvlink-c2c
    nvml_names: tuple[str, ...]  # what NVML's nvmlDeviceGetName reports for it
    sources: tuple[str, ...]
    checked: str

    def peak_flops(self, dtype: str) -> float | None:
        """Dense FLOP/s at ``dtype`` (bf16, fp16, fp8, int8, fp4), or None if unpublished."""
        value = self.tflops.get("bf16" if dtype == "fp16" else dtype)
        return None if value is None else value * 1e12

    @property
    def device_name(self) -> str | None:
        """NVML's name of the card (the first the table lists), as an engine reads it."""
        return self.nvml_names[0] if self.nvml_names else None

    def citation(self) -> str:
        """Where the row comes from, in one line."""
        return f"{self.name}: {', '.join(self.sources)} ({self.checked})"


CARDS: tuple[CardSku, ...] = (
    CardSku(
        sku="A10",
        name="NVIDIA A10 Tensor Core GPU (24GB, PCIe)",
        memory="24GB",
        memory_type="GDDR6",
        bandwidth=600 * GB,
        tflops={"bf16": 125, "int8": 250},
        dense_from_sparse=False,
        sms=72,
        capability="8.6",
        link="pcie",
        nvml_names=("NVIDIA A10",),
        sources=("https://www.nvidia.com/en-us/data-center/products/a10-gpu/",),
        checked="partial",
    ),
    CardSku(
        sku="A100-PCIE-40GB",
        name="NVIDIA A100 PCIe 40GB",
        memory="40GB",
        memory_type="HBM2",
        bandwidth=1555 * GB,
        tflops={"bf16": 312, "int8": 624},
        dense_from_sparse=False,
        sms=108,
        capability="8.0",
        link="pcie",
        nvml_names=("NVIDIA A100-PCIE-40GB",),
        sources=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet.pdf",
            "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
        ),
        checked="verified",
    ),
    CardSku(
        sku="A100-PCIE-80GB",
        name="NVIDIA A100 80GB PCIe",
        memory="80GB",
        memory_type="HBM2e",
        bandwidth=1935 * GB,
        tflops={"bf16": 312, "int8": 624},
        dense_from_sparse=False,
        sms=108,
        capability="8.0",
        link="pcie",
        nvml_names=("NVIDIA A100 80GB PCIe",),
        sources=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-nvidia-us-2188504-web.pdf",
            "https://www.nvidia.com/en-us/data-center/a100/",
        ),
        checked="verified",
    ),
    CardSku(
        sku="A100-SXM4-40GB",
        name="NVIDIA A100 SXM4 40GB",
        memory="40GB",
        memory_type="HBM2",
        bandwidth=1555 * GB,
        tflops={"bf16": 312, "int8": 624},
        dense_from_sparse=False,
        sms=108,
        capability="8.0",
        link="nvlink",
        nvml_names=("NVIDIA A100-SXM4-40GB",),
        sources=(
            "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet.pdf",
        ),
        checked="verified",
    ),
    CardSku(
        sku="A100-SXM4-80GB",
        name="NVIDIA A100 80GB SXM4",
        memory="80GB",
        memory_type="HBM2e",
        bandwidth=2039 * GB,
        tflops={"bf16": 312, "int8": 624},
        dense_from_sparse=False,
        sms=108,
        capability="8.0",
        link="nvlink",
        nvml_names=("NVIDIA A100-SXM4-80GB",),
        sources=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-nvidia-us-2188504-web.pdf",
            "https://www.nvidia.com/en-us/data-center/a100/",
        ),
        checked="verified",
    ),
    CardSku(
        sku="L4",
        name="NVIDIA L4 Tensor Core GPU",
        memory="24GB",
        memory_type="GDDR6",
        bandwidth=300 * GB,
        tflops={"bf16": 121, "fp8": 242, "int8": 242},
        dense_from_sparse=True,
        sms=None,
        capability="8.9",
        link="pcie",
        nvml_names=("NVIDIA L4",),
        sources=(
            "https://www.nvidia.com/en-us/data-center/l4/",
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        ),
        checked="partial",
    ),
    CardSku(
        sku="L40S",
        name="NVIDIA L40S",
        memory="48GB",
        memory_type="GDDR6 (ECC)",
        bandwidth=864 * GB,
        tflops={"bf16": 362, "fp8": 733, "int8": 733},
        dense_from_sparse=False,
        sms=142,
        capability="8.9",
        link="pcie",
        nvml_names=("NVIDIA L40S",),
        sources=(
            "https://www.nvidia.com/en-us/data-center/l40s/",
            "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
        ),
        checked="partial",
    ),
    CardSku(
        sku="H100-PCIE-80GB",
        name="NVIDIA H100 PCIe 80GB",
        memory="80GB",
        memory_type="HBM2e",
        bandwidth=2000 * GB,
        tflops={"bf16": 756, "fp8": 1513, "int8": 1513},
        dense_from_sparse=True,
        sms=114,
        capability="9.0",
        link="pcie",
        nvml_names=("NVIDIA H100 PCIe",),
        sources=(
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/PB-11133-001_v01.pdf",
            "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper",
        ),
        checked="verified",
    ),
    CardSku(
        sku="H100-SXM-80GB",
        name="NVIDIA H100 SXM5 80GB",
        memory="80GB",
        memory_type="HBM3",
        bandwidth=3350 * GB,
        tflops={"bf16": 989, "fp8": 1979, "int8": 1979},
        dense_from_sparse=True,
        sms=132,
        capability="9.0",
        link="nvlink",
        nvml_names=("NVIDIA H100 80GB HBM3",),
        sources=(
            "https://www.nvidia.com/en-us/data-center/h100/",
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper",
        ),
        checked="verified",
    ),
    CardSku(
        sku="H100-NVL-94GB",
        name="NVIDIA H100 NVL (94GB, PCIe, NVLink bridge)",
        memory="94GB",
        memory_type="HBM3",
        bandwidth=3900 * GB,
        tflops={"bf16": 835, "fp8": 1670, "int8": 1670},
        dense_from_sparse=True,
        sms=None,
        capability="9.0",
        link="nvlink",
        nvml_names=("NVIDIA H100 NVL",),
        sources=(
            "https://www.nvidia.com/en-us/data-center/h100/",
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
        ),
        checked="verified",
    ),
    CardSku(
        sku="H200-SXM-141GB",
        name="NVIDIA H200 SXM 141GB",
        memory="141GB",
        memory_type="HBM3e",
        bandwidth=4800 * GB,
        tflops={"bf16": 989, "fp8": 1979, "int8": 1979},
        dense_from_sparse=True,
        sms=132,
        capability="9.0",
        link="nvlink",
        nvml_names=("NVIDIA H200",),
        sources=("https://www.nvidia.com/en-us/data-center/h200/", ACHATBOT_DEVICE_PROPERTIES),
        checked="partial",
    ),
    CardSku(
        sku="B200",
        name="NVIDIA B200 (HGX B200, per-GPU figures)",
        memory="180GB",
        memory_type="HBM3e",
        bandwidth=7700 * GB,
        tflops={"bf16": 2250, "fp8": 4500, "int8": 4500, "fp4": 9000},
        dense_from_sparse=True,
        sms=148,
        capability="10.0",
        link="nvlink",
        nvml_names=("NVIDIA B200",),
        sources=(
            "https://www.nvidia.com/en-us/data-center/hgx/",
            "https://www.nvidia.com/en-us/data-center/dgx-b200/",
            ACHATBOT_DEVICE_PROPERTIES,
        ),
        checked="verified",
    ),
    CardSku(
        sku="RTX-3090",
        name="NVIDIA GeForce RTX 3090",
        memory="24GB",
        memory_type="GDDR6X",
        bandwidth=936 * GB,
        tflops={"bf16": 71, "int8": 284},
        dense_from_sparse=False,
        sms=82,
        capability="8.6",
        link="nvlink",
        nvml_names=("NVIDIA GeForce RTX 3090",),
        sources=(
            "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
            "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/",
        ),
        checked="partial",
    ),
    CardSku(
        sku="RTX-4090",
        name="NVIDIA GeForce RTX 4090",
        memory="24GB",
        memory_type="GDDR6X",
        bandwidth=1008 * GB,
        tflops={"bf16": 165, "fp8": 330, "int8": 661},
        dense_from_sparse=False,
        sms=128,
        capability="8.9",
        link="pcie",
        nvml_names=("NVIDIA GeForce RTX 4090",),
        sources=(
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
            "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/",
        ),
        checked="verified",
    ),
    CardSku(
        sku="RTX-5090",
        name="NVIDIA GeForce RTX 5090",
        memory="32GB",
        memory_type="GDDR7",
        bandwidth=1792 * GB,
        tflops={"bf16": 209, "fp8": 419, "int8": 838, "fp4": 1676},
        dense_from_sparse=False,
        sms=170,
        capability="12.0",
        link="pcie",
        nvml_names=("NVIDIA GeForce RTX 5090",),
        sources=(
            "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf",
            "https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5090/",
        ),
        checked="partial",
    ),
    CardSku(
        sku="RTX-PRO-6000",
        name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition (96GB)",
        memory="96GB",
        memory_type="GDDR7 (ECC)",
        bandwidth=1792 * GB,
        tflops={"fp4": 2000},
        dense_from_sparse=True,
        sms=188,
        capability="12.0",
        link="pcie",
        nvml_names=("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",),
        sources=(
            "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/",
        ),
        checked="partial",
    ),
    CardSku(
        sku="GB10",
        name="NVIDIA GB10 Grace Blackwell Superchip (DGX Spark)",
        memory="128GB",
        memory_type="LPDDR5x (unified CPU+GPU",
        bandwidth=273 * GB,
        tflops={"fp4": 500},
        dense_from_sparse=True,
        sms=48,
        capability="12.1",
        link="nvlink-c2c",
        nvml_names=("NVIDIA GB10",),
        sources=(
            "https://www.nvidia.com/en-us/products/workstations/dgx-spark/",
            "https://docs.nvidia.com/dgx/dgx-spark/hardware.html",
        ),
        checked="partial",
    ),
    CardSku(
        sku="RTX-A5000",
        name="NVIDIA RTX A5000",
        memory="24GB",
        memory_type="GDDR6 (ECC)",
        bandwidth=768 * GB,
        tflops={"bf16": 111},  # the datasheet's one tensor peak, 222.2, is with sparsity
        dense_from_sparse=True,
        sms=64,  # 8,192 CUDA cores, 128 per GA102 SM
        capability="8.6",
        link="nvlink",
        nvml_names=("NVIDIA RTX A5000",),
        sources=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs21/rtx-a5000/nvidia-rtx-a5000-datasheet.pdf",
            "https://www.nvidia.com/en-us/design-visualization/rtx-a5000/",
        ),
        checked="partial",
    ),
    CardSku(
        sku="A40",
        name="NVIDIA A40",
        memory="48GB",
        memory_type="GDDR6 (ECC)",
        bandwidth=696 * GB,
        tflops={"bf16": 149.7, "int8": 299.3},
        dense_from_sparse=False,
        sms=84,
        capability="8.6",
        link="nvlink",
        nvml_names=("NVIDIA A40",),
        sources=(
            "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf",
            "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
        ),
        checked="partial",
    ),
    CardSku(
        sku="RTX-A6000",
        name="NVIDIA RTX A6000",
        memory="48GB",
        memory_type="GDDR6 (ECC)",
        bandwidth=768 * GB,
        tflops={"bf16": 155, "int8": 310},
        dense_from_sparse=False,
        sms=84,
        capability="8.6",
        link="nvlink",
        nvml_names=("NVIDIA RTX A6000",),
        sources=(
            "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
            "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
        ),
        checked="partial",
    ),
    CardSku(
        sku="RTX-6000-Ada",
        name="NVIDIA RTX 6000 Ada Generation",
        memory="48GB",
        memory_type="GDDR6 (ECC)",
        bandwidth=960 * GB,
        tflops={"bf16": 364, "fp8": 728, "int8": 728},
        dense_from_sparse=True,
        sms=142,
        capability="8.9",
        link="pcie",
        nvml_names=("NVIDIA RTX 6000 Ada Generation",),
        sources=(
            "https://www.nvidia.com/en-us/design-visualization/rtx-6000/",
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        ),
        checked="partial",
    ),
)

_BY_SKU = {card.sku.casefold(): card for card in CARDS}
_BY_NVML = {name.casefold(): card for card in CARDS for name in card.nvml_names}


def card_sku(name: str) -> CardSku | None:
    """The row of SKU ``name`` (any case), or None."""
    return _BY_SKU.get(name.strip().casefold())


def unknown_sku(name: str) -> str:
    """Why ``name`` names no row, with the nearest SKUs: one sentence for every place a
    card is named (card.sku, --card-sku)."""
    near = near_skus(name)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    return f"{name!r} is not a card fakplan knows{hint}; fakplan cards lists them"


def near_skus(name: str) -> list[str]:
    """The SKUs nearest ``name``, for a "did you mean"."""
    folded = {card.sku.casefold(): card.sku for card in CARDS}
    query = name.strip().casefold()
    containing = [sku for key, sku in folded.items() if query and query in key]
    close = [folded[k] for k in difflib.get_close_matches(query, folded, n=3, cutoff=0.4)]
    return list(dict.fromkeys([*containing, *close]))[:3]


def sku_for_device(nvml_name: str) -> CardSku | None:
    """The row of the card NVML names ``nvml_name``, or None."""
    return _BY_NVML.get(nvml_name.strip().casefold())
