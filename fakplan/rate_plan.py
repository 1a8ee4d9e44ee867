"""The rates a plan predicts before boot: the inputs ``fakplan.rates`` needs, read from
the shape, its model and its figures, and the record plan.json carries.

What is exact and what is measured: the bytes a step reads (weights per rank from the
checkpoint or GGUF, KV from the contract) and the FLOPs a prompt costs are derived;
the card's bandwidth and peak are the vendor's (``fakplan.cards``) or the operator's
measurement (``card.bandwidth``); the efficiency is a band measured from public runs
(``Engine.decode_bands``). Where an input is missing the rate is not predicted and
``not_predicted`` says which input and how to give it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from fakplan.cards import CardSku, card_sku
from fakplan.engines import ENGINES, Engine, ModelledEngine, setup_of
from fakplan.figures import Figures
from fakplan.geometry import Geometry
from fakplan.geometry.model import LayerKind
from fakplan.geometry.params import moe_layout
from fakplan.rates import (
    DecodeInputs,
    EfficiencyBand,
    Experts,
    PrefillInputs,
    RatePoint,
    decode_curve,
    decode_point,
    prefill_rate,
)
from fakplan.shape import LoadedShape
from fakplan.units import human

# the decode probe's run: one session, a prompt of a few hundred tokens and 512 generated
PROBE_CONTEXT = 1024
# the decode-load probe's run: every slot from window - 512 - 16 tokens to the window
LOAD_GENERATED = 512 + 16
# the prefill probe's prompt: the window less the tokens it asks for (probes/prefill_rate)
PREFILL_PROBE_GEN = 16


class BandRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    high: float
    fit: tuple[str, ...]
    source: str
    borrowed: str | None = None

    @classmethod
    def of(cls, band: EfficiencyBand, borrowed: str | None = None) -> BandRecord:
        return cls(
            low=round(band.low, 4),
            high=round(band.high, 4),
            fit=band.fit,
            source=band.source,
            borrowed=borrowed,
        )


class DecodeRecord(BaseModel):
    """Decode per rank: what a step reads, the band, and the rate over sessions and context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band: BandRecord
    weights_bytes_per_step: int
    experts: dict[str, int] | None
    kv_bytes_per_token: float
    kv_bytes_per_seq: int
    all_reduce: str | None
    one_session: dict[str, Any]  # at the decode probe's context: what the probe closes
    worst_case: dict[str, Any]  # every slot at the full window
    # every slot over the decode-load probe's run, its context growing to the window
    at_window: dict[str, Any]
    curve: tuple[dict[str, Any], ...]
    derivation: str


class PrefillRecord(BaseModel):
    """Prefill of one window-sized prompt: FLOPs, peak, band, rate and time to first token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band: BandRecord
    peak_dtype: str
    peak_flops: float
    active_params: int
    prompt_tokens: int
    flops: int
    prefill_tps: tuple[float, float]
    ttft_s: tuple[float, float]
    derivation: str


class RatesRecord(BaseModel):
    """plan.json's ``rates``: the card, and decode and prefill where they are predicted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: str | None
    bandwidth_bytes_per_s: int | None
    bandwidth_source: str
    card_sources: tuple[str, ...]
    decode: DecodeRecord | None
    prefill: PrefillRecord | None
    not_predicted: tuple[str, ...]


@dataclass(frozen=True)
class _Card:
    row: CardSku | None
    bandwidth: int | None
    source: str


def _card(loaded: LoadedShape) -> _Card:
    card = loaded.shape.card
    row = card_sku(card.sku) if card.sku else None
    if card.bandwidth is not None:
        return _Card(row, card.bandwidth, f"card.bandwidth, {_rate(card.bandwidth)} as stated")
    if row is not None:
        return _Card(row, row.bandwidth, f"{_rate(row.bandwidth)} ({row.sku}, the card table)")
    return _Card(None, None, "unknown: the shape names no card.sku and states no card.bandwidth")


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def _band(engine: Engine, kind: str, device: str) -> EfficiencyBand | None:
    bands = engine.decode_bands if kind == "decode" else engine.prefill_bands
    return bands.get(device)


