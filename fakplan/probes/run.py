"""One probe run against a deployed shape.

``run_probes`` detects the engine, then runs the selected probes in order
(kv, calibrate, boundary, decode, prefill), each under its own total timeout. A
probe that faults is recorded as failed with its one line and the others
still run. ``verdicts_for`` (``verdicts``) turns a run into verdicts for the
plan's predictions; nothing here writes files (the CLI records).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Protocol

from fakplan.engines import ENGINES, setup_of
from fakplan.errors import GeometryError, ProbeError
from fakplan.launch import served_name as launch_served_name
from fakplan.predict import Verdict
from fakplan.probes.api import Server
from fakplan.probes.boundary import AsyncClientFactory, BoundaryResult, boundary, chat_overhead
from fakplan.probes.calibrate import Calibration, Method, Sizer, calibrate
from fakplan.probes.capacity import capacity
from fakplan.probes.decode_load import decode_load
from fakplan.probes.detect import detect
from fakplan.probes.http import Deadline, Endpoint, ProbeFault
from fakplan.probes.outcomes import RUN_SCHEMA, ProbeOutcome, ProbeRun, Result, redacted
from fakplan.probes.rates import DEFAULT_DECODE_TOKENS, RateResult, decode, prefill
from fakplan.probes.verdicts import CAPACITY_CLOSES, verdicts_for

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape

# the run's names, wherever they are defined now: callers import them from here
__all__ = [
    "CAPACITY_CLOSES",
    "DEFAULT_PROBES",
    "DETECT_TIMEOUT_S",
    "PROBES",
    "RUN_SCHEMA",
    "ProbeOptions",
    "ProbeOutcome",
    "ProbeRun",
    "Progress",
    "Quiet",
    "eos_ids_for",
    "hint_for",
    "redacted",
    "run_document",
    "run_probes",
    "verdicts_for",
]

PROBES = ("kv", "calibrate", "boundary", "decode", "decode-load", "prefill")
# what a plain ``fakplan probe`` runs: decode-load fills every slot's window at once, a
# load an operator asks for by name (--only decode-load), not one a routine check sends
DEFAULT_PROBES = tuple(name for name in PROBES if name != "decode-load")
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
    only: tuple[str, ...] = DEFAULT_PROBES
    # probe an endpoint whose engine or served model is not the shape's (a renaming proxy):
    # the mismatch is then a note instead of a refusal
    any_endpoint: bool = False
    repeat: int = 3
    max_tokens: int = DEFAULT_DECODE_TOKENS
    timeout_s: float = 600.0  # total, per probe
    connect_timeout_s: float = 10.0
    calibrate_method: Method = "auto"
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # see api.Server.extra_body


def hint_for(loaded: LoadedShape) -> str | None:
    """The flavour the shape's engine names, for endpoints whose routes do not tell."""
    return ENGINES[loaded.shape.engine].probe_hint(setup_of(loaded))


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
    """The run's id and time. The id is unique to the run, whatever runs beside it: the
    microsecond and a random tail (a verdict's source carries it, and two runs in one
    second must not read as one observation)."""
    run_id = f"{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond:06d}Z-{secrets.token_hex(3)}"
    return run_id, now.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Header:
    """The run's id, time and notes: what its record opens with, whatever the probes do."""

    id: str
    at: str
    notes: list[str]


def _finish(
    loaded: LoadedShape,
    endpoint: Endpoint,
    header: _Header,
    server: dict[str, Any] | None,
    outcomes: Mapping[str, ProbeOutcome],
) -> ProbeRun:
    """The run in ``PROBES`` order, masked: the last gate before anything is reported."""
    ordered = {name: outcomes[name] for name in PROBES if name in outcomes}
    run = ProbeRun(
        id=header.id,
        at=header.at,
        shape=loaded.path.as_posix(),
        name=loaded.shape.name,
        url=endpoint.url,
        server=server,
        probes=ordered,
        notes=tuple(header.notes),
    )
    return redacted(run, endpoint)


def served_name(loaded: LoadedShape) -> str:
    """The model id the shape's endpoint lists (``launch.served_name``, as the alerts)."""
    return launch_served_name(loaded.shape)


