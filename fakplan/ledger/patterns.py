"""The language the engine tables are written in: a ``Row`` per log-line format.

Each engine module lists its boot-ledger lines as ``Row`` data, one row per
format string, tagged with the engine version it was read in (as
``docs/engines.md`` cites it). A row names the figures its regex
captures and how to read them:

    Row("kv_budget", "vLLM v0.11.0, v0.33.0 gpu_worker.py", "Available KV cache memory",
        r"Available KV cache memory: (?P<kv_bytes>[\\d.]+) GiB", (fig("kv_bytes", IN_GIB),))

Units are read exactly as the engine means them: SGLang and old vLLM print
"GB" but divide by 2**30 (``GB_IS_GIB``). Bytes are integers: the printed
decimal times the unit, rounded to the nearest byte.

A figure's text is read only in the form engines print it (ASCII digits, thousands
grouped by three, one decimal point), with at most ``MAX_DIGITS`` digits, a size up to
1 PiB (``units.MAX_BYTE_SIZE``, as a shape's) and a count up to ``MAX_FIGURE``.
Anything else raises ``Unreadable``, whose message says why: the
scan notes it and leaves the figure null rather than guess, convert without bound, or
hand a number that overflows downstream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Protocol

from fakplan.units import GIB, KIB, MAX_BYTE_SIZE, MIB, TIB

Value = int | float | bool | str

MAX_DIGITS = 24
"""More digits than any boot log prints (a byte count has at most 19, a size a few decimals)."""
MAX_FIGURE = 2**63 - 1
"""The largest count read (tokens, blocks, cells): what a signed 64-bit reader of ``--json``
holds, and more than any hardware has. A larger one is absurd, not a measurement."""
MAX_WORD = 200
"""The longest text figure (a version, a dtype) an engine prints, with room to spare."""


class Unreadable(ValueError):
    """A figure's text that no engine prints; the message is why, as the note gives it."""


_WHOLE = re.compile(r"[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+")
_DECIMAL = re.compile(r"(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)(?:\.[0-9]+)?")
_ABSURD = f"beyond 2**63 - 1 ({MAX_FIGURE:,}), more than any hardware holds"


def _number(text: str, form: re.Pattern[str]) -> str:
    """``text`` without its separators, if it is a number as engines print one."""
    if form.fullmatch(text) is None:
        raise Unreadable("is not a number as an engine prints one")
    digits = text.replace(",", "").replace(".", "")
    if len(digits) > MAX_DIGITS:
        raise Unreadable(f"has {len(digits):,} digits, more than any boot log prints")
    return text.replace(",", "")


@dataclass(frozen=True)
class Reading:
    """One figure as read from its text: the value, the text as printed, the unit meant."""

    value: Value
    printed: str | None
    unit: str | None


class Conv(Protocol):
    def __call__(self, text: str) -> Reading: ...


@dataclass(frozen=True)
class Size:
    """A number printed in one fixed unit (``printed``) that the engine means as ``meant``."""

    bytes_per_unit: int
    printed_unit: str
    meant_unit: str

    def __call__(self, text: str) -> Reading:
        number = Decimal(_number(text, _DECIMAL))
        value = int((number * self.bytes_per_unit).to_integral_value(rounding=ROUND_HALF_EVEN))
        if value > MAX_BYTE_SIZE:
            raise Unreadable(
                f"is {value:,} bytes, more than 1 PiB: no card or host holds that much"
            )
        return Reading(value, f"{text} {self.printed_unit}", self.meant_unit)


IN_GIB = Size(GIB, "GiB", "GiB")
GB_IS_GIB = Size(GIB, "GB", "GiB")  # SGLang and vLLM V0 divide by 2**30 and print "GB"
IN_MIB = Size(MIB, "MiB", "MiB")
MB_IS_MIB = Size(MIB, "MB", "MiB")

_BINARY = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": TIB}
_QUANTITY = re.compile(r"^(?P<number>[0-9][0-9,]*(?:\.[0-9]+)?) ?(?P<unit>B|KiB|MiB|GiB|TiB)$")


