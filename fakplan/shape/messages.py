"""A validation error in the words of the shape: the field's path and what it expected.

Pydantic's messages name Python types; a shape's author reads YAML. Values
quoted back are cut to a short, escaped excerpt (an expanded alias can be
megabytes).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from fakplan.shape.source import LineMap, excerpt


def field_path(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def first_error(errors: Sequence[ErrorDetails], lines: LineMap) -> ErrorDetails:
    """The error to report: the first unknown key, else the first by line.

    A misspelled key (``max_num_seq:``) also leaves its real field missing; the typo is
    the cause, at its own line, so it is reported before what it hides."""
    by_line = sorted(errors, key=lambda e: lines.line(e["loc"]))
    unknown = [e for e in by_line if e["type"] == "extra_forbidden"]
    return (unknown or by_line)[0]


def message(
    error: ErrorDetails, model: type[BaseModel], others: Sequence[ErrorDetails] = ()
) -> str:
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(error, model, others)
    if kind == "missing":
        return "required field is missing"
    if kind in {"greater_than", "greater_than_equal", "less_than_equal"}:
        return f"{error['msg'].replace('Input should be', 'expected a value')}, got {excerpt(got)}"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"expected a whole number, got {excerpt(got)}"
    if kind in {"string_type"}:
        return f"expected text, got {excerpt(got)}"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"expected a mapping of keys, got {excerpt(got)}"
    if kind in {"list_type", "tuple_type"}:
        return f"expected a list, got {excerpt(got)}"
    if kind == "string_pattern_mismatch":
        return f"expected lower-case letters, digits, '.', '_' or '-', got {excerpt(got)}"
    msg = error["msg"]
    for prefix in ("Value error, ",):
        msg = msg.removeprefix(prefix)
    return msg


def _unknown_key(
    error: ErrorDetails, model: type[BaseModel], others: Sequence[ErrorDetails]
) -> str:
    """``unknown key 'max_num_seq' (did you mean 'max_num_seqs'? ... is required and missing)``."""
    parent, key = error["loc"][:-1], str(error["loc"][-1])
    allowed = _allowed_keys(model, parent)
    missing = [
        str(e["loc"][-1]) for e in others if e["type"] == "missing" and e["loc"][:-1] == parent
    ]
    # a required field left missing beside it is the likeliest meaning, then any known key
    meant = difflib.get_close_matches(key, missing, n=1, cutoff=0.6) or difflib.get_close_matches(
        key, allowed, n=1, cutoff=0.6
    )
    text = f"unknown key {excerpt(key)}"
    if meant:
        hides = ""
        if meant[0] in missing:
            hides = f" {field_path((*parent, meant[0]))} is required and missing"
        text += f" (did you mean {meant[0]!r}?{hides})"
    return text + (f"; expected one of: {', '.join(allowed)}" if allowed else "")


def _allowed_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            current = _inner_model(current)
            if isinstance(part, int):
                continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(str(part))
        if info is None:
            return []
        current = _inner_model(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation
