"""fakplan: a capacity compiler for LLM inference endpoints.

The stable public API is what ``__all__`` lists; a test pins it. Names are
imported when first used, so ``import fakplan`` (and every command that needs
only part of it) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fakplan.errors import FakplanError, GeometryError, LedgerError, ProbeError, ShapeError

if TYPE_CHECKING:
    from fakplan.plan import Plan, compile_plan
    from fakplan.shape import LoadedShape, Shape, load_shape
    from fakplan.units import format_bytes, parse_bytes

_LAZY = {
    "Plan": "fakplan.plan",
    "compile_plan": "fakplan.plan",
    "LoadedShape": "fakplan.shape",
    "Shape": "fakplan.shape",
    "load_shape": "fakplan.shape",
    "format_bytes": "fakplan.units",
    "parse_bytes": "fakplan.units",
}

__all__ = [
    "FakplanError",
    "GeometryError",
    "LedgerError",
    "LoadedShape",
    "Plan",
    "ProbeError",
    "Shape",
    "ShapeError",
    "compile_plan",
    "format_bytes",
    "load_shape",
    "parse_bytes",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fakplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
