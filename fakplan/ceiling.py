"""The card ceiling, read from a boot ledger: the engine's, never a hand-picked reserve.

The VRAM budget table's ``ceiling = (settled_free − engine_floor) + current_pair``, where the
ledger states them. vLLM's profiler gives it another way: what the engine may
use (``total × gpu_memory_utilization``) minus what it holds outside the pair
(non-torch allocations and the activation peak). llama.cpp states the free
memory of each device at load and the buffers it adds beside the pair.
A ceiling whose inputs the log does not state is unknown, with the missing
lines named. Where ranks print different figures the binding rank's are used
(the smallest pool, else the least free memory: the engine sizes every rank
by it), and the derivation says so, with the spread.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.ledger import Ledger
from fakplan.ledger.model import spread
from fakplan.units import human, human_pair

_INPUTS = frozenset(
    {
        "settled_free_bytes",
        "free_at_ready_bytes",
        "free_after_graphs_bytes",
        "engine_floor_bytes",
        "pair_bytes",
        "weights_bytes",
        "kv_bytes",
        "total_gpu_bytes",
        "gpu_memory_utilization",
        "usable_bytes",
        "non_torch_bytes",
        "activation_bytes",
        "compute_bytes",
        "output_bytes",
    }
)
"""Every figure a ceiling is computed from: one the log prints unreadably is named when the
ceiling is unknown."""


@dataclass(frozen=True)
class CeilingReading:
    bytes: int | None
    derivation: str
    lines: tuple[int, ...] = ()


def _line(ledger: Ledger, name: str) -> tuple[int, ...]:
    figure = ledger.figure(name)
    return (figure.line,) if figure is not None else ()


def _where(ledger: Ledger, lines: tuple[int, ...]) -> str:
    numbers = ", ".join(str(n) for n in sorted(set(lines)))
    return f"{ledger.file} line{'s' if len(set(lines)) > 1 else ''} {numbers}"


def _settled(ledger: Ledger) -> tuple[int | None, str]:
    if ledger.settled_free_bytes is not None:
        return ledger.settled_free_bytes, "settled_free_bytes"
    # SGLang: what is free once the pool and the CUDA graphs are in place; where ranks
    # differ, the binding rank's own figure first (TP0 alone prints the scheduler's line).
    names = [
        n
        for n in ("free_at_ready_bytes", "free_after_graphs_bytes")
        if ledger.figure(n) is not None
    ]
    if not names:
        return None, ""
    name = next((n for n in names if _of_binding(ledger, n)), names[0])
    return getattr(ledger, name), name


def _of_binding(ledger: Ledger, name: str) -> bool:
    figure = ledger.figure(name)
    return figure is not None and figure.rank in (None, ledger.binding_rank)


def _ranks(ledger: Ledger, names: tuple[str, ...]) -> str:
    """Where ranks differ: which rank's figures the ceiling used, and the spread of its inputs."""
    if ledger.binding_rank is None:
        return ""
    inputs = set(names)
    kv = ledger.figure("kv_bytes")
    if "kv_bytes" in inputs and kv is not None and kv.derived:
        inputs.update(("k_bytes", "v_bytes"))  # SGLang's pool is K + V: it differs through them
    differ = [
        spread(name, {label: per[name] for label, per in ledger.ranks.items() if name in per})
        for name in sorted(inputs)
        if any(name in per for per in ledger.ranks.values())
    ]
    used = f"; {'; '.join(differ)}" if differ else "; its inputs agree on every rank"
    return (
        f"; the figures of {ledger.binding_rank}, the binding rank (the engine sizes every rank "
        f"by it){used}"
    )


def _pair(ledger: Ledger) -> tuple[int | None, tuple[str, ...]]:
    if ledger.pair_bytes is not None:
        return ledger.pair_bytes, ("pair_bytes",)
    if ledger.weights_bytes is not None and ledger.kv_bytes is not None:
        return ledger.weights_bytes + ledger.kv_bytes, ("weights_bytes", "kv_bytes")
    return None, ()


