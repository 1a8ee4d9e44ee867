"""What a vLLM rank spends before its KV pool, and the pool --gpu-memory-utilization leaves.

Issue 17's and issue 31's model, as far as it is read (research notes: docs/vllm-memory.md),
on one PP stage, for 0.17 to 0.33:

    requested = ceil(CUDA total x utilization)            v1/worker/utils.py:408 (0.19.0)
    0.17-0.26: pool = requested - (weights + activation peak + non-torch) - CUDA graphs
                                                          gpu_worker.py:424 (0.20.0)
    0.27-0.33: pool = requested - consumed - (transient peak + CUDA graphs)
                                                          gpu_worker.py:526-547 (0.27.1)

  where consumed (C) is the free memory the worker used up since its init snapshot (the
  weights, the runner's buffers, non-torch memory, allocator slack: utils/mem_utils.py
  memory_profiling, 0.27.1) and the transient peak (H) is the profiling run's torch peak less
  what it left allocated; vLLM prints H + the graph estimate as "peak activation". fakplan
  counts C as the weights plus a measured range (``CONSUMED_BEYOND_WEIGHTS_MEASURED``), H as
  the activation peak below, widened for the V2 runner by what its public boots printed
  beyond fakplan's estimate (``V2_PEAK_EXCESS_MEASURED``, scaled; before 0.27 too, where the
  V2 runner's non-torch memory has a range of its own, ``NON_TORCH_V2_MEASURED``, and its
  weights a measured load residue beyond the count, ``LOAD_RESIDUE_MEASURED``, as from 0.20
  on either runner);

- the CUDA-graph estimate G is printed from 0.18 and subtracted from 0.20
  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 there, envs.py), where graphs are
  captured (cudagraph_mode != NONE) and the runner measures them: the V2 model runner
  returns 0 until 0.29 (``runner``), and which runner a model gets is each release's rule;
  from 0.29 the V2 runner measures it by capturing the graphs, which no public boot prints
  yet: the V1 runner's measured range stands in, said to be borrowed (``V2_GRAPHS_BORROWED``);
- weights: ``weights.vllm_rank_weights`` (the plain decoders only), as CUDA's caching
  allocator counts the blocks holding them (``torch_allocator``);
- activation peak, V1 runner: the profiling run's sampler phase (derived term by term in
  gpu_model_runner.py _dummy_sampler_run, sampler.py:90, topk_topp_sampler.py:112 and
  topk_topp_triton.py:1017 at 0.19.0), with Rs = min(max_num_seqs, max_num_batched_tokens)
  rows of the vocabulary V:
      16-bit logits 2 + their fp32 copy 4 + softmax probs 4 + the exponential draw q 4
      = 14 B a logit, + the Triton top-k/top-p buffer 4 x min(2^ceil(log2 min(SMs, Rs)),
      SMs) x V, + the hidden states 2 x Tb x H and two Rs x H row copies, + the cuBLAS
      workspace (32 MiB, PyTorch's sm90 default 4096 KiB x 8: inferred, not in vLLM);
      a mixture of experts adds its fused_moe workspaces Tb x top-k x (max(N/2, H) +
      max(N, H)) x 2 B, N = 2 x moe_intermediate / TP (experts/triton_moe.py). From 0.21
      the sampler runs a second time on forward_native with a generator; with Triton
      present that pass takes the same Triton top-k/top-p path (topk_topp_sampler.py
      apply_top_k_top_p), so the peak is the first pass's;
- activation peak, V2 runner: its dummy sampler has no request to process and no top-k or
  top-p (v1/worker/gpu/model_runner.py _dummy_sampler_run, sample/sampler.py, 0.29.0), so
  the sampler phase is the 16-bit logits 2 x Rs x V beside the hidden states; the forward
  may peak higher, which fakplan estimates (the MLP at max_num_batched_tokens), not derives:
  the term is the interval between the two;
- non-torch memory and the graph estimate: not derivable from any config (NCCL buffers,
  CUDA modules; the captured graphs' pool); the figures measured in public 0.19.0 boots on
  H100 (tests/data/public/profiler), by parallelism, with their spread. 0.19's estimator
  is the V1 runner's from 0.18 to 0.28 (gpu_model_runner.py profile_cudagraph_memory).

From 0.27 at TP > 1, where no fitted boot prints C, the TP 1 range's top is raised by the
most the 0.19.0 boots' non-torch memory grew from TP 1, and said to be borrowed
(``consumed_beyond_weights``).

Anything else is unknown, with the reason: 0.34 on (the extensible KV cache), a TP no
public boot of either era measures, a
quantized checkpoint whose layout is not counted, a multimodal one but Gemma 3's SigLIP
tower (``encoder_profile``; read on the V1 runner, on the V2 runner with no encoder pass
in 0.25-0.26 and with one from 0.27), an architecture whose weights are not counted, PP > 1
but at TP 1 on 0.17-0.19 with the layers split evenly and the last stage binding under
fakplan's forward bound (``_earlier_stages``), a 32-bit served dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from fakplan.engines.gemma4_weights import GEMMA4_FAMILIES
from fakplan.engines.packed_weights import capability_number
from fakplan.engines.rank_weights import RankWeights
from fakplan.engines.releases import parse_version
from fakplan.engines.served import served_dtype
from fakplan.engines.vllm.rules import DOWNCAST
from fakplan.engines.vllm.runner import (
    RUNNER_ENV,
    ModelTraits,
    Runner,
    RunnerChoice,
    default_runner,
    graphs_estimated,
)
from fakplan.engines.weights import (
    GDN_FAMILIES,
    GEMMA3_DEFAULTS,
    GEMMA3_FAMILIES,
    MAMBA_FAMILIES,
    MLA_FAMILIES,
    SWA_HYBRID_FAMILIES,
    vllm_rank_weights,
    weights_refusal,
)
from fakplan.geometry.params import MOE_FAMILIES, ROUTED_EXPERT_FIELDS, moe_layout, towers
from fakplan.kv import KvQuery
from fakplan.sizing import bytes_span
from fakplan.units import GIB, MIB

# torch's default cuBLAS workspace, allocated through the caching allocator on a handle's
# first use (aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize):
# ":4096:2:16:8" (8,519,680 B), 32 MiB on compute capability 9.0 (pytorch PR 89027, 2022);
# majors 10 and 12 take the 32 MiB from pytorch PR 175344 (2026-02) and 11 from PR 189312
# (2026-07), so on Blackwell the release's torch decides
CUBLAS_WORKSPACE = 32 * MIB
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspace(capability: str | None) -> tuple[int, int, str]:
    """torch's cuBLAS workspace on a card of ``capability`` as (least, most, why): the
    release's torch decides on Blackwell; None: an H100's (9.0), as the SM count defaults."""
    major = 9 if capability is None else capability_number(capability) // 10
    source = "torch's default (CublasHandlePool.cpp parseChosenWorkspaceSize)"
    if major == 9:
        return CUBLAS_WORKSPACE, CUBLAS_WORKSPACE, f"{source}: 32 MiB on 9.0"
    if major < 9:
        return (
            CUBLAS_WORKSPACE_DEFAULT,
            CUBLAS_WORKSPACE_DEFAULT,
            f"{source}: 4,096 KiB x 2 + 16 KiB x 8 before Hopper",
        )
    return (
        CUBLAS_WORKSPACE_DEFAULT,
        CUBLAS_WORKSPACE,
        f"{source}: 4,096 KiB x 2 + 16 KiB x 8 to 32 MiB on Blackwell, as the release's torch "
        "names it or not",
    )


ALLOCATOR_SPARE = 1 << 20  # kSmallSize: a block with no more spare is not split (torch_allocator)
# non-torch memory measured in vLLM 0.19.0 boots on H100 80GB (llm-d-planner, PR #205):
# (low, high) bytes as printed ("non-torch forward increase memory"), the min-max per TP of
# the fit set: every boot of tests/data/public/profiler and the dev corpus that ran a release
# in READ at PP 1 and prints the term (37 boots, 12 configs; tests/engines/vllm/test_vllm_floor
# refits it). Scored with each boot's model left out in docs/arithmetic.md.
NON_TORCH_MEASURED = {
    "tp1": (round(0.24 * GIB), round(0.27 * GIB)),
    "tp2": (round(2.06 * GIB), round(2.11 * GIB)),
    "tp4": (round(2.13 * GIB), round(2.21 * GIB)),
}
# The V2 runner before 0.27 (0.23-0.26 for the models it takes by default): its public boots
# print non-torch memory far below the V1 runner's, 0.08 GiB (prof-035, prof-036: 0.26.0, an
# A40), +- the print's 0.005; the fit set is every V2 boot of the profile era at PP 1 that
# prints the term (floor_corpus.v2_non_torch_fit_set). At TP > 1 none is measured: the V1
# range there is borrowed, its low end lowered by what V2 printed below V1 at TP 1
NON_TORCH_V2_MEASURED = {"tp1": (round(0.075 * GIB), round(0.085 * GIB))}
NON_TORCH_V2_BORROWED = (
    "borrowed: no public V2 boot before 0.27 measures it at this TP, so the V1 runner's range "
    "there is taken, its low end lowered by what the V2 boots printed below V1's at TP 1"
)
# What "Model loading took" printed beyond fakplan's count of the checkpoint and its rotary
# caches from 0.20, per kind of load; 0.19.0 printed the count (every boot of its corpus, on an
# H100). Each range is its fit set's lowest to highest of what the print's rounding allows
# beyond the count, the low end no lower than 0 (the counted tensors are allocated); each is
# scored with every boot's checkpoint left out (tests/engines/vllm/test_vllm_floor.py). What
# these releases allocate there is not read: DeviceMemoryProfiler is allocated bytes after
# the load less before, as in 0.19 (utils/mem_utils.py, 0.26.0 and 0.27.1).
HALF_CENTI_GIB = GIB // 200  # half the last digit of a figure printed to 0.01 GiB
LoadKind = Literal["v2-profile-era", "from-0.20"]
LOAD_RESIDUE_MEASURED: dict[LoadKind, tuple[int, int]] = {
    # the V2 runner before 0.27, where the load is the pool's W: every V2 boot of the
    # profile era at TP 1 and PP 1 that prints its weights (floor_corpus.load_fit_set):
    # prof-035 ... prof-038 (0.26.0, an A40, Llama-3.1-8B in bf16, W8A8, AWQ and GPTQ). The
    # least is the bf16 boot's (15.0 GiB printed, 16,094,076,928 B counted), the most the
    # W8A8 boot's (8.52 GiB printed, 9,120,260,096 B counted)
    "v2-profile-era": (
        round(15.0 * GIB) - HALF_CENTI_GIB - 16_094_076_928,
        round(8.52 * GIB) + HALF_CENTI_GIB - 9_120_260_096,
    ),
    # every other load from 0.20 (the V1 runner; the V2 runner from 0.27, where W is logged
    # and the consumed memory C holds it): every such boot that prints its weights, prof-020,
    # prof-021 (0.27.1, V2, an RTX 4090), graphs-007, graphs-008 (0.24.0, V1, an RTX 4090)
    # and prof-027 (0.27.1, V1 at TP 4, RTX PRO 6000). The least is below the count (0.93 GiB
    # printed, 994,670,592 B counted), so 0; the most is graphs-008's (Qwen2.5-7B-Instruct:
    # 14.29 GiB printed, its author's transcription "Model loading took: 14.29 GiB", which
    # the corpus reads from cases.yaml's ``transcribed``; 15,299,390,464 B counted), which
    # no other boot of the set reaches: the next most is prof-027's, 11.5 MB
    "from-0.20": (0, round(14.29 * GIB) + HALF_CENTI_GIB - 15_299_390_464),
}
LOAD_RESIDUE_FIT_SETS: dict[LoadKind, str] = {
    "v2-profile-era": "the V2 runner before 0.27: prof-035 ... prof-038, vLLM 0.26.0 on an A40",
    "from-0.20": (
        "from 0.20 otherwise: prof-020, prof-021, prof-027 (0.27.1), graphs-007, graphs-008 (0.24.0)"
    ),
}
# At PP > 1 (TP 1), every stage of the fit set's boots printed 0.07 GiB of non-torch memory
# (prof-004: Llama-3.1-8B at PP 2, 0.19.0, H100), +- the print's 0.005 GiB; the fit set is the
# PP 2 boots (floor_corpus.pp_fit_set), and the PP 4 boot of the same source (prof-028) checks it
NON_TORCH_PP_MEASURED = {"tp1": (round(0.065 * GIB), round(0.075 * GIB))}
# The profiling forward's own peak is printed where no sampler runs beside it: a first PP
# stage's. fakplan estimates it (``_forward_estimate``), not derives it; what the PP fit set's
# first stage printed beyond that estimate: prof-004's PP0 "torch peak memory increase:
# 1.1GiB" (+ the print's 0.005 GiB) less the 872,415,232 B estimate for Llama-3.1-8B at
# 8,192 batched tokens of width 4,096. What the estimate leaves out (norm and attention
# outputs, residual copies, what Inductor keeps alive) is of the hidden states' shape, so
# another model takes it scaled by its batched tokens x hidden size (``forward_excess``)
FORWARD_EXCESS_MEASURED = round(1.105 * GIB) - 872_415_232
FORWARD_EXCESS_STATE = 8192 * 4096  # prof-004's batched tokens x hidden size
# The activations a later PP stage receives: the runner keeps the model's
# make_empty_intermediate_tensors at max_num_batched_tokens rows of the hidden size in the
# model dtype from the profiling run on (gpu_model_runner.py _dummy_run, 0.19.0), one tensor
# a name the model's factory lists: hidden_states and residual in llama.py (mistral and phi3
# subclass it), qwen2.py (qwen3 subclasses it), qwen3_moe.py and mixtral.py; hidden_states
# alone in granite.py (0.19.0). Listed: the families whose stage weights fakplan counts at
# PP > 1 (gemma2.py, gemma3.py, deepseek_v2.py and gpt_oss.py list both too, but their
# stages' weights are not counted)
PP_RECEIVED_TENSORS = {
    "llama": 2, "mistral": 2, "phi3": 2, "qwen2": 2, "qwen3": 2, "qwen3_moe": 2,
    "mixtral": 2, "granite": 1,
}  # fmt: skip
# What is in use when the worker takes its init snapshot (CUDA context; NCCL and the custom
# all-reduce buffers at TP > 1): total - free at init, "worker init memory snapshot ...
# cuda_memory=" in the 0.19.0 H100 boots of tests/data/public (0.51 GiB at TP 1 in 19 boots;
# 1.53 and 2.01 GiB at TP 2; 1.55 GiB at TP 4), and at TP 1 the 0.60-0.61 GiB of vLLM
# 0.11.0 H100 boots (llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md
# at 4f4d4494); each +- the print's 0.005 GiB
CONTEXT_MEASURED = {
    "tp1": (round(0.505 * GIB), round(0.615 * GIB)),
    "tp2": (round(1.525 * GIB), round(2.015 * GIB)),
    "tp4": (round(1.545 * GIB), round(1.555 * GIB)),
}
# The CUDA-graph pool vLLM captures after the KV pool ("Graph capturing finished in X secs,
# took Y GiB", gpu_model_runner.py capture_model, measured after empty_cache from 0.18):
# the 0.19.0 H100 boots of tests/data/public/profiler with their print's rounding (TP 1:
# 0.51 a stage of Llama-3.1-8B at PP 4 .. 1.57 DeepSeek-V2-Lite; TP 2: 0.76 .. 1.85; TP 4:
# 0.67 .. 1.66)
GRAPHS_MEASURED = {
    "tp1": (round(0.505 * GIB), round(1.575 * GIB)),
    "tp2": (round(0.755 * GIB), round(1.855 * GIB)),
    "tp4": (round(0.665 * GIB), round(1.665 * GIB)),
}
# vLLM's own margin where it suggests a --kv-cache-memory-bytes that fills the card
# (gpu_worker.py compile_or_warm_up_model, 0.19.0: redundancy_buffer_memory = 150 MiB)
REDUNDANCY = 150 << 20
# The CUDA-graph estimate (V1 runner, gpu_model_runner.py profile_cudagraph_memory, 0.18 to
# 0.28): per mode it captures the largest graph, then the next, and charges
#     G = the largest first capture over the modes + sum over modes (graphs - 1) x per-graph
# (checked against every 0.19.0 boot below: 260 + 50 x 6 + 50 x 6 MiB = 0.84 GiB). The
# first capture and the per-graph costs are no config's figures: measured in the DEBUG
# lines "Estimated FULL|PIECEWISE CUDA graph memory: X MiB first-capture + (n-1) x Y MiB
# per-graph" of the 0.19.0 H100 boots of tests/data/public/profiler (the fit set), by TP,
# in MiB: (first low, first high, FULL per-graph low, high, PIECEWISE per-graph low, high)
GRAPH_ESTIMATE_MEASURED = {
    # prof-001, -005..-007, -011, -012, -014, -015, -022..-026, -030, -032, -033; prof-023
    # (phi-4, added after the first fit) printed 4 MiB per FULL graph and prof-032
    # (gemma-2-2b-it, added later still) 4 MiB per PIECEWISE graph, each below the 6
    # fitted before it
    "tp1": (112, 522, 4, 10, 4, 12),
    "tp2": (128, 268, 6, 14, 6, 26),  # prof-002, -008, -010, -013
    "tp4": (84, 142, 4, 14, 6, 18),  # prof-003, -009
}
# A check-set boot below the fit's range widens it, and is then in sample: graphs-006 (vLLM
# 0.21.0, RTX A5000, Qwen3-8B; LMCache issue 3430) printed 0.52 GiB for 51 PIECEWISE and 35
# FULL graphs, below the 112 + 50 x 6 + 34 x 4 = 548 MiB the TP 1 fit's smallest costs give.
# The TP 1 first capture's low end is taken to the smallest any fit boot printed at any TP
# (84 MiB, TP 4): 520 MiB holds it. Per TP: the first capture's low end, in MiB.
GRAPH_FIRST_CAPTURE_WIDENED = {"tp1": 84}
# Per TP, the least hidden size among the fit boots (tests/engines/vllm/test_vllm_graphs refits
# it). A model below it (graphs-007: Qwen2.5-0.5B, hidden 896, 0.28 GiB for 51 and 35 graphs on
# an RTX 4090 at 0.24.0, under the 0.41 the fit's least costs give) is outside the geometry the
# per-graph costs were measured at, and their low end falls to vLLM's own floor: "Use at least
# 1 MiB per graph for driver overhead" (gpu_model_runner.py profile_cudagraph_memory, 0.21.0)
GRAPH_FIT_LEAST_HIDDEN = {"tp1": 2048, "tp2": 2880, "tp4": 4096}
PER_GRAPH_FLOOR_MIB = 1
# At TP 1 a graph's cost follows the layers it holds (each layer's kernels are nodes of every
# graph, PIECEWISE or FULL): the top of a model's per-graph cost is the most per layer any
# fit boot without MLA printed, for each mode (FULL: 6 MiB over 28 layers, prof-024;
# PIECEWISE: 8 MiB over 32, prof-026), x its layers, and its first capture's top the largest
# such a boot printed (328 MiB, prof-023). An MLA model keeps the fit's range (DeepSeek-V2-Lite
# printed a 522 MiB first capture and 0.37 MiB a layer). At TP 2 and 4 the per-layer costs
# scatter (Llama-3.1-8B at TP 2: 26 MiB a PIECEWISE graph over 32 layers, Llama-3.3-70B 20
# over 80): not scaled. Refitted by tests/engines/vllm/test_vllm_graphs.
GRAPH_PER_LAYER_TOP = {"tp1": (-(-6 * MIB // 28), 8 * MIB // 32)}  # FULL, PIECEWISE: B
GRAPH_FIRST_CAPTURE_TOP_WITHOUT_MLA = {"tp1": 328}
# From 0.27 the memory consumed since the init snapshot less the weights ("Actual usage is
# C GiB for consumed memory (weights + non-torch)" less "Model loading took W GiB"): non-torch
# memory, the runner's persistent buffers and allocator slack, no config's figure. The fit
# set: every boot of tests/data/public/profiler that ran 0.27-0.33 at TP 1 and PP 1 and prints both
# (prof-020: 1.49 - 0.93, prof-021: 1.23 - 0.93, RTX 4090, V2 runner), each +- the two
# prints' 0.005 GiB; tests/engines/vllm/test_vllm_floor refits it. The low end is one figure
# from outside tests/data: a public ~0.28 source build's boot on a 16 GB SM 12.0 card printed
# 10.47 - 10.24 = 0.23 GiB (yeasah/vllm-golite tests/data/vllm-start-qwen3.8-27b.log at
# 07c863c0; a dev version string, so no release row of its own)
CONSUMED_BEYOND_WEIGHTS_MEASURED = {
    "tp1": (round(0.22 * GIB), round(0.57 * GIB)),
}
# A Gated DeltaNet or Mamba-2 hybrid's: its scan kernels (FLA's Triton) load beside the
# text model's, and no config gives what they take. Two public boots of 27B Gated DeltaNet
# hybrids at TP 1 measure it: the ~0.28 build's above (an exl3 checkpoint, 0.23 GiB) and
# 0.27.1 on an RTX PRO 6000 (an NVFP4 checkpoint with an MTP drafter: 22.37 - 20.75 = 1.62
# GiB; pctablet505/servedeck tests/fixtures/qwen_server-20260827-183107.log at bd900dff).
# The range runs from the least any 0.27+ boot printed to that top, each +- the prints'
# 0.005 GiB: in sample, both boots (a third hybrid boot would check it).
HYBRID_CONSUMED_BEYOND_WEIGHTS_MEASURED = {
    "tp1": (round(0.22 * GIB), round(1.63 * GIB)),
}
HYBRID_CONSUMED_SOURCE = (
    "measured in two public boots of 27B Gated DeltaNet hybrids at TP 1 (a ~0.28 build, "
    "exl3: 0.23 GiB; vLLM 0.27.1 with an MTP drafter, NVFP4: 1.62 GiB; printed consumed "
    "memory less printed weights), its low end the least any 0.27+ boot printed"
)
CONSUMED_TP_GROWTH_BORROWED = (
    "borrowed: no public 0.27+ boot at TP > 1 was fitted, so the TP 1 range is widened up "
    "to what the 0.19.0 H100 boots' non-torch memory grew from TP 1 to this TP (what the "
    "collectives allocate after the init snapshot, which both eras take right after setting "
    "up the distributed environment: gpu_worker.py init_device, 0.19.0 and 0.33.0); that "
    "growth is an NVLink card's (NCCL and the custom all-reduce take the most there), and a "
    "card without NVLink may grow less, so the low end stays the TP 1 one"
)
# What the V2 runner's printed peak activation exceeded the top of fakplan's range by: the
# profiling forward also runs torch.compile's first compilation (a cold compile cache printed
# 1.18 GiB for a launch that printed 0.19 warm in a study note), whose workspace no config
# gives. Fitted on every V2 boot at TP 1 and PP 1 that prints its peak, per batched token per
# hidden unit (the compiled graph's tensors are of the hidden states' shape at the compile
# size): prof-020 (Qwen2.5-0.5B, 0.27.1, RTX 4090, 2,048 x 896) printed 0.25 GiB, + the
# print's 0.005, against 92,804,218 B, the most per unit (98.6 B); prof-035 (Llama-3.1-8B,
# 0.26.0, A40, 2,048 x 4,096) went 94.5 B per unit beyond its top of 296,752,251 B. Kept at
# prof-035's state. Refitted by tests/engines/vllm/test_vllm_floor; a boot that compiles more
# falls outside, and verify says so.
V2_PEAK_EXCESS_MEASURED = -(-(round(0.255 * GIB) - 92_804_218) * 4096 // 896)
V2_PEAK_EXCESS_STATE = 2048 * 4096  # prof-035's batched tokens x hidden size
# The V2 runner's CUDA-graph estimate (0.29 on) measures the memory of the same graphs by
# capturing them into a throwaway pool: every PIECEWISE graph in full, the FULL ones from
# the two largest, first capture + (n - 1) x the second, at least 1 MiB a graph
# (v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory and
# _extrapolate_full_graph_memory, 0.33.0). No public boot of it prints the estimate yet, so
# the V1 runner's measured range stands in, said to be borrowed; from 0.27 vLLM prints it
# inside "peak activation" (H + G), where verify's activation-peak check closes it
V2_GRAPHS_BORROWED = (
    "the V1 runner's measured range, borrowed: the V2 runner (0.29 on) measures the same "
    "graphs by capturing them (PIECEWISE in full, FULL from its two largest; "
    "v1/worker/gpu/cudagraph_utils.py, 0.33.0) and no public boot of it prints its estimate yet"
)
READ = ((0, 17), (0, 33))  # the releases whose terms were all read
CONSUMED_ERA = (0, 27)  # non-KV = C + H (utils/mem_utils.py memory_profiling, 0.27.1)
EXTENSIBLE_KV_CACHE = (0, 34)  # config/cache.py enable_extensible_kv_cache, default on
EAGER_GRAPHS = (  # read in 0.21.0, 0.26.0 and 0.27.1
    "0: --enforce-eager sets cudagraph_mode NONE (config/vllm.py), and the worker estimates "
    "CUDA graphs only where it is not (gpu_worker.py determine_available_memory)"
)
GRAPHS_SUBTRACTED = (0, 20)  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 (envs.py)
# Families whose public boots print non-torch memory outside every other model's range for
# a cause not read: refused, and kept out of the measured range (granite: 0.46 GiB on three
# checkpoints, 0.24-0.27 on every other dense model at TP 1, 0.19.0 H100)
NON_TORCH_UNREAD = ("granite",)


def consumed_beyond_weights(tp: int, *, scan: bool = False) -> tuple[int, int, str] | None:
    """From 0.27, the memory a worker consumes beyond its weights at this TP, as a range and
    whence: measured at TP 1 (``scan``: a Gated DeltaNet or Mamba-2 hybrid's, measured on
    its own boots); at a TP the 0.19.0 boots measure non-torch memory for, the TP 1 range
    with its top raised by the most that grew over TP 1 there (borrowed, and said so); None
    elsewhere."""
    key = f"tp{tp}"
    measured = HYBRID_CONSUMED_BEYOND_WEIGHTS_MEASURED if scan else CONSUMED_BEYOND_WEIGHTS_MEASURED
    if key in measured:
        low, high = measured[key]
        source = (
            HYBRID_CONSUMED_SOURCE
            if scan
            else f"measured in public vLLM 0.27.1 boots at TP {tp}, its low end in a ~0.28 "
            "build's (printed consumed memory less printed weights)"
        )
        return low, high, f"{source}: {low:,}..{high:,} B (no config gives it)"
    if key not in NON_TORCH_MEASURED:
        return None
    base_low, base_high = measured["tp1"]
    one_low = NON_TORCH_MEASURED["tp1"][0]
    at_high = NON_TORCH_MEASURED[key][1]
    growth = at_high - one_low
    high = base_high + growth
    return (
        base_low,
        high,
        (
            f"the TP 1 range measured in public 0.27.1 and ~0.28 boots"
            f"{' of hybrids' if scan else ''} {base_low:,}..{base_high:,} B, "
            f"its top raised by the most the 0.19.0 H100 boots' non-torch memory grew from TP 1 "
            f"to TP {tp} ({at_high:,} B less {one_low:,} B = {growth:,} B) = "
            f"{base_low:,}..{high:,} B; {CONSUMED_TP_GROWTH_BORROWED}"
        ),
    )


@dataclass(frozen=True)
class Term:
    bytes: int
    derivation: str


@dataclass(frozen=True)
class VllmFloor:
    """One rank's boot-time memory before the pool, term by term, and the pool left."""

    requested: Term
    weights: RankWeights  # with the top of its interval where it has one
    activation: Term  # its low end where it is a range (``activation_span``)
    non_torch: tuple[int, int]  # measured range
    pool: tuple[int, int]  # the range the measured terms leave
    # the CUDA-graph estimate the release subtracts, as a range; None where it subtracts
    # none (before 0.20, eager, or a V2 runner before 0.29)
    cuda_graph: tuple[int, int] | None = None
    graph_derivation: str = ""
    # the top of the activation range: the allocator's spare, the forward's top where few
    # slots let it outgrow the sampler, the V2 runner's forward (+ a PP stage's received
    # tensors); None where the term is one figure
    activation_high: int | None = None
    runner: str = "v1"
    runner_rule: str = ""
    # "profile" (0.17-0.26: W + P' + N, ``non_torch`` the measured N) or "consumed" (0.27
    # on: C + H, ``non_torch`` the measured C - W; the activation term is H + the graph
    # estimate, as vLLM prints it, and ``cuda_graph`` is None)
    era: str = "profile"
    # 0.27 on: what the profiling run leaves allocated that fakplan derives (a mixture's
    # fused-MoE workspaces), counted in ``non_torch`` beside the measured range
    persistent: Term | None = None
    # 0.27 on, the V2 runner with a vision tower: its multimodal inputs_embeds buffer,
    # also counted in ``non_torch`` beside the measured range
    inputs_embeds: Term | None = None
    # 0.27 on: the CUDA-graph estimate inside ``activation`` (vLLM prints H + G as peak
    # activation), as a range; None where there is none
    graph_in_activation: tuple[int, int] | None = None
    # PP > 1: why the last stage's pool is the one the engine keeps ('' at PP 1)
    stages: str = ""
    # whence the non-torch range (from 0.27 the consumed range) came: '' where it is the
    # V1 runner's 0.19.0 boots' (0.17-0.26)
    non_torch_derivation: str = ""

    @property
    def activation_span(self) -> tuple[int, int]:
        return self.activation.bytes, self.activation_high or self.activation.bytes


