"""fakplan: a capacity compiler for LLM inference endpoints.

The stable public API is what ``__all__`` lists; a test pins it.
"""

from fakplan.errors import FakplanError, GeometryError, LedgerError, ProbeError, ShapeError
from fakplan.plan import Plan, compile_plan
from fakplan.shape import LoadedShape, Shape, load_shape
from fakplan.units import format_bytes, parse_bytes

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