def _weights_per_step(loaded: LoadedShape, f: Figures) -> tuple[int, str] | None:
    """Weights one tensor rank reads per step, over every pipeline stage in turn."""
    shape = loaded.shape
    pp, tp = shape.parallel.pipeline, shape.parallel.tensor
    term = next((t for t in f.sizing.terms if t.id == "weights"), None) if f.sizing else None
    if term is not None:
        return term.high * pp, f"{human(term.high, 'GiB', 2)} per rank (weights) x {pp} stage(s)"
    if f.model is None or f.model.weight_bytes is None:
        return None
    share = -(-f.model.weight_bytes // tp)
    return share, f"{human(f.model.weight_bytes, 'GiB', 2)} / {tp} tensor rank(s)"


# the reason a mixture of experts gets no rate where its routed experts are not counted
_EXPERTS_UNCOUNTED = (
    "a mixture of experts whose expert tensors are not counted from its config "
    "(decode reads only the routed experts)"
)


def _routed(g: Geometry) -> tuple[int, int, int] | None:
    """(experts, routed a token, parameters of every routed expert) from the config as
    transformers builds it (geometry.params.moe_layout); None where it is not counted."""
    text = json.loads(g.text_config_json) if g.text_config_json else None
    try:
        layout = moe_layout(text, str(text.get("model_type"))) if text else None
    except (KeyError, TypeError, ValueError):
        return None
    if layout is None or not g.experts_per_token:
        return None
    count, inter, sparse = layout
    return count, g.experts_per_token, count * 3 * g.hidden_size * inter * len(sparse)


def _experts(g: Geometry, weights: int, tp: int) -> tuple[Experts | None, str | None]:
    """The routed experts one rank holds, or why they are not counted."""
    if not g.num_experts:
        return None, None
    routed = _routed(g)
    if routed is None or not g.weight_params or not g.weight_bytes:
        return None, _EXPERTS_UNCOUNTED
    count, per_token, params = routed
    expert_bytes = params * g.weight_bytes // g.weight_params // tp
    return Experts(count=count, per_token=per_token, bytes=min(expert_bytes, weights)), None


def _decode(
    loaded: LoadedShape, f: Figures, g: Geometry, card: _Card, engine: Engine
) -> tuple[DecodeRecord | None, str | None]:
    shape = loaded.shape
    band = _band(engine, "decode", shape.card.device)
    if band is None:
        return None, f"decode: {engine.name} has no measured efficiency on a {shape.card.device}"
    if card.bandwidth is None:
        return None, "decode: name the card (card.sku) or state card.bandwidth"
    every_layer = engine.offload_layers(setup_of(loaded))
    offloaded = shape.launch.gpu_layers
    if every_layer is not None and offloaded is not None and 0 <= offloaded < every_layer:
        return None, (
            f"decode: {every_layer - offloaded} of {every_layer} layers stay in host RAM "
            "(launch.gpu_layers): each step reads them at the host's bandwidth, which the "
            "card's does not bound"
        )
    weights = _weights_per_step(loaded, f)
    if weights is None:
        why = f.model.weight_source if f.model is not None else None
        return None, f"decode: the weights a step reads are not counted ({why or 'unknown'})"
    experts, why = _experts(g, weights[0], shape.parallel.tensor)
    if why:
        return None, f"decode: {why}"
    all_reduce = None
    if shape.parallel.tensor > 1:
        link = card.row.link if card.row is not None else "an unnamed link"
        all_reduce = engine.all_reduce.get(link)
        if all_reduce is None:
            return None, (
                f"decode: {engine.name}'s tensor ranks joined by {link}: no measured "
                "all-reduce range for that link (card.sku names the link)"
            )
    pp = shape.parallel.pipeline
    kv_per_token = float(f.cost.rate) * pp  # pipeline stages hold their layers' share each
    inputs = DecodeInputs(
        weights_bytes=weights[0],
        experts=experts,
        kv_bytes_per_token=kv_per_token,
        kv_bytes_per_seq=f.cost.per_seq_bytes * pp,
        bandwidth=card.bandwidth,
        band=band,
        tensor=shape.parallel.tensor,
        hidden=g.hidden_size,
        layers=g.num_layers,
        all_reduce=all_reduce,
    )
    window, slots = f.max_model_len, f.max_num_seqs
    one = _one_session(inputs, window)
    worst = decode_point(inputs, slots, window)
    loaded_run = _spanned(inputs, slots, max(0, window - LOAD_GENERATED), window)
    derivation = (
        f"per step and rank: weights {weights[1]}"
        + (f" (routed experts {experts.per_token} of {experts.count})" if experts else "")
        + f" + KV {kv_per_token:,.0f} B/token x context x sessions, read at "
        f"{card.source} x {band.text()}"
        + (f"; + 2 all-reduces per layer ({all_reduce.source})" if all_reduce else "")
        + (f"; {engine.borrowed_band}" if engine.borrowed_band else "")
    )
    return (
        DecodeRecord(
            band=BandRecord.of(band, engine.borrowed_band),
            weights_bytes_per_step=weights[0],
            experts=(
                {"count": experts.count, "per_token": experts.per_token, "bytes": experts.bytes}
                if experts
                else None
            ),
            kv_bytes_per_token=kv_per_token,
            kv_bytes_per_seq=f.cost.per_seq_bytes * pp,
            all_reduce=all_reduce.source if all_reduce else None,
            one_session=one.json(),
            worst_case=worst.json(),
            at_window=loaded_run.json(),
            curve=tuple(p.json() for p in decode_curve(inputs, slots, window)),
            derivation=derivation,
        ),
        None,
    )


def _one_session(inputs: DecodeInputs, window: int) -> RatePoint:
    """One session as the decode probe runs it: its context grows from a short prompt to
    ``PROBE_CONTEXT`` tokens, so the slow end is read there and the fast end at none."""
    return _spanned(inputs, 1, 0, min(PROBE_CONTEXT, window))


def _spanned(inputs: DecodeInputs, sessions: int, start: int, end: int) -> RatePoint:
    """``sessions`` whose context grows from ``start`` to ``end`` tokens while they decode:
    the slow end read at ``end``, the fast end at ``start``."""
    far = decode_point(inputs, sessions, end)
    near = decode_point(inputs, sessions, start)
    return RatePoint(
        sessions=sessions,
        context=end,
        bytes_per_step=(near.bytes_per_step[0], far.bytes_per_step[1]),
        per_session=(far.per_session[0], near.per_session[1]),
        aggregate=(far.aggregate[0], near.aggregate[1]),
    )


def _compute_dtype(g: Geometry) -> str:
    """The tensor-core dtype a prompt runs at: fp8 for an fp8 checkpoint, else bf16."""
    return "fp8" if (g.quant_method or "").startswith("fp8") else "bf16"


def _active_params(g: Geometry) -> int | None:
    """Parameters a token passes through: a mixture of experts' routed ones only."""
    if not g.weight_params or not g.num_experts:
        return g.weight_params
    routed = _routed(g)
    if routed is None:
        return None
    count, per_token, params = routed
    return g.weight_params - params + params * per_token // count


def _prefill(
    loaded: LoadedShape, f: Figures, g: Geometry, card: _Card, engine: Engine
) -> tuple[PrefillRecord | None, str | None]:
    shape = loaded.shape
    band = _band(engine, "prefill", shape.card.device)
    if band is None:
        return None, (
            f"prefill: {engine.name} has no measured prefill efficiency on a "
            f"{shape.card.device} (no public prompt-processing runs with their conditions)"
        )
    dtype = _compute_dtype(g)
    peak = card.row.peak_flops(dtype) if card.row is not None else None
    if peak is None:
        return None, f"prefill: the card's dense {dtype} peak is not published (card.sku)"
    params = _active_params(g)
    if params is None:
        return None, "prefill: the parameters are not counted from the checkpoint"
    heads = g.attention or g.sliding
    if heads is None:
        return None, "prefill: no softmax attention heads to count"
    full_layers = sum(1 for k in g.layer_kinds if k == LayerKind.FULL)
    inputs = PrefillInputs(
        active_params=params,
        layers=full_layers or g.num_layers,
        heads=g.num_attention_heads,
        head_dim=heads.head_dim,
        peak_flops=peak,
        peak_dtype=dtype,
        band=band,
        tensor=shape.parallel.tensor,
    )
    tokens = max(1, f.max_model_len - PREFILL_PROBE_GEN)
    slow, fast, flops = prefill_rate(inputs, tokens)
    return (
        PrefillRecord(
            band=BandRecord.of(band),
            peak_dtype=dtype,
            peak_flops=peak,
            active_params=params,
            prompt_tokens=tokens,
            flops=flops,
            prefill_tps=(round(slow, 2), round(fast, 2)),
            ttft_s=(round(tokens / fast, 4), round(tokens / slow, 4)),
            derivation=(
                f"2 x {params:,} active parameters x {tokens:,} tokens + causal attention "
                f"2 x {tokens:,}^2 x {g.num_attention_heads} heads x {heads.head_dim} x "
                f"{inputs.layers} layers = {flops:,} FLOPs / {shape.parallel.tensor} rank(s), "
                f"at {peak / 1e12:,.0f} TFLOP/s dense {dtype} ({card.row.sku if card.row else ''})"
                f" x {band.text()}"
            ),
        ),
        None,
    )


def plan_rates(loaded: LoadedShape, f: Figures) -> RatesRecord | None:
    """The rates of a shape, or None for an engine fakplan does not model."""
    engine = ENGINES[loaded.shape.engine]
    if not isinstance(engine, ModelledEngine):
        return None
    card = _card(loaded)
    g = setup_of(loaded).geometry
    decode, decode_why = _decode(loaded, f, g, card, engine)
    prefill, prefill_why = _prefill(loaded, f, g, card, engine)
    return RatesRecord(
        sku=card.row.sku if card.row else None,
        bandwidth_bytes_per_s=card.bandwidth,
        bandwidth_source=card.source,
        card_sources=card.row.sources if card.row else (),
        decode=decode,
        prefill=prefill,
        not_predicted=tuple(w for w in (decode_why, prefill_why) if w),
    )
