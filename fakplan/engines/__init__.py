"""Engines are plug-ins behind one class, listed in one registry.

Each engine is a subclass of ``base.Engine`` in a module of its own, with its
templates and its tests; ``ENGINES`` lists the built-in ones, and the shape
schema's ``engine`` values are its keys. ``register`` adds an engine from
outside the package (a plug-in, or a test's toy engine): nothing else changes.
"""

from __future__ import annotations

from fakplan.engines.base import Engine, ModelledEngine
from fakplan.engines.custom import CustomEngine
from fakplan.engines.llamacpp import LlamacppEngine
from fakplan.engines.query import query_for_shape, shape_geometry
from fakplan.engines.sglang import SglangEngine
from fakplan.engines.vllm import VllmEngine
from fakplan.errors import FakplanError
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (VllmEngine(), SglangEngine(), LlamacppEngine(), CustomEngine())
}

__all__ = [
    "ENGINES",
    "Engine",
    "ModelledEngine",
    "kv_breakdown",
    "modelled",
    "modelled_engine",
    "pool_tokens",
    "query_for_shape",
    "register",
    "shape_geometry",
]


def register(engine: Engine) -> Engine:
    """Add ``engine`` to the registry (a plug-in's, or a test's); its name must be new."""
    if engine.name in ENGINES:
        raise FakplanError(f"engine {engine.name!r} is already registered")
    ENGINES[engine.name] = engine
    return engine


def modelled() -> dict[str, ModelledEngine]:
    """The engines whose arithmetic fakplan derives from the model's geometry."""
    return {name: e for name, e in ENGINES.items() if isinstance(e, ModelledEngine)}


def modelled_engine(name: str) -> ModelledEngine:
    engine = ENGINES.get(name)
    if not isinstance(engine, ModelledEngine):
        raise FakplanError(
            f"engine {name!r}: fakplan models {', '.join(modelled())}; "
            "an engine it does not model takes engine: custom with a contract"
        )
    return engine


def kv_breakdown(query: KvQuery) -> KvBreakdown:
    """The query's KV cost, component by component, as its engine computes it."""
    return modelled_engine(query.engine).breakdown(query)


def pool_tokens(query: KvQuery, pool_bytes: int) -> PoolResult:
    """The tokens (and blocks) a pool of ``pool_bytes`` becomes on the query's engine."""
    engine = modelled_engine(query.engine)
    return engine.pool(query, engine.breakdown(query), pool_bytes)
