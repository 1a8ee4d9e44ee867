"""One probe run against a deployed shape, and the verdicts it gives its predictions.

``run_probes`` detects the engine, then runs the selected probes in order
(kv, calibrate, boundary, decode, prefill), each under its own total timeout. A
probe that faults is recorded as failed with its one line and the others
still run. ``verdicts_for`` turns a run into verdicts for the plan's
predictions; nothing here writes files (the CLI records).

Verdict rules:

- ``kv``: the KV tokens the engine states live (vLLM's ``/metrics``) close
  ``kv-tokens`` within its tolerance and ``sessions-at-window`` as
  ``tokens // max_model_len``, exactly as vLLM's boot ledger would; an engine
  that states nothing gives no verdict.

- ``boundary``: held when the markers retrieved are at least the predicted
  count (the prediction is a floor: ``min(slots, whole windows backed)``;
  more retrieved than predicted is reported, not a kill); killed when fewer;
  unverifiable when the engine counted the prompts outside -3 %..+1 % of
  ``max_model_len - gen`` (the boundary was not the one predicted).
- decode / prefill expectations: the figure (median of the repetitions) is
  held inside [low, high]; killed when even its noise band (the spread, at
  least ±3 %) misses the range; otherwise "inside noise". A decode run that
  generated under 128 tokens is unverifiable. A change against the previous
  recorded figure of a like run (same size and basis) inside the noise band is
  reported as such, never as a trend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from fakplan.engines import ENGINES
from fakplan.errors import GeometryError
from fakplan.predict import KV_TOKENS, SESSIONS_AT_WINDOW, Prediction, Verdict, judge
from fakplan.probes.boundary import AsyncClientFactory, BoundaryResult, boundary, chat_overhead
from fakplan.probes.calibrate import Calibration, Method, Sizer, calibrate
from fakplan.probes.capacity import CapacityResult, capacity
from fakplan.probes.detect import detect
from fakplan.probes.http import Deadline, Endpoint, ProbeFault
from fakplan.probes.rates import DEFAULT_DECODE_TOKENS, RateResult, decode, prefill
from fakplan.probes.stats import judge_band, trend

if TYPE_CHECKING:
    from fakplan.plan import Plan
    from fakplan.shape import LoadedShape

PROBES = ("kv", "calibrate", "boundary", "decode", "prefill")
# the plan's ledger predictions a live statement of the KV pool also closes
CAPACITY_CLOSES = (KV_TOKENS, SESSIONS_AT_WINDOW)
RUN_SCHEMA = "fakplan.probe/1"
DETECT_TIMEOUT_S = 30.0


class Progress(Protocol):
    """Told when a probe starts, finishes a step, and ends (the CLI draws it)."""

    def begin(self, probe: str, steps: int) -> None: ...
    def step(self, probe: str, text: str) -> None: ...
    def end(self, probe: str, status: str) -> None: ...


class Quiet:
    """No progress display."""

    def begin(self, probe: str, steps: int) -> None:
        pass

    def step(self, probe: str, text: str) -> None:
        pass

    def end(self, probe: str, status: str) -> None:
        pass


@dataclass(frozen=True)
class ProbeOptions:
    only: tuple[str, ...] = PROBES
    repeat: int = 3
    max_tokens: int = DEFAULT_DECODE_TOKENS
    timeout_s: float = 600.0  # total, per probe
    connect_timeout_s: float = 10.0
    calibrate_method: Method = "auto"
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # see api.Server.extra_body


Result = CapacityResult | Calibration | BoundaryResult | RateResult


class ProbeOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["ok", "failed"]
    requested: bool = True  # False: run only because a later probe needed it
    seconds: float | None = None
    error: str | None = None
    result: Result | None = None


class ProbeRun(BaseModel):
    """Everything one run measured (schema ``fakplan.probe/1``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: str = RUN_SCHEMA
    id: str  # the UTC timestamp that names the raw record
    at: str  # ISO 8601, UTC
    shape: str
    name: str
    url: str
    server: dict[str, Any] | None
    probes: dict[str, ProbeOutcome]
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> dict[str, str]:
        return {
            name: outcome.error or "failed"
            for name, outcome in self.probes.items()
            if outcome.status == "failed" and outcome.requested
        }

    def result(self, name: str) -> Result | None:
        outcome = self.probes.get(name)
        return outcome.result if outcome and outcome.status == "ok" else None

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        return {"schema": data.pop("schema_"), **data}


def redacted(run: ProbeRun, endpoint: Endpoint) -> ProbeRun:
    """``run`` with the API key masked in every string it holds, whatever a server echoed.

    The last gate before anything is reported: errors, notes, results and the
    server's model id all quote the server, and a quote may hold part of the key.
    """
    return ProbeRun.model_validate(endpoint.redact(run.model_dump()))


def hint_for(loaded: LoadedShape) -> str | None:
    """The flavour the shape's engine names, for endpoints whose routes do not tell."""
    return ENGINES[loaded.shape.engine].probe_hint(loaded)


def eos_ids_for(loaded: LoadedShape) -> tuple[tuple[int, ...], str | None]:
    """EOS and EOT ids from the shape's GGUF (for servers without ``ignore_eos``)."""
    from fakplan.geometry.gguf_header import read_header

    shape = loaded.shape
    for reference in (shape.launch.weights, shape.model):
        if not reference or not reference.endswith(".gguf"):
            continue
        path = loaded.resolve(reference)
        if not path.is_file():
            continue
        try:
            metadata = read_header(path).metadata
        except (GeometryError, OSError) as exc:
            return (), f"EOS id not read from {reference}: {exc}"
        ids = tuple(
            dict.fromkeys(
                value
                for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")
                if isinstance(value := metadata.get(key), int)
            )
        )
        return ids, f"EOS id(s) {', '.join(map(str, ids))} from {reference}" if ids else None
    return (), None


def _stamp(now: datetime) -> tuple[str, str]:
    return now.strftime("%Y%m%dT%H%M%SZ"), now.isoformat(timespec="seconds").replace("+00:00", "Z")


def run_probes(
    loaded: LoadedShape,
    endpoint: Endpoint,
    async_client: AsyncClientFactory,
    options: ProbeOptions = ProbeOptions(),
    progress: Progress | None = None,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ProbeRun:
    """Run ``options.only`` against ``endpoint`` for ``loaded``'s shape."""
    show = progress or Quiet()
    shape = loaded.shape
    window, slots = shape.serving.max_model_len, shape.serving.max_num_seqs
    run_id, at = _stamp(now())
    eos_ids, eos_note = eos_ids_for(loaded)
    notes = [eos_note] if eos_note else []
    outcomes: dict[str, ProbeOutcome] = {}

    def finish(server: dict[str, Any] | None) -> ProbeRun:
        ordered = {name: outcomes[name] for name in PROBES if name in outcomes}
        run = ProbeRun(
            id=run_id,
            at=at,
            shape=loaded.path.as_posix(),
            name=shape.name,
            url=endpoint.url,
            server=server,
            probes=ordered,
            notes=tuple(notes),
        )
        return redacted(run, endpoint)

    try:
        server = detect(
            endpoint,
            Deadline(min(DETECT_TIMEOUT_S, options.timeout_s)),
            hint=hint_for(loaded),
            eos_ids=eos_ids,
            extra_body=options.extra_body,
        )
    except ProbeFault as exc:
        for name in options.only:
            outcomes[name] = ProbeOutcome(status="failed", error=f"engine detection: {exc}")
        return finish(None)
    if server.context is not None and server.context != window:
        notes.append(
            f"the server states a {server.context:,}-token window; the shape's max_model_len "
            f"is {window:,} (prompts are sized to the shape)"
        )

    def attempt(
        name: str, steps: int, body: Callable[[Deadline], Result], *, requested: bool = True
    ) -> Result | None:
        show.begin(name, steps)
        start = time.monotonic()
        try:
            result = body(Deadline(options.timeout_s))
        except ProbeFault as exc:
            outcomes[name] = ProbeOutcome(
                status="failed",
                requested=requested,
                seconds=round(time.monotonic() - start, 3),
                error=str(exc),
            )
            show.end(name, "failed")
            return None
        outcomes[name] = ProbeOutcome(
            status="ok",
            requested=requested,
            seconds=round(time.monotonic() - start, 3),
            result=result,
        )
        show.end(name, "ok")
        return result

    if "kv" in options.only:
        attempt("kv", 1, lambda d: capacity(endpoint, server, d))
    calibration: Calibration | None = None
    sizing = [p for p in ("boundary", "prefill") if p in options.only]
    if "calibrate" in options.only or sizing:
        found = attempt(
            "calibrate",
            1,
            lambda d: calibrate(endpoint, server, window, d, options.calibrate_method),
            requested="calibrate" in options.only,
        )
        calibration = found if isinstance(found, Calibration) else None
    overhead: int | None = None
    if "boundary" in options.only:

        def run_boundary(deadline: Deadline) -> BoundaryResult:
            if calibration is None:
                raise ProbeFault("needs the calibration, which failed (see calibrate)")
            return boundary(
                endpoint,
                async_client,
                server,
                Sizer(endpoint, server, calibration, deadline),
                slots=slots,
                window=window,
                deadline=deadline,
            )

        found_b = attempt("boundary", 1, run_boundary)
        if isinstance(found_b, BoundaryResult):
            overhead = found_b.chat_overhead_tokens
    if "decode" in options.only:
        attempt(
            "decode",
            2 * options.repeat,
            lambda d: decode(
                endpoint,
                server,
                max_tokens=options.max_tokens,
                repeat=options.repeat,
                deadline=d,
                window=window,
                progress=lambda text: show.step("decode", text),
            ),
        )
    if "prefill" in options.only:

        def run_prefill(deadline: Deadline) -> RateResult:
            if calibration is None:
                raise ProbeFault("needs the calibration, which failed (see calibrate)")
            sizer = Sizer(endpoint, server, calibration, deadline)
            template = (
                overhead
                if overhead is not None
                else chat_overhead(endpoint, server, sizer, deadline)
            )
            return prefill(
                endpoint,
                server,
                sizer,
                window=window,
                repeat=options.repeat,
                deadline=deadline,
                overhead=template,
                progress=lambda text: show.step("prefill", text),
            )

        attempt("prefill", options.repeat, run_prefill)
    return finish(server.to_dict())


# --------------------------------------------------------------------- verdicts


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
    expected = int(prediction.value or 0)
    facts = (
        f"{result.retrieved}/{result.slots} markers retrieved (predicted {expected}); "
        f"{result.answered} answered, {result.refused} refused, {result.preempted} preempted, "
        f"{result.failed} failed; prompts of {result.target_tokens:,} tokens"
    )
    if result.latency_s:
        facts += f"; latency median {result.latency_s['median']:g} s"
    if not result.sized_ok:
        return Verdict(
            status="unverifiable",
            observed=result.retrieved,
            source=source,
            at=at,
            note=f"{facts}; the engine counted the prompts off their target, so this was not "
            "the predicted boundary",
        )
    if result.retrieved >= expected:
        more = " (more than predicted)" if result.retrieved > expected else ""
        return Verdict(
            status="held", observed=result.retrieved, source=source, at=at, note=facts + more
        )
    return Verdict(status="killed", observed=result.retrieved, source=source, at=at, note=facts)


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
