"""The built-in gates: each a pure check of a plan's figures, defined once.

``@builtin(id, title, rationale)`` stamps those three on every verdict the
check returns (``Gate.verdict``), so no gate types its id or title twice;
``BUILTIN_GATES`` lists them in the order reports show them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fakplan.contract import pages_for
from fakplan.figures import Figures
from fakplan.gates.model import FixPatch, Gate, GateResult
from fakplan.units import MIB, human, human_pair

_DEFINED: dict[str, Gate] = {}


def builtin(
    id: str, title: str, rationale: str
) -> Callable[[Callable[[Gate, Figures], GateResult | None]], Gate]:
    def define(check: Callable[[Gate, Figures], GateResult | None]) -> Gate:
        gate = Gate(id, title, rationale, check)
        _DEFINED[id] = gate
        return gate

    return define


def _mib(n: int) -> str:
    return human(n, "MiB")


def _mib_up(n: int) -> str:
    """MiB rounded up: what a fix must add is never understated (KiB below one MiB)."""
    if n < MIB:
        return f"{-(-n // 1024):,} KiB"
    return f"{-(-n // MIB):,} MiB"


def _mib_down(n: int) -> str:
    """MiB rounded down: what a fix lowers a budget to is never overstated."""
    return f"{n // MIB:,} MiB"


def _compared(a: int, sign: str, b: int) -> str:
    left, right = human_pair(a, b)
    return f"{left} {sign} {right}"


def _card(f: Figures) -> str:
    return f"the card's {_mib(f.card_total_bytes)} (card.total)"


def _limit(f: Figures) -> tuple[int, str]:
    """What the pair must fit in: the ceiling where one is known, else (and never above)
    the card's bound."""
    bound, _ = f.card_bound
    if f.ceiling_bytes is not None and f.ceiling_bytes <= bound:
        kind = "predicted ceiling" if f.ceiling_basis == "predicted" else "ceiling"
        return f.ceiling_bytes, f"the {kind}'s {_mib(f.ceiling_bytes)}"
    if bound == f.card_total_bytes:
        return bound, _card(f)
    return bound, f"the card's bound of {_mib(bound)}"


def _pair_fix(f: Figures, limit: int, within: str) -> str:
    """A pair over ``limit``: what to take out of which half, as far as each half has room
    above what it must hold (the weights the model needs, the contract); else what cannot
    fit at all."""
    over = f.pair_bytes - limit
    weights = f.model.weights_per_rank if f.model is not None else None
    kv_spare = max(0, f.kv_budget_bytes - f.contract_bytes)
    weights_spare = None if weights is None else max(0, f.weights_budget_bytes - weights)
    if weights_spare is not None and kv_spare + weights_spare >= over:
        from_kv = min(kv_spare, over)
        from_weights = over - from_kv
        steps = []
        if from_kv:
            steps.append(
                f"budget.kv by {_mib_up(from_kv)} (to {_mib_down(f.kv_budget_bytes - from_kv)}, "
                "still the contract)"
            )
        if from_weights:
            steps.append(
                f"budget.weights by {_mib_up(from_weights)} (to "
                f"{_mib_down(f.weights_budget_bytes - from_weights)}, still the weights per rank)"
            )
        return f"lower {' and '.join(steps)}: the pair then fits in {within}"
    if weights is None:
        return (
            f"take {_mib_up(over)} out of budget.weights or budget.kv (the pair must fit in "
            f"{within}); budget.kv cannot go below the contract ({_mib_up(f.contract_bytes)})"
        )
    need = weights + f.contract_bytes
    return (
        f"the weights per rank ({_mib_up(weights)}) plus the contract "
        f"({_mib_up(f.contract_bytes)}) = {_mib_up(need)} exceed {within}: lower "
        "serving.max_num_seqs or serving.max_model_len, use a smaller serving.kv_cache_dtype, "
        "quantize the weights, or shard wider (parallel.tensor)"
    )


