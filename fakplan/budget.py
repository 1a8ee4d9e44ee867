"""The device budget: what the cards say they hold, and the sentence that explains it.

One rule: ask the device, do not model the operating system. Three
sources, in order:

    FAKPLAN_DEVICE_BUDGET_BYTES   an operator's override (85899345920, or "80 GiB"): a container
                                  limit or a shared card fakplan cannot see
    NVML                          each GPU's total, free and used bytes
    host RAM                      no GPU: physical memory minus a stated reserve

A budget is a snapshot to plan against, never a reservation, and never the
ceiling: the ceiling is the engine's, read from its boot ledger. When nothing
can be probed the budget is unknown, with a visible note (fail open).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fakplan.cards import sku_for_device
from fakplan.errors import FakplanError, UnitsError
from fakplan.units import MAX_BYTE_SIZE, human, parse_bytes

BUDGET_ENV = "FAKPLAN_DEVICE_BUDGET_BYTES"
HOST_RESERVE_FRACTION = 0.10  # held back for the OS on a host-RAM budget: a blunt, stated reserve


@dataclass(frozen=True)
class DeviceMemory:
    index: int
    name: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    reserved_bytes: int | None = None  # NVML v2: what the driver and firmware hold back
    # CUDA compute capability as NVML states it (nvmlDeviceGetCudaComputeCapability),
    # "major.minor": card.capability, which decides vLLM's kernels for packed checkpoints
    capability: str | None = None

    @property
    def sku(self) -> str | None:
        """The card table's row for the name NVML reports (card.sku), if fakplan knows it."""
        row = sku_for_device(self.name)
        return row.sku if row is not None else None


@dataclass(frozen=True)
class DeviceBudget:
    source: str  # "env", "nvml", "host" or "unknown"
    devices: tuple[DeviceMemory, ...]
    budget_bytes: int | None  # per card: the smallest card's total (the pair is per card)
    sentence: str
    # what an engine sizing its own pool multiplies by its fraction, where it is known:
    # CUDA's total (NVML's less what the driver reserves), or the NUMA node's MemTotal
    engine_total_bytes: int | None = None
    engine_total_sentence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "fakplan.budget/1",
            "source": self.source,
            "budget_bytes": self.budget_bytes,
            "sentence": self.sentence,
            "engine_total_bytes": self.engine_total_bytes,
            "engine_total_sentence": self.engine_total_sentence,
            "devices": [{**d.__dict__, "sku": d.sku} for d in self.devices],
        }


class Nvml(Protocol):
    """The NVML calls fakplan makes; tests inject a fake device at this boundary."""

    def device_count(self) -> int: ...

    def memory(self, index: int) -> DeviceMemory: ...


class PynvmlBackend:
    """NVML through nvidia-ml-py (``pynvml``)."""

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def memory(self, index: int) -> DeviceMemory:
        handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        name = self._nvml.nvmlDeviceGetName(handle)
        info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        try:  # v2 (driver 510+) also states what the driver reserves, which CUDA never sees
            reserved: int | None = int(
                self._nvml.nvmlDeviceGetMemoryInfo(
                    handle, version=self._nvml.nvmlMemory_v2
                ).reserved
            )
        except Exception:
            reserved = None
        try:
            major, minor = self._nvml.nvmlDeviceGetCudaComputeCapability(handle)
            capability: str | None = f"{int(major)}.{int(minor)}"
        except Exception:
            capability = None
        return DeviceMemory(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            total_bytes=int(info.total),
            free_bytes=int(info.free),
            used_bytes=int(info.used),
            reserved_bytes=reserved,
            capability=capability,
        )

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _why(exc: Exception) -> str:
    first = str(exc).splitlines()[0] if str(exc) else "no detail"
    return f"{type(exc).__name__}: {first}"


def _host_ram() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


NODE_MEMINFO = Path("/sys/devices/system/node/node0/meminfo")
MEMINFO_MAX_BYTES = 1 << 16


