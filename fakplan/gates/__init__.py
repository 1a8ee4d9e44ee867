"""Gates: pure checks from a plan's figures to a verdict with its numbers.

Each gate has an id, a one-line rationale, and says what to change when it
fails. ``unknown`` is a verdict of its own: a gate that cannot be evaluated is
reported, never passed silently. ``model`` holds the records, ``builtin`` the
checks fakplan ships, ``operator`` the loader of an operator's own gates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.gates.builtin import BUILTIN_GATES
from fakplan.gates.model import Gate, GateResult, GateStatus

if TYPE_CHECKING:
    from fakplan.figures import Figures

__all__ = ["BUILTIN_GATES", "Gate", "GateResult", "GateStatus", "run_gates"]


def run_gates(figures: Figures, gates: tuple[Gate, ...] = BUILTIN_GATES) -> tuple[GateResult, ...]:
    results = (gate.check(figures) for gate in gates)
    return tuple(r for r in results if r is not None)