def _sized_fix(f: Figures, fewer: str, shorter: str) -> str:
    """A pool the engine sizes grows with its fraction, as far as the fraction goes."""
    sizing = f.sizing
    assert sizing is not None
    floor = sizing.requested_bytes - sizing.pool_low  # what the terms take at their worst
    need = sizing.fraction_for(f.contract_bytes)
    wanted = math.ceil(need * 10_000) / 10_000  # the engines take any float; 4 places read well
    if wanted <= 1:
        return (
            f"raise serving.{sizing.field} to at least {wanted:.4f} (the pool then "
            f"covers {_mib_up(f.contract_bytes)}), or {fewer}, or {shorter}"
        )
    return (
        f"the contract ({_mib_up(f.contract_bytes)}) plus the floor the engine keeps "
        f"({_mib_up(floor)}) exceed the card's {_mib(sizing.total_bytes)}: {fewer}, {shorter}, "
        "use a smaller serving.kv_cache_dtype, or shard wider (parallel.tensor)"
    )


def _contract_proposes(f: Figures) -> tuple[FixPatch, ...]:
    """The change the fix's words lead with, for the prover to gate: the fraction that
    covers the contract, where the engine sizes its pool and one does."""
    sizing = f.sizing
    if sizing is None:
        return ()
    wanted = math.ceil(sizing.fraction_for(f.contract_bytes) * 10_000) / 10_000
    return (FixPatch(path=f"serving.{sizing.field}", value=wanted),) if wanted <= 1 else ()


def _contract_fix(f: Figures) -> str:
    """Grow the pool only as far as the card holds it; else say what cannot fit."""
    card = f.card_total_bytes
    contract = _mib_up(f.contract_bytes)
    shorter = "lower serving.max_model_len"
    fewer = f"lower serving.max_num_seqs (the pool backs {f.whole_sessions} at the full window)"
    if f.sizing is not None:
        return _sized_fix(f, fewer, shorter)
    card, within = _limit(f)  # the ceiling where known: a grown pool must still fit under it
    if f.weights_budget_bytes + f.contract_bytes <= card:
        gap = f.contract_bytes - f.kv_budget_bytes
        return (
            f"grow budget.kv by at least {_mib_up(gap)} (to {contract}), or {fewer}, or {shorter}"
        )
    weights = f.model.weights_per_rank if f.model is not None else None
    if f.contract_bytes + (weights or 0) <= card:
        # the pool fits beside what the weights need, not beside what budget.weights claims
        take = f.weights_budget_bytes + f.contract_bytes - card
        return (
            f"grow budget.kv to at least {contract} and take {_mib_up(take)} out of "
            f"budget.weights (the pair must fit in {within}), or {fewer}, or {shorter}"
        )
    room = card - (weights or 0)
    cost = f.cost
    slot = pages_for(f.max_model_len, cost.page_tokens) * cost.page_bytes + cost.per_seq_bytes
    fit = (room - cost.fixed_bytes) // slot if slot else 0
    if fit >= 1:
        beside = f"in {within}" if weights is None else f"beside the weights in {within}"
        fewer = f"lower serving.max_num_seqs to {fit} (its contract fits {beside})"
    what = (
        f"the contract ({contract}) alone exceeds"
        if weights is None
        else f"the contract ({contract}) plus the weights per rank ({_mib_up(weights)}) exceed"
    )
    return (
        f"{what} {within}, so no budget.kv serves {f.max_num_seqs} slots at the "
        f"full window: {fewer}, {shorter}, use a smaller serving.kv_cache_dtype, or shard "
        "wider (parallel.tensor)"
    )


@builtin(
    "pool-contract",
    "pool ≥ contract",
    "a pool below the contract boots, serves short chats, then refuses every long request",
)
def pool_covers_contract(g: Gate, f: Figures) -> GateResult:
    ok = f.kv_budget_bytes >= f.contract_bytes
    gap = f.contract_bytes - f.kv_budget_bytes
    return g.verdict(
        status="pass" if ok else "fail",
        summary=_compared(f.kv_budget_bytes, "≥" if ok else "<", f.contract_bytes),
        detail=f"contract: {f.contract_derivation}",
        fix=None if ok else _contract_fix(f),
        proposes=() if ok else _contract_proposes(f),
        numbers={
            "pool_bytes": f.kv_budget_bytes,
            "contract_bytes": f.contract_bytes,
            "short_bytes": max(0, gap),
            "tokens_backed": f.tokens_backed,
            "tokens_needed": f.max_num_seqs * f.max_model_len,
        },
    )


