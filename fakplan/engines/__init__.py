"""Engines are plug-ins behind one Protocol, listed in one literal dict.

The shape schema's ``engine`` values are the keys of ``ENGINES``; adding an
engine touches its module, its templates and its tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from fakplan.engines.custom import CustomEngine

if TYPE_CHECKING:
    from fakplan.contract import Capacity, KvCost
    from fakplan.shape import LoadedShape


class Engine(Protocol):
    """What the planner needs from an engine: its KV cost, its count, its dtypes."""

    name: str

    def kv_cost(self, loaded: LoadedShape) -> KvCost:
        """The per-page, per-sequence and fixed cost of the shape's KV on one rank."""
        ...

    def capacity(self, loaded: LoadedShape, cost: KvCost, pool_bytes: int) -> Capacity:
        """Tokens the pool backs, counted as this engine counts them at boot."""
        ...

    def accepted_dtypes(self, loaded: LoadedShape) -> tuple[str, ...]:
        """The ``kv_cache_dtype`` spellings this engine takes."""
        ...

    def version_used(self, loaded: LoadedShape) -> str | None:
        """The release whose arithmetic applied (None where there are none)."""
        ...


ENGINES: dict[str, Engine] = {
    "custom": CustomEngine(),
}
