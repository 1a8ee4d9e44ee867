"""A gate and its verdict: the records every gate, built-in or an operator's, returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

if TYPE_CHECKING:
    from fakplan.figures import Figures

GateStatus = Literal["pass", "fail", "warn", "unknown"]
# what a fix costs the operator, in the order fixes are offered: nothing first, cards last
# ("offload": layers left in RAM by llama.cpp's -ngl, so every token runs part on the CPU)
GivesUp = Literal[
    "nothing", "sessions", "window", "kv_precision", "weight_precision", "offload", "cards"
]
GIVES_UP_ORDER: tuple[str, ...] = (
    "nothing", "sessions", "window", "kv_precision", "weight_precision", "offload", "cards",
)  # fmt: skip


class FixPatch(BaseModel):
    """One field of the shape set to a value (a byte size as the shape writes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    value: int | float | str | None


class ProvenFix(BaseModel):
    """A change to the shape that was gated before it was offered: with it applied, the
    shape passes every gate (so the failing one passes and none newly fails)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patch: tuple[FixPatch, ...]
    gives_up: tuple[GivesUp, ...]  # what it costs, e.g. ("kv_precision", "sessions")
    summary: str


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
    # fixes proven by gating the patched shape (fakplan.fit.proven_fixes), cheapest first;
    # empty where none was searched for or none holds
    fixes: tuple[ProvenFix, ...] = ()
    # a change the gate itself proposes (a value None removes the field), offered among
    # the fixes only once the patched shape is gated
    proposes: tuple[FixPatch, ...] = ()
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
