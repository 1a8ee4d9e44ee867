"""Falsifiable predictions and their verdicts.

A prediction names the observation that can kill it (``closed_by``) and the
command that makes that observation. A verdict is written beside it later and
never overwrites an earlier one: verdicts accumulate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

VerdictStatus = Literal["held", "killed", "unverifiable", "inside noise"]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: VerdictStatus
    observed: float | int | str | None
    source: str = Field(description="the ledger line or probe run the observation came from")
    note: str = ""
    at: str = Field("", description="when the observation was made (ISO 8601, UTC)")


class Prediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    claim: str = Field(description="the prediction in words")
    value: float | int | None
    low: float | int | None
    high: float | int | None
    unit: str
    derivation: str
    closed_by: Literal["ledger", "probe boundary", "probe decode", "probe prefill"]
    command: str
    verdicts: tuple[Verdict, ...] = ()

    def with_verdict(self, verdict: Verdict) -> Prediction:
        return self.model_copy(update={"verdicts": (*self.verdicts, verdict)})

    @property
    def latest(self) -> Verdict | None:
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
