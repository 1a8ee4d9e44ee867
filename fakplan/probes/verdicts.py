"""The verdicts one probe run gives the plan's predictions (pure: nothing here does I/O).

Verdict rules:

- ``kv``: the KV tokens the engine states live (vLLM's ``/metrics``) close
  ``kv-tokens`` within its tolerance and ``sessions-at-window`` as
  ``tokens // max_model_len``, exactly as vLLM's boot ledger would; an engine
  that states nothing gives no verdict.

- ``boundary``: held when the prompts served in full at the window (accepted and
  answered, none refused or preempted) are at least the predicted count (a floor:
  ``min(slots, whole windows backed)``; more than predicted is reported, not a
  kill); killed when fewer; unverifiable when the engine counted the prompts
  outside -3 %..+1 % of ``max_model_len - gen`` (the boundary was not the one
  predicted). The markers repeated are the model's quality, in the note only.
- decode / prefill expectations: the figure (median of the repetitions) is
  held inside [low, high]; killed when even its noise band (the spread, at
  least ±3 %) misses the range; otherwise "inside noise". A decode run that
  generated under 128 tokens is unverifiable. A change against the previous
  recorded figure of a like run (same size and basis) inside the noise band is
  reported as such, never as a trend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.predict import KV_TOKENS, SESSIONS_AT_WINDOW, Prediction, Verdict, judge
from fakplan.probes.boundary import BoundaryResult
from fakplan.probes.capacity import CapacityResult
from fakplan.probes.outcomes import ProbeRun
from fakplan.probes.rates import RateResult
from fakplan.probes.stats import judge_band, trend

if TYPE_CHECKING:
    from fakplan.plan import Plan

# the plan's ledger predictions a live statement of the KV pool also closes
CAPACITY_CLOSES = (KV_TOKENS, SESSIONS_AT_WINDOW)


def _previous(previous: Plan | None, prediction_id: str, like: str) -> float | None:
    """The last figure recorded for this prediction by a run ``like`` this one.

    Runs of another size or basis (512 against 128 tokens, streamed against
    non-streamed) are different measurements, not points of one trend.
    """
    if previous is None:
        return None
    for prediction in previous.predictions:
        if prediction.id == prediction_id:
            for verdict in reversed(prediction.verdicts):
                if verdict.source.endswith(f"; {like})") and isinstance(
                    verdict.observed, int | float
                ):
                    return float(verdict.observed)
    return None


def _boundary_verdict(
    prediction: Prediction, result: BoundaryResult, source: str, at: str
) -> Verdict:
    """Capacity: the prompts served in full at the window. The markers the model repeated
    are its quality (a random-weight model repeats none), said in the note, never judged."""
    expected = int(prediction.value or 0)
    facts = (
        f"{result.answered}/{result.slots} served in full at {result.target_tokens:,} tokens "
        f"(predicted {expected}); {result.refused} refused, {result.preempted} preempted, "
        f"{result.failed} failed"
    )
    if result.latency_s:
        facts += f"; latency median {result.latency_s['median']:g} s"
    facts += (
        f"; model quality, not capacity: {result.retrieved}/{result.answered or result.slots} "
        "repeated the marker at their head"
    )
    if not result.sized_ok:
        return Verdict(
            status="unverifiable",
            observed=result.answered,
            source=source,
            at=at,
            note=f"{facts}; the engine counted the prompts off their target, so this was not "
            "the predicted boundary",
        )
    if result.answered >= expected:
        more = " (more than predicted)" if result.answered > expected else ""
        return Verdict(
            status="held", observed=result.answered, source=source, at=at, note=facts + more
        )
    return Verdict(status="killed", observed=result.answered, source=source, at=at, note=facts)


def _rate_verdict(
    prediction: Prediction, result: RateResult, source: str, at: str, previous: float | None
) -> Verdict:
    if result.figure is None:
        return Verdict(
            status="unverifiable",
            observed=None,
            source=source,
            at=at,
            note=f"no {result.probe} figure: " + "; ".join(result.notes),
        )
    spread = result.spread or {}
    facts = (
        f"{result.figure:,.2f} {prediction.unit} ({result.basis}, median of "
        f"{spread.get('n', result.repeat)}, spread ±{spread.get('spread_pct', 0):.1f} %, noise "
        f"band ±{result.noise_pct:.1f} %) against {prediction.low:g}..{prediction.high:g}"
    )
    if result.bound_by:
        facts += f"; {result.bound_by}"
    if previous is not None:
        facts += "; " + trend(previous, result.figure, result.noise_pct).text()
    if result.short:
        return Verdict(
            status="unverifiable",
            observed=result.figure,
            source=source,
            at=at,
            note=f"{facts}; " + "; ".join(result.notes),
        )
    low = float(prediction.low if prediction.low is not None else float("-inf"))
    high = float(prediction.high if prediction.high is not None else float("inf"))
    status = judge_band(result.figure, result.noise_pct, low, high)
    if status == "inside noise":
        facts += "; the miss is inside the noise band: repeat with a larger --repeat"
    return Verdict(status=status, observed=result.figure, source=source, at=at, note=facts)


def _capacity_verdict(
    prediction: Prediction, result: CapacityResult, plan: Plan, source: str, at: str
) -> Verdict | None:
    tokens = result.kv_tokens
    if tokens is None:
        return None
    if prediction.id == KV_TOKENS:
        observed, note = tokens, f"the engine states {tokens:,} KV tokens"
    else:
        observed = tokens // plan.max_model_len
        note = f"{tokens:,} tokens // {plan.max_model_len:,}"
    return Verdict(
        status=judge(prediction, observed), observed=observed, source=source, at=at, note=note
    )


def verdicts_for(run: ProbeRun, plan: Plan, previous: Plan | None = None) -> dict[str, Verdict]:
    """Verdicts for the plan's probe predictions this run observed; ``previous`` for trends."""
    out: dict[str, Verdict] = {}
    stated = run.result("kv")
    if isinstance(stated, CapacityResult):
        source = f"fakplan probe kv {run.url} (run {run.id}): {stated.statement}"
        for prediction in plan.predictions:
            if prediction.id in CAPACITY_CLOSES:
                verdict = _capacity_verdict(prediction, stated, plan, source, run.at)
                if verdict is not None:
                    out[prediction.id] = verdict
    for prediction in plan.predictions:
        probe = prediction.closed_by.removeprefix("probe ")
        result = run.result(probe) if prediction.closed_by.startswith("probe ") else None
        if result is None:
            continue
        if isinstance(result, BoundaryResult):
            source = f"fakplan probe {probe} {run.url} (run {run.id})"
            out[prediction.id] = _boundary_verdict(prediction, result, source, run.at)
        elif isinstance(result, RateResult):
            like = f"{result.tokens} tokens, {result.basis}"
            source = f"fakplan probe {probe} {run.url} (run {run.id}; {like})"
            before = _previous(previous, prediction.id, like)
            out[prediction.id] = _rate_verdict(prediction, result, source, run.at, before)
    return out
