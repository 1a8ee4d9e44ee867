"""Live probes of a deployed OpenAI-compatible endpoint: calibrate, boundary, decode, prefill.

Pure core, thin edge: request bodies, refusal parsing, statistics and
verdict rules are pure (``api``, ``refusals``, ``stats``, ``verdicts``);
HTTP goes through ``http.Endpoint`` over an ``httpx.Client`` the caller owns
(tests inject ``httpx.MockTransport``), and concurrent prompts through async
clients the caller's factory makes. Usage::

    import httpx
    from fakplan.probes import Endpoint, ProbeOptions, run_probes, verdicts_for

    with httpx.Client() as client:
        endpoint = Endpoint(client, "http://127.0.0.1:8000", api_key=key)
        run = run_probes(loaded, endpoint, httpx.AsyncClient, ProbeOptions(only=("decode",)))
    verdicts = verdicts_for(run, compile_plan(loaded))

Errors: ``ProbeFault`` fails one probe (``run_probes`` records it and goes
on); ``fakplan.errors.ProbeError`` is an endpoint that cannot be probed at all
(a malformed URL), which the CLI reports as bad input.
"""

from fakplan.probes.api import Server
from fakplan.probes.boundary import BoundaryResult, boundary
from fakplan.probes.calibrate import Calibration, Sizer, calibrate
from fakplan.probes.capacity import CapacityResult, capacity
from fakplan.probes.corpus import corpus
from fakplan.probes.detect import detect
from fakplan.probes.flavours import Flavour, flavours
from fakplan.probes.http import AsyncEndpoint, Deadline, Endpoint, ProbeFault
from fakplan.probes.rates import MIN_DECODE_TOKENS, RateResult, decode, prefill
from fakplan.probes.refusals import Refusal, parse_refusal
from fakplan.probes.run import (
    DEFAULT_PROBES,
    PROBES,
    RUN_SCHEMA,
    ProbeOptions,
    ProbeOutcome,
    ProbeRun,
    run_document,
    run_probes,
    verdicts_for,
)
from fakplan.probes.stats import NOISE_FLOOR_PCT, Summary, judge_band, summarize, trend

__all__ = [
    "DEFAULT_PROBES",
    "MIN_DECODE_TOKENS",
    "NOISE_FLOOR_PCT",
    "PROBES",
    "RUN_SCHEMA",
    "AsyncEndpoint",
    "BoundaryResult",
    "Calibration",
    "CapacityResult",
    "Deadline",
    "Endpoint",
    "Flavour",
    "ProbeFault",
    "ProbeOptions",
    "ProbeOutcome",
    "ProbeRun",
    "RateResult",
    "Refusal",
    "Server",
    "Sizer",
    "Summary",
    "boundary",
    "calibrate",
    "capacity",
    "corpus",
    "decode",
    "detect",
    "flavours",
    "judge_band",
    "parse_refusal",
    "prefill",
    "run_document",
    "run_probes",
    "summarize",
    "trend",
    "verdicts_for",
]
