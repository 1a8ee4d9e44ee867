"""An operator gate: this repository's own rule, run beside fakplan's built-in gates.

`fakplan gate shapes/` and `pytest gates/` load every *.py in this folder
(except conftest.py, test_*.py and names starting with "_") and call each
@gate function with the compiled fakplan.Plan of every shape. Return
(ok, summary[, fix]), a Verdict (adds detail, numbers, warn), a GateResult,
or None when the gate does not apply. ok=None reports the gate as unknown.
"""

from __future__ import annotations

from fakplan import Plan
from fakplan.gates.operator import Verdict, gate

MIB = 1024 * 1024


@gate(
    id="contract-headroom",
    title="pool ≥ contract + 10 %",
    rationale="a pool cut to the contract's byte has no room when the prompt template grows",
)
def contract_headroom(plan: Plan) -> Verdict:
    need = plan.contract_bytes * 11 // 10
    return Verdict(
        ok=plan.kv_budget_bytes >= need,
        summary=f"{plan.kv_budget_bytes / MIB:,.0f} MiB vs {need / MIB:,.0f} MiB",
        fix=f"grow budget.kv to at least {-(-need // MIB):,} MiB",
        numbers={"pool_bytes": plan.kv_budget_bytes, "needed_bytes": need},
    )
