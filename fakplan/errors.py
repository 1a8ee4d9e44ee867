"""fakplan's one error tree.

    FakplanError                 anything the user can fix; the CLI exits 2
    ├── UnitsError               a byte size that is not "<number> <unit>"
    ├── ShapeError               a shape file: file, line, field, expected form
    ├── GeometryError            a model fakplan cannot read or does not know
    ├── ReleaseError             an engine version older than fakplan models, or not a number
    ├── RuleError                an engine's rule a query breaks, with the shape field that states it
    ├── LedgerError              a boot log that states nothing fakplan recognises
    ├── RecordError              a compiled record (plan.json) that is missing or damaged
    ├── GatesError               an operator gates file that cannot be imported or clashes
    ├── SelectorError            PromQL label matchers that cannot be read, or that pick
    │                            another endpoint's series too
    └── ProbeError               an endpoint that cannot be probed at all

Library code raises these and never exits; ``fakplan.cli`` maps them to exit
codes in one place. Every message is one line that says where and how to fix.
"""

from __future__ import annotations

import re
from pathlib import Path

# what would break the one line a message is: C0 controls (newline and tab included),
# DEL, C1 and the Unicode line and paragraph separators; a terminal escape (ESC) too
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def inert(text: str) -> str:
    """``text`` as one printable line: each control character shown as its escape
    (``\\n``, ``\\x1b``), so a value quoted from a file or an endpoint cannot break a
    message into two lines or drive the terminal."""
    return _BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class FakplanError(Exception):
    """Bad input: the message is the one line the user sees (``inert``: one line, always)."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(inert(str(message)), *args)


class UnitsError(FakplanError, ValueError):
    """A byte quantity that cannot be read."""


class ShapeError(FakplanError):
    """A shape that cannot be loaded or cannot be planned.

    ``file``, ``line`` and ``field`` locate the fault; any may be unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.detail}"


class GeometryError(FakplanError):
    """A model source that is unreadable, or an architecture fakplan does not know."""


class ReleaseError(FakplanError):
    """An engine version no modelled rule set applies to (the message lists the known ones)."""


class LedgerError(FakplanError):
    """A boot log from which nothing can be derived."""


class RecordError(FakplanError):
    """A compiled record that cannot be read or updated."""


class GatesError(FakplanError):
    """An operator gates file that cannot be loaded, or a gate id used twice."""


class SelectorError(FakplanError):
    """Label matchers that are not PromQL's, or rules whose series another endpoint shares."""


class ProbeError(FakplanError):
    """An endpoint that cannot be probed at all (bad URL, missing key)."""


class RuleError(FakplanError):
    """An engine's rule the query breaks; ``field`` is the shape's path to what states it,
    so a plan reports it at that line (``fakplan kv`` has no shape: the message alone)."""

    def __init__(self, message: str, *field: str) -> None:
        super().__init__(message)
        self.field = field
