"""A shape's pool as SGLang sizes it from --mem-fraction-static: the terms, as predictions.

SGLang measures the memory free before its weights load (``pre``, after torch.distributed
is up) and, once they are loaded, the memory free then (``after``); the pool is what is
left above ``1 - fraction`` of ``pre``, in GiB floats:

    rest = after - pre x (1 - fraction);  tokens = int(rest x 2**30 // cell) // page x page

(read in v0.4.6.post5 ``model_runner.py`` profile_max_num_token:816-819, v0.5.2
``model_runner.py``:1123-1132 and :1297-1300, v0.5.23 ``mem_cache/kv_cache_configurator.py``
_profile_available_bytes:2990-3058 with ``pool_configurator.py``:637-646; the three agree
for a text model with no draft and no Mamba state). With ``pre = total - in use`` and
``after = pre - loaded``, the pool is ``fraction x total - fraction x in use - loaded``:

- ``loaded``: the weights one rank holds (the parameters, sharded as vLLM shards them,
  SGLang's layers being ported from it: vocab padded to 64, ``DEFAULT_VOCAB_PADDING_SIZE``
  in layers/vocab_parallel_embedding.py) plus the rotary cos/sin cache, which SGLang
  keeps in float32 on CUDA ("cache needs to be in FP32 for numerical stability",
  layers/rotary_embedding.py:82-84 at v0.4.6.post5, :100-102 at v0.5.2,
  rotary_embedding/base.py:116-120 at v0.5.23), plus what the load itself leaves resident
  (kernels loaded on first use): measured, as no config gives it;
- ``in use`` before the weights: the CUDA context and torch.distributed: measured.

Refused with the reason (never guessed): multimodal, hybrid and quantized checkpoints,
whose weights are not counted; a draft model; PP > 1, or a TP but 1, 2, 4 and 8 (TP > 1
takes one range borrowed across them, ``in_use_measured``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fakplan.engines.served import served_dtype
from fakplan.engines.sglang.rules import NO_KV_METHODS
from fakplan.engines.weights import vllm_rank_weights
from fakplan.sizing import EngineSizing, SizedTerm, SizingUnknown

if TYPE_CHECKING:
    from fakplan.engines.served import Downcast
    from fakplan.kv import KvQuery

GIB = 1 << 30
FLAG = "--mem-fraction-static"
FIELD = "mem_fraction_static"
REFUSAL = (
    'SGLang refuses to boot: "Not enough memory. Please try to increase --mem-fraction-static"'
)
ROPE_BYTES = 4  # float32 on CUDA in every read release


def _gib_span(low: float, high: float) -> tuple[int, int]:
    return math.floor(low * GIB), math.ceil(high * GIB)


def profiled_tokens(
    free_before_gib: float, free_after_gib: float, fraction: float, cell: int, page: int = 1
) -> int:
    """The tokens SGLang sizes from what it measured, in its own float GiB arithmetic."""
    rest = free_after_gib - free_before_gib * (1 - fraction)
    return int(rest * GIB // cell) // page * page


# What public boots measured (tests/data/public/sizing/sglang-boots.yaml): two TP 1 boots
# on 80 GB cards of SGLang's own testing (its docs CI; PR 4760's FA3 test, Hopper only),
# whose total CUDA reports as 79.19 GiB (as vLLM prints it on an H100 80GB: "Requested
# memory: 0.950000 (util), 75.23 GiB"), printed with two decimals (+- 0.005):
# free before the weights 78.81 GiB (docs) and 63.48 + 15.11 = 78.59 GiB (PR 4760).
IN_USE_MEASURED: dict[int, tuple[tuple[int, int], str]] = {
    1: (
        _gib_span(79.185 - 78.82, 79.195 - 78.58),
        "79.19 GiB (CUDA's total of an 80 GB card) less the 78.59..78.81 GiB free before "
        "the weights in two public TP 1 boots (SGLang's docs CI; PR 4760)",
    ),
}
# At TP > 1 the collectives take memory before the weights too ("Init torch distributed
# ends. mem usage", tests/data/public/sizing/sglang-collectives.yaml): 0.13 GiB on four
# PCIe-only L4s (no custom all-reduce), whose 22.03 GiB total less the 21.63 GiB free before
# the weights leaves 0.39..0.41 GiB in use, 0.255 GiB at the least beside their collectives'
# share (a CUDA context that small); up to 2.01 GiB on eight ranks of PR 11716. One range
# stands for TP 2, 4 and 8 (borrowed across TPs and cards, and said so): from that least
# context, as collectives may take next to nothing, to the most in use at TP 1 plus the most
# the collectives took at any TP (an NVSwitch machine's buffers are the larger). The public
# TP > 1 boots docs/engines.md lists (0.33 to 2.52 GiB in use) all fall inside.
_COLLECTIVES_TOP = round(2.015 * GIB)
_LEAST_CONTEXT = math.floor((22.025 - 21.635 - 0.135) * GIB)
IN_USE_TP_ABOVE_ONE: tuple[tuple[int, int], str] = (
    (_LEAST_CONTEXT, IN_USE_MEASURED[1][0][1] + _COLLECTIVES_TOP),
    "from the least CUDA context measured beside the collectives (four PCIe-only L4s at TP "
    "4: 22.03 GiB total less 21.63 free, less the 0.13 their collectives took) to the most "
    f"in use at TP 1 ({IN_USE_MEASURED[1][0][1]:,} B) plus the most the collectives took at "
    "any TP > 1 (2.01 GiB on eight ranks, sgl-project/sglang#11716): borrowed across TPs "
    "and cards, as no public boot gives both figures at one TP on an NVSwitch machine",
)


def in_use_measured(tp: int) -> tuple[tuple[int, int], str] | None:
    """The memory in use before the weights at this TP (a range, whence), or None."""
    if tp in IN_USE_MEASURED:
        return IN_USE_MEASURED[tp]
    return IN_USE_TP_ABOVE_ONE if tp in (2, 4, 8) else None


# The same two boots, Llama-3.1-8B-Instruct: mem usage 15.11 GiB (PR 4760) and
# 78.81 - 63.72 = 15.09 GiB (docs), less the 8,030,261,248 parameters x 2 B and the
# float32 rotary cache 131,072 x 128 x 4 B = 16,127,631,360 B counted
_COUNTED_LLAMA_8B = 8_030_261_248 * 2 + 131_072 * 128 * ROPE_BYTES
LOAD_RESIDUE_MEASURED: tuple[tuple[int, int], str] = (
    (math.floor(15.08 * GIB) - _COUNTED_LLAMA_8B, math.ceil(15.115 * GIB) - _COUNTED_LLAMA_8B),
    "what SGLang's mem usage (15.09..15.11 GiB in two public boots of "
    "Llama-3.1-8B-Instruct) holds beyond the 16,127,631,360 B counted: kernels loaded on "
    "first use",
)


def sglang_sizing(
    query: KvQuery,
    fraction: float,
    total: int,
    total_text: str,
    downcast: Downcast,
) -> EngineSizing | SizingUnknown:
    """The pool one rank of SGLang sizes at ``fraction`` of a card whose CUDA total is
    ``total``; or why fakplan cannot say (the reason, never a guess)."""
    if query.spec_tokens and (query.spec_method or "").lower() not in NO_KV_METHODS:
        return SizingUnknown(
            "a speculative draft's weights and pool share the fraction (v0.5.23 charges "
            "its pool at the target's per-layer cell after loading both models; v0.5.2 "
            "reserved 2 GB and raised the count), which is not predicted"
        )
    if query.pp > 1:
        return SizingUnknown("no public boot measures the memory in use at PP > 1")
    in_use = in_use_measured(query.tp)
    if in_use is None:
        return SizingUnknown(
            f"the memory in use before the weights (CUDA context, torch.distributed, NCCL) "
            f"is measured at TP 1, 2, 4 and 8 only, not TP {query.tp}"
        )
    g = query.geometry
    if g.text_config is None:
        return SizingUnknown(f"{g.source}: no config.json to count the weights from")
    served, _ = served_dtype(query, downcast)
    # a quantized checkpoint's layout is read for vLLM on a GPU only
    weights = (
        None
        if "quantization_config" in g.text_config
        else vllm_rank_weights(
            g.text_config, g.architecture, tp=query.tp, served=served, rope_bytes=ROPE_BYTES
        )
    )
    if weights is None:
        return SizingUnknown(
            f"{g.architecture}: its weights are not counted from a config (fakplan counts "
            "the plain dense and MoE decoders in 16 bits)"
        )
    (use_low, use_high), use_source = in_use
    (residue_low, residue_high), residue_source = LOAD_RESIDUE_MEASURED
    requested = math.floor(total * fraction)
    terms = (
        SizedTerm(
            "weights",
            "the weights one rank loads (SGLang's mem usage)",
            weights.bytes + residue_low,
            weights.bytes + residue_high,
            f"{weights.derivation}; + what the load leaves resident, {residue_low:,}.."
            f"{residue_high:,} B ({residue_source})",
            measured=True,
        ),
        SizedTerm(
            "memory-in-use",
            "memory in use before the weights load (CUDA context, torch.distributed)",
            use_low,
            use_high,
            f"{'measured' if query.tp == 1 else 'borrowed'}: {use_source}; no config gives it",
            measured=True,
            scaled=True,
        ),
    )
    return EngineSizing(
        flag=FLAG,
        field=FIELD,
        refusal=REFUSAL,
        fraction=fraction,
        total_bytes=total,
        total_derivation=total_text,
        requested_bytes=requested,
        requested_derivation=(
            f"floor({total:,} B x {fraction:g}) = {requested:,} B: the fraction of the card "
            "SGLang keeps for weights and pool (it keeps 1 - fraction of what is free before "
            "the weights, so what is in use then costs the pool the fraction of it)"
        ),
        terms=terms,
        weights_bytes=weights.bytes + residue_high,
    )