def ceiling_from_ledger(ledger: Ledger, engine_floor: int | None = None) -> CeilingReading:
    """The largest weights + KV pair the card holds under this engine, as the ledger shows it.

    ``engine_floor`` is what the engine must keep free at worst case, for logs
    that do not state it (an operator's figure: it is labelled as such).
    """
    settled, settled_name = _settled(ledger)
    pair, pair_names = _pair(ledger)
    floor = ledger.engine_floor_bytes
    floor_text = "the engine's floor"
    if floor is None and engine_floor is not None:
        floor, floor_text = (
            engine_floor,
            "ceiling.engine_floor stated in the shape (not in the log)",
        )
    if settled is not None and pair is not None and floor is not None:
        lines = _line(ledger, settled_name) + _line(ledger, "engine_floor_bytes")
        lines += tuple(n for name in pair_names for n in _line(ledger, name))
        value = settled - floor + pair
        used = (settled_name, "engine_floor_bytes", *pair_names)
        return CeilingReading(
            value,
            f"(settled free {human(settled, 'MiB', 2)} - {floor_text} {human(floor, 'MiB', 2)}) "
            f"+ pair {human(pair, 'MiB', 2)} = {human(value, 'MiB', 2)} ({_where(ledger, lines)})"
            f"{_ranks(ledger, used)}",
            lines,
        )
    total, util = ledger.total_gpu_bytes, ledger.gpu_memory_utilization
    non_torch, activation = ledger.non_torch_bytes, ledger.activation_bytes
    if None not in (total, util, non_torch, activation):
        assert total is not None and util is not None
        assert non_torch is not None and activation is not None
        usable = ledger.usable_bytes if ledger.usable_bytes is not None else round(total * util)
        value = usable - non_torch - activation
        names = ("total_gpu_bytes", "usable_bytes", "non_torch_bytes", "activation_bytes")
        lines = tuple(n for name in names for n in _line(ledger, name))
        return CeilingReading(
            value,
            f"vLLM: total {human(total, 'GiB', 2)} x utilisation {util:g} = {human(usable, 'GiB', 2)}, "
            f"- non-torch {human(non_torch, 'GiB', 2)} - activation peak {human(activation, 'GiB', 2)} "
            f"= {human(value, 'MiB', 2)} for weights + KV; a larger --gpu-memory-utilization "
            f"raises it up to what is free at startup ({_where(ledger, lines)})"
            f"{_ranks(ledger, (*names, 'gpu_memory_utilization'))}",
            lines,
        )
    free = [d["free_bytes"] for d in ledger.devices.values() if "free_bytes" in d]
    if len(free) == 1 and ledger.compute_bytes is not None:
        other = ledger.compute_bytes + (ledger.output_bytes or 0) + (floor or 0)
        value = free[0] - other
        lines = tuple(n for name in ("compute_bytes", "output_bytes") for n in _line(ledger, name))
        floor_part = f" - {floor_text} {human(floor, 'MiB', 2)}" if floor else ""
        return CeilingReading(
            value,
            f"llama.cpp: device free at load {human(free[0], 'MiB', 2)} - compute and output "
            f"buffers {human(ledger.compute_bytes + (ledger.output_bytes or 0), 'MiB', 2)}{floor_part}"
            f" = {human(value, 'MiB', 2)} ({ledger.file})",
            lines,
        )
    missing = []
    if settled is None:
        missing.append("the free memory once settled")
    if floor is None:
        missing.append("the engine's floor (give ceiling.engine_floor)")
    if pair is None:
        missing.append("the weights and KV it allocated")
    unread = [why for name, why in ledger.unreadable.items() if name in _INPUTS]
    return CeilingReading(
        None,
        f"unknown: {ledger.file} ({ledger.engine}) does not state {', '.join(missing)}"
        + "".join(f"; {why}" for why in unread),
    )


def above_card(reading: CeilingReading, card_total: int, log: object) -> str | None:
    """Why a ceiling ``log`` measures cannot be this card's, or None.

    A pair checked against it would pass on memory the card lacks: the log is another
    card's, or card.total understates this one. Bad input, never a gate verdict."""
    if reading.bytes is None or reading.bytes <= card_total:
        return None
    measured, stated = human_pair(reading.bytes, card_total)
    return (
        f"the ceiling {log} measures, {measured}, is above the card's {stated} "
        "(card.total): the log is from a larger card, or card.total understates this one "
        "(state it as the device reports it: fakplan budget)"
    )
