"""Close a plan's ledger predictions against what the engine said at boot.

Each prediction closed by the ledger gets a verdict: ``held`` (the observation
lies in its range), ``killed`` (it does not, or the boot failed), or
``unverifiable`` (the log does not state the figure) — with the observed value
and the log line it came from. A killed verdict's note says how far the
observation missed (``predict.miss``). Where ranks print different figures the
ledger gives the binding rank's; the weights are judged on the heaviest rank,
since every rank must fit its budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fakplan.ceiling import above_card, ceiling_from_ledger
from fakplan.contract import windows_held
from fakplan.engines import ENGINES, printed_pool_tokens, setup_of
from fakplan.errors import LedgerError, UnitsError
from fakplan.ledger import Ledger, LedgerFigure
from fakplan.ledger.model import spread
from fakplan.plan import Plan
from fakplan.predict import (
    ACTIVATION_PEAK,
    CONSUMED_BEYOND_WEIGHTS,
    CUDA_GRAPHS,
    DRAFT_KV,
    KV_POOL,
    KV_TOKENS,
    MEMORY_IN_USE,
    NON_KV,
    NON_TORCH,
    SESSIONS_AT_WINDOW,
    UNCLAIMED,
    WEIGHTS,
    Prediction,
    PredictionVerdict,
    judge,
    miss,
)
from fakplan.shape import LoadedShape
from fakplan.units import human, printed_interval


@dataclass(frozen=True)
class Observation:
    value: int | float | None
    source: str
    note: str = ""
    # the bytes the printed figure may stand for ("1.23 GiB" is any of an interval): a
    # prediction that meets that interval holds
    printed: tuple[int, int] | None = None


def _figure_source(ledger: Ledger, name: str, figure: LedgerFigure | None = None) -> str:
    figure = figure or ledger.figure(name)
    if figure is None:
        return f"{ledger.file}"
    derived = f" (derived: {figure.derivation})" if figure.derived and figure.derivation else ""
    return f"{ledger.file}:{figure.line}: {figure.text.strip()}{derived}"


def _per_rank(ledger: Ledger, name: str) -> dict[str, LedgerFigure]:
    return {label: per[name] for label, per in ledger.ranks.items() if name in per}


def _rank_note(ledger: Ledger, name: str) -> str:
    """Which rank's figure this is, where ranks state it differently."""
    per_rank = _per_rank(ledger, name)
    if not per_rank or ledger.binding_rank is None:
        return ""
    return f"the figure of {ledger.binding_rank}, the binding rank: {spread(name, per_rank)}"


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _unstated(ledger: Ledger, name: str, what: str) -> str:
    """Why a figure is missing: the line that prints it in a form no engine prints (a
    5,000-digit count, "1.2.3 GiB"), else that the log does not state it."""
    return ledger.unreadable.get(name, f"the log states no {what}")


