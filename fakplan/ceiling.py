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
    """A ceiling (None: unknown), how it was derived, and the log lines it cites."""

    bytes: int | None
    derivation: str
    lines: tuple[int, ...] = ()


def _lines(ledger: Ledger, *names: str) -> tuple[int, ...]:
    """The lines that state ``names``, in that order: what a derivation cites."""
    return tuple(figure.line for name in names if (figure := ledger.figure(name)) is not None)


def _where(ledger: Ledger, lines: tuple[int, ...]) -> str:
    """``boot.log lines 3, 9``: where a derivation's inputs stand."""
    numbers = ", ".join(str(n) for n in sorted(set(lines)))
    return f"{ledger.file} line{'s' if len(set(lines)) > 1 else ''} {numbers}"


def _settled(ledger: Ledger) -> tuple[int | None, str]:
    """The free memory once the engine has settled, and the figure it was read from."""
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
    """Whether figure ``name`` is the binding rank's own (or no rank's)."""
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
    """The weights + KV the engine allocated, and the figures it was read from."""
    if ledger.pair_bytes is not None:
        return ledger.pair_bytes, ("pair_bytes",)
    if ledger.weights_bytes is not None and ledger.kv_bytes is not None:
        return ledger.weights_bytes + ledger.kv_bytes, ("weights_bytes", "kv_bytes")
    return None, ()


@dataclass(frozen=True)
class _Stated:
    """The inputs every route to a ceiling may need, with the names they were read from."""

    settled: int | None
    settled_name: str
    pair: int | None
    pair_names: tuple[str, ...]
    floor: int | None
    floor_text: str


def _stated(ledger: Ledger, engine_floor: int | None) -> _Stated:
    """The settled free memory, the pair and the floor: the log's floor, else the shape's."""
    settled, settled_name = _settled(ledger)
    pair, pair_names = _pair(ledger)
    floor = ledger.engine_floor_bytes
    floor_text = "the engine's floor"
    if floor is None and engine_floor is not None:
        floor, floor_text = (
            engine_floor,
            "ceiling.engine_floor stated in the shape (not in the log)",
        )
    return _Stated(settled, settled_name, pair, pair_names, floor, floor_text)


def ceiling_from_ledger(ledger: Ledger, engine_floor: int | None = None) -> CeilingReading:
    """The largest weights + KV pair the card holds under this engine, as the ledger shows it.

    ``engine_floor`` is what the engine must keep free at worst case, for logs
    that do not state it (an operator's figure: it is labelled as such).
    """
    stated = _stated(ledger, engine_floor)
    if (reading := _from_settled(ledger, stated)) is not None:
        return reading
    if (reading := _from_profiler(ledger)) is not None:
        return reading
    if (reading := _from_device_free(ledger, stated)) is not None:
        return reading
    return _unknown(ledger, stated)


def _from_settled(ledger: Ledger, s: _Stated) -> CeilingReading | None:
    """The table's definition: (settled free - the engine's floor) + the pair it holds."""
    if s.settled is None or s.pair is None or s.floor is None:
        return None
    lines = _lines(ledger, s.settled_name, "engine_floor_bytes", *s.pair_names)
    value = s.settled - s.floor + s.pair
    used = (s.settled_name, "engine_floor_bytes", *s.pair_names)
    return CeilingReading(
        value,
        f"(settled free {human(s.settled, 'MiB', 2)} - {s.floor_text} "
        f"{human(s.floor, 'MiB', 2)}) + pair {human(s.pair, 'MiB', 2)} = "
        f"{human(value, 'MiB', 2)} ({_where(ledger, lines)}){_ranks(ledger, used)}",
        lines,
    )


def _from_profiler(ledger: Ledger) -> CeilingReading | None:
    """vLLM's profiler: what it may use (total x utilisation) less what it holds outside the
    pair (non-torch allocations, the activation peak)."""
    total, util = ledger.total_gpu_bytes, ledger.gpu_memory_utilization
    non_torch, activation = ledger.non_torch_bytes, ledger.activation_bytes
    if total is None or util is None or non_torch is None or activation is None:
        return None
    usable = ledger.usable_bytes if ledger.usable_bytes is not None else round(total * util)
    value = usable - non_torch - activation
    names = ("total_gpu_bytes", "usable_bytes", "non_torch_bytes", "activation_bytes")
    lines = _lines(ledger, *names)
    return CeilingReading(
        value,
        f"vLLM: total {human(total, 'GiB', 2)} x utilisation {util:g} = {human(usable, 'GiB', 2)}, "
        f"- non-torch {human(non_torch, 'GiB', 2)} - activation peak {human(activation, 'GiB', 2)} "
        f"= {human(value, 'MiB', 2)} for weights + KV; a larger --gpu-memory-utilization "
        f"raises it up to what is free at startup ({_where(ledger, lines)})"
        f"{_ranks(ledger, (*names, 'gpu_memory_utilization'))}",
        lines,
    )


def _from_device_free(ledger: Ledger, s: _Stated) -> CeilingReading | None:
    """llama.cpp: the one device's free memory at load less the buffers beside the pair."""
    free = [d["free_bytes"] for d in ledger.devices.values() if "free_bytes" in d]
    if len(free) != 1 or ledger.compute_bytes is None:
        return None
    buffers = ledger.compute_bytes + (ledger.output_bytes or 0)
    value = free[0] - (buffers + (s.floor or 0))
    lines = _lines(ledger, "compute_bytes", "output_bytes")
    floor_part = f" - {s.floor_text} {human(s.floor, 'MiB', 2)}" if s.floor else ""
    return CeilingReading(
        value,
        f"llama.cpp: device free at load {human(free[0], 'MiB', 2)} - compute and output "
        f"buffers {human(buffers, 'MiB', 2)}{floor_part} = {human(value, 'MiB', 2)} "
        f"({ledger.file})",
        lines,
    )


def _unknown(ledger: Ledger, s: _Stated) -> CeilingReading:
    """No route's inputs are all stated: name what is missing, and any input printed
    unreadably (the reason it is missing)."""
    missing = []
    if s.settled is None:
        missing.append("the free memory once settled")
    if s.floor is None:
        missing.append("the engine's floor (give ceiling.engine_floor)")
    if s.pair is None:
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
