"""SGLang's launch: ``python -m sglang.launch_server`` and its flags, per node role."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.engines.query import pinned_revision
from fakplan.engines.sglang.rules import DIST_INIT_PORT
from fakplan.engines.sglang.sizing import in_use_measured
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
    """What SGLang's flags are read from: the shape, the figures, the static fraction."""

    setup: Setup
    figures: Figures
    fraction: float


def _speculative(i: _Launch) -> list[str]:
    s, spec = i.setup.serving, i.setup.launch.speculative
    if spec is None or not s.spec_tokens:
        return []
    words = ["--speculative-algorithm", spec.method.upper()]
    words += ["--speculative-num-draft-tokens", str(s.spec_tokens)]
    if spec.model:
        words += ["--speculative-draft-model-path", spec.model]
    return words


# sglang.launch_server's flags, in the order the argv carries them
FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--model-path", lambda i: i.setup.launch.weights or i.setup.model),
    flag("--host", lambda i: i.setup.launch.host),
    flag("--port", lambda i: i.setup.launch.port),
    flag("--tp", lambda i: i.setup.parallel.tensor),
    flag(
        "--pp-size", lambda i: i.setup.parallel.pipeline if i.setup.parallel.pipeline > 1 else None
    ),
    flag("--served-model-name", lambda i: i.setup.launch.served_model_name),
    flag("--context-length", lambda i: i.setup.serving.max_model_len),
    flag("--max-running-requests", lambda i: i.setup.serving.max_num_seqs),
    flag("--kv-cache-dtype", lambda i: i.setup.serving.kv_dtype),
    flag("--dtype", lambda i: i.setup.serving.dtype_flag),
    flag("--page-size", lambda i: i.figures.cost.page_tokens),
    flag(
        "--max-total-tokens",
        lambda i: None if i.setup.engine_sized else i.figures.tokens_backed,
    ),
    flag(
        "--mem-fraction-static",
        lambda i: f"{i.fraction:g}" if i.setup.engine_sized else f"{i.fraction:.3f}",
    ),
    _speculative,
)


def _roles(setup: Setup, argv: list[str], env: dict[str, str]) -> tuple[RoleRecord, ...]:
    """One serve.sh, or one script per node with SGLang's own --nnodes/--node-rank flags."""
    par, tail = setup.parallel, tuple(setup.launch.extra_args)
    if par.nodes == 1:
        return (RoleRecord(name="serve", file="serve.sh", argv=(*argv, *tail)),)
    address = (
        f"{head_address(setup.launch.head_address)}:{setup.launch.head_port or DIST_INIT_PORT}"
    )
    env["DIST_INIT_ADDR"] = address
    nodes = ("--nnodes", str(par.nodes))
    return tuple(
        RoleRecord(
            name=f"node{rank}",
            file=f"serve-node{rank}.sh",
            argv=(*argv, *nodes, "--node-rank", str(rank), "--dist-init-addr", address, *tail),
            note="the head node (its address is --dist-init-addr)"
            if rank == 0
            else f"node rank {rank}",
        )
        for rank in range(par.nodes)
    )


