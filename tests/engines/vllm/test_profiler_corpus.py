"""vLLM's memory profiler lines, as fakplan's ledger reads them (tests/data/public/profiler).

The expectation is the figure as the log prints it: the ledger's value must lie in the
interval the printed digits allow.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from fakplan.engines import parse_ledger
from fakplan.units import printed_interval
from tests.support.paths import PUBLIC

PROFILER = PUBLIC / "profiler"
CASES: list[dict[str, Any]] = yaml.safe_load((PROFILER / "cases.yaml").read_text())["cases"]
FIELDS = {
    "total_gpu_gib": "total_gpu_bytes",
    "requested_gib": "usable_bytes",
    "weights_gib": "weights_bytes",
    "non_torch_gib": "non_torch_bytes",
    "activation_peak_gib": "activation_bytes",
    "non_kv_total_gib": "non_kv_bytes",
    "cuda_graph_gib": "graph_estimate_bytes",
    "cuda_graph_actual_gib": "graph_bytes",
    "kv_gib": "kv_bytes",
    "consumed_gib": "consumed_bytes",  # 0.27+: weights + non-torch, C
}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_ledger_reads_every_profiler_figure(case: dict[str, Any]) -> None:
    ledger = parse_ledger(PROFILER / case["log"], "vllm")
    printed = case["printed"]
    assert printed, case["id"]
    for key, value in printed.items():
        if key == "kv_tokens":
            assert ledger.kv_tokens == int(str(value).replace(",", "")), case["id"]
            continue
        if key == "kv_blocks":
            assert ledger.num_blocks == int(value), case["id"]
            continue
        low, _, high = printed_interval(re.sub(r"([\d.])GiB", r"\1 GiB", str(value)))
        got = getattr(ledger, FIELDS[key])
        assert got is not None and low <= got <= high, (case["id"], key, value, got)


def test_the_profiler_corpus_names_its_sources() -> None:
    assert len(CASES) >= 15
    for case in CASES:
        assert case["source"].startswith("https://github.com/"), case["id"]
        if case.get("config"):
            assert (PUBLIC / "configs" / case["config"] / "config.json").exists(), case["id"]


def test_a_later_pp_stage_states_its_pool_in_its_summary_and_binds() -> None:
    """prof-004 (PP 2): only stage 0 prints "Available KV cache memory" (66.54 GiB); stage 1
    states its pool in its memory summary ("Current kv cache memory in use is 65.63 GiB"),
    and the engine keeps the smaller: the printed 1,075,312 tokens are 67,207 blocks of 16,
    1 MiB each (16 layers x 16 tokens x 4,096 B), which 65.63 GiB (67,200..67,210 MiB) holds
    and 66.54 GiB (68,131 MiB and more) does not. The ledger reports stage 1's figures."""
    ledger = parse_ledger(PROFILER / "prof-004.log", "vllm")
    assert ledger.binding_rank == "PP1"
    low, _, high = printed_interval("65.63 GiB")
    assert ledger.kv_bytes is not None and low <= ledger.kv_bytes <= high
    assert low // (1 << 20) <= 1_075_312 // 16 <= high // (1 << 20)
    assert printed_interval("66.54 GiB")[0] // (1 << 20) > 1_075_312 // 16
