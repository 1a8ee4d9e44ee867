"""The post-deploy probe suite: ``pytest probes/ --probe-url URL --probe-shape SHAPE``.

Thin over ``fakplan.probes``: one run of every probe against the endpoint
(session-scoped), one test per probe and per live prediction of the shape.
Without ``--probe-url`` every test is skipped, so a plain ``pytest probes/``
in a checkout passes. Options carry a ``--probe-`` prefix so they cannot clash
with another plugin's ``--url`` or ``--shape`` (fakplan's own gate plugin
takes ``--fakplan-shapes``). Nothing is written: ``fakplan probe`` records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fakplan.errors import FakplanError
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Verdict
from fakplan.probes import Endpoint, ProbeOptions, ProbeRun, run_probes, verdicts_for
from fakplan.shape import load_shape


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakplan-probe", "fakplan live probes (probes/)")
    group.addoption("--probe-url", metavar="URL", help="the deployed endpoint (root or /v1)")
    group.addoption("--probe-shape", metavar="SHAPE", help="the shape it was deployed from")
    group.addoption(
        "--probe-api-key-env", metavar="VAR", help="environment variable holding the API key"
    )
    group.addoption("--probe-repeat", type=int, default=3, help="repetitions (default 3)")
    group.addoption(
        "--probe-max-tokens", type=int, default=512, help="tokens per decode run (default 512)"
    )
    group.addoption(
        "--probe-timeout", type=float, default=600.0, help="seconds per probe (default 600)"
    )


@dataclass(frozen=True)
class Probed:
    run: ProbeRun
    plan: Plan
    verdicts: dict[str, Verdict]


@pytest.fixture(scope="session")
def probed(pytestconfig: pytest.Config) -> Probed:
    url = pytestconfig.getoption("probe_url")
    if not url:
        pytest.skip("no --probe-url: give --probe-url URL --probe-shape SHAPE to probe an endpoint")
    shape = pytestconfig.getoption("probe_shape")
    if not shape:
        raise pytest.UsageError("--probe-url needs --probe-shape SHAPE (the deployed shape)")
    variable = pytestconfig.getoption("probe_api_key_env")
    key = os.environ.get(variable) if variable else None
    if variable and not key:
        raise pytest.UsageError(f"--probe-api-key-env {variable}: the variable is not set")
    try:
        loaded = load_shape(Path(shape))
        plan = compile_plan(loaded)
        options = ProbeOptions(
            repeat=pytestconfig.getoption("probe_repeat"),
            max_tokens=pytestconfig.getoption("probe_max_tokens"),
            timeout_s=pytestconfig.getoption("probe_timeout"),
        )
        with httpx.Client() as client:
            run = run_probes(loaded, Endpoint(client, url, api_key=key), httpx.AsyncClient, options)
    except FakplanError as exc:
        raise pytest.UsageError(str(exc)) from None
    return Probed(run=run, plan=plan, verdicts=verdicts_for(run, plan))
