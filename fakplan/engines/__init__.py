"""The engines fakplan plans for, behind one registry.

Each engine is a folder of its own (``fakplan/engines/<name>/``) holding everything fakplan
knows of it, in the same core modules: ``rules`` (its releases as data), ``launch`` (its
flags), ``sizing`` (the pool it sizes itself), ``bootlog`` (its boot-log lines),
``server`` (its OpenAI-compatible server: flavours, context refusals, what it says of its
capacity) and ``cluster`` (image, /dev/shm, health route, alert rules), with a subclass of
``base.Engine`` that names them. Shared pieces sit beside them in this folder: the base
class, weights counting (vLLM's and SGLang's), releases and choices, the serving record
types.

``ENGINES`` maps a shape's ``engine:`` to its ``Engine``. An engine's modules are imported
the first time it is asked for, so a vLLM shape never loads SGLang's or llama.cpp's.
``register`` adds one from outside (a plug-in, a test's toy engine): its boot-log format,
its server flavours and its cluster facts join every command's through this registry,
and nothing outside its own files changes. Code outside ``fakplan/engines/`` imports this
module only.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fakplan.engines.alerting import AlertFacts, AlertRule, quoted, range_regex
from fakplan.engines.base import Engine, ModelledEngine
from fakplan.engines.query import model_source
from fakplan.engines.refusals import BootInputs, BootRefusal, Finding, findings, planned_version
from fakplan.engines.served import served_weights, weights_source
from fakplan.engines.serving import (
    OPENAI,
    CapacityReading,
    Evidence,
    Flavour,
    Observed,
    RefusalPattern,
    TokenizeRoute,
)
from fakplan.engines.setup import Setup, setup_of
from fakplan.errors import FakplanError
from fakplan.kv import KvBreakdown, KvQuery, PoolResult

if TYPE_CHECKING:
    # the boot-log reader loads only where a log is read: a plan never compiles its rows
    from fakplan.ledger import Ledger, LedgerFormat

# the built-in engines, in the order every listing gives them: module and class, imported
# when the engine is first asked for
BUILTIN: dict[str, tuple[str, str]] = {
    "vllm": ("fakplan.engines.vllm", "VllmEngine"),
    "sglang": ("fakplan.engines.sglang", "SglangEngine"),
    "llamacpp": ("fakplan.engines.llamacpp", "LlamacppEngine"),
    "custom": ("fakplan.engines.custom", "CustomEngine"),
}


DEFAULT_ENGINE = next(iter(BUILTIN))  # `fakplan kv` without --engine


class Registry(Mapping[str, Engine]):
    """Engine name -> engine; a built-in one is imported on first use."""

    def __init__(self) -> None:
        self._lazy: dict[str, tuple[str, str]] = dict(BUILTIN)
        self._loaded: dict[str, Engine] = {}

    def __getitem__(self, name: str) -> Engine:
        engine = self._loaded.get(name)
        if engine is not None:
            return engine
        if name not in self._lazy:
            raise KeyError(name)
        module, cls = self._lazy[name]
        engine = getattr(importlib.import_module(module), cls)()
        assert isinstance(engine, Engine) and engine.name == name, (module, cls)
        self._loaded[name] = engine
        return engine

    def __contains__(self, name: object) -> bool:
        return name in self._lazy or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from self._lazy
        yield from (name for name in self._loaded if name not in self._lazy)

    def __len__(self) -> int:
        return len(set(self._lazy) | set(self._loaded))

    def add(self, engine: Engine) -> Engine:
        if engine.name in self:
            raise FakplanError(f"engine {engine.name!r} is already registered")
        self._loaded[engine.name] = engine
        return engine

    def pop(self, name: str) -> Engine:
        """Remove an engine ``register`` added (a test's, once it is done)."""
        if name in self._lazy:
            raise FakplanError(f"engine {name!r} is built in")
        return self._loaded.pop(name)


ENGINES = Registry()

__all__ = [
    "BUILTIN",
    "DEFAULT_ENGINE",
    "ENGINES",
    "OPENAI",
    "AlertFacts",
    "AlertRule",
    "BootInputs",
    "BootRefusal",
    "CapacityReading",
    "Engine",
    "Evidence",
    "Finding",
    "Flavour",
    "ModelledEngine",
    "Observed",
    "RefusalPattern",
    "Setup",
    "TokenizeRoute",
    "boot_refusals",
    "bootlog_formats",
    "context_refusals",
    "detection",
    "findings",
    "flavours",
    "kv_breakdown",
    "model_source",
    "modelled",
    "modelled_engine",
    "parse_ledger",
    "planned_version",
    "pool_tokens",
    "printed_pool_tokens",
    "quoted",
    "range_regex",
    "register",
    "served_weights",
    "setup_of",
    "weights_source",
]


def register(engine: Engine) -> Engine:
    """Add ``engine`` to the registry (a plug-in's, or a test's); its name must be new."""
    return ENGINES.add(engine)


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


# ---------------------------------------------------------------- what engines know, joined


def boot_refusals() -> tuple[BootRefusal, ...]:
    """The one table of boot refusals: every registered engine's rows, in registry order."""
    return tuple(row for engine in ENGINES.values() for row in engine.boot_refusals)


def bootlog_formats() -> dict[str, LedgerFormat]:
    """Every engine's boot-log format by its name, then the engine-neutral budget table."""
    from fakplan.ledger import TABLE

    formats = [e.boot_format() for e in ENGINES.values()]
    return {**{f.name: f for f in formats if f is not None}, TABLE.name: TABLE}


def parse_ledger(path: str | Path, engine: str = "auto") -> Ledger:
    """A boot log read with every registered engine's format (``auto`` detects which wrote
    it; an engine name or ``table`` forces one)."""
    from fakplan.ledger import read_ledger

    return read_ledger(path, bootlog_formats(), engine)


def flavours() -> dict[str, Flavour]:
    """Every engine's server flavours by name, then ``openai`` (any compatible server)."""
    found = {f.name: f for e in ENGINES.values() for f in e.server.flavours}
    return {**found, OPENAI.name: OPENAI}


def detection() -> tuple[Evidence, ...]:
    """The rules that tell which server answers, tried in order: each engine's own by field
    (what /v1/models says) first, then by route (what /openapi.json or /props lists)."""
    rules = [rule for e in ENGINES.values() for rule in e.server.evidence]
    return tuple(sorted(rules, key=lambda rule: rule.rank))


def context_refusals() -> tuple[RefusalPattern, ...]:
    """Every engine's context-overflow wordings, in registry order."""
    return tuple(row for e in ENGINES.values() for row in e.server.refusals)


# ---------------------------------------------------------------- the KV question's route


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
    top = engine.printed_pool(query, breakdown, high)
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
    bottom = engine.printed_pool(query, breakdown, low)
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
