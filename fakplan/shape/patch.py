"""A shape's YAML with some fields set, everything else as it was written.

A proven fix (``fakplan.fit.proven_fixes``) is a list of ``path: value`` settings; applied
with ruamel.yaml's round-trip loader, the operator's comments, key order, quoting and
layout survive, so the change a reviewer sees in git is the fix and nothing else.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from fakplan.errors import ShapeError


def patched_text(
    text: str, settings: Iterable[tuple[str, int | float | str | None]], what: str
) -> str:
    """``text`` with each dotted ``path`` set to its value (a block made where missing, a
    value of None removed); ``what`` names the file in an error."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    try:
        document = yaml.load(text)
    except YAMLError as exc:
        raise ShapeError(f"cannot be edited as YAML ({exc})", file=what) from None
    if not isinstance(document, CommentedMap):
        raise ShapeError("the shape is not a mapping", file=what)
    for path, value in settings:
        *blocks, key = path.split(".")
        node = document
        for block in blocks:
            child = node.get(block)
            if not isinstance(child, CommentedMap):
                child = CommentedMap()
                node[block] = child
            node = child
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value
    out = io.StringIO()
    yaml.dump(document, out)
    return out.getvalue()
