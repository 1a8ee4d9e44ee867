"""Compile a shape into a ``Plan``: every derived number with its derivation.

The plan is a frozen record. Its JSON form (``Plan.to_json``) is a public,
versioned interface (``schema: fakplan.plan/1``) documented in docs/json.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fakplan.cluster import cluster_facts
from fakplan.contract import (
    CostComponent,
    KvCost,
    contract_requirement,
    exact_number,
    per_token_rate,
)
from fakplan.engines import (
    ENGINES,
    BootInputs,
    ModelledEngine,
    findings,
    model_source,
    planned_version,
    served_weights,
    setup_of,
    weights_source,
)
from fakplan.errors import LedgerError, RuleError
from fakplan.figures import Figures, ModelFacts
from fakplan.gates import GateResult, run_gates
from fakplan.kv import KvBreakdown
from fakplan.launch import LaunchRecord, shape_relative_paths, with_shape_env
from fakplan.predict import Prediction, predictions_for
from fakplan.rate_plan import RatesRecord, plan_rates
from fakplan.shape import LoadedShape
from fakplan.sizing import EngineSizing, term_fields
from fakplan.units import human

PLAN_SCHEMA = "fakplan.plan/1"


class ComponentRecord(BaseModel):
    """One KV component as the plan's and ``fakplan kv``'s JSON state it (kv leaves out
    ``bytes_per_page``): built here once, so the two records cannot drift apart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: str
    bytes_per_page: int
    bytes_per_token: int | float
    bytes_per_seq: int
    scales_with_dtype: bool
    derivation: str

    @classmethod
    def of(cls, component: CostComponent, page_tokens: int) -> ComponentRecord:
        """The record of ``component``, its per-token rate exact for ``page_tokens``-token pages."""
        return cls(
            name=component.name,
            kind=component.kind,
            bytes_per_page=component.page_bytes,
            bytes_per_token=exact_number(per_token_rate(component.page_bytes, page_tokens)),
            bytes_per_seq=component.per_seq_bytes,
            scales_with_dtype=component.scales_with_dtype,
            derivation=component.derivation,
        )


class SizedTermRecord(BaseModel):
    """One term between the memory the engine requests and the pool it sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    low_bytes: int
    high_bytes: int
    measured: bool
    # the pool loses fraction x the term (SGLang's memory in use before its weights load)
    scaled: bool
    derivation: str


class SizingRecord(BaseModel):
    """A pool the engine sizes for itself, as the plan predicts it (one rank)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flag: str
    fraction: float
    total_bytes: int
    total_derivation: str
    requested_bytes: int
    requested_derivation: str
    pool_low_bytes: int
    pool_high_bytes: int
    pool_derivation: str
    terms: tuple[SizedTermRecord, ...]

    @classmethod
    def of(cls, sizing: EngineSizing) -> SizingRecord:
        return cls(
            flag=sizing.flag,
            fraction=sizing.fraction,
            total_bytes=sizing.total_bytes,
            total_derivation=sizing.total_derivation,
            requested_bytes=sizing.requested_bytes,
            requested_derivation=sizing.requested_derivation,
            pool_low_bytes=sizing.pool_low,
            pool_high_bytes=sizing.pool_high,
            pool_derivation=sizing.pool_derivation,
            terms=tuple(SizedTermRecord(**term_fields(t)) for t in sizing.terms),
        )


