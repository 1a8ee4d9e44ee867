"""What CUDA reports as one card's memory, per card of the table, as public logs print it.

An engine that sizes its own pool multiplies CUDA's total (``torch.cuda.mem_get_info``),
never the size a vendor markets: an H100 80GB reports 79.19 GiB, not 80 GB. No datasheet
states that figure, so it comes from logs: each print below is a verbatim line of a public
boot or error, with its source, and the same line is kept in ``tests/data/public/cuda_totals``
where the suite checks it. A card whose prints differ (the driver, WSL2, ECC or MIG move it)
gets the span of them all; a card no public log ties to a figure has none, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.units import printed_interval


@dataclass(frozen=True)
class CudaPrint:
    """One public log's print of a card's CUDA total."""

    printed: str  # as the log prints it, e.g. "79.19 GiB" (read as its digits allow)
    line: str  # the verbatim line (or the part of it that holds the figure)
    source: str  # where the log is, with what ties it to the card
    setting: str = ""  # where the print depends on it: the platform ("WSL2") or the like


@dataclass(frozen=True)
class CudaTotal:
    """A card's CUDA total as every public print of it allows."""

    sku: str
    prints: tuple[CudaPrint, ...]

    @property
    def interval(self) -> tuple[int, int]:
        """The totals every print allows, lowest to highest, in bytes."""
        spans = [printed_interval(p.printed) for p in self.prints]
        return min(s[0] for s in spans), max(s[2] for s in spans)

    @property
    def plain(self) -> str | None:
        """The one figure every print made without a setting of its own reads (a shape's
        card.total where it names only the card), or None."""
        figures = {p.printed for p in self.prints if not p.setting}
        return figures.pop() if len(figures) == 1 else None

    def sentence(self) -> str:
        """What the prints say, for a derivation: each figure with where it was printed."""
        parts = [
            f"{p.printed}{f' ({p.setting})' if p.setting else ''}: {p.source}" for p in self.prints
        ]
        return f"CUDA's total of one {self.sku} as public logs print it: " + "; ".join(parts)


LLM_D_PLANNER = (
    "https://github.com/llm-d-incubation/llm-d-planner/blob/"
    "d3121e059da88662db39a926a3ead964be97359b/accuracy/results/v0.19.0/logs/"
    "qwen-qwen3-30b-a3b--h100-80gb--tp1pp1dp1--8192.log"
)

CUDA_TOTALS: tuple[CudaTotal, ...] = (
    CudaTotal(
        "H100-SXM-80GB",
        (
            CudaPrint(
                "79.19 GiB",
                "worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.68GiB, "
                "total_memory=79.19GiB",
                f"{LLM_D_PLANNER} (vLLM 0.19.0; the same boot loads a fused-MoE config for "
                "device_name=NVIDIA_H100_80GB_HBM3, NVML's name of the SXM card; every H100 "
                "run of that commit prints the same total)",
            ),
        ),
    ),
    CudaTotal(
        "L4",
        (
            CudaPrint(
                "22.03 GiB",
                "GPU 0 has a total capacity of 22.03 GiB of which 1.25 GiB is free.",
                "https://github.com/ArcInstitute/evo2/issues/190 (torch's OOM; \"Is a L4 GPU "
                'not enough to run the test script?")',
            ),
        ),
    ),
    CudaTotal(
        "RTX-4090",
        (
            CudaPrint(
                "23.64 GiB",
                "GPU 0 has a total capacity of 23.64 GiB of which 319.38 MiB is free.",
                "https://github.com/ali-vilab/VGen/issues/104 (torch's OOM; \"I use RTX 4090 "
                '24GB GPU")',
            ),
            CudaPrint(
                "23.64 GiB",
                "(GPU 0; 23.64 GiB total capacity; 5.14 GiB already allocated;",
                "https://github.com/TMElyralab/MuseTalk/issues/76 (torch's OOM; titled "
                '"NVIDIA GeForce RTX 4090 24G")',
            ),
            CudaPrint(
                "23.65 GiB",
                "(GPU 0; 23.65 GiB total capacity; 11.70 GiB already allocated;",
                "https://github.com/MotrixLab/AiOS/issues/29 (torch's OOM on a 4090)",
            ),
            CudaPrint(
                "23.68 GiB",
                "(GPU 0; 23.68 GiB total capacity; 18.96 GiB already allocated;",
                "https://github.com/zai-org/CogVideo/issues/36 (torch's OOM on a 4090)",
            ),
            CudaPrint(
                "23.99 GiB",
                "Free memory on device (22.45/23.99 GiB) on startup.",
                "https://github.com/enginrect/llmso/blob/"
                "06bc0e5821294198e2b574a35a113bcfaa1316b3/labs/environment-setup.md "
                "(vLLM 0.27.1 on an RTX 4090 24 GB under WSL2, as the repository states)",
                setting="WSL2",
            ),
        ),
    ),
    CudaTotal(
        "RTX-5090",
        (
            CudaPrint(
                "31.35 GiB",
                "GPU 0 has a total capacity of 31.35 GiB of which 93.06 MiB is free.",
                "https://github.com/vllm-project/vllm/issues/40291 (torch's OOM under vLLM "
                '0.19.1; titled "... causing OOM on single RTX 5090 ...")',
            ),
        ),
    ),
)

_BY_SKU = {total.sku.casefold(): total for total in CUDA_TOTALS}


def cuda_total(sku: str) -> CudaTotal | None:
    """The CUDA total of the table's card ``sku`` (any case), or None where no public log
    ties one to it."""
    return _BY_SKU.get(sku.strip().casefold())
