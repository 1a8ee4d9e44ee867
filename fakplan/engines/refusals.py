"""Boot refusals: what an engine refuses at boot that a shape can cause, as one table.

Each engine lists its rows (``Engine.boot_refusals``); ``BOOT_REFUSALS`` in
``fakplan.engines`` is the table across them, and docs/boot-refusals.md prints it. A row
says which releases it holds for, the condition in the shape's terms, the engine's own
message (its format string, verbatim) and where that message is in the engine's source at
the tag it was read in. Its ``check`` returns the message filled in with the shape's
figures where the engine would print it, so the ``boots`` gate fails with the engine's
own words before anything is deployed.

A check that lacks a fact it needs (a geometry that does not give the head sizes, a
release no row was read for) raises ``NotChecked`` with the reason: the gate says which
rows it could not check, never that they hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.engines.releases import parse_version
from fakplan.errors import ReleaseError

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures


class NotChecked(Exception):
    """A row's condition cannot be decided for this shape (the message says why)."""


@dataclass(frozen=True)
class BootInputs:
    """What a row's check reads: the shape, its derived figures and the release planned."""

    setup: Setup
    figures: Figures
    version: tuple[int, ...]  # the release the shape states, else the newest modelled

    def env(self, name: str) -> str | None:
        """A variable the launch sets for the engine (launch.env), as a plain value."""
        value = self.setup.launch.env.get(name)
        return value if isinstance(value, str) else None

    def env_on(self, name: str) -> bool:
        """The launch sets ``name`` to a value the engine reads as true: "1" or "true" in
        any case (vllm/envs.py `.strip().lower() in ("1", "true")`; SGLang's
        get_bool_env_var, python/sglang/srt/utils.py, `.lower() in ("true", "1")`)."""
        return (self.env(name) or "").strip().lower() in {"1", "true"}


Check = Callable[[BootInputs], str | None]


@dataclass(frozen=True)
class BootRefusal:
    """One refusal: when it holds, what the engine says, where it says it, and the fix."""

    id: str
    engine: str
    releases: str  # the releases it holds for, in words (the read ones named)
    first: tuple[int, ...]  # the first release it applies to: older ones are not checked
    condition: str  # in the shape's terms
    message: str  # the engine's format string, verbatim, at the newest release read
    source: str  # file, function and lines, at the tag read
    fix: str
    check: Check

    def applies(self, version: tuple[int, ...]) -> bool:
        return version >= self.first


@dataclass(frozen=True)
class Finding:
    """One row's verdict on a shape: the engine's message where it refuses, else why the row
    could not be checked (neither: the row does not refuse this shape)."""

    row: BootRefusal
    message: str | None = None
    not_checked: str | None = None


def kv_split(kv_heads: int, tp: int) -> tuple[int, int] | None:
    """(numerator, denominator) where TP cannot split the KV heads, else None: the heads
    are partitioned (kv % tp) where there are at least as many as ranks, else replicated
    (tp % kv). vLLM's QKVParallelLinear and SGLang's attention layers assert the same."""
    numerator, denominator = (kv_heads, tp) if kv_heads >= tp else (tp, kv_heads)
    return None if numerator % denominator == 0 else (numerator, denominator)


def planned_version(setup: Setup, used: str | None) -> tuple[int, ...]:
    """The release a shape's rows are judged at: its own engine_version, else the newest
    the engine models (``used``), parsed; () where neither is a release number."""
    for text in (setup.engine_version, used):
        if text:
            try:
                return parse_version(text.lstrip("bB"))
            except ReleaseError:  # a commit id, not a release number
                continue
    return ()


def findings(rows: tuple[BootRefusal, ...], inputs: BootInputs) -> tuple[Finding, ...]:
    """Every row that applies at the planned release, checked against the shape."""
    out = []
    for row in rows:
        if not row.applies(inputs.version):
            continue
        try:
            message = row.check(inputs)
        except NotChecked as why:
            out.append(Finding(row, not_checked=str(why)))
            continue
        out.append(Finding(row, message=message))
    return tuple(out)


def markdown_table(rows: tuple[BootRefusal, ...]) -> str:
    """The rows as docs/boot-refusals.md prints them (generated: a test keeps them equal)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [
        "| row | engine | releases | condition | the engine's message | source |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| `{r.id}` | {r.engine} | {cell(r.releases)} | {cell(r.condition)} | "
        f"`` {cell(r.message)} `` | {cell(r.source)} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"
