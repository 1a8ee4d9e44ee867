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

# where a print was made, as --card-platform and a boot case's platform name it
PLATFORMS = ("linux", "wsl2", "windows")


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

    def on(self, platform: str) -> CudaTotal | None:
        """The prints made on ``platform`` (PLATFORMS), or None where no print was:
        "linux" takes those made without a setting of their own (WSL2 and Windows print
        a total of their own for the same card)."""
        wanted = platform.casefold()
        if wanted not in PLATFORMS:
            raise ValueError(f"{platform!r}: one of {', '.join(PLATFORMS)}")
        kept = tuple(
            p
            for p in self.prints
            if (not p.setting if wanted == "linux" else p.setting.casefold().startswith(wanted))
        )
        return CudaTotal(self.sku, kept) if kept else None

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

PRIME_RL = (
    "https://github.com/Jackmin801/prime-rl-hardfork/blob/"
    "a0837f4366b3806bd912aa4386d99d51d9cbe6dc/benchmarks/baselines"
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

# prints of an A100 80GB or 40GB whose thread does not say SXM4 or PCIe: each form's span
# holds them (the form does not set the total; the driver and ECC do)
A100_80GB_FORM_UNSTATED = (
    CudaPrint(
        "79.15 GiB",
        "GPU 0 has a total capacity of 79.15 GiB of which 147.75 MiB is free.",
        'https://github.com/vllm-project/vllm/issues/4408 (torch\'s OOM; "A100 80GB", the '
        "form not stated)",
    ),
    CudaPrint(
        "79.15 GiB",
        "(GPU 0; 79.15 GiB total capacity; 77.13 GiB already allocated;",
        'https://github.com/YJiangcm/LTE/issues/3 (torch\'s OOM; "4xA100(80GB)", the form not '
        "stated)",
    ),
    CudaPrint(
        "79.32 GiB",
        "ValueError: Free memory on device (0.49/79.32 GiB) on startup is less than desired "
        "GPU memory utilization (0.6, 47.59 GiB).",
        "https://github.com/vllm-project/vllm-omni/issues/276 (vLLM's startup check; titled "
        '"2×A100 (80GB)", the form not stated)',
    ),
    CudaPrint(
        "79.35 GiB",
        "GPU 0 has a total capacty of 79.35 GiB of which 17.27 GiB is free.",
        "https://github.com/OSU-NLP-Group/TableLlama/issues/10 (torch 2.1's OOM; \"a100 with "
        '80GB memory", the form not stated)',
    ),
)
A100_40GB_FORM_UNSTATED = (
    CudaPrint(
        "39.39 GiB",
        "GPU 1 has a total capacity of 39.39 GiB of which 2.00 MiB is free.",
        'https://github.com/huggingface/peft/issues/1703 (torch\'s OOM; titled "4xA100-40GB", '
        "the form not stated)",
    ),
    CudaPrint(
        "39.41 GiB",
        "GPU 1 has a total capacty of 39.41 GiB of which 183.50 MiB is free.",
        "https://github.com/tatsu-lab/stanford_alpaca/issues/308 (torch 2.1's OOM; \"4 A100 "
        '40G", the form not stated)',
    ),
)

CUDA_TOTALS += (
    CudaTotal(
        "A100-SXM4-80GB",
        (
            CudaPrint(
                "79.25 GiB",
                "GPU 5 has a total capacity of 79.25 GiB of which 1.79 GiB is free.",
                "https://github.com/vllm-project/vllm/issues/20581 (torch's OOM under vLLM "
                '0.9.1; collect_env "GPU 0: NVIDIA A100-SXM4-80G", "8xA100 80GB")',
            ),
            *A100_80GB_FORM_UNSTATED,
        ),
    ),
    CudaTotal("A100-PCIE-80GB", A100_80GB_FORM_UNSTATED),
    CudaTotal("A100-SXM4-40GB", A100_40GB_FORM_UNSTATED),
    CudaTotal("A100-PCIE-40GB", A100_40GB_FORM_UNSTATED),
    CudaTotal(
        "A10",
        (
            CudaPrint(
                "22.18 GiB",
                "GPU 0 has a total capacity of 22.18 GiB of which 3.47 GiB is free.",
                "https://github.com/OpenBMB/MiniCPM-V/issues/640 (torch's OOM; "
                '"一张A10显卡，显存24G", one A10 of 24 GB)',
            ),
        ),
    ),
    CudaTotal(
        "L40S",
        (
            CudaPrint(
                "44.42 GiB",
                "GPU  has a total capacity of 44.42 GiB of which 118.12 MiB is free.",
                "https://github.com/stepfun-ai/Step-Video-T2V/issues/8 (torch's OOM; titled "
                '"Run 8*L40S OOM")',
            ),
        ),
    ),
    CudaTotal(
        "A40",
        (
            CudaPrint(
                "44.43 GiB",
                "Free memory on device (44.17/44.43 GiB) on startup.",
                "https://github.com/vireshkoli/LLM-Inference-Optimization/blob/"
                "1425eb749091cdaf89313e4a32f700bc322e68e7/results/logs/vllm-bf16.startup.log "
                "(vLLM 0.26.0's memory summary; the repository's tests name the card: "
                '"running Llama-3.1-8B on the target A40"; tests/data/public/profiler/prof-035)',
            ),
        ),
    ),
    CudaTotal(
        "H100-NVL-94GB",
        (
            CudaPrint(
                "93.02 GiB",
                "GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free.",
                "https://github.com/vllm-project/vllm/issues/16712 (torch's OOM under vLLM; "
                '"Running on 2xH100 NVL")',
            ),
            CudaPrint(
                "93.00 GiB",
                "GPU 0 has a total capacity of 93.00 GiB of which 1.08 GiB is free.",
                "https://github.com/ali-vilab/VACE/issues/56 (torch's OOM in a comment of "
                '2025-05-16; "an H100 NVL 94GB VRAM (RunPod)")',
            ),
        ),
    ),
    CudaTotal(
        "H200-SXM-141GB",
        (
            CudaPrint(
                "139.80 GiB",
                "GPU 5 has a total capacity of 139.80 GiB of which 35.64 GiB is free.",
                f"{PRIME_RL}/benchmark-8xh200-Qwen--Qwen3-30B-A3B-Instruct-2507-sft-full-8gpu-"
                "Recompute-flash_attention_2-65536.json (torch's OOM in a prime-rl benchmark "
                'record of 2026-01-13 whose "device_name" is "NVIDIA H200", NVML\'s name of '
                "the SXM card)",
            ),
            CudaPrint(
                "139.81 GiB",
                "GPU 0 has a total capacity of 139.81 GiB of which 92.12 MiB is free.",
                "https://github.com/sungwon-chae/arxiv_confi/blob/"
                "fbebdca71dee60a37592d09fc2b75733d0b1a70d/etu_logging.md (torch's OOM; the "
                'same run prints "GPU 0: NVIDIA H200 (139.8 GB)")',
            ),
        ),
    ),
    CudaTotal(
        "B200",
        (
            CudaPrint(
                "178.36 GiB",
                "GPU 7 has a total capacity of 178.36 GiB of which 96.12 MiB is free.",
                f"{PRIME_RL}/benchmark-8xb200-PrimeIntellect--INTELLECT-3-rl-full-8gpu-"
                "Recompute-flash_attention_2-16384.json (torch's OOM in a prime-rl benchmark "
                'record of 2026-01-13 whose "device_name" is "NVIDIA B200")',
            ),
        ),
    ),
    CudaTotal(
        "GB10",
        (
            CudaPrint(
                "121.69 GiB",
                "Free memory on device (110.37/121.69 GiB) on startup.",
                "https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/issues/47 "
                '(vLLM\'s snapshot in a comment of 2026-08-30; "2× DGX Spark (GB10, 128 GB)")',
            ),
            CudaPrint(
                "119.56 GiB",
                "Free memory on device cuda:0 (55.87/119.56 GiB)",
                "https://github.com/vllm-project/vllm/issues/48140 (vLLM 0.24.0's startup "
                'check, quoted in a comment of 2026-07-09; "NVIDIA DGX Spark (GB10 Grace '
                'Blackwell ...)"; unified memory: the kernel and driver move the total)',
            ),
        ),
    ),
    CudaTotal(
        "RTX-3090",
        (
            CudaPrint(
                "23.70 GiB",
                "(GPU 0; 23.70 GiB total capacity; 1.38 GiB already allocated;",
                'https://github.com/GaoLii/DSP/issues/10 (torch\'s OOM; "I have two 3090 GPU.")',
            ),
            CudaPrint(
                "23.70 GiB",
                "(GPU 0; 23.70 GiB total capacity; 343.74 MiB already allocated;",
                'https://github.com/ashawkey/nerf2mesh/issues/97 (torch\'s OOM; "GPU RTX 3090")',
            ),
            CudaPrint(
                "23.56 GiB",
                "GPU 0 has a total capacity of 23.56 GiB of which 56.88 MiB is free",
                "https://github.com/noonghunna/club-3090/issues/58 (torch's OOM in its title; "
                '"GPU 0: NVIDIA GeForce RTX 3090 | 24576 MiB | driver 580.126.09", bare metal)',
            ),
            CudaPrint(
                "23.56 GiB",
                "Free memory on device (22.93/23.56 GiB) on startup.",
                "https://github.com/wtdcode/vllm-backport/issues/34 (vLLM's memory summary; "
                'titled "... 8x RTX 3090 ...")',
            ),
            CudaPrint(
                "24.00 GiB",
                "GPU 0 has a total capacity of 24.00 GiB of which 0 bytes is free.",
                "https://github.com/sdbds/TRELLIS-for-windows/issues/7 (torch's OOM on Windows; "
                '"cuda:0" : "NVIDIA GeForce RTX 3090")',
                setting="Windows",
            ),
        ),
    ),
    CudaTotal(
        "RTX-A5000",
        (
            CudaPrint(
                "23.56 GiB",
                "GPU 0 has a total capacity of 23.56 GiB of which 83.25 MiB is free.",
                "https://github.com/LMCache/LMCache/issues/3430 (torch's OOM in a vLLM 0.21.0 "
                'boot; "an RTX A5000 (24GB)"; its --gpu-memory-utilization=0.9764 is 23 GiB '
                "of that total)",
            ),
        ),
    ),
    CudaTotal(
        "RTX-A6000",
        (
            CudaPrint(
                "47.53 GiB",
                "GPU 0 has a total capacity of 47.53 GiB of which 176.88 MiB is free.",
                "https://github.com/black-forest-labs/flux2/issues/23 (torch's OOM; "
                '"Running on RTX-A6000 on HyperStack")',
            ),
            CudaPrint(
                "47.99 GiB",
                "(GPU 0; 47.99 GiB total capacity; 18.36 GiB already allocated;",
                "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/8998 (torch's "
                'OOM; "I have an RTX A6000"; the whole 49,140 MiB framebuffer, as the thread\'s '
                '"Sys VRAM: .../49140 MiB" shows, the Windows pattern of the RTX 3090\'s 24.00)',
                setting="Windows, inferred",
            ),
        ),
    ),
    CudaTotal(
        "RTX-PRO-6000",
        (
            CudaPrint(
                "95.01 GiB",
                "Free memory on device (94.05/95.01 GiB) on startup.",
                "https://github.com/kubesimplify/website/blob/"
                "08b151ee1aa38188fb118b99104567117a2ca6d4/content/blog/"
                "running-a-big-llm-across-multiple-gpus-with-vllm.md (vLLM 0.27.1's memory "
                "summary on four RTX PRO 6000 Blackwell Server Edition; "
                "tests/data/public/profiler/prof-027)",
            ),
            CudaPrint(
                "95.59 GiB",
                "GPU 0 has a total capacity of 95.59 GiB of which 50.40 GiB is free.",
                "https://github.com/pytorch/pytorch/issues/182286 (torch's OOM; \"NVIDIA RTX PRO "
                '6000 Blackwell (sm_120, 96 GB VRAM) under WSL2")',
                setting="WSL2",
            ),
        ),
    ),
)


_BY_SKU = {total.sku.casefold(): total for total in CUDA_TOTALS}


def cuda_total(sku: str) -> CudaTotal | None:
    """The CUDA total of the table's card ``sku`` (any case), or None where no public log
    ties one to it."""
    return _BY_SKU.get(sku.strip().casefold())