def _same_model(listed: str, planned: str) -> bool:
    """An id names the planned model: the same text, or the same file (an engine lists a
    path as it was given, relative or absolute)."""
    if listed == planned:
        return True
    looks_like_path = any(
        x.endswith((".gguf", "/")) or x.startswith((".", "/")) for x in (listed, planned)
    )
    return looks_like_path and PurePath(listed).name == PurePath(planned).name


def endpoint_mismatch(loaded: LoadedShape, server: Server) -> str | None:
    """Why the endpoint is not the one the shape plans (another engine, another model), or
    None. Verdicts from another endpoint would be recorded against the wrong plan."""
    problems = []
    engine = loaded.shape.engine
    # an engine fakplan does not model (custom) may be served by any server
    modelled = not ENGINES[engine].needs_contract
    if modelled and server.flavour.engine not in (None, engine):
        problems.append(
            f"it is {server.flavour.name} ({server.evidence}), the shape's engine is {engine}"
        )
    planned = served_name(loaded)
    if server.models and not any(_same_model(m, planned) for m in server.models):
        listed = ", ".join(repr(m) for m in server.models[:3])
        problems.append(
            f"it serves {listed}, the shape {planned!r} (launch.served_model_name, else "
            "launch.weights or model)"
        )
    return "; ".join(problems) or None


def _window_note(server: Server, window: int) -> str | None:
    """A note where the server's own window differs from the shape's (prompts follow the shape)."""
    if server.context is None or server.context == window:
        return None
    return (
        f"the server states a {server.context:,}-token window; the shape's max_model_len "
        f"is {window:,} (prompts are sized to the shape)"
    )


