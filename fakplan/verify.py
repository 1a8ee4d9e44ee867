"""Close a plan's ledger predictions against what the engine said at boot.

Each prediction closed by the ledger gets a verdict: ``held`` (the observation
lies in its range), ``killed`` (it does not, or the boot failed), or
``unverifiable`` (the log does not state the figure) — with the observed value
and the log line it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fakplan.ceiling import ceiling_from_ledger
from fakplan.ledger import Ledger
from fakplan.plan import Plan
from fakplan.predict import Prediction, Verdict, judge
from fakplan.units import human


@dataclass(frozen=True)
class Observation:
    value: int | float | None
    source: str
    note: str = ""


def _figure_source(ledger: Ledger, name: str) -> str:
    figure = ledger.figure(name)
    if figure is None:
        return f"{ledger.file}"
    derived = f" (derived: {figure.derivation})" if figure.derived and figure.derivation else ""
    return f"{ledger.file}:{figure.line}: {figure.text.strip()}{derived}"


def _kv_tokens(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    if ledger.kv_tokens is None:
        return Observation(None, ledger.file, "the log states no KV token count")
    return Observation(ledger.kv_tokens, _figure_source(ledger, "kv_tokens"))


def _sessions(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
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
            f"{ledger.kv_tokens:,} tokens // {plan.max_model_len:,}",
        )
    return Observation(None, ledger.file, "the log states neither sequences backed nor KV tokens")


def _weights(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    if ledger.weights_bytes is None:
        return Observation(None, ledger.file, "the log states no weights size")
    return Observation(
        ledger.weights_bytes,
        _figure_source(ledger, "weights_bytes"),
        f"{human(ledger.weights_bytes, 'MiB', 2)} loaded",
    )


def _unclaimed(ledger: Ledger, plan: Plan, engine_floor: int | None) -> Observation:
    reading = ceiling_from_ledger(ledger, engine_floor)
    if reading.bytes is None:
        return Observation(None, ledger.file, reading.derivation)
    value = reading.bytes - plan.pair_bytes
    return Observation(
        value,
        f"{ledger.file}:{','.join(map(str, reading.lines))}",
        f"ceiling {reading.derivation}; minus the pair {human(plan.pair_bytes)}",
    )


OBSERVERS: dict[str, Callable[[Ledger, Plan, int | None], Observation]] = {
    "kv-tokens": _kv_tokens,
    "sessions-at-window": _sessions,
    "weights": _weights,
    "unclaimed": _unclaimed,
}


def ledger_verdicts(
    plan: Plan, ledger: Ledger, engine_floor: int | None = None, now: datetime | None = None
) -> dict[str, Verdict]:
    """A verdict for every prediction of ``plan`` that the ledger closes."""
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    verdicts: dict[str, Verdict] = {}
    for prediction in plan.predictions:
        if prediction.closed_by != "ledger":
            continue
        verdicts[prediction.id] = _verdict(prediction, plan, ledger, engine_floor, at)
    return verdicts


def _verdict(
    prediction: Prediction, plan: Plan, ledger: Ledger, engine_floor: int | None, at: str
) -> Verdict:
    if ledger.boot_failed:
        return Verdict(
            status="killed",
            observed=f"boot failed: {ledger.error or 'see the log'}",
            source=ledger.file,
            note="the engine refused the shape at boot",
            at=at,
        )
    observer = OBSERVERS.get(prediction.id)
    if observer is None:
        return Verdict(
            status="unverifiable",
            observed=None,
            source=ledger.file,
            note=f"no ledger figure closes {prediction.id}",
            at=at,
        )
    seen = observer(ledger, plan, engine_floor)
    if seen.value is None:
        return Verdict(
            status="unverifiable", observed=None, source=seen.source, note=seen.note, at=at
        )
    return Verdict(
        status=judge(prediction, seen.value),
        observed=seen.value,
        source=seen.source,
        note=seen.note,
        at=at,
    )