class Plan(BaseModel):
    """A compiled shape. Field order is the JSON order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: str = PLAN_SCHEMA
    name: str
    engine: str
    engine_version: str | None
    shape: str
    model: str
    # where model resolved: a path, the Hub (or its cache) at a commit, or the catalog
    # (None: an engine fakplan does not model, or a record written before this field)
    model_source: dict[str, Any] | None = None
    # where launch.weights resolved where it names a GGUF by Hub id (llama.cpp's -hf):
    # {repo, selector, commit, origin, files}; None otherwise
    weights_source: dict[str, Any] | None = None
    kv_cache_dtype: str  # as the shape states it (auto, or the engine's spelling)
    # the KV dtype the engine will use: "auto" resolved as the engine resolves it (a record
    # written before this field reads None)
    kv_cache_dtype_resolved: str | None = None
    max_num_seqs: int
    max_model_len: int
    rate_bytes_per_token: int | float
    page_tokens: int
    page_bytes: int
    per_seq_bytes: int
    fixed_bytes: int
    components: tuple[ComponentRecord, ...]
    contract_bytes: int
    kv_budget_bytes: int
    weights_budget_bytes: int
    tokens_backed: int
    sessions_at_window: float
    whole_sessions_at_window: int
    pair_bytes: int
    card_total_bytes: int
    ceiling_bytes: int | None
    unclaimed_bytes: int | None
    kv_unclaimed_bytes: int | None
    derivations: dict[str, str]
    gates: tuple[GateResult, ...]
    predictions: tuple[Prediction, ...]
    launch: LaunchRecord
    retired_predictions: tuple[Prediction, ...] = ()
    engine_sizing: SizingRecord | None = None
    ceiling_basis: Literal["stated", "ledger", "predicted"] | None = None
    # the PromQL label matchers that pick this endpoint's series (monitoring.selector)
    metrics_selector: str = ""
    # what every output says beside the figures: an assumption the answer depends on
    # (the release whose rules applied where the shape states none)
    notices: tuple[str, ...] = ()
    # decode and prefill rates predicted before boot (fakplan.rate_plan): None for an engine
    # fakplan does not model, or a record written before this field
    rates: RatesRecord | None = None
    # what this run saw of the model's resolution (the Hub or the cache answered, why the
    # catalog): printed, never recorded, so the record does not move with the machine
    model_seen: tuple[str, ...] = Field(default=(), exclude=True)

    @property
    def decode_worst_case(self) -> dict[str, Any] | None:
        """Every slot decoding at the full window (rates.decode.worst_case); None where no
        decode rate is predicted."""
        decode = self.rates.decode if self.rates else None
        return None if decode is None else decode.worst_case

    @property
    def decode_tps_at_window(self) -> float | None:
        """The slow end of the decode rate one session sees with every slot at the full
        window: what a change costs in speed, for diff."""
        worst = self.decode_worst_case
        return None if worst is None else float(worst["per_session_tps"][0])

    @property
    def decode_tps_aggregate(self) -> float | None:
        """The slow end of all slots' decode together at the full window."""
        worst = self.decode_worst_case
        return None if worst is None else float(worst["aggregate_tps"][0])

    @property
    def failed(self) -> bool:
        return any(g.status == "fail" for g in self.gates)

    def model_resolution(self) -> str | None:
        """Where the model resolved, in one line, with what this run saw of it (None: no
        model fakplan resolved)."""
        recorded = self.derivations.get("model")
        if recorded is None:
            return None
        return "; ".join([recorded, *self.model_seen])

    def model_notes(self, previous: Plan | None = None) -> list[str]:
        """What a compile says beside its files: the plan's notices, where the model
        resolved where an engine could not load it from there, and the commit a Hub
        revision moved to since ``previous``."""
        source = self.model_source or {}
        notes = list(self.notices)
        if source.get("loadable") is False:
            notes += [str(n) for n in source.get("notes", ())]
        if source.get("kind") == "catalog":
            notes += list(self.model_seen)
        before = (previous.model_source or {}) if previous is not None else {}
        same = (before.get("repo"), before.get("revision")) == (
            source.get("repo"),
            source.get("revision"),
        )
        old, new = before.get("commit"), source.get("commit")
        if same and old and new and old != new:
            notes.append(
                f"model {source['repo']} at revision {source['revision']!r} moved from commit "
                f"{old} to {new} since the last compile: the plan counts the new commit"
            )
        return notes

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        return {"schema": data.pop("schema_"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


CeilingBasis = Literal["stated", "ledger", "predicted"]


def _ceiling(
    loaded: LoadedShape, ledger_path: Path | None = None
) -> tuple[int | None, str, CeilingBasis | None]:
    """The shape's ceiling: stated bytes, or read from a boot ledger (``ledger_path`` wins),
    else, for a stated pair, predicted from the engine's floor."""
    ceiling = loaded.shape.ceiling
    floor = ceiling.engine_floor if ceiling is not None else None
    if ledger_path is None:
        if ceiling is None:
            if loaded.shape.budget is None:  # the engine sizes the pool: its pair is its fill
                return None, "unknown: the shape states no ceiling", None
            value, text = ENGINES[loaded.shape.engine].predicted_ceiling(setup_of(loaded))
            return value, text, None if value is None else "predicted"
        if ceiling.bytes is not None:
            note = f" ({ceiling.note})" if ceiling.note else ""
            return ceiling.bytes, f"{human(ceiling.bytes)} as stated in the shape{note}", "stated"
    # the ledger parsers (a few hundred compiled rows) load only for a shape that reads a log
    from fakplan.ceiling import above_card, ceiling_from_ledger
    from fakplan.engines import parse_ledger

    if ledger_path is None:
        assert ceiling is not None and ceiling.ledger is not None
        ledger_path = loaded.resolve(ceiling.ledger)
        try:
            ledger = parse_ledger(ledger_path)
        except LedgerError as exc:
            raise loaded.error(str(exc), "ceiling", "ledger") from None
        loc: tuple[str, ...] = ("ceiling", "ledger")
    else:
        ledger = parse_ledger(ledger_path)
        loc = ("card", "total")
    reading = ceiling_from_ledger(ledger, floor)
    problem = above_card(reading, loaded.shape.card.total, ledger_path)
    if problem:
        raise loaded.error(problem, *loc)
    return reading.bytes, reading.derivation, None if reading.bytes is None else "ledger"


@dataclass(frozen=True)
class _Pair:
    """The pair a plan is derived against: stated, or the pool the engine will size."""

    weights: int
    kv: int
    derivation: str
    sizing: EngineSizing | None = None
    sized_tokens: tuple[int, int] | None = None


def _pair(loaded: LoadedShape, cost: KvCost) -> _Pair:
    shape = loaded.shape
    if shape.budget is not None:
        b = shape.budget
        return _Pair(
            b.weights,
            b.kv,
            f"{human(b.weights)} weights + {human(b.kv)} KV = {human(b.weights + b.kv)}",
        )
    engine = ENGINES[shape.engine]
    setup = setup_of(loaded)
    sizing = engine.sized_pool(setup)
    if sizing.pool_low <= 0:
        raise loaded.error(
            f"the engine would size no pool: {sizing.pool_derivation} ({sizing.refusal}); "
            f"raise serving.{sizing.field}",
            "serving",
            sizing.field,
        )
    tolerance = shape.limits.sizing_tolerance_pct / 100
    low = engine.capacity(setup, cost, math.floor(sizing.pool_low * (1 - tolerance)))
    high = engine.capacity(setup, cost, math.ceil(sizing.pool_high * (1 + tolerance)))
    weights, kv = sizing.weights_bytes, sizing.pool_low
    return _Pair(
        weights,
        kv,
        f"{human(weights)} weights predicted + {human(kv)} KV pool predicted (the low end of "
        f"{sizing.pool_derivation}) = {human(weights + kv)}",
        sizing,
        (low.tokens, high.tokens),
    )


def derive_figures(loaded: LoadedShape, ledger_path: Path | None = None) -> Figures:
    """The figures, with the engine's boot refusals checked against them."""
    figures = _figures(loaded, ledger_path)
    engine = ENGINES[loaded.shape.engine]
    if not engine.boot_refusals:
        return figures
    setup = setup_of(loaded)
    version = planned_version(setup, engine.version_used(setup))
    boot = findings(engine.boot_refusals, BootInputs(setup, figures, version))
    return replace(figures, boot=boot)


def _figures(loaded: LoadedShape, ledger_path: Path | None) -> Figures:
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    setup = setup_of(loaded)
    cost = engine.kv_cost(setup)
    seqs, window = shape.serving.max_num_seqs, shape.serving.max_model_len
    requirement = contract_requirement(cost, seqs, window)
    stated = _pair(loaded, cost)
    capacity = engine.capacity(setup, cost, stated.kv)
    pair = stated.weights + stated.kv
    ceiling, ceiling_text, ceiling_basis = _ceiling(loaded, ledger_path)
    bound, bound_text = engine.card_bound(setup)
    return Figures(
        name=shape.name,
        engine=shape.engine,
        kv_cache_dtype=shape.serving.kv_cache_dtype,
        max_num_seqs=seqs,
        max_model_len=window,
        spec_tokens=shape.serving.spec_tokens,
        cost=cost,
        contract_bytes=requirement.bytes,
        contract_derivation=requirement.derivation,
        kv_budget_bytes=stated.kv,
        weights_budget_bytes=stated.weights,
        tokens_backed=capacity.tokens,
        tokens_derivation=capacity.derivation,
        pair_bytes=pair,
        pair_derivation=stated.derivation,
        card_total_bytes=shape.card.total,
        ceiling_bytes=ceiling,
        ceiling_derivation=ceiling_text,
        ceiling_basis=ceiling_basis,
        card_bound_bytes=bound,
        card_bound_derivation=bound_text,
        cluster=cluster_facts(shape, stated.weights, engine.shm_bytes),
        max_spec_rows=shape.limits.max_spec_rows,
        unclaimed_warn_above=shape.limits.unclaimed_warn_above,
        model=_model_facts(loaded),
        engine_sessions=capacity.sessions,
        slot_tokens=capacity.slot_tokens,
        slots_share=capacity.slots_share,
        kv_used_bytes=capacity.used_bytes,
        draft_printed=capacity.draft_printed,
        sizing=stated.sizing,
        sized_tokens=stated.sized_tokens,
        sizing_tolerance_pct=shape.limits.sizing_tolerance_pct,
    )


def _model_facts(loaded: LoadedShape) -> ModelFacts | None:
    shape = loaded.shape
    if not isinstance(ENGINES[shape.engine], ModelledEngine):
        return None
    setup = setup_of(loaded)
    g = setup.geometry
    weight_bytes, weight_source = served_weights(setup, g, ENGINES[shape.engine])
    draft = setup.query.draft
    if draft is not None and weight_bytes is not None:
        # the engine loads a separate draft model beside the target (vLLM and SGLang on
        # the same ranks, llama.cpp's -md on the card with -ngld 999)
        if draft.weight_bytes is not None:
            weight_bytes += draft.weight_bytes
            weight_source = (
                f"{weight_source}; + the draft model's {draft.weight_bytes:,} B "
                f"({draft.weight_source or draft.source})"
            )
        else:
            weight_source = (
                f"{weight_source}; the draft model ({draft.source}) states no weight bytes: "
                "not counted"
            )
    return ModelFacts(
        source=g.source,
        trained_context=g.context_length,
        rope_scaling=g.rope_scaling,
        rope_scaling_declared=shape.limits.rope_scaling,
        attention_heads=g.num_attention_heads,
        kv_heads=g.attention.num_kv_heads if g.attention else None,
        tp=shape.parallel.tensor,
        pp=shape.parallel.pipeline,
        weight_bytes=weight_bytes,
        weight_source=weight_source,
    )


def _notices(loaded: LoadedShape) -> tuple[str, ...]:
    shape = loaded.shape
    used = ENGINES[shape.engine].version_used(setup_of(loaded))
    if shape.engine_version is not None or used is None:
        return ()
    return (unstated_release(shape.engine, used),)


def unstated_release(engine: str, used: str) -> str:
    """What an answer says where no release was stated (the newest modelled applied)."""
    return (
        f"engine_version is not stated: {engine} {used}'s rules applied (the newest fakplan "
        "models); pool sizes, token counts and boot refusals differ by release, so state "
        "the release you run (engine_version:, fakplan kv --engine-version)"
    )


def _model_seen(loaded: LoadedShape) -> tuple[str, ...]:
    if not isinstance(ENGINES[loaded.shape.engine], ModelledEngine):
        return ()
    return model_source(setup_of(loaded))[1].seen


def _model_source(loaded: LoadedShape) -> dict[str, Any] | None:
    if not isinstance(ENGINES[loaded.shape.engine], ModelledEngine):
        return None
    return model_source(setup_of(loaded))[1].json()


def _rate_derivation(f: Figures, components: tuple[ComponentRecord, ...]) -> str:
    """The rate as the sum of its components' rates, at the dtype the engine resolved."""
    cost = f.cost
    terms = " + ".join(f"{c.name} {c.bytes_per_token:,}" for c in components if c.bytes_per_page)
    dtype = (
        f.kv_cache_dtype if cost.dtype == f.kv_cache_dtype else f"{f.kv_cache_dtype} ({cost.dtype})"
    )
    return f"{terms} = {exact_number(cost.rate):,} B/token/rank at {dtype}"


def _engine_rules(cost: KvCost) -> dict[str, str]:
    """The rules and notes a modelled engine followed; a contract's cost follows none."""
    if not isinstance(cost, KvBreakdown):
        return {}
    return {"engine_rules": "; ".join((*cost.rules, *cost.notes))}


def _sessions_derivation(f: Figures) -> str:
    sessions = f.tokens_backed / f.max_model_len
    return (
        f"{f.tokens_backed:,} tokens / {f.max_model_len:,} = {sessions:.2f} sessions at "
        "the full window" + ("" if f.engine_sessions is None else f"; {f.sessions_derivation}")
    )


def _unclaimed_derivation(f: Figures) -> str:
    if f.unclaimed_bytes is None:
        return "unknown: no ceiling"
    return (
        f"{human(f.ceiling_bytes or 0)} ceiling - {human(f.pair_bytes)} pair "
        f"= {human(f.unclaimed_bytes)}"
    )


def _kv_unclaimed_derivation(f: Figures) -> dict[str, str]:
    """The budget.kv a cache sized by its context leaves idle; none where the pool is budget.kv."""
    if f.kv_unclaimed_bytes is None or f.kv_used_bytes is None:
        return {}
    return {
        "kv_unclaimed_bytes": (
            f"{human(f.kv_budget_bytes)} budget.kv - {human(f.kv_used_bytes)} the "
            f"cache takes = {human(f.kv_unclaimed_bytes)} (the engine sizes its cache "
            "by the context it is given, not by budget.kv)"
        )
    }


def _sized_derivations(f: Figures) -> dict[str, str]:
    """Where the engine sizes the pool: the pool and the weights are predictions."""
    sizing = f.sizing
    if sizing is None:
        return {}
    weights = next((t.derivation for t in sizing.terms if t.id == "weights"), None)
    return {
        "kv_budget_bytes": (
            f"predicted, the low end of what {sizing.flag} {sizing.fraction:g} leaves: "
            f"{sizing.requested_derivation}; {sizing.pool_derivation}"
        ),
        "weights_budget_bytes": f"predicted: {weights or f'{f.weights_budget_bytes:,} B counted'}",
    }


def _derivations(
    loaded: LoadedShape, f: Figures, components: tuple[ComponentRecord, ...]
) -> dict[str, str]:
    """Every derived figure's arithmetic in words, in the plan's JSON order."""
    modelled = isinstance(ENGINES[loaded.shape.engine], ModelledEngine)
    return {
        **({"model": model_source(setup_of(loaded))[1].sentence()} if modelled else {}),
        "rate_bytes_per_token": _rate_derivation(f, components),
        **_engine_rules(f.cost),
        "contract_bytes": f.contract_derivation,
        "tokens_backed": f.tokens_derivation,
        "sessions_at_window": _sessions_derivation(f),
        **_sized_derivations(f),
        "pair_bytes": f.pair_derivation,
        "card_total_bytes": loaded.card_note
        or f"{human(f.card_total_bytes)} as stated in the shape (card.total)",
        "ceiling_bytes": f.ceiling_derivation,
        "unclaimed_bytes": _unclaimed_derivation(f),
        **_kv_unclaimed_derivation(f),
    }


def compile_plan(loaded: LoadedShape, ledger_path: Path | None = None) -> Plan:
    """Shape in, plan out (no files written).

    ``ledger_path`` reads the ceiling from that boot log instead of the shape's. An
    engine rule the shape breaks is reported at the shape's line that states it.
    """
    try:
        return _compiled(loaded, ledger_path)
    except RuleError as exc:
        raise loaded.error(str(exc), *exc.field) from None


def check_head_address(loaded: LoadedShape) -> None:
    """A multi-node launch names the address the other nodes join: launch.head_address,
    or a LeaderWorkerSet's leader (launch.kubernetes, or compile --target kubernetes)."""
    shape = loaded.shape
    nodes = shape.parallel.nodes
    if nodes > 1 and shape.launch.head_address is None and shape.launch.kubernetes is None:
        raise loaded.error(
            f"parallel.nodes is {nodes}: give launch.head_address, the address the other "
            "nodes join, or deploy it on Kubernetes (compile --target kubernetes, or "
            "launch.kubernetes: the LeaderWorkerSet's leader is their head)",
            "parallel",
            "nodes",
        )


def _compiled(loaded: LoadedShape, ledger_path: Path | None) -> Plan:
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    check_head_address(loaded)
    f = derive_figures(loaded, ledger_path)
    rates = plan_rates(loaded, f)
    cost = f.cost
    components = tuple(ComponentRecord.of(c, cost.page_tokens) for c in cost.components)
    return Plan(
        name=shape.name,
        engine=shape.engine,
        engine_version=engine.version_used(setup_of(loaded)),
        shape=loaded.path.as_posix(),
        model=shape.model,
        model_source=_model_source(loaded),
        weights_source=weights_source(setup_of(loaded)),
        kv_cache_dtype=f.kv_cache_dtype,
        kv_cache_dtype_resolved=cost.dtype,
        max_num_seqs=f.max_num_seqs,
        max_model_len=f.max_model_len,
        rate_bytes_per_token=exact_number(cost.rate),
        page_tokens=cost.page_tokens,
        page_bytes=cost.page_bytes,
        per_seq_bytes=cost.per_seq_bytes,
        fixed_bytes=cost.fixed_bytes,
        components=components,
        contract_bytes=f.contract_bytes,
        kv_budget_bytes=f.kv_budget_bytes,
        weights_budget_bytes=f.weights_budget_bytes,
        tokens_backed=f.tokens_backed,
        sessions_at_window=round(f.tokens_backed / f.max_model_len, 4),
        whole_sessions_at_window=f.whole_sessions,
        pair_bytes=f.pair_bytes,
        card_total_bytes=f.card_total_bytes,
        ceiling_bytes=f.ceiling_bytes,
        unclaimed_bytes=f.unclaimed_bytes,
        kv_unclaimed_bytes=f.kv_unclaimed_bytes,
        derivations=_derivations(loaded, f, components),
        gates=run_gates(f),
        predictions=predictions_for(shape, loaded.path.as_posix(), f, rates),
        launch=with_shape_env(
            shape, shape_relative_paths(loaded, engine.launch(setup_of(loaded), f))
        ),
        engine_sizing=None if f.sizing is None else SizingRecord.of(f.sizing),
        ceiling_basis=f.ceiling_basis,
        metrics_selector=shape.metrics_selector,
        notices=_notices(loaded),
        model_seen=_model_seen(loaded),
        rates=rates,
    )
