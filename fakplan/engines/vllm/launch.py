"""vLLM's launch: ``vllm serve`` flags as an ordered table, the pool's flag, Ray roles."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.engines.query import pinned_revision
from fakplan.engines.releases import select
from fakplan.engines.vllm.rules import CPU_KV_SPACE, GIB, RAY_PORT, RELEASES, VllmRules
from fakplan.launch import (
    FlagRow,
    LaunchRecord,
    RoleRecord,
    argv_of,
    flag,
    fraction_up,
    head_address,
)

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures


@dataclass(frozen=True)
class _Launch:
    """What vLLM's flags are read from: the setup, and the words that state its pool."""

    setup: Setup
    pool: tuple[str, ...]  # bytes, a whole-GiB variable's absence, or a utilisation


def _speculative(i: _Launch) -> str | None:
    s, spec = i.setup.serving, i.setup.launch.speculative
    if spec is None or not s.spec_tokens:
        return None
    config: dict[str, object] = {"method": spec.method, "num_speculative_tokens": s.spec_tokens}
    if spec.model:
        config["model"] = spec.model
    return json.dumps(config, separators=(",", ":"))


# vllm serve's flags, in the order the argv carries them (vllm/engine/arg_utils.py)
FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--host", lambda i: i.setup.launch.host),
    flag("--port", lambda i: i.setup.launch.port),
    flag("--served-model-name", lambda i: i.setup.launch.served_model_name),
    flag("--tensor-parallel-size", lambda i: i.setup.parallel.tensor),
    flag("--pipeline-parallel-size", lambda i: i.setup.parallel.pipeline),
    flag("--max-model-len", lambda i: i.setup.serving.max_model_len),
    flag("--max-num-seqs", lambda i: i.setup.serving.max_num_seqs),
    flag("--kv-cache-dtype", lambda i: i.setup.serving.kv_dtype),
    flag("--block-size", lambda i: i.setup.serving.block_size),
    flag("--dtype", lambda i: i.setup.serving.dtype_flag),
    flag("--quantization", lambda i: i.setup.serving.quantization),
    lambda i: i.pool,
    flag("--max-num-batched-tokens", lambda i: i.setup.serving.max_num_batched_tokens),
    flag("--enable-prefix-caching", lambda i: i.setup.serving.prefix_caching is True),
    flag("--no-enable-prefix-caching", lambda i: i.setup.serving.prefix_caching is False),
    flag("--speculative-config", _speculative),
    flag("--language-model-only", lambda i: i.setup.serving.language_model_only),
    flag("--enforce-eager", lambda i: i.setup.serving.enforce_eager),
)


def _pool_flags(
    setup: Setup,
    release: VllmRules,
    version: str,
    environment: dict[str, str | None],
    derivations: dict[str, str],
) -> tuple[str, ...]:
    """How the shape's pool reaches vLLM: the CPU build's variable, bytes, or a fraction."""
    fraction = setup.serving.gpu_memory_utilization
    if fraction is not None:
        if setup.card.device == "cpu":
            environment[CPU_KV_SPACE] = None  # it would set the pool and override the fraction
        derivations["--gpu-memory-utilization"] = (
            f"serving.gpu_memory_utilization {fraction:g}: vllm {version} sizes its pool from "
            "this fraction of the "
            + ("host's memory" if setup.card.device == "cpu" else "card")
            + " (no pool in bytes is passed; the plan's kv-pool prediction is what it will size)"
        )
        return ("--gpu-memory-utilization", f"{fraction:g}")
    budget = setup.stated_budget
    if setup.card.device == "cpu":
        pool: list[str] = []
        _cpu_pool(budget.kv, version, pool, environment, derivations)
        return tuple(pool)
    if release.pool_in_bytes:
        # --kv-cache-memory-bytes (v0.11.0, v0.33.0) states the pool and ignores utilisation.
        derivations["--kv-cache-memory-bytes"] = (
            f"budget.kv = {budget.kv:,} B per GPU (vllm {version} takes the pool in bytes)"
        )
        return ("--kv-cache-memory-bytes", str(budget.kv))
    util = fraction_up(budget.weights + budget.kv, setup.card.total)
    derivations["--gpu-memory-utilization"] = (
        f"(budget.weights {budget.weights:,} B + budget.kv {budget.kv:,} B) / "
        f"card.total {setup.card.total:,} B = {util:.4f}, rounded up; vllm {version} has no "
        "byte flag, and budget.weights must cover all it counts as non-KV "
        "(weights, activation peak, non-torch)"
    )
    return ("--gpu-memory-utilization", f"{util:.4f}")


