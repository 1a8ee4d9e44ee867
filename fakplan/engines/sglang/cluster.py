"""SGLang on a cluster: the /dev/shm a pod gets, and the alert rules that hold its live
metrics (SGLang v0.5.2 srt/metrics/collector.py) to a plan."""

from __future__ import annotations

from fakplan.engines.alerting import AlertFacts, AlertRule
from fakplan.units import GIB

# SGLang's docker instructions: --shm-size 32g
SHM_BYTES = 32 * GIB


def alert_rules(f: AlertFacts) -> tuple[AlertRule, ...]:
    """Tokens used above the plan's rate, requests queued with slots free, a retraction
    where the contract holds, and a pool other than the predicted one (used / usage)."""
    sel = f.selector
    rules = [
        AlertRule(
            "FakplanKvUsageAbovePlan",
            f"sglang:num_used_tokens{sel} > sglang:num_running_reqs{sel} * {f.window_tokens}",
            f"{f.name}: KV tokens used above what its running requests should need",
            f"each running request holds at most {f.window_tokens:,} tokens",
        ),
        AlertRule(
            "FakplanRequestsWaitingBelowSlots",
            f"sglang:num_queue_reqs{sel} > 0 and sglang:num_running_reqs{sel} < {f.max_num_seqs}",
            f"{f.name}: requests queue while slots are free",
            f"fewer than {f.max_num_seqs} run and requests queue: the pool is smaller than planned",
        ),
    ]
    if f.contract_holds:
        rules.append(
            AlertRule(
                "FakplanPreemptionDespiteContract",
                f"sglang:num_retracted_reqs{sel} > 0",
                f"{f.name}: a retracted request on a shape whose contract holds",
                "the pool covers every slot at the full window, so none should be retracted",
            )
        )
    if f.tokens_range is not None:
        low, high = f.tokens_range
        total = f"(sglang:num_used_tokens{sel} / sglang:token_usage{sel})"
        rules.append(
            AlertRule(
                "FakplanKvTokensDiffer",
                f"{total} < {low} or {total} > {high}",
                f"{f.name}: the engine's KV pool is not the predicted one",
                f"used / usage is the pool's tokens; kv-tokens predicts {low:,}..{high:,}",
            )
        )
    return tuple(rules)
