"""Byte quantities with explicit units.

A bare number is refused: ``5120`` could be MiB or bytes, and that ambiguity is
exactly the shell-comment arithmetic fakplan replaces.

    >>> parse_bytes("31.86 GiB")
    34208747274
    >>> format_bytes(29120 * MIB)
    '29120 MiB'
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError

from fakplan.errors import UnitsError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

# Binary units first: they are what engines allocate in. Decimal units are
# accepted because vendors print them ("80 GB" cards).
UNITS: dict[str, int] = {
    "B": 1,
    "KiB": KIB,
    "MiB": MIB,
    "GiB": GIB,
    "TiB": TIB,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}

EXAMPLE = '"5120 MiB"'
ACCEPTED_FORMS = (
    'a number and a unit, e.g. "5120 MiB", "31.86 GiB", "7488 B"; '
    "units B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal), in any case"
)

_NUMBER = r"[0-9][0-9_,]*(?:\.[0-9]+)?"  # digits, thousands separators, decimals
_QUANTITY = re.compile(rf"^\s*(?P<number>{_NUMBER})\s*(?P<unit>[A-Za-z]+)\s*$")
# every unit in any case, decimal as binary: "24 gb" is what "24 GB" is (a byte size has no
# bits to mean, and an operator who types "gb" means the vendor's "GB")
_UNIT_BY_FOLD = {unit.casefold(): unit for unit in UNITS}


def _unit_pattern(unit: str) -> str:
    """The spellings ``parse_bytes`` takes for ``unit``, as a regex without flags."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in unit)


# What parse_bytes accepts, as one regex a JSON Schema can carry (ECMA-262: no named
# groups, no inline flags), built from the parser's own pieces so the two cannot drift.
BYTE_SIZE_PATTERN = rf"^\s*{_NUMBER}\s*(?:{'|'.join(_unit_pattern(unit) for unit in UNITS)})\s*$"


MAX_BYTE_SIZE = 1 << 50  # 1 PiB: no card, pool or budget holds more; past it, a typo
_MAX_TEXT = 64  # characters: "1,234,567.89 GiB" is 16


def parse_bytes(text: str) -> int:
    """Read ``"<number> <unit>"`` as whole bytes (rounded half-even to the byte)."""
    if not isinstance(text, str):
        raise UnitsError(f"expected a byte size such as {EXAMPLE}, got {text!r}")
    if len(text) > _MAX_TEXT:
        raise UnitsError(
            f"expected a byte size such as {EXAMPLE}, got {len(text):,} characters ({text[:20]!r}…)"
        )
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitsError(f"expected a byte size such as {EXAMPLE}, got {text!r}")
    number_text = match["number"].replace(",", "").replace("_", "")
    unit_text = match["unit"]
    unit = unit_text if unit_text in UNITS else _UNIT_BY_FOLD.get(unit_text.casefold())
    if unit is None:
        raise UnitsError(
            f"unknown unit {unit_text!r} in {text!r}; use B, KiB, MiB, GiB, TiB (binary) "
            "or KB, MB, GB, TB (decimal), in any case"
        )
    try:
        value = Decimal(number_text) * UNITS[unit]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise UnitsError(f"expected a byte size such as {EXAMPLE}, got {text!r}") from exc
    result = int(value.to_integral_value(rounding=ROUND_HALF_EVEN))
    if result > MAX_BYTE_SIZE:
        raise UnitsError(f"{text!r} is more than 1 PiB: no card, pool or budget is that large")
    return result


PRINTED_DECIMALS = 2  # vLLM format_gib/round(x, 2), SGLang :.2f, llama.cpp %7.2f


