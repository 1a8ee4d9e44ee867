"""Engines are plug-ins behind one Protocol, listed in one literal dict.

The shape schema's ``engine`` values are the keys of ``ENGINES``; adding an
engine touches its module, its templates and its tests.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from fakplan.engines.custom import CustomEngine
from fakplan.engines.llamacpp import LlamacppEngine
from fakplan.engines.sglang import SglangEngine
from fakplan.engines.vllm import VllmEngine
from fakplan.errors import FakplanError, GeometryError

if TYPE_CHECKING:
    from fakplan.contract import Capacity, KvCost
    from fakplan.figures import Figures
    from fakplan.geometry import Geometry
    from fakplan.kv import KvBreakdown, KvQuery, PoolResult
    from fakplan.launch import LaunchRecord
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

    def launch(self, loaded: LoadedShape, figures: Figures) -> LaunchRecord:
        """The env file's variables and each node role's argv."""
        ...


class ModelledEngine(Engine, Protocol):
    """An engine whose arithmetic fakplan derives from the model's geometry."""

    def breakdown(self, query: KvQuery) -> KvBreakdown: ...

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult: ...


ENGINES: dict[str, Engine] = {
    "vllm": VllmEngine(),
    "sglang": SglangEngine(),
    "llamacpp": LlamacppEngine(),
    "custom": CustomEngine(),
}

MODELLED: dict[str, ModelledEngine] = {
    "vllm": VllmEngine(),
    "sglang": SglangEngine(),
    "llamacpp": LlamacppEngine(),
}


def modelled_engine(name: str) -> ModelledEngine:
    try:
        return MODELLED[name]
    except KeyError:
        raise FakplanError(
            f"engine {name!r}: fakplan models {', '.join(MODELLED)}; "
            "an engine it does not model takes engine: custom with a contract"
        ) from None


@lru_cache(maxsize=64)
def _geometry(reference: str) -> Geometry:
    from fakplan.geometry import load_geometry

    return load_geometry(reference)


def shape_geometry(loaded: LoadedShape) -> Geometry:
    """The geometry a shape's ``model:`` names: a path against the shape's folder, or a
    catalog id. Never the working directory: a path that is not beside the shape is refused
    with the path looked at, so no spelling works for one command and not for another."""
    from fakplan.geometry import catalog

    reference = loaded.shape.model
    local = loaded.resolve(reference)
    if not local.exists():
        try:
            entry = catalog.lookup(reference)
        except GeometryError as exc:
            raise loaded.error(str(exc), "model") from None
        if entry is None:
            raise loaded.error(
                f"{reference!r} is neither a file or folder at {local} (a path in a shape is "
                "relative to the shape's folder) nor a catalog id (fakplan kv --list)",
                "model",
            )
        return entry
    try:
        return _geometry(str(local))
    except GeometryError as exc:
        raise loaded.error(str(exc), "model") from None


def query_for_shape(loaded: LoadedShape) -> KvQuery:
    from fakplan.kv import KvQuery

    shape = loaded.shape
    serving = shape.serving
    return KvQuery(
        geometry=shape_geometry(loaded),
        engine=shape.engine,
        engine_version=shape.engine_version,
        kv_dtype=serving.kv_cache_dtype,
        model_dtype=serving.dtype,
        device=shape.card.device,
        tp=shape.parallel.tensor,
        pp=shape.parallel.pipeline,
        block_size=serving.block_size,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        prefix_caching=serving.prefix_caching,
        spec_tokens=serving.spec_tokens,
        kv_unified=serving.kv_unified,
    )
