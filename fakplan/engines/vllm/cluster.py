"""vLLM on a cluster: its image, the /dev/shm a pod gets, and the alert rules that hold its
live metrics (vLLM v0.32.0 vllm/v1/metrics/loggers.py) to a plan."""

from __future__ import annotations

from fakplan.engines.alerting import AlertFacts, AlertRule, range_regex
from fakplan.units import GIB

# vllm serve's own image, tagged by release (Docker Hub vllm/vllm-openai)
IMAGE = "vllm/vllm-openai:v{version}"
# LeaderWorkerSet v0.7.0 docs/examples/vllm/GPU/lws.yaml gives a pod 15Gi
SHM_BYTES = 15 * GIB


def alert_rules(f: AlertFacts) -> tuple[AlertRule, ...]:
    """Usage above the plan's rate, requests waiting with slots free, a preemption where
    the contract holds, and a pool other than the predicted one (``cache_config_info`` has
    no model_name label: selected by the endpoint's labels, joined on ``instance``)."""
    sel = f.selector
    ratio = f.window_tokens / f.tokens_backed
    rules = [
        AlertRule(
            "FakplanKvUsageAbovePlan",
            f"vllm:kv_cache_usage_perc{sel} > vllm:num_requests_running{sel} * {ratio:.9g}",
            f"{f.name}: KV usage above what its running sequences should need",
            f"each running sequence needs at most {f.window_tokens:,} tokens of the "
            f"{f.tokens_backed:,} the plan backs: more means a sequence costs more than the "
            "plan's rate",
        ),
        AlertRule(
            "FakplanRequestsWaitingBelowSlots",
            f"vllm:num_requests_waiting{sel} > 0 and vllm:num_requests_running{sel} < "
            f"{f.max_num_seqs}",
            f"{f.name}: requests wait while slots are free",
            f"fewer than max_num_seqs {f.max_num_seqs} run and requests wait: the pool is "
            "smaller than planned",
        ),
    ]
    if f.contract_holds:
        rules.append(
            AlertRule(
                "FakplanPreemptionDespiteContract",
                f"increase(vllm:num_preemptions_total{sel}[10m]) > 0",
                f"{f.name}: a preemption on a shape whose contract holds",
                "the pool covers every slot at the full window, so no sequence should be preempted",
            )
        )
    if f.blocks_range is not None:
        low, high = f.blocks_range
        rules.append(
            AlertRule(
                "FakplanKvTokensDiffer",
                f'vllm:cache_config_info{{{f.endpoint},num_gpu_blocks!~"{range_regex(low, high)}"}} '
                f"and on(instance) vllm:num_requests_running{sel}",
                f"{f.name}: the engine's KV pool is not the predicted one",
                f"kv-tokens predicts {low:,}..{high:,} blocks of {f.page_tokens} tokens",
            )
        )
    return tuple(rules)