def quantity(text: str) -> Reading:
    """``"31.86 GiB"``: a number with its binary unit printed beside it."""
    match = _QUANTITY.match(text.strip())
    if match is None:  # the row regexes admit only these forms; a new row might not
        raise Unreadable("is not a byte quantity as an engine prints one")
    unit = match["unit"]
    return Size(_BINARY[unit], unit, unit)(match["number"])


def count(text: str) -> Reading:
    """A whole number, thousands separators allowed (``"2,042,016"``)."""
    value = int(_number(text, _WHOLE))
    if value > MAX_FIGURE:
        raise Unreadable(f"is {_ABSURD}")
    return Reading(value, text, None)


def ratio(text: str) -> Reading:
    """A decimal such as ``"0.90"`` or ``"997.08"`` (concurrency, a memory fraction)."""
    value = float(_number(text, _DECIMAL))
    if value > MAX_FIGURE:
        raise Unreadable(f"is {_ABSURD}")
    return Reading(value, text, None)


def text_(text: str) -> Reading:
    word = text.strip()
    if len(word) > MAX_WORD:
        raise Unreadable(f"is {len(word):,} characters long, longer than any name an engine prints")
    return Reading(word, word, None)


def flag(text: str) -> Reading:
    """``true``/``false``/``1``/``0`` as printed by llama.cpp."""
    return Reading(text.strip().lower() in {"true", "1", "yes", "enabled"}, text.strip(), None)


# The quantity forms a table row may print (``card total  31.86 GiB``).
Q = r"[0-9][0-9,]*(?:\.[0-9]+)? ?(?:B|KiB|MiB|GiB|TiB)\b"


@dataclass(frozen=True)
class Fig:
    """A figure a row states: its name (a template over the regex groups) and its reading."""

    name: str
    group: str
    conv: Conv


def fig(name: str, conv: Conv, group: str | None = None) -> Fig:
    """``fig("kv_tokens", count)`` reads group ``kv_tokens``; ``group=`` reads another."""
    return Fig(name, group or name, conv)


@dataclass(frozen=True)
class Default:
    """A figure the log does not print but the engine version fixes (e.g. vLLM V0's block 16)."""

    name: str
    value: int
    why: str


@dataclass(frozen=True)
class Row:
    """One boot-ledger line format of one engine version.

    ``needle``: a literal the line must contain (a cheap pre-filter before the regex).
    ``starts_boot``: the line opens a boot (a second one in a file starts a new boot).
    ``phase``: where in a boot the line comes (weights before KV budget before capacity);
    a line from an earlier phase than the rank has reached starts a new boot.
    ``once``: printed once per boot and rank, so a repeat from the same rank starts a
    new boot; with ``identity`` (a group naming the model) a repeat naming another model
    is a second model in the same boot (a draft), whose figures are not counted.
    ``second_model``: the line says a second model (a draft) loads next.
    ``server``: still read while a second model loads (server-wide lines).
    ``series``/``occurrence``: the row applies to the n-th line of its series in a boot
    and rank (llama.cpp prints one KV summary per cache: non-SWA first, then SWA).
    ``opens``: series whose next line is at least the given occurrence once this line is
    seen (llama.cpp's "creating SWA KV cache": what follows is the SWA cache's, even in an
    excerpt that lacks the non-SWA cache's lines).
    ``failure``: the line says the boot failed (``error`` group: the message).
    ``serving``: the line says the server is up: the boot is over, and a failure line
    after it is a request's error, not the boot's.
    ``signature``: the line names its engine (generic lines such as a CUDA OOM do not).
    ``priority``: a higher one replaces a figure an earlier line stated.
    ``defaults``: figures the version fixes but this line does not print.
    """

    kind: str
    source: str
    needle: str
    pattern: str
    figures: tuple[Fig, ...] = ()
    starts_boot: bool = False
    phase: int | None = None
    once: bool = False
    identity: str | None = None
    second_model: bool = False
    server: bool = False
    series: str | None = None
    occurrence: int = 0
    opens: tuple[tuple[str, int], ...] = ()
    failure: bool = False
    serving: bool = False
    signature: bool = True
    priority: int = 0
    defaults: tuple[Default, ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))
        where = f"row {self.kind!r} ({self.source})"
        if self.needle not in re.sub(r"\\(.)", r"\1", self.pattern):
            raise ValueError(f"{where}: needle {self.needle!r} is not a literal of the pattern")
        groups = set(self.regex.groupindex)
        missing = {f.group for f in self.figures} - groups
        if self.failure and "error" not in groups:
            missing.add("error")
        if self.identity is not None and self.identity not in groups:
            missing.add(self.identity)
        if missing:
            raise ValueError(f"{where}: no group {sorted(missing)}")


