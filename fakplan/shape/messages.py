"""A validation error in the words of the shape: the field's path and what it expected.

Pydantic's messages name Python types; a shape's author reads YAML. Values
quoted back are cut to a short, escaped excerpt (an expanded alias can be
megabytes).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from fakplan.shape.source import excerpt


def field_path(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def message(error: ErrorDetails, model: type[BaseModel]) -> str:
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, error["loc"][:-1])
        hint = f"; expected one of: {', '.join(allowed)}" if allowed else ""
        return f"unknown key{hint}"
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
