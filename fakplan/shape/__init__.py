"""The shape: an endpoint's declared VRAM pair, slots, window and dtype, as YAML.

``load_shape`` reads a file and returns a frozen ``Shape``, or raises one
``ShapeError`` that names the file, the line and the field:

    shapes/x.yaml:12: budget.kv: expected a byte size such as "5120 MiB", got 5120

The package is the pipeline: ``source`` reads YAML with bounded work and maps
fields to lines, ``model`` is the schema, ``messages`` words validation errors,
``checks`` holds the rules that span fields, ``load`` ties them together.
"""

from fakplan.shape.load import LoadedShape, load_shape, load_shape_text, shape_paths
from fakplan.shape.messages import field_path
from fakplan.shape.model import AUTO, Shape

__all__ = [
    "AUTO",
    "LoadedShape",
    "Shape",
    "field_path",
    "load_shape",
    "load_shape_text",
    "shape_paths",
]