@builtin(
    "pair-ceiling",
    "pair ≤ ceiling",
    "weights + KV above the engine's ceiling does not boot, or settles below the engine's floor",
)
def pair_within_ceiling(g: Gate, f: Figures) -> GateResult:
    bound, bound_text = f.card_bound
    numbers: dict[str, int | float | str | None] = {
        "pair_bytes": f.pair_bytes,
        "ceiling_bytes": f.ceiling_bytes,
        "card_bound_bytes": bound,
    }
    if f.pair_bytes > bound:
        # the card decides, whatever else is unknown: no ceiling can be above it
        unknown = "" if f.ceiling_bytes is not None else "; no ceiling known"
        return g.verdict(
            status="fail",
            summary=f"{_compared(f.pair_bytes, '>', bound)} the card holds{unknown}",
            detail=f"pair: {f.pair_derivation}; the card bounds every pair: {bound_text}; "
            f"ceiling: {f.ceiling_derivation}",
            fix=_pair_fix(f, *_limit(f)),
            numbers={**numbers, "over_bytes": f.pair_bytes - bound},
        )
    if f.ceiling_bytes is None:
        return g.verdict(
            status="unknown",
            summary=f"pair {_compared(f.pair_bytes, '≤', bound)} the card holds, ceiling unknown",
            detail=f"{f.ceiling_derivation}; the card bounds the pair: {bound_text}",
            fix="state ceiling: as a byte size read from a boot ledger, or {ledger: PATH}",
            numbers=numbers,
        )
    ok = f.pair_bytes <= f.ceiling_bytes
    over = f.pair_bytes - f.ceiling_bytes
    predicted = "predicted ceiling: " if f.ceiling_basis == "predicted" else ""
    return g.verdict(
        status="pass" if ok else "fail",
        basis="predicted" if predicted else None,
        summary=predicted + _compared(f.pair_bytes, "≤" if ok else ">", f.ceiling_bytes),
        detail=f"pair: {f.pair_derivation}; ceiling: {f.ceiling_derivation}",
        fix=None if ok else _pair_fix(f, *_limit(f)),
        numbers={**numbers, "over_bytes": max(0, over)},
    )


@builtin(
    "spec-rows",
    "speculative rows within bound",
    "seqs x (1 + spec_tokens) rows past a declared bound leave the exact path (a kernel bit-exact only up to that many rows)",
)
def spec_rows_within_bound(g: Gate, f: Figures) -> GateResult | None:
    if f.max_spec_rows is None:
        return None
    rows = f.max_num_seqs * (1 + f.spec_tokens)
    ok = rows <= f.max_spec_rows
    return g.verdict(
        status="pass" if ok else "fail",
        summary=f"{f.max_num_seqs} x (1 + {f.spec_tokens}) = {rows} {'≤' if ok else '>'} {f.max_spec_rows}",
        detail=f"rows = max_num_seqs x (1 + spec_tokens) = {rows}; limits.max_spec_rows = {f.max_spec_rows}",
        fix=None if ok else "lower serving.max_num_seqs or serving.spec_tokens",
        numbers={"rows": rows, "bound": f.max_spec_rows},
    )