@dataclass
class _Session:
    """One run's probes against a detected server: each probe a step, each outcome kept.

    The steps run in ``PROBES`` order because later ones use earlier results:
    boundary and prefill size their prompts from the calibration, and prefill
    reuses the chat template size boundary measured.
    """

    loaded: LoadedShape
    endpoint: Endpoint
    async_client: AsyncClientFactory
    options: ProbeOptions
    show: Progress
    server: Server
    outcomes: dict[str, ProbeOutcome] = field(default_factory=dict)
    calibration: Calibration | None = None
    overhead: int | None = None

    @property
    def window(self) -> int:
        return self.loaded.shape.serving.max_model_len

    def run(self) -> None:
        """Every selected probe, and calibrate also where boundary or prefill needs it."""
        only = self.options.only
        if "kv" in only:
            self._attempt("kv", 1, lambda d: capacity(self.endpoint, self.server, d))
        if "calibrate" in only or {"boundary", "prefill", "decode-load"} & set(only):
            self._calibrate(requested="calibrate" in only)
        if "boundary" in only:
            found = self._attempt("boundary", 1, self._boundary)
            if isinstance(found, BoundaryResult):
                self.overhead = found.chat_overhead_tokens
        if "decode" in only:
            self._attempt("decode", 2 * self.options.repeat, self._decode)
        if "decode-load" in only:
            self._attempt("decode-load", 1, self._decode_load)
        if "prefill" in only:
            self._attempt("prefill", self.options.repeat, self._prefill)

    def _attempt(
        self, name: str, steps: int, body: Callable[[Deadline], Result], *, requested: bool = True
    ) -> Result | None:
        """``body`` under a fresh deadline; a fault is recorded as the probe's failure."""
        self.show.begin(name, steps)
        start = time.monotonic()
        try:
            result = body(Deadline(self.options.timeout_s))
        except ProbeFault as exc:
            self.outcomes[name] = ProbeOutcome(
                status="failed",
                requested=requested,
                seconds=round(time.monotonic() - start, 3),
                error=str(exc),
            )
            self.show.end(name, "failed")
            return None
        self.outcomes[name] = ProbeOutcome(
            status="ok",
            requested=requested,
            seconds=round(time.monotonic() - start, 3),
            result=result,
        )
        self.show.end(name, "ok")
        return result

    def _calibrate(self, *, requested: bool) -> None:
        """The corpus's chars/token, kept for sizing (run unasked when sizing needs it)."""
        found = self._attempt(
            "calibrate",
            1,
            lambda d: calibrate(
                self.endpoint, self.server, self.window, d, self.options.calibrate_method
            ),
            requested=requested,
        )
        self.calibration = found if isinstance(found, Calibration) else None

    def _sizer(self, deadline: Deadline) -> Sizer:
        """Prompts sized from the calibration: a fault where it failed."""
        if self.calibration is None:
            raise ProbeFault("needs the calibration, which failed (see calibrate)")
        return Sizer(self.endpoint, self.server, self.calibration, deadline)

    def _boundary(self, deadline: Deadline) -> BoundaryResult:
        return boundary(
            self.endpoint,
            self.async_client,
            self.server,
            self._sizer(deadline),
            slots=self.loaded.shape.serving.max_num_seqs,
            window=self.window,
            deadline=deadline,
        )

    def _decode(self, deadline: Deadline) -> RateResult:
        return decode(
            self.endpoint,
            self.server,
            max_tokens=self.options.max_tokens,
            repeat=self.options.repeat,
            deadline=deadline,
            window=self.window,
            progress=lambda text: self.show.step("decode", text),
        )

    def _decode_load(self, deadline: Deadline) -> RateResult:
        return decode_load(
            self.endpoint,
            self.server,
            self._sizer(deadline),
            slots=self.loaded.shape.serving.max_num_seqs,
            window=self.window,
            max_tokens=self.options.max_tokens,
            deadline=deadline,
            progress=lambda text: self.show.step("decode-load", text),
        )

    def _prefill(self, deadline: Deadline) -> RateResult:
        """The prefill rate, the chat template counted where boundary did not count it."""
        sizer = self._sizer(deadline)
        template = (
            self.overhead
            if self.overhead is not None
            else chat_overhead(self.endpoint, self.server, sizer, deadline)
        )
        return prefill(
            self.endpoint,
            self.server,
            sizer,
            window=self.window,
            repeat=self.options.repeat,
            deadline=deadline,
            overhead=template,
            progress=lambda text: self.show.step("prefill", text),
        )


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
    run_id, at = _stamp(now())
    eos_ids, eos_note = eos_ids_for(loaded)
    header = _Header(run_id, at, [eos_note] if eos_note else [])
    try:
        server = detect(
            endpoint,
            Deadline(min(DETECT_TIMEOUT_S, options.timeout_s)),
            hint=hint_for(loaded),
            eos_ids=eos_ids,
            extra_body=options.extra_body,
        )
    except ProbeFault as exc:
        failed = ProbeOutcome(status="failed", error=f"engine detection: {exc}")
        return _finish(loaded, endpoint, header, None, dict.fromkeys(options.only, failed))
    mismatch = endpoint_mismatch(loaded, server)
    if mismatch and not options.any_endpoint:
        raise ProbeError(
            f"{endpoint.url} is not the endpoint {loaded.path.as_posix()} plans: {mismatch}; "
            "check --url, or pass --any-endpoint to probe it anyway"
        )
    if mismatch:
        header.notes.append(f"probed despite a mismatch (--any-endpoint): {mismatch}")
    note = _window_note(server, loaded.shape.serving.max_model_len)
    if note:
        header.notes.append(note)
    session = _Session(loaded, endpoint, async_client, options, progress or Quiet(), server)
    session.run()
    return _finish(loaded, endpoint, header, server.to_dict(), session.outcomes)


def run_document(
    run: ProbeRun,
    options: ProbeOptions,
    verdicts: dict[str, Verdict],
    record: Path | None,
    raw: Path,
    code: int,
) -> dict[str, Any]:
    """The raw record of the run (and what ``--json`` prints): figures, options, verdicts."""
    return {
        **run.to_dict(),
        "options": {
            "only": list(options.only),
            "repeat": options.repeat,
            "max_tokens": options.max_tokens,
            "timeout_s": options.timeout_s,
        },
        "verdicts": {pid: v.model_dump(mode="json") for pid, v in verdicts.items()},
        "record": record.as_posix() if record else None,
        "raw": raw.as_posix(),
        "exit": code,
    }
