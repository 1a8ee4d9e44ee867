"""What one probe run measured, as the record it leaves (schema ``fakplan.probe/1``).

Apart from the run itself so the verdicts, the CLI and the run read one shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fakplan.probes.boundary import BoundaryResult
from fakplan.probes.calibrate import Calibration
from fakplan.probes.capacity import CapacityResult
from fakplan.probes.http import Endpoint
from fakplan.probes.rates import RateResult

RUN_SCHEMA = "fakplan.probe/1"

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