@builtin(
    "unclaimed",
    "unclaimed VRAM",
    "VRAM between the pair and the ceiling is throughput left on the floor (a warning)",
)
def unclaimed_below_floor(g: Gate, f: Figures) -> GateResult | None:
    if f.sizing is not None:
        return None  # the engine sizes its pool to fill what it requests: nothing left over
    kv_idle = f.kv_unclaimed_bytes or 0  # budget.kv the engine's cache leaves unused
    threshold = f.unclaimed_warn_above
    numbers: dict[str, int | float | str | None] = {
        "unclaimed_bytes": f.unclaimed_bytes,
        **({} if f.kv_unclaimed_bytes is None else {"kv_unclaimed_bytes": kv_idle}),
        "floor_bytes": threshold,
    }
    if f.unclaimed_bytes is None and not kv_idle:
        return g.verdict(
            status="unknown",
            summary=f"no ceiling to measure it against; warns above {_mib(threshold)}",
            detail=f"unclaimed = ceiling - pair, and {f.ceiling_derivation}",
            fix="state ceiling: as a byte size read from a boot ledger, or {ledger: PATH}",
            numbers=numbers,
        )
    if f.unclaimed_bytes is not None and f.unclaimed_bytes < 0:
        # a pair over its ceiling leaves a debt, not a margin
        ceiling = f.ceiling_bytes or 0
        return g.verdict(
            status="fail",
            basis="predicted" if f.ceiling_basis == "predicted" else None,
            summary=f"{_mib(f.unclaimed_bytes)} unclaimed: the pair is over the ceiling",
            detail=f"ceiling - pair = {ceiling:,} B - {f.pair_bytes:,} B = {f.unclaimed_bytes:,} B",
            fix=_pair_fix(f, *_limit(f)),
            numbers=numbers,
        )
    unclaimed = (f.unclaimed_bytes or 0) + kv_idle
    over = unclaimed > threshold
    parts = [] if f.unclaimed_bytes is None else [f"ceiling - pair = {f.unclaimed_bytes:,} B"]
    if kv_idle:
        parts.append(
            f"budget.kv the cache leaves unused = {kv_idle:,} B (the engine sizes its cache "
            "by the slots' windows, so more KV budget buys no sessions)"
        )
    fix = None
    if over:
        fix = (
            f"lower budget.kv to {_mib_up(f.kv_budget_bytes - kv_idle)} (what the cache "
            "takes), then give the unclaimed bytes to budget.weights or to more slots"
            if kv_idle
            else "give the unclaimed bytes to budget.kv or budget.weights"
        )
    return g.verdict(
        status="warn" if over else "pass",
        basis="predicted" if f.ceiling_basis == "predicted" else None,
        summary=_compared(unclaimed, "unclaimed >" if over else "unclaimed ≤", threshold),
        detail="unclaimed = " + " + ".join(parts),
        fix=fix,
        numbers=numbers,
    )


@builtin(
    "weights-fit",
    "weights fit their budget",
    "a weights budget below the checkpoint's bytes per rank cannot load the model",
)
def weights_fit_budget(g: Gate, f: Figures) -> GateResult | None:
    m = f.model
    if m is None or f.sizing is not None:
        # an engine that sizes its own pool loads the weights first and fits the pool
        # around them: its weights "budget" is the prediction, nothing to hold it against
        return None
    share = m.weights_per_rank
    if share is None:
        return g.verdict(
            status="unknown",
            summary=f"budget {_mib(f.weights_budget_bytes)}, weight bytes unknown",
            detail=m.weight_source
            or f"{m.source} states no weight bytes (no safetensors index or GGUF tensor table)",
            fix="point model: at the GGUF or HF folder so fakplan can read the weight bytes",
            numbers={
                "weights_budget_bytes": f.weights_budget_bytes,
                "weights_per_rank_bytes": None,
            },
        )
    split = f" / (TP {m.tp} x PP {m.pp})" if m.tp * m.pp > 1 else ""
    detail = f"{m.weight_bytes:,} B ({m.weight_source}){split} = {share:,} B per rank at least"
    numbers: dict[str, int | float | str | None] = {
        "weights_budget_bytes": f.weights_budget_bytes,
        "weights_per_rank_bytes": share,
    }
    bound, bound_text = f.card_bound
    if share > bound:  # no budget can hold them: the card decides
        return g.verdict(
            status="fail",
            summary=f"{_compared(share, '>', bound)} the card holds",
            detail=f"{detail}; the card bounds them: {bound_text}",
            fix=_weights_fix(f, share),
            numbers={**numbers, "card_bound_bytes": bound},
        )
    ok = share <= f.weights_budget_bytes
    return g.verdict(
        status="pass" if ok else "fail",
        summary=_compared(share, "≤" if ok else ">", f.weights_budget_bytes),
        detail=detail,
        fix=None if ok else _weights_fix(f, share),
        numbers=numbers,
    )


def _weights_fix(f: Figures, share: int) -> str:
    """Grow the weights budget only as far as the pair's limit holds it; else say what
    cannot fit."""
    limit, within = _limit(f)
    if share > limit:
        return (
            f"the weights per rank ({_mib_up(share)}) exceed {within}: shard wider "
            "(parallel.tensor or parallel.pipeline), quantize them, or serve a smaller checkpoint"
        )
    over = share + f.kv_budget_bytes - limit
    if over > 0 and share + f.contract_bytes > limit:
        return (
            f"the weights per rank ({_mib_up(share)}) plus the contract "
            f"({_mib_up(f.contract_bytes)}) exceed {within}: lower serving.max_num_seqs or "
            "serving.max_model_len, use a smaller serving.kv_cache_dtype, or shard wider"
        )
    if over > 0:
        return (
            f"grow budget.weights to at least {_mib_up(share)} and take {_mib_up(over)} out of "
            f"budget.kv (to {_mib_down(f.kv_budget_bytes - over)}, still the contract; the pair "
            f"must fit in {within}), or shard wider"
        )
    return f"grow budget.weights to at least {_mib_up(share)} or shard wider"