@dataclass(frozen=True)
class Unknown:
    """Why the pool is not predicted; ``weights``: the rank's weights where they were
    counted before another term stopped the prediction."""

    reason: str
    weights: int | None = None
    weights_high: int | None = None  # the top of the weights' interval, where they have one


# The MLA attention backends whose modules allocate a 128 MiB workspace on the GPU when
# imported. Choosing a backend imports every one of its priority list (platforms/cuda.py
# _get_backend_priorities, then get_valid_backends' loop; flashinfer is a dependency of
# the CUDA wheel), while the first MLA layer is built: inside "Model loading took", for
# good. 0.17.0 and 0.19.0: FlashInfer-MLA's g_fi_workspace
# (v1/attention/backends/mla/flashinfer_mla.py), in every list but 0.33's for 12.x, and
# CUTLASS-MLA's g_sm100_workspace (cutlass_mla.py), listed for 10.x only. 0.33.0 allocates
# FlashInfer-MLA's on first use instead; CUTLASS-MLA's stays. Between, not read.
MLA_IMPORT_WORKSPACE = 128 * MIB
# 0.18 is taken as 0.17 and 0.19, which read alike
MLA_WORKSPACES_READ = {(0, 17): "both", (0, 18): "both", (0, 19): "both", (0, 33): "cutlass"}