TORCH_OOM = Row(
    "error",
    "torch (any engine)",
    "OutOfMemoryError",
    r"(?P<error>(?:torch\.)?(?:cuda\.)?OutOfMemoryError: .*)",
    failure=True,
    signature=False,
)
"""A CUDA out-of-memory line: any torch-based engine's boot can end with it."""

TORCH_OOM_TOTAL = Row(
    "profile",
    "torch c10/cuda/CUDACachingAllocator.cpp out-of-memory message (2.1+; before: "
    "'(GPU 0; X GiB total capacity;')",
    "total capac",  # torch 2.1 prints "total capacty"
    r"GPU \d+(?: has a total capaci?ty of |; )(?P<total>[\d.]+) GiB(?: total capacity;| of which)",
    (fig("total_gpu_bytes", IN_GIB, "total"), fig("card_total_bytes", IN_GIB, "total")),
    signature=False,
    priority=-1,
)
"""CUDA's total as torch's out-of-memory message prints it (``cudaMemGetInfo``'s, the total an
engine multiplies by its fraction): a boot that printed no total of its own, and died of an
OOM, still states its card. Any engine line that prints the total replaces it."""

PYTHON_ERROR = Row(
    "error",
    "Python (any Python engine)",
    "Error: ",
    r"(?:^|\] )(?P<error>[A-Za-z_][\w.]*Error: \S.*)",
    failure=True,
    signature=False,
)
"""The exception a Python engine's boot died of: at a line's start (a traceback's last
line) or right after a log prefix's ``[file.py:N] ``, never quoted inside a warning.
Engine rows that name the cause have priority over it."""

SERVER_UP = Row(
    "serving",
    "uvicorn (vLLM, SGLang and llama-cpp-python serve through it)",
    "Application startup complete",
    r"Application startup complete",
    serving=True,
    signature=False,
)
"""The HTTP server is up: what comes after is serving, not booting."""

ARGPARSE_ERROR = Row(
    "error",
    "argparse (any Python engine's command line)",
    ": error: ",
    r"^(?P<error>[\w.-]+: error: .+)",
    failure=True,
    signature=False,
)
"""``prog: error: unrecognized arguments: --bogus``: the command line was refused."""


class LedgerFormat(Protocol):
    """What ``parse_ledger`` needs from an engine: its rows, its ranks, its derivations."""

    name: str
    title: str
    rows: tuple[Row, ...]

    def rank(self, text: str) -> str | None:
        """The rank a line comes from (``TP1``, ``DP0``), or None."""
        ...

    def complete(self, names: set[str]) -> bool:
        """Whether a boot that stated ``names`` reached its capacity (or its failure)."""
        ...

    def derive(self, figures: DerivedFigures) -> None:
        """Add the figures that follow from printed ones, each marked derived."""
        ...


class DerivedFigures(Protocol):
    """The view of a boot's figures a format's ``derive`` works on."""

    def value(self, name: str) -> Value | None: ...

    def cite(self, name: str) -> str: ...

    def names(self, prefix: str = "") -> list[str]: ...

    def derive(
        self, name: str, value: Value, derivation: str, *, main: str, source: str
    ) -> None: ...

    def copy(self, name: str, to: str) -> None: ...

    def default(self, name: str) -> Default | None: ...
