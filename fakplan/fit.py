"""What fits on these cards: the frontier of (window, sessions) a model serves, each point
realised as a shape and proven by gating it.

The operator's first question is the inverse of a plan's: not "does this shape fit?" but
"how many sessions at what window, and what do I give up for more?". For each layout
(KV dtype, weight quantization, tensor-parallel width) and each window on a ladder,
``Fitter`` finds the most sessions whose shape passes every gate (the built-in ones and
the repository's operator gates). Every point is tight by construction: the shape with one
more session was compiled too, and the gate it fails is named.

A point's budget split gives the weights what they need per rank (or what the shape
states) and the KV pool the rest of what the pair must fit in: the ceiling where one is
known (stated, read from a ledger, or predicted), else the card's bound. Where the engine
asks for less cache than the pool (llama.cpp's ``-c``), the pool is trimmed to it.

The search compiles shapes in memory: one geometry (cached by reference), no file read per
candidate, about two compiles per candidate and a handful of candidates per window.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fakplan.budget import DeviceBudget
from fakplan.engines import ENGINES, setup_of
from fakplan.errors import FakplanError, ShapeError, inert
from fakplan.gates import BUILTIN_GATES
from fakplan.gates.model import GIVES_UP_ORDER, FixPatch, GateResult, ProvenFix
from fakplan.gates.operator import GatesCache, OperatorGate
from fakplan.plan import Plan, compile_plan
from fakplan.shape import LoadedShape, Shape
from fakplan.shape.checks import check_semantics
from fakplan.shape.messages import field_path, first_error, message
from fakplan.shape.model import MAX_SEQS, MAX_TOKENS, SIZING_FIELDS
from fakplan.shape.source import LineMap, read_yaml

SCHEMA = "fakplan.fit/1"
MIB = 1 << 20
SMALLEST_WINDOW = 1024  # the ladder's first rung: a shorter window serves no chat
WIDER = (2, 4, 8, 16, 32, 64)  # tensor-parallel widths tried for a model that fits nowhere


@dataclass(frozen=True)
class Layout:
    """One way to lay the model on the cards: what the search holds fixed."""

    kv_cache_dtype: str
    quantization: str | None = None
    tensor: int = 1
    gpu_layers: int | None = None  # llama.cpp -ngl; None: every layer on the card

    def label(self) -> str:
        quant = f", {self.quantization} weights" if self.quantization else ""
        layers = "" if self.gpu_layers is None else f", -ngl {self.gpu_layers}"
        return f"KV {self.kv_cache_dtype}{quant}, TP {self.tensor}{layers}"

    def offloading(self, gpu_layers: int) -> Layout:
        return Layout(self.kv_cache_dtype, self.quantization, self.tensor, gpu_layers)


@dataclass(frozen=True)
class Failing:
    """Why a candidate is not a point: the first failing gate (or the shape refused)."""

    gate: str
    summary: str
    fix: str | None = None
    field: str | None = None  # the shape field a refusal names (gate "shape")
    detail: str | None = None  # the refusal without the field


@dataclass(frozen=True)
class Outcome:
    """One candidate compiled and gated."""

    window: int
    sessions: int
    data: dict[str, Any]
    plan: Plan | None
    failing: Failing | None
    step: int = 1  # tokens between windows that cost differently (Engine.window_step)

    @property
    def passes(self) -> bool:
        return self.plan is not None and self.failing is None


@dataclass(frozen=True)
class Beyond:
    """What one step past a point does: the field stepped, its value, the gate it fails."""

    field: str
    value: int
    gate: str
    summary: str


@dataclass(frozen=True)
class LeastFraction:
    """Where the engine sizes the pool from a fraction of the card: the smallest fraction,
    in hundredths, that still realises a point, and the gate a hundredth less fails."""

    field: str  # serving.gpu_memory_utilization or serving.mem_fraction_static
    value: float
    below: float
    gate: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "value": self.value,
            "below": {"value": self.below, "gate": self.gate, "summary": self.summary},
        }


@dataclass(frozen=True)
class FitPoint:
    """A shape that passes every gate, and the step past it that does not."""

    layout: Layout
    outcome: Outcome
    beyond: Beyond
    least: LeastFraction | None = None

    @property
    def plan(self) -> Plan:
        assert self.outcome.plan is not None
        return self.outcome.plan

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        worst = p.decode_worst_case
        return {
            "max_model_len": p.max_model_len,
            "max_num_seqs": p.max_num_seqs,
            "gpu_layers": self.layout.gpu_layers,
            "weights_budget_bytes": p.weights_budget_bytes,
            "kv_budget_bytes": p.kv_budget_bytes,
            "contract_bytes": p.contract_bytes,
            "pair_bytes": p.pair_bytes,
            "tokens_backed": p.tokens_backed,
            "whole_sessions_at_window": p.whole_sessions_at_window,
            "unclaimed_bytes": p.unclaimed_bytes,
            "ceiling_bytes": p.ceiling_bytes,
            "ceiling_basis": p.ceiling_basis,
            "gates_unknown": [g.id for g in p.gates if g.status == "unknown"],
            # every slot at the window: tokens/s per session and in all, [slow, fast]
            "decode_tps_per_session": worst["per_session_tps"] if worst else None,
            "decode_tps_aggregate": worst["aggregate_tps"] if worst else None,
            "least_fraction": None if self.least is None else self.least.to_json(),
            "beyond": {
                "field": self.beyond.field,
                "value": self.beyond.value,
                "gate": self.beyond.gate,
                "summary": self.beyond.summary,
            },
        }


@dataclass
class LayoutFit:
    """The frontier of one layout: per window the most sessions, and where none fits."""

    layout: Layout
    frontier: list[FitPoint] = field(default_factory=list)
    none_at: list[tuple[int, Failing]] = field(default_factory=list)
    at_sessions: FitPoint | None = None
    at_sessions_none: Failing | None = None
    # llama.cpp: per window where not every layer fits, the most layers -ngl can put on the
    # card at the sessions asked for (or one), each one layer short of failing a gate
    offload: list[FitPoint] = field(default_factory=list)
    offload_none: list[tuple[int, Failing]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_cache_dtype": self.layout.kv_cache_dtype,
            "quantization": self.layout.quantization,
            "tensor": self.layout.tensor,
            "gpu_layers": self.layout.gpu_layers,
            "frontier": [p.to_json() for p in self.frontier],
            "offload": [p.to_json() for p in self.offload],
            "offload_none": [
                {"max_model_len": w, "gate": f.gate, "summary": f.summary}
                for w, f in self.offload_none
            ],
            "none_at": [
                {"max_model_len": w, "gate": f.gate, "summary": f.summary} for w, f in self.none_at
            ],
            "at_sessions": None if self.at_sessions is None else self.at_sessions.to_json(),
            "at_sessions_none": None
            if self.at_sessions_none is None
            else {"gate": self.at_sessions_none.gate, "summary": self.at_sessions_none.summary},
        }


@dataclass(frozen=True)
class Wider:
    """The narrowest tensor-parallel width on which a layout that fits nowhere fits."""

    layout: Layout
    point: Outcome | None  # None: no width up to 64 fits
    tried: tuple[tuple[int, Failing], ...]


class Fitter:
    """Compiles and gates candidate shapes derived from one base shape's data."""

    def __init__(
        self,
        base: dict[str, Any],
        path: Path,
        lines: LineMap,
        budget: DeviceBudget | None,
        gates: Sequence[OperatorGate] = (),
        ledger: Path | None = None,
        keep_weights: bool = True,
    ) -> None:
        self.base = base
        self.ledger = ledger
        self.path = path
        self.lines = lines
        self.budget = budget
        self.gates = tuple(gates)
        self._seen: dict[tuple[Layout, int, int], Outcome] = {}
        stated = (base.get("budget") or {}).get("weights") if keep_weights else None
        # kept as the shape states it, for the shape's own weights; else what they need
        self.stated_weights = stated
        self.own_quantization = (base.get("serving") or {}).get("quantization")
        self.own_tensor = int((base.get("parallel") or {}).get("tensor", 1))
        self.own_layers = _all_is_none((base.get("launch") or {}).get("gpu_layers"))
        serving = base.get("serving") or {}
        # a shape that lets the engine size its pool keeps its fraction: each point is
        # realised by the pool the engine will size, not by a budget pair
        self.sized = next((f for f in SIZING_FIELDS if f in serving), None)
        self.compiles = 0
        # per layout, the weights' budget and the pair's limit where no candidate moves them
        self._splits: dict[Layout, tuple[int, int, int]] = {}
        # -ngl's count of every layer, where the engine can leave some in RAM (llama.cpp)
        self.offloadable: int | None = None
        self._offload_known = False  # set by the first compile that reaches the engine

    # ------------------------------------------------------------ one candidate

    def outcome(self, layout: Layout, window: int, sessions: int) -> Outcome:
        key = (layout, window, sessions)
        if key not in self._seen:
            self._seen[key] = self._realised(layout, window, sessions)
        return self._seen[key]

    def _data(
        self,
        layout: Layout,
        window: int,
        sessions: int,
        weights: Any,
        kv: Any,
        fraction: float | None = None,
    ) -> dict[str, Any]:
        data = copy.deepcopy(self.base)
        serving = data.setdefault("serving", {})
        if fraction is not None and self.sized is not None:
            serving[self.sized] = fraction
        serving.update(
            max_num_seqs=sessions, max_model_len=window, kv_cache_dtype=layout.kv_cache_dtype
        )
        if self.sized is None:
            for sized in SIZING_FIELDS:
                serving.pop(sized, None)
        if layout.quantization is None:
            serving.pop("quantization", None)
        else:
            serving["quantization"] = layout.quantization
        launch = data.get("launch")
        if layout.gpu_layers is not None:
            data.setdefault("launch", {})["gpu_layers"] = layout.gpu_layers
        elif isinstance(launch, dict):
            launch.pop("gpu_layers", None)
        parallel = data.setdefault("parallel", {})
        parallel["tensor"] = layout.tensor
        card = data.setdefault("card", {})
        needed = layout.tensor * int(parallel.get("pipeline", 1))
        nodes = int(parallel.get("nodes", 1))
        cards = max(int(card.get("count", 1)), math.ceil(needed / nodes))
        if cards != 1 or "count" in card:
            card["count"] = cards
        if self.sized is None:
            data["budget"] = {"weights": weights, "kv": kv}
        return data

    def _compiled(self, data: dict[str, Any]) -> tuple[Plan | None, Failing | None, int]:
        """The plan of ``data``, or the refusal; the first failing gate, operator gates too;
        and the engine's window step."""
        self.compiles += 1
        try:
            try:
                shape = Shape.model_validate(data)
            except ValidationError as exc:
                errors = exc.errors()
                first = first_error(errors, self.lines)
                where = field_path(first["loc"])
                return None, Failing("shape", f"{where}: {message(first, Shape, errors)}"), 1
            loaded = LoadedShape(shape=shape, path=self.path, lines=self.lines, budget=self.budget)
            check_semantics(loaded)
            plan = compile_plan(loaded, self.ledger)
            engine = ENGINES[shape.engine]
            step = engine.window_step(setup_of(loaded))
            if not self._offload_known:
                self.offloadable = engine.offload_layers(setup_of(loaded))
                self._offload_known = True
        except ShapeError as exc:  # the candidate's own text: no file or line to name
            why = f"{exc.field}: {exc.detail}" if exc.field else exc.detail
            return None, Failing("shape", why, field=exc.field, detail=exc.detail), 1
        except FakplanError as exc:
            return None, Failing("shape", str(exc)), 1
        for gate in plan.gates:
            if gate.status == "fail":
                return plan, Failing(gate.id, gate.summary, gate.fix), step
        for operator in self.gates:
            result = operator.run(plan)
            if result is not None and result.status == "fail":
                return plan, Failing(result.id, result.summary, result.fix), step
        return plan, None, step

    def _realised(self, layout: Layout, window: int, sessions: int) -> Outcome:
        """The candidate with its budget split: the weights' need (or the stated budget),
        and the rest of the pair's limit for the pool."""
        if self.sized is not None:  # the engine sizes the pool from the shape's fraction
            data = self._data(layout, window, sessions, None, None)
            plan, failing, step = self._compiled(data)
            return Outcome(window, sessions, data, plan, failing, step)
        own = (layout.quantization, layout.tensor, layout.gpu_layers) == (
            self.own_quantization,
            self.own_tensor,
            self.own_layers,
        )
        stated = self.stated_weights if own else None  # other weights: what they need
        split = self._splits.get(layout)
        if split is not None:  # the weights and the limit do not move with the candidate
            return self._split(layout, window, sessions, *split)
        provisional = self._data(layout, window, sessions, stated or f"{MIB} B", f"{MIB} B")
        plan, failing, step = self._compiled(provisional)
        if plan is None:
            return Outcome(window, sessions, provisional, None, failing)
        numbers = {g.id: g.numbers for g in plan.gates}
        need = numbers.get("weights-fit", {}).get("weights_per_rank_bytes")
        if stated is not None:
            weights = exact = plan.weights_budget_bytes
        elif isinstance(need, int):
            weights, exact = _up(need), need
        else:
            return Outcome(
                window,
                sessions,
                provisional,
                None,
                Failing(
                    "weights-fit",
                    "the weights' bytes are unknown: state budget.weights (--weights)",
                ),
            )
        pair = numbers.get("pair-ceiling", {})
        bound = pair.get("card_bound_bytes")
        ceiling = pair.get("ceiling_bytes")
        assert isinstance(bound, int)
        limit = min(bound, ceiling) if isinstance(ceiling, int) else bound
        if plan.ceiling_basis != "predicted":  # a predicted floor moves with the sessions
            self._splits[layout] = (weights, limit, exact)
        return self._split(layout, window, sessions, weights, limit, exact)

    def _split(
        self, layout: Layout, window: int, sessions: int, weights: int, limit: int, exact: int
    ) -> Outcome:
        """The candidate with ``weights`` and the rest of ``limit`` for the pool, both in
        whole MiB; where that pool falls short of the contract, the split to the byte
        (``exact``: the weights' own need, the rest of the limit the pool's), so a point is
        never lost to the rounding."""
        kv = (limit - weights) // MIB * MIB
        if kv <= 0:
            # the weights' need leaves no pool under the limit: the smallest pool beside
            # them is over it, as the candidate's own gates say
            data = self._data(layout, window, sessions, f"{weights} B", f"{MIB} B")
            plan, failing, step = self._compiled(data)
            over = plan is not None and any(
                g.id == "pair-ceiling" and g.status == "fail" for g in plan.gates
            )
            if over or failing is None:
                failing = Failing(
                    "pair-ceiling",
                    f"the weights' {weights >> 20:,} MiB leave no pool under the limit of "
                    f"{limit >> 20:,} MiB",
                )
            return Outcome(window, sessions, data, plan, failing, step)
        data = self._data(layout, window, sessions, f"{weights} B", f"{kv} B")
        plan, failing, step = self._compiled(data)
        if plan is not None and failing is None and plan.kv_unclaimed_bytes:
            # the engine asks for less cache than the pool (llama.cpp's -c): the pool is
            # trimmed to the cache, the rest left unclaimed on the card
            trimmed = self._data(
                layout, window, sessions, f"{weights} B", f"{_up(kv - plan.kv_unclaimed_bytes)} B"
            )
            trimmed_plan, trimmed_failing, _ = self._compiled(trimmed)
            if trimmed_plan is not None and trimmed_failing is None:
                return Outcome(window, sessions, trimmed, trimmed_plan, None, step)
        if failing is not None and failing.gate == "pool-contract" and limit - exact > kv:
            tight = self._data(layout, window, sessions, f"{exact} B", f"{limit - exact} B")
            tight_plan, tight_failing, _ = self._compiled(tight)
            if tight_plan is not None and tight_failing is None:
                return Outcome(window, sessions, tight, tight_plan, None, step)
        return Outcome(window, sessions, data, plan, failing, step)

    # ------------------------------------------------------------ the searches

    def most_sessions(self, layout: Layout, window: int) -> FitPoint | Failing:
        """The most sessions at ``window`` that pass, with the failing step past it; or why
        not one session fits."""
        first = self.outcome(layout, window, 1)
        if not first.passes:
            assert first.failing is not None
            return first.failing
        lo, hi = 1, None
        guess = _guess(first.plan, window)
        if guess > 1:
            if self.outcome(layout, window, guess).passes:
                lo = guess
            else:
                hi = guess
        step = 1
        while hi is None:
            candidate = lo + step
            if candidate > MAX_SEQS or not self.outcome(layout, window, candidate).passes:
                hi = candidate
            else:
                lo, step = candidate, step * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.outcome(layout, window, mid).passes:
                lo = mid
            else:
                hi = mid
        past = self.outcome(layout, window, lo + 1)
        assert past.failing is not None
        return FitPoint(
            layout,
            self.outcome(layout, window, lo),
            Beyond("serving.max_num_seqs", lo + 1, past.failing.gate, past.failing.summary),
        )

    def longest_window(self, layout: Layout, sessions: int, trained: int) -> FitPoint | Failing:
        """The longest window at ``sessions`` that passes, one page past it failing."""
        page = _page(self, layout, sessions)
        if isinstance(page, Failing):
            return page
        lo = 1  # in pages
        first = self.outcome(layout, page, sessions)
        if not first.passes:
            assert first.failing is not None
            return first.failing
        cap = MAX_TOKENS // page  # the longest window a shape may state, in pages
        hi = min(cap, max(trained, page) // page + 1)
        while hi <= cap and self.outcome(layout, hi * page, sessions).passes:
            lo, hi = hi, min(cap + 1, hi * 2)  # past the trained context (rope scaling)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.outcome(layout, mid * page, sessions).passes:
                lo = mid
            else:
                hi = mid
        past = self.outcome(layout, (lo + 1) * page, sessions)
        point = self.outcome(layout, lo * page, sessions)
        failing = past.failing or Failing("shape", "past the longest window fakplan plans for")
        return FitPoint(
            layout,
            point,
            Beyond("serving.max_model_len", (lo + 1) * page, failing.gate, failing.summary),
        )

    def most_layers(self, layout: Layout, window: int, sessions: int) -> FitPoint | Failing | None:
        """llama.cpp: the most layers -ngl puts on the card with ``sessions`` at ``window``,
        one more layer failing a gate; None where every layer fits (nothing to leave in
        RAM) or the engine cannot leave any there."""
        if not self._offload_known:
            self.outcome(layout, window, sessions)  # a compile tells the engine's count
        every = self.offloadable
        if every is None:
            return None
        if self.outcome(layout.offloading(every), window, sessions).passes:
            return None
        none = self.outcome(layout.offloading(0), window, sessions)
        if not none.passes:
            assert none.failing is not None
            return none.failing
        lo, hi = 0, every  # lo passes, hi fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.outcome(layout.offloading(mid), window, sessions).passes:
                lo = mid
            else:
                hi = mid
        past = self.outcome(layout.offloading(hi), window, sessions)
        assert past.failing is not None
        return FitPoint(
            layout.offloading(lo),
            self.outcome(layout.offloading(lo), window, sessions),
            Beyond("launch.gpu_layers", hi, past.failing.gate, past.failing.summary),
        )

    def least_fraction(self, point: FitPoint) -> FitPoint:
        """``point`` with the smallest fraction of the card, in hundredths, that realises it
        where the engine sizes its pool (the shape's own is the most it is given), the
        fraction a hundredth below it failing a named gate."""
        if self.sized is None:
            return point
        own = point.outcome.data["serving"][self.sized]
        window, sessions = point.outcome.window, point.outcome.sessions

        seen: dict[int, tuple[Plan | None, Failing | None]] = {}

        def tried(hundredths: int) -> tuple[Plan | None, Failing | None]:
            if hundredths not in seen:
                data = self._data(point.layout, window, sessions, None, None, hundredths / 100)
                plan, failing, _ = self._compiled(data)
                seen[hundredths] = (plan, failing)
            return seen[hundredths]

        hi = math.floor(own * 100 + 1e-9)  # passes (the shape's own, or just under it)
        plan, failing = tried(hi)
        if plan is None or failing is not None:
            return point
        lo = 0  # fails: no pool at all
        while hi - lo > 1:
            mid = (lo + hi) // 2
            plan, failing = tried(mid)
            if plan is not None and failing is None:
                hi = mid
            else:
                lo = mid
        plan, failing = tried(lo)
        why = failing or Failing("shape", "no pool at all")
        least = LeastFraction(f"serving.{self.sized}", hi / 100, lo / 100, why.gate, why.summary)
        return FitPoint(point.layout, point.outcome, point.beyond, least)

    def fit(
        self, layout: Layout, windows: Iterable[int], sessions: int | None, trained: int
    ) -> LayoutFit:
        result = LayoutFit(layout)
        windows = list(windows)
        for window in windows:
            found = self.most_sessions(layout, window)
            if isinstance(found, FitPoint):
                result.frontier.append(self.least_fraction(found))
            else:
                result.none_at.append((window, found))
        if layout.gpu_layers is None:  # a layout with every layer on the card
            for window in windows:
                partial = self.most_layers(layout, window, sessions or 1)
                if isinstance(partial, FitPoint):
                    result.offload.append(partial)
                elif partial is not None:
                    result.offload_none.append((window, partial))
        if sessions is not None:
            at = self.longest_window(layout, sessions, trained)
            if isinstance(at, FitPoint):
                result.at_sessions = at
            else:
                result.at_sessions_none = at
        return result

    def narrowest_wider(self, layout: Layout, window: int, sessions: int) -> Wider:
        """For a layout that fits nowhere: the narrowest wider TP that serves ``sessions`` at
        ``window``."""
        tried: list[tuple[int, Failing]] = []
        for width in WIDER:
            if width <= layout.tensor:
                continue
            wide = Layout(layout.kv_cache_dtype, layout.quantization, width, layout.gpu_layers)
            outcome = self.outcome(wide, window, sessions)
            if outcome.passes:
                return Wider(layout, outcome, tuple(tried))
            assert outcome.failing is not None
            tried.append((width, outcome.failing))
        return Wider(layout, None, tuple(tried))


def ladder(trained: int, extra: Iterable[int] = ()) -> list[int]:
    """Windows to answer for: powers of two from 1,024 up to the trained context, the
    trained context itself, and any asked for."""
    rungs = {1 << k for k in range(10, 31) if (1 << k) <= trained}
    rungs.add(trained)
    rungs.update(w for w in extra if w > 0)
    return sorted(w for w in rungs if w <= MAX_TOKENS)


def trained_context(plan: Plan) -> int | None:
    """The model's trained context, as the ``context`` gate read it."""
    for gate in plan.gates:
        if gate.id == "context":
            value = gate.numbers.get("trained_context")
            return value if isinstance(value, int) else None
    return None


def relocated(data: dict[str, Any], source: Path, target: Path) -> dict[str, Any]:
    """The shape's data as a file in ``target`` says it: its relative paths (model,
    launch.weights, launch.speculative.model, ceiling.ledger) re-pointed from ``source``'s
    folder."""
    out = copy.deepcopy(data)

    def moved(value: Any) -> Any:
        if not isinstance(value, str) or os.path.isabs(value):
            return value
        where = source / value
        if not where.exists():
            return value  # a catalog or Hub id, not a path
        return os.path.relpath(where.resolve(), target.resolve())

    out["model"] = moved(out.get("model"))
    launch = out.get("launch")
    if isinstance(launch, dict) and "weights" in launch:
        launch["weights"] = moved(launch["weights"])
    speculative = launch.get("speculative") if isinstance(launch, dict) else None
    if isinstance(speculative, dict) and "model" in speculative:  # a draft model's folder
        speculative["model"] = moved(speculative["model"])
    ceiling = out.get("ceiling")
    if isinstance(ceiling, dict) and "ledger" in ceiling:
        ceiling["ledger"] = moved(ceiling["ledger"])
    return out


def _page(fitter: Fitter, layout: Layout, sessions: int) -> int | Failing:
    probe = fitter.outcome(layout, SMALLEST_WINDOW, sessions)
    if probe.plan is None:
        assert probe.failing is not None
        return probe.failing
    return probe.step


def _guess(plan: Plan | None, window: int) -> int:
    """The sessions the pool holds by the contract's own formula: a starting point only,
    each candidate is then compiled and gated."""
    assert plan is not None
    pages = -(-window // plan.page_tokens)
    per = pages * plan.page_bytes + plan.per_seq_bytes
    if per <= 0:
        return 1
    return max(1, min(MAX_SEQS, (plan.kv_budget_bytes - plan.fixed_bytes) // per))


def _up(n: int) -> int:
    return -(-n // MIB) * MIB


# ---------------------------------------------------------------- the whole answer


@dataclass(frozen=True)
class FitRequest:
    """What to answer: the layouts to try, windows beyond the ladder, and the sessions
    whose longest window is asked for."""

    layouts: tuple[Layout, ...]
    windows: tuple[int, ...] = ()
    sessions: int | None = None


@dataclass
class FitReport:
    """Every layout's frontier, and for the layouts that fit nowhere the narrowest TP."""

    model: str
    engine: str
    engine_version: str | None
    card_total_bytes: int
    trained_context: int
    windows: list[int]
    sessions: int | None
    fits: list[LayoutFit]
    wider: list[Wider]
    compiles: int

    @property
    def found(self) -> bool:
        return any(f.frontier or f.offload for f in self.fits)

    def points(self) -> list[FitPoint]:
        """Every point, each once: the frontiers', then the longest windows at the sessions."""
        out: list[FitPoint] = []
        for fit in self.fits:
            out += fit.frontier
            if fit.at_sessions is not None and all(
                p.outcome is not fit.at_sessions.outcome for p in fit.frontier
            ):
                out.append(fit.at_sessions)
            out += fit.offload
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "card_total_bytes": self.card_total_bytes,
            "trained_context": self.trained_context,
            "windows": self.windows,
            "sessions": self.sessions,
            "layouts": [f.to_json() for f in self.fits],
            "wider": [
                {
                    "kv_cache_dtype": w.layout.kv_cache_dtype,
                    "quantization": w.layout.quantization,
                    "from_tensor": w.layout.tensor,
                    "tensor": None if w.point is None else w.point.data["parallel"]["tensor"],
                    "cards": None if w.point is None else w.point.data["card"]["count"],
                    "max_model_len": None if w.point is None else w.point.window,
                    "max_num_seqs": None if w.point is None else w.point.sessions,
                    "tried": [
                        {"tensor": t, "gate": f.gate, "summary": f.summary} for t, f in w.tried
                    ],
                }
                for w in self.wider
            ],
            "compiles": self.compiles,
        }


class FitRefused(FakplanError):
    """No layout can be planned at all: the shape is refused whatever its size."""

    def __init__(self, failing: Failing) -> None:
        self.failing = failing
        super().__init__(f"no layout can be planned: {failing.summary}")


def run_fit(fitter: Fitter, request: FitRequest) -> FitReport:
    """The frontier of every layout asked for; ``FakplanError`` where no layout compiles
    at all (the model cannot be read, the engine refuses the shape whatever its size)."""
    first: Outcome | None = None
    for layout in request.layouts:
        first = fitter.outcome(layout, SMALLEST_WINDOW, 1)
        if first.plan is not None:
            break
    assert first is not None
    if first.plan is None:
        assert first.failing is not None
        raise FitRefused(first.failing)
    trained = trained_context(first.plan) or SMALLEST_WINDOW
    windows = ladder(trained, request.windows)
    fits = [fitter.fit(layout, windows, request.sessions, trained) for layout in request.layouts]
    asked = request.windows[0] if request.windows else windows[0]
    shards = ENGINES[first.plan.engine].tensor_parallel
    wider = [
        fitter.narrowest_wider(fit.layout, asked, request.sessions or 1)
        for fit in fits
        if not fit.frontier and shards
    ]
    plan = first.plan
    return FitReport(
        model=plan.model,
        engine=plan.engine,
        engine_version=plan.engine_version,
        card_total_bytes=plan.card_total_bytes,
        trained_context=trained,
        windows=windows,
        sessions=request.sessions,
        fits=fits,
        wider=wider,
        compiles=fitter.compiles,
    )


def point_name(base: str, point: FitPoint) -> str:
    """A shape name for a point: the base's, then layout and size (63 characters at most)."""
    layout = point.layout
    quant = f"-{layout.quantization}w" if layout.quantization else ""
    layers = "" if layout.gpu_layers is None else f"-ngl{layout.gpu_layers}"
    tail = f"-{layout.kv_cache_dtype}{quant}-tp{layout.tensor}{layers}-{point.outcome.window}x{point.outcome.sessions}"
    tail = tail.lower().replace("_", "-")
    return base[: 63 - len(tail)].rstrip("-._") + tail


def point_text(name: str, point: FitPoint, data: dict[str, Any]) -> str:
    """The shape file of a point: a header saying what it is and what one step more fails."""
    out = dict(data)
    out["name"] = name
    if "budget" in data:
        out["budget"] = {k: _sized(v) for k, v in data["budget"].items()}
    p, beyond = point.plan, point.beyond
    step = {
        "serving.max_num_seqs": "session",
        "launch.gpu_layers": "layer on the card",
    }.get(beyond.field, "page of window")
    lines = [
        f"# Written by fakplan fit: {p.max_num_seqs} x {p.max_model_len:,} tokens "
        f"({point.layout.label()}) passes every gate.",
        f"# One {step} more ({beyond.field}: {beyond.value:,}) fails {beyond.gate}: "
        f"{inert(beyond.summary)}.",
    ]
    return "\n".join(lines) + "\n" + yaml.safe_dump(out, sort_keys=False, allow_unicode=True)


def _sized(value: Any) -> Any:
    """``16062 MiB`` for a whole number of MiB written as bytes, else as it was."""
    if isinstance(value, str) and value.endswith(" B") and value[:-2].isdigit():
        n = int(value[:-2])
        if n % MIB == 0:
            return f"{n // MIB} MiB"
    return value


# ---------------------------------------------------------------- proven fixes

# the shape fields a fix may change, in the order a patch lists them
FIX_FIELDS = (
    ("serving", "max_num_seqs"),
    ("serving", "max_model_len"),
    ("serving", "kv_cache_dtype"),
    ("serving", "quantization"),
    ("launch", "gpu_layers"),
    ("parallel", "tensor"),
    ("card", "count"),
    ("budget", "weights"),
    ("budget", "kv"),
)


def proven_fixes(
    loaded: LoadedShape,
    plan: Plan,
    gates: Sequence[OperatorGate] = (),
    ledger: Path | None = None,
    proposals: Sequence[tuple[FixPatch, ...]] = (),
) -> tuple[ProvenFix, ...] | None:
    """The changes to a failing shape that make it pass every gate, each gated before it
    is offered, cheapest first (``GIVES_UP_ORDER``): the same sessions and window with the
    budget split again; fewer sessions; a shorter window; a smaller KV dtype; fp8 weights;
    a wider TP; and first each of ``proposals`` (a gate's own proposed change) that holds.
    A shape whose engine sizes its own pool keeps its fraction. None where fakplan does
    not search (the arithmetic is typed in); () where nothing it can change fits.
    """
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    if not engine.fit_kv_dtypes or not loaded.text:
        return None
    data = _shape_data(loaded)
    fitters = [
        Fitter(data, loaded.path, loaded.lines, loaded.budget, gates, ledger, keep_weights=keep)
        for keep in (True, False)
    ]
    serving = shape.serving
    own = _own_layout(shape)
    own_layers = own.gpu_layers
    window, sessions = serving.max_model_len, serving.max_num_seqs
    trained = trained_context(plan) or window
    layouts = [own] + [
        Layout(dtype, quantization, own.tensor, own_layers)
        for quantization in dict.fromkeys((own.quantization, *engine.quantizations))
        for dtype in dict.fromkeys((own.kv_cache_dtype, *engine.fit_kv_dtypes))
        if (dtype, quantization) != (own.kv_cache_dtype, own.quantization)
    ]
    found: list[tuple[tuple[int, int, int], Outcome, tuple[str, ...]]] = []

    def offer(outcome: Outcome, costs: list[str], amount: int = 0) -> None:
        if outcome.passes:
            ranks = [GIVES_UP_ORDER.index(c) for c in costs] or [0]
            found.append(((max(ranks), len(costs), amount), outcome, tuple(costs) or ("nothing",)))

    for fitter in fitters:
        for layout in layouts:
            costs = _layout_costs(fitter, own, layout, plan)
            offer(fitter.outcome(layout, window, sessions), costs)
            fewer = fitter.most_sessions(layout, window)
            if isinstance(fewer, FitPoint) and fewer.outcome.sessions < sessions:
                offer(fewer.outcome, [*costs, "sessions"], sessions - fewer.outcome.sessions)
            shorter = fitter.longest_window(layout, sessions, trained)
            if isinstance(shorter, FitPoint) and shorter.outcome.window < window:
                offer(shorter.outcome, [*costs, "window"], window - shorter.outcome.window)
            fewer_layers = fitter.most_layers(layout, window, sessions)
            if isinstance(fewer_layers, FitPoint):
                kept_on = fewer_layers.layout.gpu_layers or 0
                if own_layers is None or kept_on < own_layers:
                    cut = (fitter.offloadable or 0) - kept_on
                    offer(fewer_layers.outcome, [*costs, "offload"], cut)
        wider = fitter.narrowest_wider(own, window, sessions) if engine.tensor_parallel else None
        if wider is not None and wider.point is not None:
            offer(wider.point, ["cards"], int(wider.point.data["parallel"]["tensor"]))
        if found:
            break  # the shape's own weights budget serves: a re-split weights need not be
    fixes: list[ProvenFix] = []
    for proposal in proposals:
        patched, failing, _ = fitters[0]._compiled(_applied(data, proposal))
        holds = patched is not None and failing is None  # the operator's gates too
        if holds and patched is not None and all(f.patch != proposal for f in fixes):
            cut = patched.max_model_len < window
            gives_up: tuple[str, ...] = ("window",) if cut else ("nothing",)
            fixes.append(
                ProvenFix(
                    patch=proposal, gives_up=gives_up, summary=_fix_summary(proposal, gives_up)
                )
            )
    kept: list[tuple[Outcome, tuple[str, ...]]] = []
    for _, outcome, gives_up in sorted(found, key=lambda f: f[0]):
        if any(_dominates(k, outcome, gives_up) for k in kept):
            continue  # another fix keeps as much and gives up no more
        kept.append((outcome, gives_up))
        patch = _patch(shape, outcome)
        if patch and all(f.patch != patch for f in fixes):
            fixes.append(
                ProvenFix(patch=patch, gives_up=gives_up, summary=_fix_summary(patch, gives_up))
            )
    return tuple(fixes)


def with_proven_fixes(
    loaded: LoadedShape,
    plan: Plan,
    verdicts: tuple[GateResult, ...],
    gates: Sequence[OperatorGate] = (),
    ledger: Path | None = None,
) -> tuple[GateResult, ...]:
    """The verdicts with every failing gate's fix proven (``proven_fixes``): its ``fixes``
    the patches, its ``fix`` the first one's words, or that nothing fakplan can change
    fits. Where fakplan does not search, the verdicts are returned as they were."""
    if not any(v.status == "fail" for v in verdicts):
        return _with_warn_fixes(loaded, plan, verdicts, gates, ledger)
    proposals = [v.proposes for v in verdicts if v.status == "fail" and v.proposes]
    fixes = proven_fixes(loaded, plan, gates, ledger, proposals)
    if fixes is None:
        return verdicts
    text = fixes[0].summary if fixes else no_fix_text(loaded.shape)
    builtin = {g.id for g in BUILTIN_GATES}

    def proven(v: GateResult) -> GateResult:
        if v.status != "fail":
            return v
        # an operator gate's own fix is the operator's words: kept, the proven ones beside
        words = text if v.id in builtin or not v.fix else v.fix
        return v.model_copy(update={"fixes": fixes, "fix": words})

    return tuple(proven(v) for v in verdicts)


_GATES = GatesCache()  # the operator gates beside each shape's folder, imported once


def proven_plan(
    loaded: LoadedShape,
    plan: Plan,
    gates: Sequence[OperatorGate] | None = None,
    ledger: Path | None = None,
) -> Plan:
    """The plan with its failing gates' fixes proven (``with_proven_fixes``), against
    ``gates`` or the operator gates beside the shape's folder, as ``fakplan gate`` runs."""
    if not plan.failed and not any(g.status == "warn" for g in plan.gates):
        return plan
    if gates is None:
        gates = _GATES.for_shape(loaded.path) if loaded.path.exists() else ()
    verdicts = with_proven_fixes(loaded, plan, plan.gates, gates, ledger)
    return plan.model_copy(update={"gates": verdicts})


def _with_warn_fixes(
    loaded: LoadedShape,
    plan: Plan,
    verdicts: tuple[GateResult, ...],
    gates: Sequence[OperatorGate],
    ledger: Path | None,
) -> tuple[GateResult, ...]:
    """A passing shape's warnings with their fixes proven: the bytes a warning leaves on
    the floor given to more sessions at the same window, or a longer window for the same
    sessions, each gated (every gate passes and the warning clears). A warning no such
    change clears says so rather than advise."""
    warned = [v for v in verdicts if v.status == "warn"]
    engine = ENGINES[loaded.shape.engine]
    if not warned or not engine.fit_kv_dtypes or not loaded.text:
        return verdicts
    fitter = Fitter(_shape_data(loaded), loaded.path, loaded.lines, loaded.budget, gates, ledger)
    shape = loaded.shape
    own = _own_layout(shape)
    window, sessions = shape.serving.max_model_len, shape.serving.max_num_seqs

    def clears(outcome: Outcome, gate: str) -> bool:
        assert outcome.plan is not None
        return all(g.status != "warn" for g in outcome.plan.gates if g.id == gate)

    candidates: list[Outcome] = []
    more = fitter.most_sessions(own, window)
    if isinstance(more, FitPoint) and more.outcome.sessions > sessions:
        candidates.append(more.outcome)
    if not all(any(clears(c, v.id) for c in candidates) for v in warned):
        # a longer window only where more sessions leave a warning standing
        longer = fitter.longest_window(own, sessions, trained_context(plan) or window)
        if isinstance(longer, FitPoint) and longer.outcome.window > window:
            candidates.append(longer.outcome)

    def proven(v: GateResult) -> GateResult:
        if v.status != "warn" or v.id not in {g.id for g in BUILTIN_GATES}:
            return v
        fixes: list[ProvenFix] = []
        for outcome in candidates:
            patch = _patch(shape, outcome)
            if clears(outcome, v.id) and patch and all(f.patch != patch for f in fixes):
                fixes.append(
                    ProvenFix(
                        patch=patch,
                        gives_up=("nothing",),
                        summary=_fix_summary(patch, ("nothing",)),
                    )
                )
        words = (
            fixes[0].summary
            if fixes
            else "no change fakplan can make clears it: not more sessions at this window, "
            "nor a longer window for these sessions"
        )
        return v.model_copy(update={"fixes": tuple(fixes), "fix": words})

    return tuple(proven(v) for v in verdicts)


def _all_is_none(gpu_layers: int | None) -> int | None:
    """launch.gpu_layers with "every layer" (unset, or -1) as None, as a Layout states it."""
    return None if gpu_layers in (None, -1) else gpu_layers


def _own_layout(shape: Shape) -> Layout:
    """The layout a shape states."""
    serving = shape.serving
    return Layout(
        serving.kv_cache_dtype,
        serving.quantization,
        shape.parallel.tensor,
        _all_is_none(shape.launch.gpu_layers),
    )


def _shape_data(loaded: LoadedShape) -> dict[str, Any]:
    """The shape's text as data for a fitter, card.total as it was read (auto resolved)."""
    data, _ = read_yaml(loaded.path, loaded.text)
    data.setdefault("card", {})["total"] = f"{loaded.shape.card.total} B"
    return data


def no_fix_text(shape: Shape) -> str:
    """What a failing shape is told when no change fakplan can make fits."""
    if not ENGINES[shape.engine].tensor_parallel:
        return (
            "nothing fakplan can change fits: not fewer sessions, a shorter window, another "
            "KV dtype, nor fewer layers on the card"
        )
    return (
        f"nothing fakplan can change fits: not fewer sessions, a shorter window, another KV "
        f"dtype, quantized weights, nor tensor parallelism up to {WIDER[-1]} "
        f"(from {shape.parallel.tensor})"
    )


def _field(shape: Shape, block: str, name: str) -> Any:
    part = getattr(shape, block)
    return None if part is None else getattr(part, name)


def _patch(shape: Shape, outcome: Outcome) -> tuple[FixPatch, ...]:
    """The fields ``outcome``'s shape sets differently from ``shape``."""
    candidate = Shape.model_validate(outcome.data)
    out: list[FixPatch] = []
    for block, name in FIX_FIELDS:
        before = _field(shape, block, name)
        after = _field(candidate, block, name)
        if before != after:
            value = _sized(f"{after} B") if block == "budget" and after is not None else after
            out.append(FixPatch(path=f"{block}.{name}", value=value))
    return tuple(out)


_COSTS = {
    "nothing": "gives up nothing",
    "sessions": "fewer sessions",
    "window": "a shorter window",
    "kv_precision": "a smaller KV dtype",
    "weight_precision": "quantized weights",
    "offload": "layers left in RAM (slower tokens)",
    "cards": "more cards",
}


def _applied(data: dict[str, Any], patch: Sequence[FixPatch]) -> dict[str, Any]:
    """``data`` with each patched path set (None removes it)."""
    out = copy.deepcopy(data)
    for p in patch:
        *blocks, key = p.path.split(".")
        node = out
        for block in blocks:
            node = node.setdefault(block, {})
        if p.value is None:
            node.pop(key, None)
        else:
            node[key] = p.value
    return out


def _dominates(
    kept: tuple[Outcome, tuple[str, ...]], outcome: Outcome, gives_up: tuple[str, ...]
) -> bool:
    """Whether a fix already kept serves as many sessions at as long a window, giving up
    no more kinds of thing: then ``outcome`` is not worth offering."""
    other, costs = kept
    fewer = set(costs) - {"nothing"} <= set(gives_up) - {"nothing"}
    return fewer and other.sessions >= outcome.sessions and other.window >= outcome.window


def _layout_costs(fitter: Fitter, own: Layout, layout: Layout, plan: Plan) -> list[str]:
    """What moving from the shape's layout to ``layout`` gives up."""
    costs: list[str] = []
    if layout.kv_cache_dtype != own.kv_cache_dtype:
        probe = fitter.outcome(layout, SMALLEST_WINDOW, 1)
        if probe.plan is None or probe.plan.rate_bytes_per_token < plan.rate_bytes_per_token:
            costs.append("kv_precision")
    if layout.quantization != own.quantization:
        costs.append("weight_precision")
    return costs


def _fix_summary(patch: tuple[FixPatch, ...], gives_up: tuple[str, ...]) -> str:
    sets = ", ".join(f"{p.path}: {p.value}" for p in patch)
    cost = " and ".join(_COSTS[c] for c in gives_up)
    return f"set {sets} ({cost}; gated: every gate passes)"


def tensor_widths(loaded: LoadedShape, cards: int | None) -> tuple[int, ...]:
    """The tensor-parallel widths the cards allow: powers of two up to the cards of every
    node (--cards, else the shape's), each dividing the model's attention heads (what every
    engine asks of TP); the gates judge the rest. One card: TP 1."""
    shape = loaded.shape
    if not ENGINES[shape.engine].tensor_parallel:
        return (1,)
    per_node = cards if cards is not None else shape.card.count
    total = per_node * shape.parallel.nodes // shape.parallel.pipeline
    try:
        heads = setup_of(loaded).geometry.num_attention_heads
    except FakplanError:
        return (1,)
    return tuple(w for w in (1, 2, 4, 8, 16, 32, 64) if w <= max(total, 1) and heads % w == 0)
