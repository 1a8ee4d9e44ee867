"""A gate and its verdict: the records every gate, built-in or an operator's, returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

if TYPE_CHECKING:
    from fakplan.figures import Figures

GateStatus = Literal["pass", "fail", "warn", "unknown"]


class GateResult(BaseModel):
    """One gate's verdict on one shape. ``ok`` is True when it holds (a warning
    holds), False when it fails, None when it could not be evaluated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    ok: bool | None = None
    title: str
    status: GateStatus
    summary: str
    detail: str
    rationale: str
    fix: str | None = None
    numbers: dict[str, int | float | str | None] = {}
    # "predicted": judged against a figure fakplan predicts before any boot (a predicted
    # ceiling), not one a boot ledger printed or the shape states; a ledger replaces it
    basis: Literal["predicted"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _ok_from_status(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("ok") is None and "status" in data:
            status = data["status"]
            data = {**data, "ok": None if status == "unknown" else status != "fail"}
        return data


@dataclass(frozen=True)
class Gate:
    """A check with the id, title and rationale every verdict it returns carries."""

    id: str
    title: str
    rationale: str
    judge: Callable[[Gate, Figures], GateResult | None]

    def check(self, figures: Figures) -> GateResult | None:
        return self.judge(self, figures)

    def verdict(self, **fields: Any) -> GateResult:
        """A verdict of this gate: its id, title and rationale, and the check's fields."""
        return GateResult(id=self.id, title=self.title, rationale=self.rationale, **fields)
