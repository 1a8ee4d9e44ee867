"""SGLang's launch: ``python -m sglang.launch_server`` and its flags, per node role."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.engines.query import pinned_revision
from fakplan.engines.sglang.rules import DIST_INIT_PORT
from fakplan.engines.sglang.sizing import IN_USE_MEASURED
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
    from fakplan.figures import Figures
    from fakplan.shape import LoadedShape, Shape


@dataclass(frozen=True)
class _Launch:
    """What SGLang's flags are read from: the shape, the figures, the static fraction."""

    shape: Shape
    figures: Figures
    fraction: float


def _speculative(i: _Launch) -> list[str]:
    s, spec = i.shape.serving, i.shape.launch.speculative
    if spec is None or not s.spec_tokens:
        return []
    words = ["--speculative-algorithm", spec.method.upper()]
    words += ["--speculative-num-draft-tokens", str(s.spec_tokens)]
    if spec.model:
        words += ["--speculative-draft-model-path", spec.model]
    return words


# sglang.launch_server's flags, in the order the argv carries them
FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--model-path", lambda i: i.shape.launch.weights or i.shape.model),
    flag("--host", lambda i: i.shape.launch.host),
    flag("--port", lambda i: i.shape.launch.port),
    flag("--tp", lambda i: i.shape.parallel.tensor),
    flag(
        "--pp-size", lambda i: i.shape.parallel.pipeline if i.shape.parallel.pipeline > 1 else None
    ),
    flag("--served-model-name", lambda i: i.shape.launch.served_model_name),
    flag("--context-length", lambda i: i.shape.serving.max_model_len),
    flag("--max-running-requests", lambda i: i.shape.serving.max_num_seqs),
    flag("--kv-cache-dtype", lambda i: i.shape.serving.kv_cache_dtype),
    flag("--dtype", lambda i: None if i.shape.serving.dtype == "auto" else i.shape.serving.dtype),
    flag("--page-size", lambda i: i.figures.cost.page_tokens),
    flag(
        "--max-total-tokens",
        lambda i: None if i.shape.engine_sized else i.figures.tokens_backed,
    ),
    flag(
        "--mem-fraction-static",
        lambda i: f"{i.fraction:g}" if i.shape.engine_sized else f"{i.fraction:.3f}",
    ),
    _speculative,
)


def _roles(shape: Shape, argv: list[str], env: dict[str, str]) -> tuple[RoleRecord, ...]:
    """One serve.sh, or one script per node with SGLang's own --nnodes/--node-rank flags."""
    par, tail = shape.parallel, tuple(shape.launch.extra_args)
    if par.nodes == 1:
        return (RoleRecord(name="serve", file="serve.sh", argv=(*argv, *tail)),)
    address = f"{head_address(shape)}:{shape.launch.head_port or DIST_INIT_PORT}"
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


def _budget_fraction(loaded: LoadedShape) -> tuple[float, str]:
    """The fraction that leaves SGLang room for the budgeted pair: SGLang keeps
    ``1 - fraction`` of the memory free *before* the weights load (sizing.sglang_sizing), so what
    is in use then (CUDA context, torch.distributed) comes out of the pair unless the
    fraction is of what is free, not of the card. ``--max-total-tokens`` caps the pool."""
    shape = loaded.shape
    budget = shape.stated_budget
    total, in_use, source = _in_use_before_weights(shape)
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
            f"{named} / (card.total {total:,} B - {in_use:,} B, the most memory in use "
            f"before the weights measured at TP {shape.parallel.tensor}: {source}; another "
            f"card's CUDA context may differ) = {fraction:.3f}, rounded up; SGLang keeps "
            "1 - fraction of what is free before the weights load, and --max-total-tokens "
            "caps the pool"
        )
    return fraction, (
        f"{named} / card.total {total:,} B = {fraction:.3f}, rounded up; SGLang keeps "
        "1 - fraction of what is free before the weights load, and the memory in use then "
        "(CUDA context, torch.distributed, NCCL) is not measured at TP "
        f"{shape.parallel.tensor} PP {shape.parallel.pipeline}: the pool it profiles falls "
        "short of budget.kv by the fraction of that memory unless budget.weights leaves the "
        "slack (fakplan verify's kv-tokens says); --max-total-tokens caps the pool"
    )


def _in_use_before_weights(shape: Shape) -> tuple[int, int, str]:
    """(card.total, the most memory measured in use before the weights at this layout, where
    that figure comes from); 0 in use where nothing is measured (TP > 1, PP > 1)."""
    measured = IN_USE_MEASURED.get(shape.parallel.tensor) if shape.parallel.pipeline == 1 else None
    if measured is None:
        return shape.card.total, 0, ""
    return shape.card.total, measured[0][1], measured[1]


def launch_record(loaded: LoadedShape, figures: Figures) -> LaunchRecord:
    """``python3 -m sglang.launch_server`` argv; SGLang's own multi-node flags across nodes."""
    shape = loaded.shape
    s, par = shape.serving, shape.parallel
    env = {
        "MODEL": shape.launch.weights or shape.model,
        "TP": str(par.tensor),
        "CONTEXT_LENGTH": str(s.max_model_len),
        "MAX_RUNNING_REQUESTS": str(s.max_num_seqs),
        "KV_CACHE_DTYPE": s.kv_cache_dtype,
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
        fraction, fraction_derivation = _budget_fraction(loaded)
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
        *argv_of(FLAGS, _Launch(shape, figures, fraction)),
    ]
    pinned = pinned_revision(loaded)
    if pinned is not None:
        argv[5:5] = ["--revision", pinned[0]]  # after --model-path MODEL
        derivations["--revision"] = pinned[1]
        env["REVISION"] = pinned[0]
    roles = _roles(shape, argv, env)
    return LaunchRecord(binary="sglang", env=env, roles=roles, derivations=derivations)
