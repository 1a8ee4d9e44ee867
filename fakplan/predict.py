"""Falsifiable predictions and their verdicts.

A prediction names the observation that can kill it (``closed_by``) and the
command that makes that observation. A verdict is written beside it later and
never overwrites an earlier one: verdicts accumulate, one per observation (the
same figure read again from the same source is not a second verdict).

``describe`` and ``miss`` put a prediction's range and a killed verdict's
distance from it in words, with units, for reports and notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from fakplan.figures import Figures
from fakplan.units import GIB, KIB, MIB, UNITS, human, human_pair

if TYPE_CHECKING:
    from fakplan.rate_plan import RatesRecord
    from fakplan.shape import Shape
    from fakplan.shape.model import Expectation

# The ids of the predictions every plan makes: plan builds them, verify and the probes
# close them by these names (an expectation's id is the operator's own).
KV_TOKENS = "kv-tokens"
SESSIONS_AT_WINDOW = "sessions-at-window"
BOUNDARY = "boundary"
WEIGHTS = "weights"
UNCLAIMED = "unclaimed"
# a pool the engine sizes for itself: the pool, and the terms it is left by
KV_POOL = "kv-pool"
ACTIVATION_PEAK = "activation-peak"
NON_TORCH = "non-torch"
# vLLM 0.27+: the memory consumed since the init snapshot beyond the weights
CONSUMED_BEYOND_WEIGHTS = "consumed-beyond-weights"
NON_KV = "non-kv"
MEMORY_IN_USE = "memory-in-use"  # SGLang: in use before the weights load
CUDA_GRAPHS = "cuda-graphs"  # vLLM 0.20+: the graph estimate subtracted from the pool
DRAFT_KV = "draft-kv"  # a speculative draft's KV beside the pool (llama.cpp's contexts)
# rates before boot (fakplan.rate_plan): one session as the decode probe runs it, and a
# window-sized prompt as the prefill probe sends it
DECODE_TPS_ONE = "decode-tps-one"
# every slot decoding at once near the full window, as the decode-load probe runs them
DECODE_TPS = "decode-tps"
PREFILL_TPS = "prefill-tps"

VerdictStatus = Literal["held", "killed", "unverifiable", "inside noise"]
ClosedBy = Literal["ledger", "probe boundary", "probe decode", "probe decode-load", "probe prefill"]


class PredictionVerdict(BaseModel):
    """One observation's verdict on a prediction: held, killed, unverifiable or inside noise,
    with the figure observed and where it was read (not an operator gate's verdict)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: VerdictStatus
    observed: float | int | str | None
    source: str = Field(description="the ledger line or probe run the observation came from")
    note: str = ""
    at: str = Field("", description="when the observation was made (ISO 8601, UTC)")

    def same_observation(self, other: PredictionVerdict) -> bool:
        """The same verdict on the same figure from the same source: one observation.

        When it was made and how the note words it do not count: reading a log again
        learns nothing new.
        """
        return (self.status, self.observed, self.source) == (
            other.status,
            other.observed,
            other.source,
        )


# The name record, the probes and their tests still import; new code says PredictionVerdict.
Verdict = PredictionVerdict


class Prediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    claim: str = Field(description="the prediction in words")
    value: float | int | None
    low: float | int | None
    high: float | int | None
    unit: str
    derivation: str
    closed_by: ClosedBy
    command: str
    verdicts: tuple[PredictionVerdict, ...] = ()

    def with_verdict(self, verdict: PredictionVerdict) -> Prediction:
        """This prediction with ``verdict`` appended, unless that observation is recorded."""
        if self.records(verdict):
            return self
        return self.model_copy(update={"verdicts": (*self.verdicts, verdict)})

    def records(self, verdict: PredictionVerdict) -> bool:
        """Whether ``verdict``'s observation is already among this prediction's verdicts."""
        return any(v.same_observation(verdict) for v in self.verdicts)

    @property
    def latest(self) -> PredictionVerdict | None:
        return self.verdicts[-1] if self.verdicts else None


def judge(prediction: Prediction, observed: float | int) -> VerdictStatus:
    """held when the observation lies in [low, high]; a missing bound is open on that side."""
    low, high = prediction.low, prediction.high
    if low is None and high is None:
        if prediction.value is None:
            return "unverifiable"
        low = high = prediction.value
    if low is not None and observed < low:
        return "killed"
    if high is not None and observed > high:
        return "killed"
    return "held"


# ------------------------------------------------------------------- in words


def _byte_unit(n: int | float) -> str:
    size = abs(n)
    return "GiB" if size >= GIB else "MiB" if size >= MIB else "KiB" if size >= KIB else "B"


def _bytes(n: int | float) -> str:
    """Bytes with a unit and separators: whole units shown whole ("40 GiB"), else 2 decimals."""
    unit = _byte_unit(n)
    exact = float(n).is_integer() and int(n) % UNITS[unit] == 0
    text = human(abs(n), unit, 0 if exact else 2)
    return f"−{text}" if n < 0 else text


def _number(n: int | float) -> str:
    whole = float(n).is_integer()
    text = f"{abs(int(n)):,}" if whole else f"{abs(n):,.2f}".rstrip("0").rstrip(".")
    return f"−{text}" if n < 0 else text


def amount(n: int | float, unit: str) -> str:
    """``n`` in ``unit``: bytes as "5.98 GiB", counts as "625,990 tokens", rates "82.5 tokens/s"."""
    if unit == "B":
        return _bytes(n)
    return f"{_number(n)} {unit}" if unit else _number(n)


def describe(prediction: Prediction) -> str:
    """The predicted range with its unit: "625,990..632,282 tokens", "≤ 40 GiB", "3 sequences"."""
    low, high, unit = prediction.low, prediction.high, prediction.unit
    if low is None and high is None:
        return "—" if prediction.value is None else amount(prediction.value, unit)
    if low is not None and high is not None:
        if low == high:
            return amount(low, unit)
        if unit == "B":
            return f"{_bytes(low)}..{_bytes(high)}"
        return f"{_number(low)}..{_number(high)} {unit}".rstrip()
    if low is None:
        assert high is not None
        return f"≤ {amount(high, unit)}"
    return f"≥ {amount(low, unit)}"


@dataclass(frozen=True)
class Miss:
    """How far a killed observation lies outside its prediction.

    ``by`` is observed − the bound it crossed (negative: below the low bound), and
    ``pct`` is ``by`` as a percentage of that bound; ``None`` for a bound of 0. A
    point prediction (low = high, or a value alone) is measured from the predicted value.
    """

    against: Literal["low", "high", "predicted"]
    bound: int | float
    by: int | float
    pct: float | None

    def text(self, observed: int | float, unit: str) -> str:
        """ "observed 612,000 tokens, 13,990 below the low bound 625,990 (−2.2 %)"."""
        side = "below" if self.by < 0 else "above"
        bound = {"low": "the low bound", "high": "the high bound", "predicted": "the predicted"}
        # the unit once, on the observation; bytes carry theirs everywhere (GiB or MiB)
        figure = _bytes if unit == "B" else _number
        words = (
            f"observed {amount(observed, unit)}, {figure(abs(self.by))} {side} "
            f"{bound[self.against]} {figure(self.bound)}"
        )
        if self.pct is None:
            return words
        shown = f"{abs(self.pct):.2f}" if abs(self.pct) < 1 else f"{abs(self.pct):.1f}"
        return f"{words} ({'−' if self.pct < 0 else '+'}{shown} %)"

    def to_dict(self) -> dict[str, object]:
        return {"against": self.against, "bound": self.bound, "by": self.by, "pct": self.pct}


def miss(prediction: Prediction, observed: float | int) -> Miss | None:
    """How far ``observed`` lies outside ``prediction``'s range; ``None`` when it lies inside."""
    low, high = prediction.low, prediction.high
    point = (low is None and high is None) or (low is not None and low == high)
    if low is None and high is None:
        if prediction.value is None:
            return None
        low = high = prediction.value
    if low is not None and observed < low:
        against: Literal["low", "high", "predicted"] = "predicted" if point else "low"
        bound: int | float = low
    elif high is not None and observed > high:
        against, bound = ("predicted" if point else "high"), high
    else:
        return None
    by = observed - bound
    pct = None if bound == 0 else by / abs(bound) * 100
    return Miss(against=against, bound=bound, by=by, pct=pct)


# ------------------------------------------------------------ what a plan claims


def _verify_command(path: str) -> str:
    """What closes a ledger prediction: the shape verified against a boot log."""
    return f"fakplan verify {path} --ledger BOOT.log"


def _kv_tokens(shape: Shape, path: str, f: Figures) -> Prediction:
    """The tokens the boot ledger reports, within the shape's tolerance."""
    if f.sizing is not None and f.sized_tokens is not None:
        return _sized_tokens(path, f, f.sized_tokens)
    tolerance = shape.limits.kv_tokens_tolerance_pct
    return Prediction(
        id=KV_TOKENS,
        claim=f"the boot ledger reports {f.tokens_backed:,} KV tokens (± {tolerance:g} %)",
        value=f.tokens_backed,
        low=math.floor(f.tokens_backed * (1 - tolerance / 100)),
        high=math.ceil(f.tokens_backed * (1 + tolerance / 100)),
        unit="tokens",
        derivation=f.tokens_derivation,
        closed_by="ledger",
        command=_verify_command(path),
    )


def _sized_tokens(path: str, f: Figures, tokens: tuple[int, int]) -> Prediction:
    """The tokens of a pool the engine sizes: its predicted range, widened by the tolerance."""
    assert f.sizing is not None
    tolerance = f.sizing_tolerance_pct
    low, high = tokens
    return Prediction(
        id=KV_TOKENS,
        claim=(
            f"the boot ledger reports {low:,}..{high:,} KV tokens: the pool "
            f"{f.sizing.flag} {f.sizing.fraction:g} leaves (± {tolerance:g} %)"
        ),
        value=f.tokens_backed,
        low=low,
        high=high,
        unit="tokens",
        derivation=(
            f"the tokens of {f.sizing.pool_derivation} less and more {tolerance:g} %; at the "
            f"low end: {f.tokens_derivation}"
        ),
        closed_by="ledger",
        command=_verify_command(path),
    )


def _draft_kv(path: str, f: Figures) -> Prediction | None:
    """The draft's KV the boot prints (the sum of its contexts' cache lines), exact: the
    prints' rounding is the observation's (verify)."""
    if f.draft_printed is None:
        return None
    total, lines, derivation = f.draft_printed
    return _ledger_bytes(
        path,
        DRAFT_KV,
        f"the draft's KV cache lines print {human(total)} in all ({lines} line(s))",
        total,
        (total, total),
        derivation,
    )


def _ledger_bytes(
    path: str, id: str, claim: str, value: int | None, bounds: tuple[int, int], derivation: str
) -> Prediction:
    """A byte figure of the boot's profiler, predicted as a range the ledger closes."""
    return Prediction(
        id=id,
        claim=claim,
        value=value,
        low=bounds[0],
        high=bounds[1],
        unit="B",
        derivation=derivation,
        closed_by="ledger",
        command=_verify_command(path),
    )


def _widened(low: int, high: int, pct: float) -> tuple[int, int]:
    return math.floor(low * (1 - pct / 100)), math.ceil(high * (1 + pct / 100))


def _sized(path: str, f: Figures) -> list[Prediction]:
    """A pool the engine sizes: the pool and every term it is left by, each closed by the
    profiler line that prints it. A derived term holds within the tolerance; a measured one
    within the spread it was measured over."""
    sizing = f.sizing
    if sizing is None:
        return []
    pct = f.sizing_tolerance_pct
    pool = _widened(sizing.pool_low, sizing.pool_high, pct)
    made = [
        _ledger_bytes(
            path,
            KV_POOL,
            f"{sizing.flag} {sizing.fraction:g} leaves a KV pool of "
            f"{human(pool[0])}..{human(pool[1])} per rank (± {pct:g} %)",
            sizing.pool_low,
            pool,
            f"{sizing.requested_derivation}; {sizing.pool_derivation}",
        )
    ]
    for term in sizing.terms:
        if term.id == WEIGHTS:
            continue  # the weights prediction states it (``_weights``)
        bounds = (term.low, term.high) if term.measured else _widened(term.low, term.high, pct)
        spread = "the measured spread" if term.measured else f"± {pct:g} %"
        made.append(
            _ledger_bytes(
                path,
                term.id,
                f"{term.what}: {human(bounds[0])}..{human(bounds[1])} per rank ({spread})",
                term.low if term.low == term.high else None,
                bounds,
                term.derivation,
            )
        )
    return made


def _point(
    id: str, claim: str, value: int, unit: str, derivation: str, closed_by: ClosedBy, command: str
) -> Prediction:
    """A count the shape fixes exactly: both bounds at the value, so one off kills it."""
    return Prediction(
        id=id,
        claim=claim,
        value=value,
        low=value,
        high=value,
        unit=unit,
        derivation=derivation,
        closed_by=closed_by,
        command=command,
    )


def _sequences(n: int) -> str:
    return "sequence" if n == 1 else "sequences"


def _sessions(path: str, f: Figures) -> Prediction:
    """The whole windows backed at once, as the ledger states or implies them."""
    if f.sized_tokens is not None and f.engine_sessions is None:
        # the engine sizes the pool: the windows of the kv-tokens prediction's range
        low, high = (tokens // f.max_model_len for tokens in f.sized_tokens)
        span = f"{low}" if low == high else f"{low}..{high}"
        return Prediction(
            id=SESSIONS_AT_WINDOW,
            claim=f"backs {span} {_sequences(high)} all at {f.max_model_len:,} tokens at once",
            value=f.whole_sessions,
            low=low,
            high=high,
            unit="sequences",
            derivation=f"{f.sized_tokens[0]:,}..{f.sized_tokens[1]:,} tokens (kv-tokens) // "
            f"{f.max_model_len:,}",
            closed_by="ledger",
            command=_verify_command(path),
        )
    n = f.whole_sessions
    claim = (
        f"backs {n} {_sequences(n)} {'all ' if n > 1 else ''}at {f.max_model_len:,} tokens at once"
    )
    return _point(
        SESSIONS_AT_WINDOW,
        claim,
        f.whole_sessions,
        "sequences",
        f.sessions_derivation,
        "ledger",
        _verify_command(path),
    )


def _boundary(path: str, f: Figures) -> Prediction:
    """Every slot at the full window at once: as many are served in full (accepted and
    answered, none refused or preempted) as windows are backed. Whether the model then
    repeats each prompt's marker is its quality, reported beside the verdict, not capacity."""
    seqs = f.max_num_seqs
    served = min(seqs, f.whole_sessions)
    return _point(
        BOUNDARY,
        f"{seqs} concurrent prompts of max_model_len - gen tokens each: "
        f"{served}/{seqs} are accepted and served in full (none refused or preempted)",
        served,
        "served",
        f"min({seqs} slots, {f.whole_sessions} full windows backed) = {served}",
        "probe boundary",
        f"fakplan probe {path} --url URL --only boundary",
    )


def _amount(low: int, high: int) -> str:
    """One figure, or a range where part of it is measured ("15,349..15,396 MiB")."""
    if low == high:
        return human(low)
    shown = human_pair(low, high)
    return f"{shown[0].rsplit(' ', 1)[0]}..{shown[1]}"


def _weights(path: str, f: Figures) -> Prediction:
    """The weights the boot loads fit their half of the pair (or, where the engine sizes
    the pool, are what fakplan counted, within the tolerance)."""
    term = next((t for t in f.sizing.terms if t.id == WEIGHTS), None) if f.sizing else None
    if term is not None:
        pct = f.sizing_tolerance_pct
        return _ledger_bytes(
            path,
            WEIGHTS,
            f"the boot loads {_amount(term.low, term.high)} of weights per rank (± {pct:g} %)",
            term.low,
            _widened(term.low, term.high, pct),
            term.derivation,
        )
    return Prediction(
        id=WEIGHTS,
        claim=f"the boot's weights fit budget.weights ({human(f.weights_budget_bytes)})",
        value=None,
        low=None,
        high=f.weights_budget_bytes,
        unit="B",
        derivation="budget.weights, the weights half of the pair",
        closed_by="ledger",
        command=_verify_command(path),
    )


def _unclaimed(path: str, f: Figures) -> Prediction | None:
    """The pair fits under the ceiling the boot measures; none without a ceiling."""
    if f.unclaimed_bytes is None:
        return None
    return Prediction(
        id=UNCLAIMED,
        claim=(
            f"the pair ({human(f.pair_bytes)}) fits under the ceiling the boot ledger "
            f"measures, {human(f.unclaimed_bytes)} unclaimed by the shape's ceiling"
        ),
        value=f.unclaimed_bytes,
        low=0,
        high=None,
        unit="B",
        derivation=f"ceiling - pair: {f.ceiling_derivation}",
        closed_by="ledger",
        command=_verify_command(path),
    )


def _expectation(shape: Shape, expectation: Expectation, path: str) -> Prediction:
    """An operator's expectation: a rate within a change of its control's, probed."""
    control = shape.control[expectation.control]
    low_pct, high_pct = expectation.change_pct
    low = round(control.value * (1 + low_pct / 100), 2)
    high = round(control.value * (1 + high_pct / 100), 2)
    probe = "decode" if expectation.metric == "decode_tps" else "prefill"
    return Prediction(
        id=expectation.id,
        claim=(
            f"{probe} {low_pct:+g}..{high_pct:+g} % vs {expectation.control} "
            f"({control.value:g} {control.unit}): {low:g}..{high:g} {control.unit}"
        ),
        value=None,
        low=low,
        high=high,
        unit=control.unit,
        derivation=expectation.note or f"declared against control {expectation.control}",
        closed_by="probe decode" if probe == "decode" else "probe prefill",
        command=f"fakplan probe {path} --url URL --only {probe}",
    )


def _sig(value: float) -> str:
    """Three significant figures with separators: rates are measured to a few percent."""
    if value <= 0 or not math.isfinite(value):
        return f"{value:g}"
    digits = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:,.{digits}f}"


def _tps(low: float, high: float) -> str:
    return f"{_sig(low)}..{_sig(high)} tokens/s"


def _probed_rate(
    id: str, claim: str, band: tuple[float, float], derivation: str, closed_by: ClosedBy, path: str
) -> Prediction:
    """A rate predicted before boot as an interval of tokens/s, closed by a probe."""
    return Prediction(
        id=id,
        claim=claim,
        value=None,
        low=band[0],
        high=band[1],
        unit="tokens/s",
        derivation=derivation,
        closed_by=closed_by,
        command=f"fakplan probe {path} --url URL --only {closed_by.removeprefix('probe ')}",
    )


def _rate_predictions(path: str, f: Figures, rates: RatesRecord | None) -> list[Prediction]:
    """The decode and prefill rates predicted before boot, each closed by its probe."""
    if rates is None:
        return []
    made = []
    decode = rates.decode
    if decode is not None:
        one = tuple(round(v, 2) for v in decode.one_session["per_session_tps"])
        worst = decode.worst_case
        loaded = decode.at_window
        every = tuple(round(v, 2) for v in loaded["per_session_tps"])
        made.append(
            _probed_rate(
                DECODE_TPS,
                f"with all {worst['sessions']} slots decoding at once near "
                f"{worst['context']:,} tokens, each session gets "
                f"{_tps(*every)} ({_tps(*loaded['aggregate_tps'])} in all; "
                f"at the full window {_tps(*worst['per_session_tps'])} a session); "
                "decode alone: prefills the engine runs in the same steps slow it further",
                (every[0], every[1]),
                decode.derivation,
                "probe decode-load",
                path,
            )
        )
        made.append(
            _probed_rate(
                DECODE_TPS_ONE,
                f"one session decodes at {_tps(*one)} (the decode probe's run, "
                f"context up to {decode.one_session['context']:,} tokens)",
                (one[0], one[1]),
                decode.derivation,
                "probe decode",
                path,
            )
        )
    prefill = rates.prefill
    if prefill is not None:
        ttft_low, ttft_high = prefill.ttft_s
        made.append(
            _probed_rate(
                PREFILL_TPS,
                f"a prompt of {prefill.prompt_tokens:,} tokens prefills at "
                f"{_tps(*prefill.prefill_tps)}: first token after "
                f"{ttft_low:.3g}..{ttft_high:.3g} s",
                prefill.prefill_tps,
                prefill.derivation,
                "probe prefill",
                path,
            )
        )
    return made


def predictions_for(
    shape: Shape, path: str, f: Figures, rates: RatesRecord | None = None
) -> tuple[Prediction, ...]:
    """What the plan claims, each with the observation that closes it (``path``: the shape
    file as the commands that close them name it)."""
    made = [
        _kv_tokens(shape, path, f),
        _sessions(path, f),
        _boundary(path, f),
        _weights(path, f),
        *_sized(path, f),
        _unclaimed(path, f),
        _draft_kv(path, f),
        *_rate_predictions(path, f, rates),
        *(_expectation(shape, expectation, path) for expectation in shape.expect),
    ]
    return tuple(p for p in made if p is not None)