def _env(setup: Setup, figures: Figures, environment: dict[str, str | None]) -> dict[str, str]:
    s, par = setup.serving, setup.parallel
    env = {
        "MODEL": setup.launch.weights or setup.model,
        "TENSOR_PARALLEL_SIZE": str(par.tensor),
        "PIPELINE_PARALLEL_SIZE": str(par.pipeline),
        "MAX_MODEL_LEN": str(s.max_model_len),
        "MAX_NUM_SEQS": str(s.max_num_seqs),
        "KV_CACHE_DTYPE": s.kv_dtype,
    }
    if setup.budget is not None:
        env["KV_CACHE_MEMORY_BYTES"] = str(setup.budget.kv)
    else:
        assert s.gpu_memory_utilization is not None
        env["GPU_MEMORY_UTILIZATION"] = f"{s.gpu_memory_utilization:g}"
        env["KV_POOL_PREDICTED"] = str(figures.kv_budget_bytes)
    env["KV_TOKENS_PREDICTED"] = str(figures.tokens_backed)
    if s.model_dtype != "auto":
        env["DTYPE"] = s.model_dtype
    # serve.sh exports these (or unsets them); the env file says the same
    env.update({key: value for key, value in environment.items() if value is not None})
    return env


def _roles(
    setup: Setup, argv: list[str], environment: dict[str, str | None], env: dict[str, str]
) -> tuple[RoleRecord, ...]:
    """One serve.sh, or a Ray head (which serves) and its workers across nodes."""
    par, ln = setup.parallel, setup.launch
    if par.nodes == 1:
        return (
            RoleRecord(
                name="serve", file="serve.sh", environment=environment, argv=(*argv, *ln.extra_args)
            ),
        )
    head = head_address(setup.launch.head_address)
    port = str(ln.head_port or RAY_PORT)
    gpus = str(setup.card.count)
    env["RAY_ADDRESS"] = f"{head}:{port}"
    return (
        RoleRecord(
            name="head",
            file="serve-head.sh",
            before=(("ray", "start", "--head", "--port", port, "--num-gpus", gpus),),
            environment=environment,
            argv=(*argv, "--distributed-executor-backend", "ray", *ln.extra_args),
            note=f"run on {head} once every worker has joined ({par.nodes - 1} worker node(s))",
        ),
        RoleRecord(
            name="worker",
            file="serve-worker.sh",
            argv=("ray", "start", "--address", f"{head}:{port}", "--num-gpus", gpus, "--block"),
            note=f"run on each of the {par.nodes - 1} other node(s) before the head serves",
        ),
    )


def launch_record(setup: Setup, figures: Figures) -> LaunchRecord:
    """``vllm serve`` argv realising the shape; Ray head/worker roles across nodes."""
    release, version = select("vllm", RELEASES, setup.engine_version)
    derivations: dict[str, str] = {}
    environment: dict[str, str | None] = {}
    model = setup.launch.weights or setup.model
    if setup.launch.binary == "vllm-api-server":
        argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        argv = ["vllm", "serve", model]
    pinned = pinned_revision(setup)
    if pinned is not None:
        argv += ["--revision", pinned[0]]
        derivations["--revision"] = pinned[1]
    pool = _pool_flags(setup, release, version, environment, derivations)
    argv += argv_of(FLAGS, _Launch(setup, pool))
    env = _env(setup, figures, environment)
    if pinned is not None:
        env["REVISION"] = pinned[0]
    roles = _roles(setup, argv, environment, env)
    return LaunchRecord(binary="vllm", env=env, roles=roles, derivations=derivations)


def _cpu_pool(
    kv: int,
    version: str,
    argv: list[str],
    environment: dict[str, str | None],
    derivations: dict[str, str],
) -> None:
    """The CPU build's pool: VLLM_CPU_KVCACHE_SPACE, in whole GiB, or bytes by flag.

    platforms/cpu.py (v0.32.0 CPU build) reads the variable as ``int(...) * GiB`` and
    lets it override --kv-cache-memory-bytes; cpu_worker.determine_available_memory
    then logs "Explicitly set (X/Y) GiB for KV cache on node N" and returns that pool.
    """
    if kv % GIB == 0:
        environment[CPU_KV_SPACE] = str(kv // GIB)
        derivations[CPU_KV_SPACE] = (
            f"budget.kv = {kv:,} B = {kv // GIB} GiB: the CPU build's pool, a whole number of "
            f"GiB (vllm {version})"
        )
        return
    environment[CPU_KV_SPACE] = None
    argv += ["--kv-cache-memory-bytes", str(kv)]
    derivations["--kv-cache-memory-bytes"] = (
        f"budget.kv = {kv:,} B is not a whole number of GiB, which {CPU_KV_SPACE} needs: "
        f"the pool goes by flag and the variable is unset, since it would override the flag "
        f"(vllm {version} CPU build)"
    )