@builtin(
    "context",
    "max_model_len ≤ trained context",
    "a window past the trained context serves positions the model never saw, unless rope scaling is intended",
)
def window_within_training(g: Gate, f: Figures) -> GateResult | None:
    m = f.model
    if m is None:
        return None
    # what one slot can reach where the engine decides it (llama.cpp pads -c, and a unified
    # cache lets one slot fill it all): the window served, not the window written
    slot = f.slot_tokens if f.slot_tokens is not None else f.max_model_len
    reach = max(slot, f.max_model_len)
    within = reach <= m.trained_context
    declared = m.rope_scaling_declared
    past_window = slot > f.max_model_len
    ok = (within or declared) and not past_window
    note = "" if within else " (rope scaling declared in limits.rope_scaling)" if declared else ""
    summary = f"{reach:,} {'≤' if within else '>'} {m.trained_context:,}{note}"
    fix = None
    if past_window:
        summary = (
            f"a slot reaches {slot:,} tokens > max_model_len {f.max_model_len:,} "
            f"(trained {m.trained_context:,})"
        )
    proposes: tuple[FixPatch, ...] = ()
    if past_window and f.slots_share:
        fix = (
            "drop serving.kv_unified: with a unified cache one slot may fill the whole "
            "cache; split, each slot gets exactly its window"
        )
        proposes = (FixPatch(path="serving.kv_unified", value=None),)
    elif past_window:
        fix = (
            f"write max_model_len: {slot}: the engine pads each slot's context to a multiple "
            f"of its cell step, so {f.max_model_len:,} becomes {slot:,}"
        )
        proposes = (FixPatch(path="serving.max_model_len", value=slot),)
    elif not ok:
        fix = (
            f"lower serving.max_model_len to {m.trained_context:,}, or declare "
            "limits.rope_scaling: true if you extend it on purpose"
        )
    return g.verdict(
        status="pass" if ok else "fail",
        summary=summary,
        detail=(
            f"max_position_embeddings {m.trained_context:,} from {m.source}"
            + (f"; the checkpoint declares rope scaling {m.rope_scaling}" if m.rope_scaling else "")
            + (f"; the context one slot reaches: {slot:,} tokens" if f.slot_tokens else "")
        ),
        fix=fix,
        proposes=proposes,
        numbers={
            "max_model_len": f.max_model_len,
            **({} if f.slot_tokens is None else {"slot_tokens": f.slot_tokens}),
            "trained_context": m.trained_context,
        },
    )


@builtin(
    "boots",
    "the engine boots the shape",
    "a shape the engine refuses at boot never serves: its refusals, in its own words, "
    "before anything is deployed (docs/boot-refusals.md)",
)
def engine_boots(g: Gate, f: Figures) -> GateResult | None:
    if f.boot is None:
        return None  # the engine lists no refusals (engine: custom)
    refused = [x for x in f.boot if x.message]
    unchecked = [x for x in f.boot if x.not_checked]
    checked = len(f.boot) - len(unchecked)
    numbers: dict[str, int | float | str | None] = {
        "rows_checked": checked,
        "rows_refusing": len(refused),
        "rows_not_checked": len(unchecked),
    }
    skipped = "; ".join(f"{x.row.id} not checked: {x.not_checked}" for x in unchecked)
    if refused:
        return g.verdict(
            status="fail",
            summary="; ".join(f"{x.row.id}: {x.message}" for x in refused),
            detail="; ".join(
                f"{x.row.id} ({x.row.releases}): {x.row.condition} [{x.row.source}]"
                for x in refused
            )
            + (f"; {skipped}" if skipped else ""),
            fix="; ".join(f"{x.row.id}: {x.row.fix}" for x in refused),
            numbers=numbers,
        )
    rows = "row" if checked == 1 else "rows"
    return g.verdict(
        status="pass",
        summary=f"none of {checked} refusal {rows} applies"
        + (f" ({len(unchecked)} not checked)" if unchecked else ""),
        detail=f"checked: {', '.join(x.row.id for x in f.boot if not x.not_checked)}"
        + (f"; {skipped}" if skipped else ""),
        numbers=numbers,
    )


