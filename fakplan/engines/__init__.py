"""Engines are plug-ins behind one class, listed in one registry.

Each engine is a subclass of ``base.Engine`` in a module of its own, with its
templates and its tests; ``ENGINES`` lists the built-in ones, and the shape
schema's ``engine`` values are its keys. ``register`` adds an engine from
outside the package (a plug-in, or a test's toy engine): nothing else changes.
"""

from __future__ import annotations

from dataclasses import replace

from fakplan.engines.base import Engine, ModelledEngine
from fakplan.engines.custom import CustomEngine
from fakplan.engines.llamacpp import LlamacppEngine
from fakplan.engines.query import query_for_shape, shape_geometry
from fakplan.engines.refusals import BootInputs, BootRefusal, Finding, findings, planned_version
from fakplan.engines.sglang import SglangEngine
from fakplan.engines.vllm import VllmEngine
from fakplan.errors import FakplanError
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (VllmEngine(), SglangEngine(), LlamacppEngine(), CustomEngine())
}


def boot_refusals() -> tuple[BootRefusal, ...]:
    """The one table of boot refusals: every registered engine's rows, in registry order."""
    return tuple(row for engine in ENGINES.values() for row in engine.boot_refusals)


__all__ = [
    "ENGINES",
    "BootInputs",
    "BootRefusal",
    "Engine",
    "Finding",
    "ModelledEngine",
    "boot_refusals",
    "findings",
    "kv_breakdown",
    "modelled",
    "modelled_engine",
    "planned_version",
    "pool_tokens",
    "printed_pool_tokens",
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


def printed_pool_tokens(query: KvQuery, low: int, high: int) -> PoolResult:
    """The count an engine printed beside a pool it printed rounded, as ``[low, high]``.

    Where the printed figure is the cache itself (llama.cpp's ``size =``), the engine's
    cache is the largest the interval's top holds. Where it is memory the engine then
    divides (vLLM's available memory), every pool in the interval is possible: one count
    where they agree, else the range (``tokens_low``/``tokens_high``) with ``tokens`` at
    the interval's top.
    """
    engine = modelled_engine(query.engine)
    breakdown = engine.breakdown(query)
    top = engine.pool(query, breakdown, high)
    span = f"the printed pool is any of {low:,}..{high:,} B"
    if low == high:
        return top
    if engine.printed_pool_is_cache:
        used = top.extra.get("cache_bytes", high)
        fits = "" if used >= low else f" (no cache of this layout prints so: {used:,} B is below)"
        return replace(
            top,
            derivation=f"{span}: the cache is the largest its top holds{fits}; {top.derivation}",
        )
    bottom = engine.pool(query, breakdown, low)
    if bottom.tokens == top.tokens:
        return replace(
            top, derivation=f"{span}, which all give {top.tokens:,} tokens; {top.derivation}"
        )
    return replace(
        top,
        derivation=(
            f"{span}: {bottom.tokens:,}..{top.tokens:,} tokens (the digits do not tell which); "
            f"at the top: {top.derivation}"
        ),
        extra={**top.extra, "tokens_low": bottom.tokens, "tokens_high": top.tokens},
    )