def printed_interval(text: str) -> tuple[int, int, int]:
    """The whole-byte pools whose printed figure reads ``text``: (low, nominal, high).

    An engine prints sizes rounded to two decimals (vLLM drops trailing zeros: "57.5 GiB"
    is 57.50), so "1166.62 MiB" is any pool from 1166.615 to 1166.625 MiB. A figure
    without a decimal point ("8 GiB", "7488 B") is no engine's print: it is exact.
    """
    nominal = parse_bytes(text)
    match = _QUANTITY.match(text)
    assert match is not None  # parse_bytes accepted it
    unit = match["unit"]
    unit = unit if unit in UNITS else _UNIT_BY_FOLD[unit.casefold()]
    number = match["number"].replace(",", "").replace("_", "")
    if unit == "B" or "." not in number:
        return nominal, nominal, nominal
    shown = len(number.partition(".")[2])
    half = Decimal(UNITS[unit]) / 2 / Decimal(10) ** max(shown, PRINTED_DECIMALS)
    value = Decimal(number) * UNITS[unit]
    low = int((value - half).to_integral_value(rounding="ROUND_CEILING"))
    high = int((value + half).to_integral_value(rounding="ROUND_FLOOR"))
    return max(low, 0), nominal, high


def format_bytes(n: int) -> str:
    """Exact text for ``n`` bytes that ``parse_bytes`` reads back to ``n``.

    The largest binary unit in which ``n`` is exact with at most two decimals,
    so 29,120 MiB stays "29120 MiB" rather than "28.4375 GiB".
    """
    if n < 0:
        return "-" + format_bytes(-n)
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = UNITS[unit]
        if n >= size and (n * 100) % size == 0:
            value = Decimal(n) / size
            text = format(value.normalize(), "f")
            return f"{text} {unit}"
    return f"{n} B"


# the next unit down, for a figure too small to show in the one asked for
_SMALLER = {
    "TiB": "GiB",
    "GiB": "MiB",
    "MiB": "KiB",
    "KiB": "B",
    "TB": "GB",
    "GB": "MB",
    "MB": "KB",
    "KB": "B",
}


def _shown(n: int | float, unit: str, decimals: int) -> str:
    if unit == "B" and n == int(n):
        decimals = 0  # whole bytes take no decimals
    return f"{n / UNITS[unit]:,.{decimals}f}"


def _shows_as_zero(n: int | float, unit: str, decimals: int) -> bool:
    return n != 0 and float(_shown(n, unit, decimals).replace(",", "")) == 0


def human(n: int | float, unit: str = "MiB", decimals: int = 0) -> str:
    """Rounded display with thousands separators (for tables, not for parsing).

    In ``unit``, unless a figure that is not 0 would show as 0 there ("0 MiB" for a
    300 KiB pool): then in the largest smaller unit in which it shows.
    """
    while unit != "B" and _shows_as_zero(n, unit, decimals):
        unit = _SMALLER[unit]
    return f"{_shown(n, unit, decimals)} {unit}"


def human_pair(a: int | float, b: int | float, unit: str = "MiB") -> tuple[str, str]:
    """Two figures a summary compares, in one unit, rounded no further than keeps them apart.

    Neither shows as 0 unless it is 0, and two different figures never show the same
    (6,064.4 MiB < 6,064.6 MiB rather than 6,064 MiB < 6,064 MiB): more decimals, then
    smaller units, down to whole bytes.
    """
    while True:
        for decimals in (0, 1, 2) if unit != "B" else (0,):
            texts = (_shown(a, unit, decimals), _shown(b, unit, decimals))
            zero = _shows_as_zero(a, unit, decimals) or _shows_as_zero(b, unit, decimals)
            if not zero and (a == b or texts[0] != texts[1]):
                return f"{texts[0]} {unit}", f"{texts[1]} {unit}"
        if unit == "B":
            return f"{a:,} B", f"{b:,} B"
        unit = _SMALLER[unit]


def _validate_byte_size(value: Any) -> int:
    if isinstance(value, bool | int | float):
        raise PydanticCustomError(
            "byte_size",
            'expected a byte size such as "5120 MiB", got {got}',
            {"got": value},
        )
    if not isinstance(value, str):
        raise PydanticCustomError(
            "byte_size",
            'expected a byte size such as "5120 MiB", got {got}',
            {"got": repr(value)},
        )
    try:
        return parse_bytes(value)
    except UnitsError as exc:
        raise PydanticCustomError("byte_size", str(exc)) from None


ByteSize = Annotated[
    int,
    BeforeValidator(_validate_byte_size),
    PlainSerializer(format_bytes, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": BYTE_SIZE_PATTERN,
            "description": ACCEPTED_FORMS,
            "examples": ["5120 MiB", "31.86 GiB", "7488 B"],
        }
    ),
]
"""A pydantic field type: text with a unit in, integer bytes stored."""