# ------------------------------------------------ the cluster (launch.kubernetes)


@builtin(
    "k8s-gpus",
    "GPUs per pod = cards the layout uses per node",
    "a pod that asks for fewer GPUs than its ranks cannot start them; more leaves cards idle",
)
def pod_gpus(g: Gate, f: Figures) -> GateResult | None:
    c = f.cluster
    if c is None or c.gpus_per_pod == 0:
        return None
    ok = c.gpus_per_pod == c.ranks_per_node
    return g.verdict(
        status="pass" if ok else "fail",
        summary=f"nvidia.com/gpu {c.gpus_per_pod} {'=' if ok else '≠'} {c.ranks_per_node} "
        f"ranks per node (TP {c.tensor} x PP {c.pipeline} / {c.nodes} node(s))",
        detail="resources.limits of every pod is card.count",
        fix=None if ok else f"set card.count to {c.ranks_per_node}, or change parallel",
        numbers={"gpus_per_pod": c.gpus_per_pod, "ranks_per_node": c.ranks_per_node},
    )


@builtin(
    "k8s-parallel",
    "TP x PP = GPUs per pod x pods",
    "a group whose pods hold more or fewer GPUs than the ranks never forms, or strands cards",
)
def group_parallel(g: Gate, f: Figures) -> GateResult | None:
    c = f.cluster
    if c is None or c.gpus_per_pod == 0:
        return None
    ranks, gpus = c.tensor * c.pipeline, c.gpus_per_pod * c.nodes
    ok = ranks == gpus
    return g.verdict(
        status="pass" if ok else "fail",
        summary=f"{c.tensor} x {c.pipeline} = {ranks} {'=' if ok else '≠'} "
        f"{c.gpus_per_pod} x {c.nodes} = {gpus}",
        detail="one Deployment pod, or one LeaderWorkerSet group of parallel.nodes pods",
        fix=None if ok else "make card.count x parallel.nodes equal tensor x pipeline",
        numbers={"ranks": ranks, "gpus": gpus},
    )


@builtin(
    "k8s-startup",
    "startup budget ≥ load estimate",
    "a startup probe that gives up before the weights are read restarts the pod forever",
)
def startup_budget(g: Gate, f: Figures) -> GateResult | None:
    c = f.cluster
    if c is None:
        return None
    ok = c.startup_budget_s >= c.load_estimate_s
    source = "launch.kubernetes.startup_budget_s" if c.startup_stated else "the default"
    return g.verdict(
        status="pass" if ok else "fail",
        summary=f"{c.startup_budget_s:,} s {'≥' if ok else '<'} {c.load_estimate_s:,} s",
        detail=f"budget: {source}; estimate: {c.load_derivation}",
        fix=None
        if ok
        else f"raise launch.kubernetes.startup_budget_s to at least {c.load_estimate_s:,}",
        numbers={"startup_budget_s": c.startup_budget_s, "load_estimate_s": c.load_estimate_s},
    )


@builtin(
    "k8s-shm",
    "/dev/shm with TP > 1",
    "tensor-parallel ranks share tensors through /dev/shm; a container's default 64 MiB "
    "fails NCCL at the first collective",
)
def shared_memory(g: Gate, f: Figures) -> GateResult | None:
    c = f.cluster
    if c is None or c.tensor == 1:
        return None
    ok = c.shm_bytes is not None and c.shm_bytes > 0
    return g.verdict(
        status="pass" if ok else "fail",
        summary=f"/dev/shm {human(c.shm_bytes or 0)} per pod" if ok else "no /dev/shm volume",
        detail="a memory-backed emptyDir mounted at /dev/shm",
        fix=None if ok else "set launch.kubernetes.shm_size (e.g. 16 GiB)",
        numbers={"shm_bytes": c.shm_bytes},
    )


BUILTIN_GATES: tuple[Gate, ...] = tuple(
    _DEFINED[gate_id]
    for gate_id in (
        "pool-contract",
        "pair-ceiling",
        "weights-fit",
        "context",
        "boots",
        "spec-rows",
        "unclaimed",
        "k8s-gpus",
        "k8s-parallel",
        "k8s-startup",
        "k8s-shm",
    )
)