def _node_memory(meminfo: Path = NODE_MEMINFO) -> tuple[int, str] | None:
    """NUMA node 0's MemTotal, as vLLM's CPU build reads it (cpu_resource_utils.py
    get_memory_node_info, v0.32.0), with where it was read."""
    try:
        with meminfo.open("rb") as handle:
            text = handle.read(MEMINFO_MAX_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    found = re.search(r"^Node \d+ MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    if found is None:
        return None
    return int(found.group(1)) * 1024, f"MemTotal of {meminfo}"


def _override_bytes(text: str) -> int:
    """The variable's value: a plain integer is bytes, as its name says; else a byte size."""
    shown = text if len(text) <= 40 else f"{text[:20]}… ({len(text):,} characters)"
    expected = (
        f"{BUDGET_ENV}: expected a whole number of bytes such as 85899345920, or a byte "
        f'size such as "80 GiB", got {shown!r}'
    )
    # the digits alone: regex \s also takes separators (U+001F) that int() refuses
    digits = re.fullmatch(r"\s*([0-9]+)\s*", text)
    if digits:
        if len(digits.group(1)) > 16:  # 1 PiB has 16 digits: a longer count is no card's
            raise FakplanError(f"{expected} (more than 1 PiB: no card holds that)")
        value = int(digits.group(1))
        if value > MAX_BYTE_SIZE:
            raise FakplanError(f"{expected} (more than 1 PiB: no card holds that)")
    else:
        try:
            value = parse_bytes(text)
        except UnitsError:
            raise FakplanError(expected) from None
    if value <= 0:  # no card holds nothing: a 0 would plan every shape against an empty card
        raise FakplanError(f"{expected} (a card of 0 B holds nothing)")
    return value


def _override_budget(value: int) -> DeviceBudget:
    """The operator's figure wins: a container limit or a shared card no probe sees."""
    return DeviceBudget(
        "env",
        (),
        value,
        f"{human(value, 'GiB', 2)} per card from {BUDGET_ENV} (an operator's figure; no device was asked)",
        value,
        f"{value:,} B from {BUDGET_ENV}, taken as the total the engine multiplies",
    )


def _nvml_budget(nvml: Callable[[], Nvml]) -> DeviceBudget | str:
    """The budget NVML reports, else why it reports none (the host's RAM is asked next).

    A GPU seen whose memory cannot be read leaves the budget unknown: the host's RAM
    is not the card's, so it is not asked.
    """
    count = 0
    try:
        backend = nvml()
        count = backend.device_count()
        devices = tuple(backend.memory(i) for i in range(count))
    except Exception as exc:
        if count:
            return DeviceBudget(
                "unknown",
                (),
                None,
                f"unknown: NVML sees {count} GPU(s) but failed reading their memory "
                f"({_why(exc)}); set {BUDGET_ENV} to state it",
            )
        return f"NVML unavailable ({_why(exc)})"  # NVML absent, no driver: no GPU can be seen
    if not devices:
        return "NVML reports no GPU"
    smallest = min(d.total_bytes for d in devices)
    names = sorted({d.name for d in devices})
    return DeviceBudget(
        "nvml",
        devices,
        smallest,
        f"{len(devices)} GPU(s) ({', '.join(names)}) report {human(smallest, 'GiB', 2)} per card "
        "(NVML total; CUDA's total, which vLLM multiplies by its utilisation, leaves out "
        "what the driver reserves; the engine's ceiling, from its boot ledger, is what a "
        "pair must fit)",
        *_cuda_total(devices),
    )


def _cuda_total(devices: tuple[DeviceMemory, ...]) -> tuple[int | None, str]:
    """The smallest card's total as CUDA counts it: NVML's less what the driver reserves."""
    if any(d.reserved_bytes is None for d in devices):
        return None, (
            "unknown: this NVML does not state what the driver reserves (nvmlMemory_v2), "
            "so CUDA's total cannot be told from NVML's"
        )
    card = min(devices, key=lambda d: d.total_bytes - (d.reserved_bytes or 0))
    reserved = card.reserved_bytes or 0
    cuda = card.total_bytes - reserved
    return cuda, (
        f"CUDA's total {cuda:,} B = NVML's {card.total_bytes:,} B - {reserved:,} B the "
        f"driver reserves (nvmlMemory_v2, GPU {card.index})"
    )


def _host_budget(ram: int | None, reason: str, node: tuple[int, str] | None = None) -> DeviceBudget:
    """Host RAM less a stated reserve for the OS, saying why no GPU was planned against."""
    if ram is None:
        return DeviceBudget(
            "unknown", (), None, f"unknown: {reason}, and host RAM could not be read"
        )
    budget = ram - round(ram * HOST_RESERVE_FRACTION)
    return DeviceBudget(
        "host",
        (),
        budget,
        f"{human(budget, 'GiB', 2)}: host RAM {human(ram, 'GiB', 2)} minus a {HOST_RESERVE_FRACTION:.0%} "
        f"reserve for the OS, because {reason}",
        *(
            (node[0], f"{node[0]:,} B: {node[1]}, what vLLM's CPU build multiplies")
            if node is not None
            else (ram, f"{ram:,} B: the host's physical memory (no NUMA node 0 meminfo)")
        ),
    )


def probe_budget(
    env: dict[str, str] | None = None,
    nvml: Callable[[], Nvml] | None = None,
    host_ram: Callable[[], int | None] = _host_ram,
    gpu: bool = True,
    node_memory: Callable[[], tuple[int, str] | None] = _node_memory,
) -> DeviceBudget:
    """The budget from the first source that answers (override, NVML, host RAM).

    ``gpu=False`` (a shape whose card is the CPU) asks host RAM without asking NVML.
    """
    env = dict(os.environ) if env is None else env
    override = env.get(BUDGET_ENV)
    if override:
        return _override_budget(_override_bytes(override))
    if not gpu:
        return _host_budget(host_ram(), "the card is the CPU (card.device: cpu)", node_memory())
    answer = _nvml_budget(nvml or PynvmlBackend)
    return answer if isinstance(answer, DeviceBudget) else _host_budget(host_ram(), answer)