def mla_import_workspaces(version: str, capability: str | None) -> tuple[int, int, str]:
    """The bytes the attention backend selection's imports allocate on an MLA model's
    rank, (low, high, what they are): an interval where the card's compute capability is
    not given or the release was not read (0.20-0.32: from 0.33's rule to 0.19's)."""
    release = parse_version(version)[:2]
    majors = [capability.split(".", 1)[0]] if capability else ["9", "10"]

    def count(rule: str, major: str) -> int:
        flashinfer = rule == "both"
        return MLA_IMPORT_WORKSPACE * (int(flashinfer) + int(major == "10"))

    rules = (
        [MLA_WORKSPACES_READ[release]] if release in MLA_WORKSPACES_READ else ["cutlass", "both"]
    )
    sizes = [count(rule, major) for rule in rules for major in majors]
    low, high = min(sizes), max(sizes)
    what = (
        f"{bytes_span(low, high if high != low else None)} of attention backends' import-time "
        "workspaces (FlashInfer-MLA's 128 MiB in 0.17-0.19, CUTLASS-MLA's 128 MiB on compute "
        "capability 10.x; platforms/cuda.py, v1/attention/backends/mla/, v0.19.0 and v0.33.0"
        + (", the release between them not read" if len(rules) > 1 else "")
        + (", the card's capability not given" if not capability else "")
        + ")"
    )
    return low, high, what


def _release_read(version: str) -> str | None:
    wanted = parse_version(version)[:2]
    if READ[0] <= wanted <= READ[1]:
        return None
    if wanted >= EXTENSIBLE_KV_CACHE:
        return (
            f"vllm {version}: from 0.34 the extensible KV cache (on by default on CUDA and "
            "ROCm, utilization default 1.0) measures the pool after warm-up and graph capture "
            "(v1/worker/extensible_kv_cache.py), which fakplan does not read "
            "(docs/vllm-memory.md)"
        )
    return (
        f"vllm {version}: fakplan has read the memory profiler of 0.17-0.33 only "
        "(docs/vllm-memory.md)"
    )