def _kv_tokens(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    if ledger.kv_tokens is None:
        return Observation(None, ledger.file, _unstated(ledger, "kv_tokens", "KV token count"))
    return Observation(
        ledger.kv_tokens, _figure_source(ledger, "kv_tokens"), _rank_note(ledger, "kv_tokens")
    )


def _sessions(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    if ledger.n_seq_max is not None and ledger.kv_cells is not None:
        # the engine states its slots: a sequence needs one, so sessions are the slots
        # that hold a full window, not the cells // the window
        streams = ledger.n_stream or 1
        held = windows_held(ledger.kv_cells, streams, ledger.n_seq_max, plan.max_model_len)
        return Observation(
            held,
            _figure_source(ledger, "kv_cells"),
            f"{ledger.n_seq_max} slot(s), {ledger.kv_cells:,} cells x {streams} stream(s): "
            f"{held} hold a full window of {plan.max_model_len:,}",
        )
    if ledger.sequences_backed is not None:
        note = ""
        if ledger.sequence_tokens is not None and ledger.sequence_tokens != plan.max_model_len:
            note = f"the ledger's sequences are {ledger.sequence_tokens:,} tokens, the shape's window {plan.max_model_len:,}"
        return Observation(
            ledger.sequences_backed, _figure_source(ledger, "sequences_backed"), note
        )
    if ledger.kv_tokens is not None:
        whole = ledger.kv_tokens // plan.max_model_len
        return Observation(
            whole,
            _figure_source(ledger, "kv_tokens"),
            _joined(
                f"{ledger.kv_tokens:,} tokens // {plan.max_model_len:,}",
                _rank_note(ledger, "kv_tokens"),
            ),
        )
    return Observation(
        None,
        ledger.file,
        _joined(
            "the log states neither sequences backed nor KV tokens",
            *(ledger.unreadable.get(n, "") for n in ("sequences_backed", "kv_tokens")),
        ),
    )


def _weights(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    per_rank = {
        label: figure
        for label, figure in _per_rank(ledger, "weights_bytes").items()
        if isinstance(figure.value, int)
    }
    if per_rank:  # every rank must fit budget.weights: the heaviest is the one judged
        label, heaviest = max(per_rank.items(), key=lambda item: (item[1].value, item[0]))
        assert isinstance(heaviest.value, int)
        return Observation(
            heaviest.value,
            _figure_source(ledger, "weights_bytes", heaviest),
            f"{human(heaviest.value, 'MiB', 2)} loaded on {label}, the heaviest rank: "
            + spread("weights_bytes", per_rank),
            _printed_span(heaviest),
        )
    figure = ledger.figure("weights_bytes")
    if ledger.weights_bytes is None or figure is None:
        return Observation(None, ledger.file, _unstated(ledger, "weights_bytes", "weights size"))
    return Observation(
        ledger.weights_bytes,
        _figure_source(ledger, "weights_bytes"),
        f"{human(ledger.weights_bytes, 'MiB', 2)} loaded",
        _printed_span(figure),
    )


def _unclaimed(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    reading = ceiling_from_ledger(ledger, engine_floor)
    problem = above_card(reading, plan.card_total_bytes, ledger.file)
    if problem:  # as plan and gate refuse it: the log is not this card's
        raise LedgerError(problem)
    if reading.bytes is None:
        return Observation(None, ledger.file, reading.derivation)
    value = reading.bytes - plan.pair_bytes
    return Observation(
        value,
        f"{ledger.file}:{','.join(map(str, reading.lines))}",
        f"ceiling {reading.derivation}; minus the pair {human(plan.pair_bytes)}",
    )


def _printed_span(figure: LedgerFigure) -> tuple[int, int] | None:
    """The bytes a printed figure may stand for ("1.23 GiB" is an interval); None where
    the log gives no printed form to read. The digits are read in the unit the engine
    means (SGLang's printed "GB" is GiB)."""
    if figure.printed is None:
        return None
    number, _, _ = figure.printed.rpartition(" ")
    text = f"{number} {figure.unit}" if number and figure.unit else figure.printed
    try:
        low, _, high = printed_interval(text)
    except UnitsError:
        return None
    return low, high


def _summed_span(figures: Sequence[LedgerFigure | None]) -> tuple[int, int] | None:
    """Any sum of what several printed figures stand for; None where one is not printed."""
    spans = [span for f in figures if f is not None and (span := _printed_span(f)) is not None]
    if not spans or len(spans) < len(figures):
        return None
    return sum(low for low, _ in spans), sum(high for _, high in spans)


def _printed_bytes(ledger: Ledger, name: str, what: str) -> Observation:
    """A byte figure as the log prints it, with the interval its digits allow."""
    figure = ledger.figure(name)
    value = getattr(ledger, name)
    if figure is None or value is None:
        return Observation(None, ledger.file, _unstated(ledger, name, what))
    interval = _printed_span(figure)
    note = (
        f"printed {figure.printed}: any of {interval[0]:,}..{interval[1]:,} B" if interval else ""
    )
    return Observation(
        value, _figure_source(ledger, name), _joined(note, _rank_note(ledger, name)), interval
    )


def _kv_pool(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    seen = _printed_bytes(ledger, "kv_bytes", "KV pool size")
    if seen.printed is not None or seen.value is None:
        return seen
    # SGLang prints K and V apart: the pool is any sum of what the two prints stand for
    span = _summed_span([ledger.figure(n) for n in ("k_bytes", "v_bytes")])
    if span is None:
        return seen
    note = f"K + V as printed: any of {span[0]:,}..{span[1]:,} B"
    return Observation(seen.value, seen.source, _joined(note, seen.note), span)


def _activation_peak(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    return _printed_bytes(ledger, "activation_bytes", "activation peak (torch peak increase)")


def _non_torch(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    return _printed_bytes(ledger, "non_torch_bytes", "non-torch memory")


def _non_kv(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    return _printed_bytes(ledger, "consumed_bytes", "memory consumed by non-KV usages")


def _consumed_beyond_weights(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    """vLLM 0.27+: the consumed memory it prints less the weights it prints, an interval as
    wide as the two prints' roundings."""
    consumed, weights = ledger.figure("consumed_bytes"), ledger.figure("weights_bytes")
    if (
        consumed is None
        or weights is None
        or ledger.consumed_bytes is None
        or ledger.weights_bytes is None
    ):
        return Observation(
            None,
            ledger.file,
            _unstated(ledger, "consumed_bytes", "consumed memory and the weights"),
        )
    value = ledger.consumed_bytes - ledger.weights_bytes
    c_span, w_span = _printed_span(consumed), _printed_span(weights)
    span = None if c_span is None or w_span is None else (
        c_span[0] - w_span[1], c_span[1] - w_span[0]
    )  # fmt: skip
    note = f"consumed {consumed.printed} - weights {weights.printed}" + (
        f": any of {span[0]:,}..{span[1]:,} B" if span else ""
    )
    return Observation(value, _figure_source(ledger, "consumed_bytes"), note, span)


# half of the last digit of a llama.cpp cache size (printed to 0.01 MiB)
_HALF_CENTI_MIB = (1 << 20) // 200


def _draft_kv(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    """The draft's cache lines summed; each printed to 0.01 MiB, so the sum is an interval
    as wide as its lines' roundings."""
    figure = ledger.figure("draft_kv_bytes")
    lines = ledger.draft_kv_contexts
    if figure is None or ledger.draft_kv_bytes is None or lines is None:
        return Observation(None, ledger.file, _unstated(ledger, "draft_kv_bytes", "draft KV"))
    half = lines * _HALF_CENTI_MIB
    span = (ledger.draft_kv_bytes - half, ledger.draft_kv_bytes + half)
    note = f"{figure.derivation}: any of {span[0]:,}..{span[1]:,} B"
    return Observation(ledger.draft_kv_bytes, _figure_source(ledger, "draft_kv_bytes"), note, span)


def _cuda_graphs(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    return _printed_bytes(ledger, "graph_estimate_bytes", "CUDA-graph estimate")


def _memory_in_use(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    """What was in use before the weights loaded: the total the plan sized from less what
    SGLang found free then (printed, or the free after the weights plus their usage)."""
    before = ledger.figure("free_before_load_bytes")
    parts: list[LedgerFigure | None]
    if before is not None:
        parts, how = [before], "free before the weights"
    else:
        parts = [ledger.figure("free_after_weights_bytes"), ledger.figure("weights_bytes")]
        how = "free after the weights + their mem usage"
    found = [p for p in parts if p is not None and isinstance(p.value, int)]
    if plan.engine_sizing is None or len(found) < len(parts):
        return Observation(
            None,
            ledger.file,
            _unstated(ledger, "free_before_load_bytes", "free memory before the weights"),
        )
    total = plan.engine_sizing.total_bytes
    free = sum(int(p.value) for p in found)
    span = _summed_span(found)
    interval = None if span is None else (total - span[1], total - span[0])
    return Observation(
        total - free,
        _figure_source(ledger, "", found[0]),
        f"the plan's total {total:,} B - {how} {free:,} B"
        + (f" (any of {interval[0]:,}..{interval[1]:,} B as printed)" if interval else ""),
        interval,
    )


OBSERVERS: dict[str, Callable[[Ledger, Plan, int | None], Observation]] = {
    KV_TOKENS: _kv_tokens,
    SESSIONS_AT_WINDOW: _sessions,
    WEIGHTS: _weights,
    UNCLAIMED: _unclaimed,
    KV_POOL: _kv_pool,
    ACTIVATION_PEAK: _activation_peak,
    NON_TORCH: _non_torch,
    CONSUMED_BEYOND_WEIGHTS: _consumed_beyond_weights,
    NON_KV: _non_kv,
    MEMORY_IN_USE: _memory_in_use,
    CUDA_GRAPHS: _cuda_graphs,
    DRAFT_KV: _draft_kv,
}


# the tokens fakplan's arithmetic gives for a pool anywhere in [low, high] bytes
PoolCounts = Callable[[int, int], tuple[int, int]]


def ledger_verdicts(
    plan: Plan,
    ledger: Ledger,
    engine_floor: int | None = None,
    now: datetime | None = None,
    at_printed_pool: PoolCounts | None = None,
) -> dict[str, PredictionVerdict]:
    """A verdict for every prediction of ``plan`` that the ledger closes; with
    ``at_printed_pool``, the KV-token verdict also says what the arithmetic gives for the
    pool the log printed, read as the interval its digits allow."""
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    verdicts: dict[str, PredictionVerdict] = {}
    for prediction in plan.predictions:
        if prediction.closed_by != "ledger":
            continue
        verdicts[prediction.id] = _verdict(prediction, plan, ledger, engine_floor, at)
    tokens = verdicts.get(KV_TOKENS)
    note = _printed_pool_note(ledger, at_printed_pool) if at_printed_pool else ""
    if tokens is not None and note:
        verdicts[KV_TOKENS] = tokens.model_copy(update={"note": _joined(tokens.note, note)})
    return verdicts


def _printed_pool_note(ledger: Ledger, counts: PoolCounts) -> str:
    """What the arithmetic gives for the printed pool, and whether the printed count is it."""
    figure = ledger.figure("kv_bytes")
    span = None if figure is None else _printed_span(figure)
    if figure is None or span is None or ledger.kv_tokens is None:
        return ""
    low, high = span
    first, last = counts(low, high)
    got = f"{first:,}" if first == last else f"{first:,}..{last:,}"
    if first <= ledger.kv_tokens <= last:
        agrees = "the printed count"
    elif ledger.kv_tokens < first:
        # get_kv_cache_configs keeps the smallest block count over the workers
        agrees = (
            "the printed count is below: vLLM sizes every rank by the smallest pool over the "
            "workers and a log may show one rank's, so another rank's pool was smaller"
        )
    else:
        agrees = "not the printed count"
    return (
        f"at the printed pool {figure.printed} (any of {low:,}..{high:,} B) the arithmetic "
        f"gives {got} tokens: {agrees}"
    )


def _meets(prediction: Prediction, printed: tuple[int, int]) -> bool:
    """The printed interval and the predicted range share a byte."""
    low, high = printed
    return (prediction.low is None or high >= prediction.low) and (
        prediction.high is None or low <= prediction.high
    )


def _verdict(
    prediction: Prediction, plan: Plan, ledger: Ledger, engine_floor: int | None, at: str
) -> PredictionVerdict:
    if ledger.boot_failed:
        return PredictionVerdict(
            status="killed",
            observed=f"boot failed: {ledger.error or 'see the log'}",
            source=ledger.file,
            note="the engine refused the shape at boot",
            at=at,
        )
    observer = OBSERVERS.get(prediction.id)
    if observer is None:
        return PredictionVerdict(
            status="unverifiable",
            observed=None,
            source=ledger.file,
            note=f"no ledger figure closes {prediction.id}",
            at=at,
        )
    seen = observer(ledger, plan, engine_floor)
    if seen.value is None:
        return PredictionVerdict(
            status="unverifiable", observed=None, source=seen.source, note=seen.note, at=at
        )
    status = judge(prediction, seen.value)
    if status == "killed" and seen.printed is not None and _meets(prediction, seen.printed):
        status = "held"  # the digits printed cannot tell it from a figure in range
    missed = miss(prediction, seen.value) if status == "killed" else None
    return PredictionVerdict(
        status=status,
        observed=seen.value,
        source=seen.source,
        note=_joined(missed.text(seen.value, prediction.unit) if missed else "", seen.note),
        at=at,
    )


def printed_pool_counts(loaded: LoadedShape, ledger: Ledger) -> PoolCounts | None:
    """vLLM prints the pool it divides ("Available KV cache memory"): the shape's own
    arithmetic, applied to it, shows whether a missed count is the pool or the rule."""
    engine = ENGINES[loaded.shape.engine]
    bootlog = engine.boot_format()
    if not engine.log_prints_divided_pool or bootlog is None or ledger.engine != bootlog.name:
        return None
    query = setup_of(loaded).query

    def counts(low: int, high: int) -> tuple[int, int]:
        result = printed_pool_tokens(query, low, high)
        return (
            int(result.extra.get("tokens_low", result.tokens)),
            int(result.extra.get("tokens_high", result.tokens)),
        )

    return counts