def _budget_fraction(setup: Setup) -> tuple[float, str]:
    """The fraction that leaves SGLang room for the budgeted pair: SGLang keeps
    ``1 - fraction`` of the memory free *before* the weights load (sizing.sglang_sizing), so what
    is in use then (CUDA context, torch.distributed) comes out of the pair unless the
    fraction is of what is free, not of the card. ``--max-total-tokens`` caps the pool."""
    budget = setup.stated_budget
    total, in_use, source = _in_use_before_weights(setup)
    pair = budget.weights + budget.kv
    named = f"(budget.weights {budget.weights:,} B + budget.kv {budget.kv:,} B)"
    fraction = fraction_up(pair, max(total - in_use, 1), 3)
    if fraction >= 1:
        # the pair-ceiling gate fails it against SGLangEngine.card_bound; serve.sh refuses
        return fraction, (
            f"{named} = {pair:,} B / (card.total {total:,} B - {in_use:,} B in use before the "
            f"weights) = {fraction:.3f}: 1 or more leaves SGLang nothing for activations and "
            "CUDA graphs (the pair-ceiling gate fails)"
        )
    if in_use:
        return fraction, (
            f"{named} / (card.total {total:,} B - {in_use:,} B, the top of the memory in "
            f"use before the weights at TP {setup.parallel.tensor}: {source}; another "
            f"card's CUDA context may differ) = {fraction:.3f}, rounded up; SGLang keeps "
            "1 - fraction of what is free before the weights load, and --max-total-tokens "
            "caps the pool"
        )
    return fraction, (
        f"{named} / card.total {total:,} B = {fraction:.3f}, rounded up; SGLang keeps "
        "1 - fraction of what is free before the weights load, and the memory in use then "
        "(CUDA context, torch.distributed, NCCL) is not measured at TP "
        f"{setup.parallel.tensor} PP {setup.parallel.pipeline}: the pool it profiles falls "
        "short of budget.kv by the fraction of that memory unless budget.weights leaves the "
        "slack (fakplan verify's kv-tokens says); --max-total-tokens caps the pool"
    )


def _in_use_before_weights(setup: Setup) -> tuple[int, int, str]:
    """(card.total, the most memory measured in use before the weights at this layout, where
    that figure comes from); 0 in use where nothing is measured (PP > 1, or a TP but 1, 2,
    4 and 8)."""
    measured = in_use_measured(setup.parallel.tensor) if setup.parallel.pipeline == 1 else None
    if measured is None:
        return setup.card.total, 0, ""
    return setup.card.total, measured[0][1], measured[1]


def launch_record(setup: Setup, figures: Figures) -> LaunchRecord:
    """``python3 -m sglang.launch_server`` argv; SGLang's own multi-node flags across nodes."""
    s, par = setup.serving, setup.parallel
    env = {
        "MODEL": setup.launch.weights or setup.model,
        "TP": str(par.tensor),
        "CONTEXT_LENGTH": str(s.max_model_len),
        "MAX_RUNNING_REQUESTS": str(s.max_num_seqs),
        "KV_CACHE_DTYPE": s.kv_dtype,
        "PAGE_SIZE": str(figures.cost.page_tokens),
    }
    if s.mem_fraction_static is not None:
        fraction = s.mem_fraction_static
        derivations = {
            "--mem-fraction-static": (
                f"serving.mem_fraction_static {fraction:g}: SGLang sizes its pool from it "
                "(no --max-total-tokens is passed; the plan's kv-pool prediction is what it "
                "will size)"
            ),
        }
        env["MEM_FRACTION_STATIC"] = f"{fraction:g}"
        env["KV_POOL_PREDICTED"] = str(figures.kv_budget_bytes)
        env["KV_TOKENS_PREDICTED"] = str(figures.tokens_backed)
    else:
        fraction, fraction_derivation = _budget_fraction(setup)
        derivations = {
            "--max-total-tokens": f"the tokens budget.kv backs: {figures.tokens_derivation}",
            "--mem-fraction-static": fraction_derivation,
        }
        env["MAX_TOTAL_TOKENS"] = str(figures.tokens_backed)
        env["MEM_FRACTION_STATIC"] = f"{fraction:.3f}"
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        *argv_of(FLAGS, _Launch(setup, figures, fraction)),
    ]
    pinned = pinned_revision(setup)
    if pinned is not None:
        argv[5:5] = ["--revision", pinned[0]]  # after --model-path MODEL
        derivations["--revision"] = pinned[1]
        env["REVISION"] = pinned[0]
    roles = _roles(setup, argv, env)
    return LaunchRecord(binary="sglang", env=env, roles=roles, derivations=derivations)