def capture_sizes(max_num_seqs: int, batched_tokens: int) -> tuple[int, int]:
    """How many graphs vLLM captures by default without a draft, (PIECEWISE, FULL). The
    sizes run up to min(max_num_seqs x 2, 512, max_num_batched_tokens): 1, 2, 4, then steps
    of 8 below 256 and of 16 from 256 (config/vllm.py _set_cudagraph_sizes, 0.20.0); FULL
    decode graphs take the sizes up to max_num_seqs (v1/cudagraph_dispatcher.py, 0.32.0)."""
    largest = min(max_num_seqs * 2, 512, batched_tokens)
    sizes = {i for i in (1, 2, 4) if i <= largest}
    if largest >= 8:
        sizes.update(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes.update(range(256, largest + 1, 16))
    full = [x for x in sizes if x <= min(max_num_seqs, batched_tokens)]
    return len(sizes), len(full)


def graph_estimate(
    tp: int,
    graphs: tuple[int, int],
    hidden: int | None = None,
    *,
    layers: int | None = None,
    mla: bool = False,
) -> tuple[int, int, str] | None:
    """The V1 runner's CUDA-graph estimate for (PIECEWISE, FULL) graph counts, as a range;
    ``hidden``: the model's hidden size, where one below the fit's takes vLLM's per-graph
    floor as the low end; ``layers``: its decoder layers, which scale the top at TP 1 where
    the model has no MLA (None: the fit's range as measured)."""
    key = f"tp{tp}"
    measured = GRAPH_ESTIMATE_MEASURED.get(key)
    if measured is None:
        return None
    first_low, first_high, full_low, full_high, pw_low, pw_high = measured
    widened = GRAPH_FIRST_CAPTURE_WIDENED.get(key)
    first_low = min(first_low, widened) if widened is not None else first_low
    least = GRAPH_FIT_LEAST_HIDDEN[key]
    below = hidden is not None and hidden < least
    if below:
        full_low = pw_low = PER_GRAPH_FLOOR_MIB
    # the tops in bytes: the fit's, or per layer where the model's layers scale them
    first_top, full_top, pw_top = first_high * MIB, full_high * MIB, pw_high * MIB
    scaled = False
    if layers is not None and not mla and key in GRAPH_PER_LAYER_TOP:
        scaled = True
        full_per_layer, pw_per_layer = GRAPH_PER_LAYER_TOP[key]
        # the per-layer tops stand on their own: a model with more layers than the fit's
        # largest (62) may take more than the fit's per-graph top
        first_top = min(first_top, GRAPH_FIRST_CAPTURE_TOP_WITHOUT_MLA[key] * MIB)
        full_top, pw_top = full_per_layer * layers, pw_per_layer * layers
    piecewise, full = graphs
    low = (first_low + (piecewise - 1) * pw_low + max(full - 1, 0) * full_low) * MIB
    high = first_top + (piecewise - 1) * pw_top + max(full - 1, 0) * full_top
    return (
        low,
        high,
        (
            f"the largest first capture {first_low}..{first_top / MIB:g} MiB + ({piecewise} "
            f"PIECEWISE graphs - 1) x {pw_low}..{pw_top / MIB:.2f} MiB + ({full} FULL graphs - 1) "
            f"x {full_low}..{full_top / MIB:.2f} MiB = {low:,}..{high:,} B (first capture and "
            f"per-graph costs measured in the 0.19.0 H100 boots' estimate lines at TP {tp}"
            + (
                ", the first capture's low end widened to the smallest at any TP by a 0.21.0 "
                "RTX A5000 boot below the fit's range"
                if widened is not None
                else ""
            )
            + (
                f"; hidden size {hidden:,} is below the fit boots' least at TP {tp} "
                f"({least:,}), so each per-graph cost's low end is vLLM's own floor, "
                f"{PER_GRAPH_FLOOR_MIB} MiB (gpu_model_runner.py profile_cudagraph_memory, "
                "0.21.0)"
                if below
                else ""
            )
            + (
                f"; the tops per layer for its {layers} layers (the most a fit boot without "
                "MLA printed a layer) and that class's largest first capture"
                if scaled
                else ""
            )
            + "; the graph counts are the default capture sizes' for max_num_seqs and "
            "max_num_batched_tokens)"
        ),
    )


def routed_experts(text: dict[str, Any]) -> int:
    """The routed experts a config names, as vLLM's model_config.is_moe counts them
    (get_num_experts > 0, config/model.py, 0.33.0): gpt-oss's num_local_experts counts,
    though fakplan's fused-MoE workspace rule (``MOE_FAMILIES``) does not take it."""
    for name in ROUTED_EXPERT_FIELDS:
        if text.get(name):
            return int(text[name])
    return 0


def _moe_workspace(text: dict[str, Any], model_type: str, tp: int, tokens: int) -> Term | None:
    """The fused_moe modular kernel's workspaces, which vLLM's workspace manager keeps
    (fused_moe/modular_kernel.py _allocate_buffers, v1/worker/workspace.py). gpt-oss's
    MXFP4 experts on compute capability 9.x go to the monolithic Triton kernel instead
    (OAITritonMxfp4ExpertsMonolithic, the first of the Triton backend's classes in
    fused_moe/oracle/mxfp4.py, 0.19.0-0.33.0), whose triton_kernel_moe_forward allocates
    inside the forward and keeps nothing: None (``_gpt_oss_forward``)."""
    if model_type in MLA_FAMILIES and routed_experts(text) and text.get("moe_intermediate_size"):
        # DeepSeek's routed experts go through the same unquantized fused_moe
        moe_inter = int(text["moe_intermediate_size"])
    elif model_type not in MOE_FAMILIES:  # gpt_oss is not among them
        return None
    else:
        layout = moe_layout(text, model_type)
        if layout is None:
            return None
        _, moe_inter, _ = layout
    hidden = int(text["hidden_size"])
    top_k = int(text.get("num_experts_per_tok") or 0)
    n = 2 * moe_inter // tp
    size = tokens * top_k * (max(n // 2, hidden) + max(n, hidden)) * 2
    return Term(
        size,
        f"fused_moe workspaces {tokens:,} x top-{top_k} x (max({n // 2:,}, {hidden:,}) + "
        f"max({n:,}, {hidden:,})) x 2 B = {size:,} B",
    )


def _block_fp8_on_triton(scheme: dict[str, Any], capability: str | None) -> bool:
    """A block-fp8 checkpoint (128 x 128 weight blocks, dynamic activations) whose experts
    go to the Triton kernel on this card at TP (no expert parallelism): on compute
    capability 9.0 the oracle moves Triton first for block fp8 at TP; on 8.9 and 12.x
    FlashInfer's CUTLASS takes block fp8 on 9.0 only, DeepGEMM does not run, and vLLM's
    CUTLASS experts take no 128-block scheme, so Triton is the first that does
    (fused_moe/oracle/fp8.py _get_priority_backends, experts/flashinfer_cutlass_moe.py,
    experts/cutlass_moe.py; 0.19.0, 0.22.0, 0.27.1, 0.29.0, 0.33.0). TritonExperts takes
    the same workspaces as the unquantized kernel, in the activation dtype
    (fused_moe.py workspace_shapes, modular_kernel.py workspace_dtype)."""
    if capability is None or scheme.get("quant_method") != "fp8":
        return False
    if scheme.get("weight_block_size") != [128, 128]:
        return False
    if str(scheme.get("activation_scheme") or "") != "dynamic":
        return False
    cap = capability_number(capability)
    return cap in (89, 90) or 120 <= cap < 130


def _peak_unread(
    text: dict[str, Any],
    model_type: str,
    language_model_only: bool,
    capability: str | None = None,
    consumed_era: bool = False,
) -> str:
    """Why the profiling run's terms are not derived for this model ('' where they are):
    its peak, or for a family in ``NON_TORCH_UNREAD`` its non-torch memory. Served
    text-only, a multimodal model profiles no encoder: with every modality's limit 0 the
    runner sees no multimodal input (multimodal/registry.py supports_multimodal_inputs;
    gpu_model_runner.py profile_run, v0.19.0), so its peak is the text model's."""
    if towers(text) and not language_model_only and not siglip_tower(text, model_type):
        return (
            "the activation peak of a model with a vision or audio tower other than Gemma "
            "3's SigLIP (the profiling run of its encoder) is not read; served text-only "
            "(--language-model-only) it is the text model's"
        )
    if "vocab_size" not in text:
        return "its config states no vocab_size, which the sampler's peak scales with"
    if model_type in GEMMA4_FAMILIES and (
        text.get("enable_moe_block") or text.get("hidden_size_per_layer_input")
    ):
        return (
            "the activation peak of Gemma 4's expert block (FusedMoE beside the dense MLP) "
            "or per-layer embeddings is not read"
        )
    scheme = text.get("quantization_config")
    if model_type in MLA_FAMILIES and (isinstance(scheme, dict) or not routed_experts(text)):
        # the profiling run builds no attention metadata, so MLA's own workspaces stay out
        # of it; what is read is DeepSeek's unquantized mixture (``_moe_workspace``)
        return (
            "the activation peak of a multi-head latent attention model is read for an "
            "unquantized DeepSeek mixture of experts only (a quantized checkpoint's fused-MoE "
            "workspaces depend on the kernel vLLM picks for the card)"
        )
    if model_type in (*GDN_FAMILIES, *MAMBA_FAMILIES) and not consumed_era:
        # their layers skip the scan in the profiling run (no attention metadata: "V1 profile
        # run", qwen3_next.py 0.17.0, mamba/gdn_linear_attn.py 0.19.0,
        # mamba/gdn/qwen_gdn_linear_attn.py 0.33.0, mamba_mixer2.py), so the peak is a
        # decoder's; before 0.27 no boot gives their memory outside torch (from 0.27 two
        # hybrid boots measure what a worker consumes beyond its weights)
        return (
            "a Gated DeltaNet or Mamba-2 hybrid's layers skip their scan in the profiling run "
            "(no attention metadata), so its peak is a decoder's, but before 0.27 its memory "
            "outside torch is not measured: its scan kernels (FLA's Triton) load beside it, "
            "and a public 0.27.1 boot of a 27B Gated DeltaNet hybrid (with an MTP drafter) "
            "consumed 1.62 GiB beyond its weights, against 0.22-0.57 GiB for the text models "
            "measured; from 0.27 the hybrids' measured range answers (docs/vllm-memory.md)"
        )
    if model_type in NON_TORCH_UNREAD:
        return (
            "its non-torch memory is not read: the public 0.19.0 H100 boots of three granite "
            "checkpoints print 0.46 GiB of non-torch memory (0.24-0.27 for every other dense "
            "model measured; their peaks fall inside the activation range, "
            "docs/vllm-memory.md)"
        )
    if model_type in SWA_HYBRID_FAMILIES:
        return (
            "the activation peak of a sliding-window hybrid's fused MoE (its router in "
            "float32, its workspaces) is not read"
        )
    if (
        model_type in MOE_FAMILIES
        and isinstance(scheme, dict)
        and not _block_fp8_on_triton(scheme, capability)
    ):
        return (
            f"the fused-MoE workspaces of a {scheme.get('quant_method')} mixture of experts "
            "depend on the kernel vLLM picks for the card (Triton, DeepGEMM, CUTLASS, "
            "FlashInfer) and are read for block fp8 on Triton only (compute capability 8.9, "
            "9.0 or 12.x)"
        )
    return ""


def siglip_tower(text: dict[str, Any], model_type: str) -> bool:
    """A Gemma 3 whose one tower is SigLIP's, the encoder profiling fakplan reads."""
    vision = text.get("vision_config")
    return (
        model_type in GEMMA3_FAMILIES
        and isinstance(vision, dict)
        and vision.get("model_type") == "siglip_vision_model"
        and towers(text) == ["vision"]
    )


# SigLIP's config defaults where a Gemma 3 config leaves them (transformers
# models/siglip/configuration_siglip.py SiglipVisionConfig), and the embeddings an image
# gives: Gemma3Config's mm_tokens_per_image (models/gemma3/configuration_gemma3.py), 256 in
# every published Gemma 3 config (a top-level key the text config does not carry)
SIGLIP_DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "image_size": 224,
    "patch_size": 16,
}
GEMMA3_IMAGE_TOKENS = 256
MM_LIMIT_DEFAULT = 999  # config/multimodal.py get_limit_per_prompt, 0.19.0


def encoder_profile(
    text: dict[str, Any],
    *,
    batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    pixels_held: bool = True,
) -> tuple[Term, int]:
    """What Gemma 3's encoder profiling leaves held through the text model's profiling run,
    and the encoder phase's own peak as fakplan estimates it (gpu_model_runner.py
    profile_run, v0.19.0: the dummy image batch stays bound until the run returns, and the
    encoder's outputs sit in the encoder cache until its end). The V2 runner from 0.27
    (``pixels_held`` False) batches the images onto the card inside
    ``EncoderRunner.execute_mm_encoder``, which frees them as it returns, and keeps only the
    outputs in its encoder cache (v1/worker/gpu/mm/encoder_runner.py, 0.27.0 and 0.33.0).

    The batch: the encoder budget (max_num_batched_tokens, or one image's tokens where
    more: v1/core/encoder_cache_manager.py compute_mm_encoder_budget) // an image's 256
    tokens, capped by max_num_seqs x the images a prompt holds (min(999, window // 256),
    at least 1: multimodal/encoder_budget.py _get_max_items). Each dummy image is one
    native-size crop (pan-and-scan off, Gemma 3's default: gemma3_mm.py
    get_num_image_tokens), 3 x image_size^2 pixels in the model dtype
    (multimodal/processing/context.py _postprocess_output), and gives 256 embeddings of the
    text width."""
    vision = {**SIGLIP_DEFAULTS, **text["vision_config"]}
    per_item = GEMMA3_IMAGE_TOKENS
    side, patch = int(vision["image_size"]), int(vision["patch_size"])
    v_hidden, v_inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    hidden = int(text["hidden_size"])
    budget = max(batched_tokens, per_item)
    per_prompt = max(1, min(MM_LIMIT_DEFAULT, max_model_len // per_item))
    items = max(1, min(budget // per_item, max_num_seqs * per_prompt))
    pixels = items * 3 * side * side * 2
    outputs = items * per_item * hidden * 2
    held = pixels + outputs if pixels_held else outputs
    patches = items * (side // patch) ** 2
    encoder = pixels + patches * (4 * v_hidden + 2 * v_inter) * 2
    images = f"the dummy images {items} x 3 x {side} x {side} x 2 B = {pixels:,} B"
    what = (
        f"{images} and their encoder outputs"
        if pixels_held
        else f"the encoder outputs (the V2 runner frees {images} once encoded)"
    )
    return (
        Term(
            held,
            f"held through it: {what} {items} x {per_item} x {hidden:,} x 2 B = "
            f"{outputs:,} B ({items} images: the encoder budget {budget:,} // {per_item} "
            f"tokens, at most {max_num_seqs:,} sequences x {per_prompt} a prompt; "
            "pan-and-scan off, Gemma 3's default)",
        ),
        encoder,
    )


def inputs_embeds_buffer(text: dict[str, Any], batched_tokens: int) -> Term:
    """The V2 runner's multimodal input-embedding buffer: ``EncoderRunner`` allocates
    max_num_batched_tokens x the inputs-embeds width in the model dtype once the model is
    loaded (v1/worker/gpu/mm/encoder_runner.py, model_states/interface.py, 0.27.0 and
    0.33.0), so from 0.27 it is consumed memory beyond the weights that a text model's
    measured range does not hold. The width is the text hidden size unless the config
    names a projection (config/model.py get_inputs_embeds_size)."""
    names = ("word_embed_proj_dim", "projection_dim", "projection_size")
    width = next((int(text[n]) for n in names if text.get(n)), int(text["hidden_size"]))
    size = batched_tokens * width * 2
    return Term(
        size,
        f"the V2 runner's multimodal inputs_embeds buffer {batched_tokens:,} x {width:,} x 2 B "
        f"= {size:,} B",
    )


def triton_rows(sms: int, rows: int) -> int:
    """The rows of the sampler's Triton top-k/top-p buffer: the next power of two of its
    programs, min(SMs, rows), at most the SMs (topk_topp_triton.py, 0.19.0 and 0.27.1)."""
    return min(1 << math.ceil(math.log2(min(sms, rows))), sms)


def triton_buffer(
    text: dict[str, Any], *, batched_tokens: int, max_num_seqs: int, sms: int
) -> Term:
    """The V1 sampler's Triton top-k/top-p buffer, float32 rows x vocab. It is cached for
    good (_TRITON_BUFFER_CACHE; its reset_buffer_cache has no caller, 0.27.1), so from 0.27,
    where vLLM prints the peak less what the run left allocated, it is consumed memory."""
    rows = triton_rows(sms, min(max_num_seqs, batched_tokens))
    vocab = int(text["vocab_size"])
    size = rows * vocab * 4
    return Term(
        size,
        f"the sampler's Triton top-k/top-p buffer {rows} x {vocab:,} x 4 B = {size:,} B "
        "(cached for good: v1/sample/ops/topk_topp_triton.py _TRITON_BUFFER_CACHE, 0.27.1)",
    )


def activation_peak(
    text: dict[str, Any],
    model_type: str,
    *,
    tp: int,
    batched_tokens: int,
    max_num_seqs: int,
    sms: int,
    quantized: bool = False,
    floored: bool = True,
    capability: str | None = None,
) -> tuple[Term, int]:
    """The profiling run's torch peak increase on the last PP stage (V1 runner, 16-bit),
    and the top of its range: the caching allocator's spare, or the forward's top where few
    slots let it outgrow the sampler. ``floored``: the low end no lower than the forward's
    least; not from 0.27, where vLLM prints the peak less what the run left allocated and
    the sampler's Triton buffer stays (topk_topp_triton.py _TRITON_BUFFER_CACHE, 0.27.1)."""
    vocab, hidden = int(text["vocab_size"]), int(text["hidden_size"])
    rows = min(max_num_seqs, batched_tokens)
    triton = triton_buffer(text, batched_tokens=batched_tokens, max_num_seqs=max_num_seqs, sms=sms)
    triton_count = triton_rows(sms, rows)
    # the tensors alive at the sampler phase's peak: the 16-bit logits and their three float32
    # companions (14 B a logit) and the Triton buffer; the hidden states and two row copies
    sampler_tensors = [rows * vocab * 2, *[rows * vocab * 4] * 3, triton.bytes]
    state_tensors = [batched_tokens * hidden * 2, *[rows * hidden * 2] * 2]
    sampler, states = sum(sampler_tensors), sum(state_tensors)
    cublas, cublas_most, cublas_why = cublas_workspace(capability)
    total = sampler + states + cublas
    text_out = (
        f"sampler {rows:,} rows x {vocab:,} x 14 B + Triton top-k/top-p buffer "
        f"{triton_count} x {vocab:,} x 4 B = {sampler:,} B; hidden states 2 x {batched_tokens:,} "
        f"x {hidden:,} + 4 x {rows:,} x {hidden:,} = {states:,} B; cuBLAS workspace "
        f"{cublas:,} B ({cublas_why})"
    )
    moe = _moe_workspace(text, model_type, tp, batched_tokens)
    if moe is not None:
        total += moe.bytes
        text_out += f"; {moe.derivation}"
    # each tensor over 1 MiB may be counted with up to 1 MiB of its block left whole
    tensors = [*sampler_tensors, *state_tensors, cublas]
    tensors += [] if moe is None else [moe.bytes // 2] * 2  # its two workspaces
    large = sum(1 for size in tensors if size > ALLOCATOR_SPARE)
    spare = large * ALLOCATOR_SPARE + cublas_most - cublas  # and cuBLAS's most
    spare_text = (
        f"up to {spare:,} B more where the caching allocator leaves a block whole ({large} "
        "tensors over 1 MiB, each counted with up to 1 MiB spare: should_split, "
        "c10/cuda/CUDACachingAllocator.cpp)"
        + (f", or cuBLAS takes its most, {cublas_most:,} B" if cublas_most > cublas else "")
    )
    high, forward_text, excess = _forward_top(text, tp, batched_tokens, moe, model_type, capability)
    floor = forward_floor(text, tp, batched_tokens, quantized) if floored else None
    if high <= total + spare:
        return _floored(
            Term(total, f"{text_out} = {total:,} B, {spare_text}"), floor
        ), total + spare
    # few slots: the sampler is small and the forward's MLP intermediate at
    # max_num_batched_tokens may set the peak (gpu_model_runner.py profile_run runs both)
    return _floored(
        Term(
            total,
            f"{text_out} = {total:,} B, up to the forward's ({forward_text}, + cuBLAS "
            f"{excess.derivation}) = {high:,} B: the sampler phase is checked by public boots "
            "at 256-1,024 slots, where it dominates, the forward by PP stages that run no "
            "sampler; verify reports where the boot fell",
        ),
        floor,
    ), high


def _gpt_oss_forward(
    text: dict[str, Any], tp: int, batched_tokens: int, states: int
) -> tuple[int, str]:
    """gpt-oss's forward as fakplan estimates it: two hidden states beside the monolithic
    Triton MoE's gate_up output and its activation for every routed token (its own
    allocations inside triton_kernel_moe_forward, gone when it returns)."""
    hidden = int(text["hidden_size"])
    top_k = int(text.get("num_experts_per_tok") or text.get("experts_per_token") or 0)
    inter = int(text["intermediate_size"]) // tp
    routed = batched_tokens * top_k * 3 * inter * 2
    return states + routed, (
        f"2 hidden states 2 x 2 x {batched_tokens:,} x {hidden:,} = {states:,} B + the MXFP4 "
        f"experts' gate_up and activation {batched_tokens:,} x top-{top_k} x 3 x {inter:,} x "
        f"2 B = {routed:,} B (the monolithic Triton kernel keeps no workspace)"
    )


def forward_excess(text: dict[str, Any], batched_tokens: int) -> Term:
    """What the forward may take beyond fakplan's estimate: the margin measured in a first
    PP stage's print (``FORWARD_EXCESS_MEASURED``), scaled to this model's hidden states."""
    state = batched_tokens * int(text["hidden_size"])
    size = FORWARD_EXCESS_MEASURED * state // FORWARD_EXCESS_STATE
    return Term(
        size,
        f"+ up to {size:,} B beyond the estimate (what prof-004's first PP stage, which runs "
        f"no sampler, printed beyond it: {FORWARD_EXCESS_MEASURED:,} B at "
        f"{FORWARD_EXCESS_STATE:,} batched tokens x width, scaled to {batched_tokens:,} x "
        f"{int(text['hidden_size']):,})",
    )


def v2_peak_excess(text: dict[str, Any], batched_tokens: int) -> Term:
    """What the V2 runner's printed peak may take beyond fakplan's range: the margin measured
    in public V2 boots (``V2_PEAK_EXCESS_MEASURED``), scaled to this model's hidden states."""
    hidden = int(text["hidden_size"])
    size = -(-V2_PEAK_EXCESS_MEASURED * batched_tokens * hidden // V2_PEAK_EXCESS_STATE)
    return Term(
        size,
        f"+ up to {size:,} B measured beyond this estimate in public V2 boots (prof-020, "
        f"0.27.1: {V2_PEAK_EXCESS_MEASURED:,} B at {V2_PEAK_EXCESS_STATE:,} batched tokens x "
        f"width, scaled to {batched_tokens:,} x {hidden:,}; prof-035, 0.26.0, within it): "
        "torch.compile's first compilation runs in the profiling forward, and a cold compile "
        "cache can take more, which verify reports",
    )


def load_residue(weights: RankWeights, kind: LoadKind) -> RankWeights:
    """The weights a load of ``kind`` printed from 0.20: the count plus what the public boots'
    loads printed beyond it (``LOAD_RESIDUE_MEASURED``), a range."""
    low, high = LOAD_RESIDUE_MEASURED[kind]
    fitted = LOAD_RESIDUE_FIT_SETS[kind]
    return RankWeights(
        weights.bytes + low,
        f"{weights.derivation} + {low:,}..{high:,} B public loads printed beyond the count "
        f"({fitted}; not read)",
        high=weights.top + high,
        measured=True,
    )


def _v2_non_torch(key: str) -> tuple[int, int, str]:
    """The V2 runner's non-torch memory before 0.27: measured at TP 1, borrowed elsewhere."""
    if key in NON_TORCH_V2_MEASURED:
        low, high = NON_TORCH_V2_MEASURED[key]
        why = (
            "measured in public vLLM 0.26.0 V2-runner boots (an A40) at TP 1: "
            f"{low:,}..{high:,} B (no config gives it; the V1 runner's print 0.24-0.27 GiB)"
        )
        return low, high, why
    drop = NON_TORCH_MEASURED["tp1"][0] - NON_TORCH_V2_MEASURED["tp1"][0]
    v1_low, high = NON_TORCH_MEASURED[key]
    why = (
        f"{NON_TORCH_V2_BORROWED}: V1's {v1_low:,}..{high:,} B less {drop:,} B at the low end "
        f"= {v1_low - drop:,}..{high:,} B"
    )
    return v1_low - drop, high, why


def _forward_top(
    text: dict[str, Any],
    tp: int,
    batched_tokens: int,
    moe: Term | None,
    model_type: str,
    capability: str | None = None,
) -> tuple[int, str, Term]:
    """The top of the forward's peak: fakplan's estimate + cuBLAS (its most on the card) +
    the measured margin, with the estimate's derivation and the margin."""
    forward, forward_text = _forward_estimate(text, tp, batched_tokens, moe, model_type)
    excess = forward_excess(text, batched_tokens)
    return forward + cublas_workspace(capability)[1] + excess.bytes, forward_text, excess


def _forward_estimate(
    text: dict[str, Any], tp: int, batched_tokens: int, moe: Term | None, model_type: str
) -> tuple[int, str]:
    """The profiling forward's peak as fakplan estimates it (Inductor decides what coexists):
    the MLP's gate_up and its activation at max_num_batched_tokens beside two hidden
    states, or a mixture's fused_moe workspaces beside them."""
    hidden = int(text["hidden_size"])
    states = 2 * 2 * batched_tokens * hidden
    if model_type == "gpt_oss":
        return _gpt_oss_forward(text, tp, batched_tokens, states)
    if moe is not None:
        return states + moe.bytes, (
            f"2 hidden states 2 x 2 x {batched_tokens:,} x {hidden:,} = {states:,} B + "
            f"{moe.derivation}"
        )
    inter = int(text.get("intermediate_size") or 0) // tp
    mlp = batched_tokens * 3 * inter * 2
    return states + mlp, (
        f"2 hidden states 2 x 2 x {batched_tokens:,} x {hidden:,} = {states:,} B + the MLP "
        f"gate_up and activation {batched_tokens:,} x 3 x {inter:,} x 2 B = {mlp:,} B"
    )


def forward_floor(
    text: dict[str, Any], tp: int, batched_tokens: int, quantized: bool = False
) -> Term | None:
    """The least the profiling forward must hold at once, whatever Inductor fuses: at a gated
    MLP, cuBLAS writes gate_up's output whole (2 x intermediate), the activation kernel
    writes its own (intermediate: a narrower output, so not in place), and the residual
    stream lives across the layer (hidden), all at max_num_batched_tokens rows in 16 bits
    (the dummy run's token count: gpu_model_runner.py _dummy_run, 0.19.0;
    v1/worker/gpu/model_runner.py, 0.33.0). ``quantized``: a quantized checkpoint or
    --quantization, where a fusion pass may write the activation already quantized, so it
    is counted at 1 B. None where the config names routed experts (a mixture's, gpt-oss's:
    their workspaces or kernels are counted instead)."""
    if routed_experts(text) or not text.get("intermediate_size"):
        return None
    hidden, inter = int(text["hidden_size"]), int(text["intermediate_size"]) // tp
    act = 1 if quantized else 2
    size = batched_tokens * ((2 * inter + hidden) * 2 + inter * act)
    return Term(
        size,
        f"the forward's least at its MLP: gate_up's output, its activation and the residual "
        f"stream {batched_tokens:,} x ((2 x {inter:,} + {hidden:,}) x 2 B + {inter:,} x "
        f"{act} B) = {size:,} B, alive at once whatever Inductor fuses (cuBLAS writes "
        "gate_up whole; the activation's output is narrower, so not in place"
        + ("; written quantized where a fusion pass quantizes it, so 1 B" if quantized else "")
        + ")",
    )


def _floored(term: Term, floor: Term | None) -> Term:
    """``term`` raised to the forward's floor where the forward must hold more."""
    if floor is None or floor.bytes <= term.bytes:
        return term
    return Term(
        floor.bytes,
        f"{term.derivation}; at least {floor.derivation}, above that phase's sum",
    )


def activation_peak_v2(
    text: dict[str, Any],
    model_type: str,
    *,
    tp: int,
    batched_tokens: int,
    max_num_seqs: int,
    quantized: bool = False,
    capability: str | None = None,
) -> tuple[Term, int]:
    """The V2 runner's profiling peak as a range: its sampler phase (derived) to the
    forward's estimate, where that is higher."""
    vocab, hidden = int(text["vocab_size"]), int(text["hidden_size"])
    rows = min(max_num_seqs, batched_tokens)
    logits = 2 * rows * vocab
    states = 2 * batched_tokens * hidden + 2 * rows * hidden
    moe = _moe_workspace(text, model_type, tp, batched_tokens)
    cublas, cublas_most, cublas_why = cublas_workspace(capability)
    low = logits + states + cublas + (moe.bytes if moe else 0)
    top, forward_text, excess = _forward_top(text, tp, batched_tokens, moe, model_type, capability)
    high = max(low + cublas_most - cublas, top)
    derivation = (
        f"V2 runner: sampler phase 16-bit logits {rows:,} x {vocab:,} x 2 B = {logits:,} B + "
        f"hidden states 2 x {batched_tokens:,} x {hidden:,} + 2 x {rows:,} x {hidden:,} = "
        f"{states:,} B + cuBLAS workspace {cublas:,} B ({cublas_why})"
        + (f" + {moe.derivation}" if moe else "")
        + f" = {low:,} B, up to the forward's ({forward_text}, + cuBLAS {excess.derivation}; "
        f"the model's forward, whichever runner calls it) = {high:,} B (the dummy sampler has "
        "no request to process and no top-k/top-p: v1/worker/gpu/model_runner.py "
        "_dummy_sampler_run, sample/sampler.py)"
    )
    floor = forward_floor(text, tp, batched_tokens, quantized)
    return _floored(Term(low, derivation), floor), high


def vllm_floor(
    text: dict[str, Any],
    model_type: str,
    *,
    version: str,
    tp: int,
    pp: int,
    card_total: int,
    utilization: float,
    batched_tokens: int,
    max_num_seqs: int,
    sms: int,
    served: str = "bf16",
    quantization: str | None = None,
    hybrid: bool = False,
    spec_tokens: int = 0,
    capability: str | None = None,
    language_model_only: bool = False,
    max_model_len: int | None = None,
    enforce_eager: bool = False,
    runner: Runner | None = None,
) -> VllmFloor | Unknown:
    """The pool vLLM sizes for itself on one rank, or why fakplan cannot say;
    ``capability``: the card's, where the weights' kernel depends on it;
    ``language_model_only``: a multimodal model served text-only (no tower loaded, no
    encoder profiled); ``enforce_eager``: --enforce-eager, so no graphs and no estimate;
    ``runner``: the one VLLM_USE_V2_MODEL_RUNNER sets (None: the release's rule)."""
    # a release whose profiler is not read still gets its weights: the modules counted
    # (0.19.0's) are what "Model loading took" measures in other releases too
    unread = _release_read(version)
    if unread and pp != 1:
        return Unknown(unread)
    if model_type in GEMMA3_FAMILIES:
        text = {**GEMMA3_DEFAULTS, **text}  # what Gemma3TextConfig fills (vocab_size, ...)
    # at PP > 1 the last stage's: it holds the LM head and runs the sampler
    weights = vllm_rank_weights(
        text, model_type, tp=tp, pp=pp, stage=pp - 1, served=served,
        quantization=quantization, cuda_blocks=True, capability=capability, sms=sms,
        language_model_only=language_model_only, batched_tokens=batched_tokens,
    )  # fmt: skip
    if pp != 1 and weights is not None:  # where they are not, the weights' refusal says why
        pipeline = _pipeline_unread(
            text, model_type, version, tp, pp, spec_tokens, language_model_only, served
        )
        if pipeline:
            return _unknown(pipeline, weights)
    if unread:
        return Unknown(unread) if weights is None else _unknown(unread, weights)
    if weights is not None and model_type in MLA_FAMILIES:
        low, high, what = mla_import_workspaces(version, capability)
        ranged = weights.high is not None or high != low
        weights = RankWeights(
            weights.bytes + low,
            f"{weights.derivation} + {what}",
            high=weights.top + high if ranged else None,
        )
    if weights is None:
        return Unknown(
            weights_refusal(
                text,
                model_type,
                quantization,
                tp,
                pp,
                capability,
                served=served,
                language_model_only=language_model_only,
                batched_tokens=batched_tokens,
                sms=sms,
            )
        )
    if served not in {"bf16", "fp16"}:
        return _unknown(f"a {served} served model: its sampler peak is not read", weights)
    if spec_tokens:
        return _unknown(
            "a speculative draft: the drafter's share of the profiling run and of the CUDA "
            "graphs is not read",
            weights,
        )
    key = f"tp{tp}"
    release = parse_version(version)[:2]
    consumed_era = release >= CONSUMED_ERA
    scan = model_type in (*GDN_FAMILIES, *MAMBA_FAMILIES)
    consumed = consumed_beyond_weights(tp, scan=scan) if consumed_era else None
    if consumed_era and consumed is None:
        return _unknown(
            f"TP {tp}: no public boot measures the memory a 0.27+ worker consumes beyond its "
            "weights there, nor a 0.19.0 boot the non-torch memory it could be borrowed from",
            weights,
        )
    if not consumed_era and key not in NON_TORCH_MEASURED:
        return _unknown(f"TP {tp}: no public boot measures vLLM's non-torch memory there", weights)
    unread_peak = _peak_unread(text, model_type, language_model_only, capability, consumed_era)
    if unread_peak:
        return _unknown(
            f"{model_type}: weights counted ({bytes_span(weights.bytes, weights.high)} per "
            f"rank), but {unread_peak}",
            weights,
        )
    traits = ModelTraits(
        architectures=tuple(str(a) for a in text.get("architectures") or ()),
        moe=routed_experts(text) > 0,
        hybrid=hybrid,
        quantized="quantization_config" in text,
    )
    if runner == "v2" and release < GRAPHS_SUBTRACTED:
        return _unknown(
            f"{RUNNER_ENV}=1 on vllm {version}: the V2 runner's profile is read from 0.20",
            weights,
        )
    if runner is not None:
        choice = RunnerChoice(
            runner,
            f"{RUNNER_ENV}={int(runner == 'v2')}: set, it decides the runner "
            "(config/vllm.py use_v2_model_runner, 0.26.0 and 0.27.1; envs.py, 0.21.0)",
        )
    elif release >= GRAPHS_SUBTRACTED:
        choice = default_runner(version, traits)
    else:
        choice = RunnerChoice("v1", f"V1 before 0.20 ({RUNNER_ENV} unset)")
    if choice.runner == "v2" and not consumed_era:
        weights = load_residue(weights, "v2-profile-era")
    elif release >= GRAPHS_SUBTRACTED:
        weights = load_residue(weights, "from-0.20")
    requested = math.ceil(card_total * utilization)
    request = Term(requested, f"ceil({card_total:,} B x {utilization}) = {requested:,} B")
    activation_high = None
    quantized = "quantization_config" in text or quantization is not None
    if choice.runner == "v2":
        activation, activation_high = activation_peak_v2(
            text, model_type, tp=tp, batched_tokens=batched_tokens, max_num_seqs=max_num_seqs,
            quantized=quantized, capability=capability,
        )  # fmt: skip
        if not consumed_era:
            activation = Term(
                activation.bytes,
                f"{activation.derivation}; the public 0.26.0 V2 boots (prof-035, prof-036: an "
                "A40, 2,048 batched tokens) printed 1.01 GiB, above this range without the "
                "compile margin below, which they and a 0.27.1 boot fitted (in sample: "
                "docs/vllm-memory.md)",
            )
    else:
        activation, activation_high = activation_peak(
            text, model_type, tp=tp, batched_tokens=batched_tokens, max_num_seqs=max_num_seqs,
            sms=sms, quantized=quantized, floored=not consumed_era, capability=capability,
        )  # fmt: skip
    if pp != 1:
        received = received_tensors(text, model_type, batched_tokens)
        activation = Term(
            activation.bytes + received.bytes,
            f"{activation.derivation}; + {received.derivation} = "
            f"{activation.bytes + received.bytes:,} B",
        )
        if activation_high is not None:
            activation_high += received.bytes
    encoder = siglip_tower(text, model_type) and not language_model_only
    embeds: Term | None = None
    if encoder and choice.runner == "v2" and not consumed_era:
        # the V2 runner's profile_run runs no encoder before 0.27
        # (v1/worker/gpu/model_runner.py, 0.25.0 and 0.26.0)
        encoder = False
        activation = Term(
            activation.bytes,
            f"{activation.derivation}; the V2 runner profiles no vision encoder before 0.27 "
            "(v1/worker/gpu/model_runner.py profile_run, 0.25.0 and 0.26.0)",
        )
    if encoder and (max_model_len is None or (choice.runner == "v1" and consumed_era)):
        return _unknown(
            f"{model_type}: weights counted ({bytes_span(weights.bytes, weights.high)} per "
            "rank), but the profiling run of its vision encoder is read on the V1 runner "
            "before 0.27 and on the V2 runner (no encoder pass in 0.25-0.26, one from 0.27) "
            "only" + (", and with the window stated" if max_model_len is None else ""),
            weights,
        )
    if encoder:
        assert max_model_len is not None
        held, encoder_peak = encoder_profile(
            text, batched_tokens=batched_tokens, max_num_seqs=max_num_seqs,
            max_model_len=max_model_len, pixels_held=choice.runner == "v1",
        )  # fmt: skip
        if choice.runner == "v2":
            embeds = inputs_embeds_buffer(text, batched_tokens)
        total = activation.bytes + held.bytes
        top = (activation_high or activation.bytes) + held.bytes
        text_out = f"{activation.derivation}; + {held.derivation} = {total:,} B"
        if encoder_peak > top:
            text_out += (
                f", up to the encoder phase's estimate {encoder_peak:,} B (the images beside "
                "four hidden states and two MLP intermediates of every patch): outside the "
                "measured range, as the two public boots it was checked on (V1 runner, 0.19.0) "
                "peaked in the text phase"
            )
            top = encoder_peak
        activation = Term(total, text_out)
        activation_high = top if top > total else None
    graphs: tuple[int, int] | None = None
    graph_text = "not subtracted before 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)"
    if release >= GRAPHS_SUBTRACTED:
        if enforce_eager:
            graph_text = EAGER_GRAPHS
        elif not graphs_estimated(version, choice.runner):
            graph_text = f"0: the V2 runner estimates no graphs before 0.29 ({choice.why})"
        else:
            count = capture_sizes(max_num_seqs, batched_tokens)
            found = graph_estimate(
                tp,
                count,
                int(text["hidden_size"]),
                layers=int(text["num_hidden_layers"]) if text.get("num_hidden_layers") else None,
                mla=model_type in MLA_FAMILIES,
            )
            if found is None:
                return _unknown(
                    f"TP {tp}: no public boot measures vLLM's CUDA-graph estimate", weights
                )
            graphs, graph_text = (found[0], found[1]), found[2]
            if choice.runner == "v2":
                graph_text = f"{V2_GRAPHS_BORROWED} ({choice.why}): {graph_text}"
    non_torch_text = ""
    if consumed is not None:
        low, high, non_torch_text = consumed
    elif pp != 1:
        low, high = NON_TORCH_PP_MEASURED[key]
    elif choice.runner == "v2":
        low, high, non_torch_text = _v2_non_torch(key)
    else:
        low, high = NON_TORCH_MEASURED[key]
    # the V2 runner's compile margin: on the peak before 0.27, in the transient peak from 0.27
    excess = v2_peak_excess(text, batched_tokens) if choice.runner == "v2" else None
    if excess is not None and not consumed_era:
        activation_high = (activation_high or activation.bytes) + excess.bytes
        activation = Term(activation.bytes, f"{activation.derivation}; {excess.derivation}")
    persistent: Term | None = None
    folded: tuple[int, int] | None = None
    if consumed_era:
        # the fused-MoE workspaces are kept (v1/worker/workspace.py): from 0.27 they are in
        # the consumed memory, not in the transient peak
        kept: list[Term | None] = [_moe_workspace(text, model_type, tp, batched_tokens)]
        if choice.runner == "v1":
            kept.append(
                triton_buffer(
                    text, batched_tokens=batched_tokens, max_num_seqs=max_num_seqs, sms=sms
                )
            )
        allocated = [term for term in kept if term is not None]
        if allocated:
            persistent = Term(
                sum(term.bytes for term in allocated),
                " + ".join(term.derivation for term in allocated),
            )
        if embeds is not None:  # allocated after the load, never in the transient peak
            low, high = low + embeds.bytes, high + embeds.bytes
        if persistent is not None:
            low, high = low + persistent.bytes, high + persistent.bytes
            activation = Term(
                activation.bytes - persistent.bytes,
                f"{activation.derivation}; less the {persistent.bytes:,} B that stay "
                "allocated (the fused-MoE workspaces, the sampler's Triton buffer) and so are "
                "consumed memory",
            )
            if activation_high is not None:
                activation_high -= persistent.bytes
        activation, activation_high = _transient_peak(
            activation, activation_high, choice, graphs, excess
        )
        folded, graphs = graphs, None
    a_low, a_high = activation.bytes, activation_high or activation.bytes
    g_low, g_high = graphs or (0, 0)
    base = requested - weights.bytes
    w_spread = weights.top - weights.bytes
    pool = (base - w_spread - a_high - high - g_high, base - a_low - low - g_low)
    stages = ""
    if pp != 1:
        # _pipeline_unread admits 0.17-0.19 only: no graph term, no consumed era, no MLA
        # import workspaces an earlier stage's weights would need too
        assert graphs is None and not consumed_era and model_type not in MLA_FAMILIES
        earlier = _earlier_stages(
            text, model_type, tp=tp, pp=pp, served=served, quantization=quantization,
            capability=capability, sms=sms, batched_tokens=batched_tokens, requested=requested,
            non_torch_high=high, language_model_only=language_model_only,
        )  # fmt: skip
        if isinstance(earlier, str):
            return _unknown(earlier, weights)
        binding = [(s, floor) for s, floor, _ in earlier if floor < pool[1]]
        if binding:
            stage, floor = binding[0]
            return _unknown(
                f"PP {pp}: stage {stage}'s pool may be the smallest (down to {floor:,} B, "
                f"against the last stage's {pool[0]:,}..{pool[1]:,} B), and a stage without "
                "the sampler peaks in its forward, which fakplan estimates, not derives",
                weights,
            )
        stages = (
            f"the last of {pp} stages binds (the engine keeps the smallest block count over "
            "its workers, and stages of equal layers have blocks of equal size): every "
            "earlier stage leaves at least as much under fakplan's forward bound, "
            + "; ".join(text_ for _, _, text_ in earlier)
        )
    return VllmFloor(
        requested=request,
        weights=weights,
        activation=activation,
        non_torch=(low, high),
        pool=pool,
        cuda_graph=graphs,
        graph_derivation=graph_text,
        activation_high=activation_high,
        runner=choice.runner,
        runner_rule=choice.why,
        era="consumed" if consumed_era else "profile",
        persistent=persistent,
        inputs_embeds=embeds,
        graph_in_activation=folded,
        stages=stages,
        non_torch_derivation=non_torch_text,
    )


def _pipeline_unread(
    text: dict[str, Any],
    model_type: str,
    version: str,
    tp: int,
    pp: int,
    spec_tokens: int,
    language_model_only: bool,
    served: str,
) -> str:
    """Why a PP > 1 pool is not predicted ('' where it is): read for 0.17-0.19 at TP 1 (the
    releases and the parallelism whose non-torch memory public boots measure at PP > 1),
    with the layers split evenly. The split is get_pp_indices' default (VLLM_PP_LAYER_PARTITION
    unset); the engine keeps the smallest block count over its workers, and a stage's block
    is its own layers' page, so stages of unequal layers would be compared in blocks, which
    is not read."""
    if parse_version(version)[:2] >= GRAPHS_SUBTRACTED:
        return (
            f"PP > 1 on vllm {version}: no public boot of 0.20 or later measures a stage's "
            "non-torch memory, and from 0.20 each stage's CUDA-graph estimate is subtracted "
            "(read for 0.17-0.19)"
        )
    layers = int(text.get("num_hidden_layers") or 0)
    if layers < pp or layers % pp:
        return (
            f"PP {pp}: {layers} layers do not split evenly over {pp} stages; the engine keeps "
            "the smallest block count over its workers, and a stage's block is its own "
            "layers' page, so stages of unequal layers are not compared yet"
        )
    if f"tp{tp}" not in NON_TORCH_PP_MEASURED:
        return f"TP {tp} x PP > 1: no public boot measures vLLM's non-torch memory there"
    if model_type not in PP_RECEIVED_TENSORS:
        return (
            f"PP > 1: the activations a later stage of {model_type} receives "
            "(make_empty_intermediate_tensors) are not read"
        )
    if towers(text) and not language_model_only:
        return "PP > 1 with a vision or audio tower: the stages' encoder profiling is not read"
    if spec_tokens or served not in {"bf16", "fp16"}:
        return "PP > 1: read for a 16-bit served model without a speculative draft only"
    return ""


def received_tensors(text: dict[str, Any], model_type: str, batched_tokens: int) -> Term:
    """What a later PP stage keeps for the activations it receives (``PP_RECEIVED_TENSORS``),
    in the model dtype (16-bit: ``_pipeline_unread`` admits no other)."""
    count = PP_RECEIVED_TENSORS[model_type]
    hidden = int(text["hidden_size"])
    size = count * batched_tokens * hidden * 2
    return Term(
        size,
        f"the {count} received activation tensor{'s' if count > 1 else ''} a later stage "
        f"keeps, {count} x {batched_tokens:,} x {hidden:,} x 2 B = {size:,} B "
        "(make_empty_intermediate_tensors, gpu_model_runner.py _dummy_run, 0.19.0)",
    )


def _earlier_stages(
    text: dict[str, Any],
    model_type: str,
    *,
    tp: int,
    pp: int,
    served: str,
    quantization: str | None,
    capability: str | None,
    sms: int,
    batched_tokens: int,
    requested: int,
    non_torch_high: int,
    language_model_only: bool,
) -> list[tuple[int, int, str]] | str:
    """Each stage before the last: the least pool it can leave, as (stage, bytes, why), or
    why a stage's weights are not counted. It runs no sampler, so its peak is its forward's:
    fakplan's estimate, up to the margin the fit set's first stage printed beyond it
    (``forward_excess``), + what a stage after the first keeps for the activations it
    receives (fresh 2 MiB-rounded segments: no spare)."""
    moe = _moe_workspace(text, model_type, tp, batched_tokens)
    peak, _, margin = _forward_top(text, tp, batched_tokens, moe, model_type, capability)
    excess, estimate = margin.bytes, peak - margin.bytes
    received = received_tensors(text, model_type, batched_tokens).bytes
    out = []
    for stage in range(pp - 1):
        weights = vllm_rank_weights(
            text, model_type, tp=tp, pp=pp, stage=stage, served=served,
            quantization=quantization, cuda_blocks=True, capability=capability, sms=sms,
            language_model_only=language_model_only, batched_tokens=batched_tokens,
        )  # fmt: skip
        if weights is None:
            return f"PP {pp}: stage {stage}'s weights are not counted"
        stage_peak = peak + (received if stage else 0)
        floor = requested - weights.top - stage_peak - non_torch_high
        out.append(
            (
                stage,
                floor,
                f"stage {stage}: {requested:,} - weights {weights.top:,} - forward peak at "
                f"most {stage_peak:,} (fakplan's estimate {estimate:,} + "
                f"{excess:,} B, what the fit set's first stage printed beyond it, scaled"
                f"{' + the received tensors ' + format(received, ',') if stage else ''}) "
                f"- non-torch {non_torch_high:,} = {floor:,} B",
            )
        )
    return out


def _unknown(reason: str, weights: RankWeights) -> Unknown:
    """Why the pool is not predicted, with the weights counted before it stopped."""
    return Unknown(reason, weights.bytes, weights.high)


def _transient_peak(
    peak: Term,
    peak_high: int | None,
    choice: RunnerChoice,
    graphs: tuple[int, int] | None,
    excess: Term | None,
) -> tuple[Term, int | None]:
    """0.27 on: what vLLM prints as "peak activation", the profiling run's transient peak
    (its torch peak less what it left allocated, utils/mem_utils.py, 0.27.1) + the graph
    estimate it subtracts (gpu_worker.py:526-529, 0.27.1), as a range. fakplan's peak counts
    what the run allocates, the top of that; the V2 runner's is widened by ``excess``, what
    its public boots printed beyond it (torch.compile's first compilation runs in the same
    forward)."""
    high = peak_high or peak.bytes
    text = peak.derivation
    if excess is not None:
        high += excess.bytes
        text += f"; {excess.derivation}"
    else:
        text += (
            "; the V1 runner's transient peak at 0.27+ is checked by one public boot (prof-027, "
            "a mixture at 32 slots: 0.76 GiB printed with its graph estimate, inside once the "
            "forward's margin measured in a first PP stage is taken, above the sampler phase "
            "alone); verify says where a boot fell"
        )
    low = peak.bytes
    if graphs is not None:
        low, high = low + graphs[0], high + graphs[1]
        text += f"; + the CUDA-graph estimate {graphs[0]:,}..{graphs[1]:,} B" + (
            f" ({V2_GRAPHS_BORROWED})" if choice.runner == "v2" else ""
        )
    return Term(low, f"{text} = {low:,}..{high:,} B"), high


# vllm serve's defaults when neither is stated (engine/arg_utils.py get_batch_defaults,
# 0.12-0.33, by the card's total): from 0.28 a card of 160 GiB or more takes 16,384 tokens
# and 1,024 sequences (arg_utils.py:2582, 0.28); a card of 70 GiB or more whose name holds
# no "a100" (0.33: and not a GB10, compute capability 12.1) 8,192 and 1,024; any other
# 2,048 and 256 (an A100 80GB takes the small ones: "Setting large
# `max_num_batched_tokens` for A100 reduces throughput", 0.21.0 and 0.27.1)
BIG_CARD = 70 * GIB
HUGE_CARD = 160 * GIB


def serve_defaults(
    card_total: int,
    device_name: str | None = None,
    version: str = "0.19.0",
    capability: str | None = None,
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vllm serve takes when neither is set; a card
    whose name is not known is taken as not an A100."""
    release = parse_version(version)[:2]
    name = (device_name or "").lower()
    if release >= (0, 28) and card_total >= HUGE_CARD:
        return 16384, 1024
    gb10 = release >= (0, 33) and ("gb10" in name or capability == "12.1")
    big = card_total >= BIG_CARD and "a100" not in name and not gb10
    return (8192, 1024) if big else (2048, 256)


def floor_for(
    query: KvQuery, *, card_total: int, utilization: float, sms: int, max_num_seqs: int | None
) -> VllmFloor | Unknown:
    """The floor of a ``fakplan kv`` query (its model's config, release, TP, PP, dtype)."""
    g = query.geometry
    if g.text_config is None:
        return Unknown(f"{g.source}: no config.json to count the weights from")
    if query.engine_version is None:
        return Unknown("state --engine-version: the memory profiler is read for 0.17-0.33")
    tokens, seqs = serve_defaults(
        card_total, query.device_name, query.engine_version, query.capability
    )
    served, _ = served_dtype(query, DOWNCAST)
    found = vllm_floor(
        g.text_config,
        g.architecture,
        version=query.engine_version,
        tp=query.tp,
        pp=query.pp,
        card_total=card_total,
        utilization=utilization,
        batched_tokens=query.max_num_batched_tokens or tokens,
        max_num_seqs=max_num_seqs or seqs,
        sms=sms,
        served=served,
        quantization=query.quantization,
        hybrid=g.is_hybrid,
        spec_tokens=query.spec_tokens,
        capability=query.capability,
        language_model_only=query.language_model_only,
        max_model_len=query.window,
        enforce_eager=query.enforce_eager,
        runner=query.model_runner,
    )
    if isinstance(found, Unknown) and found.weights is not None and query.spec_tokens:
        return _with_draft_weights(found, query, served)
    return found


def _with_draft_weights(found: Unknown, query: KvQuery, served: str) -> Unknown:
    """A speculative boot's weights: vLLM loads the drafter inside the same memory profile
    as the target (gpu_model_runner.py load_model, 0.19.0), so "Model loading took" holds
    both. A draft_model's are a whole model's, sharded as the target's; an EAGLE head's
    share the target's embedding or head by its checkpoint, which is not read."""
    draft = query.draft
    method = (query.spec_method or "mtp").lower()
    if draft is None or method != "draft_model" or draft.text_config is None:
        return Unknown(
            f"{found.reason}; the weights are the target's alone ({method}'s own tensors are "
            "not counted)",
            found.weights,
            found.weights_high,
        )
    counted = vllm_rank_weights(draft.text_config, draft.architecture, tp=query.tp, served=served)
    if counted is None or found.weights is None:
        return found
    return Unknown(
        f"{found.reason}; the weights are the target's {found.weights:,} B and the draft "
        f"model's {counted.bytes:,} B ({counted.derivation})",
        found.weights + counted.bytes,
        None
        if found.weights_high is None and counted.high is None
        else (found.weights_high or found.weights) + counted.top,
    )
