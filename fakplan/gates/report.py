"""A gate run over many shapes, and its three written forms: TAP, JUnit XML, JSON.

Pure functions: a ``GateRun`` in, text out. ``fakplan gate`` prints them; the
pytest plugin reuses ``diagnostic_text`` for its failure messages.

    run = GateRun((ShapeGates(...), BadInput(...), ...))
    print(format_tap(run))        # TAP version 13, one line per gate per shape

How each verdict reads:

- pass: TAP ``ok N - …``; a JUnit testcase; JSON ``status: pass``.
- fail: TAP ``not ok N - …`` and a YAML block; JUnit ``<failure>``; ``fail``.
- warn: TAP ``ok N - … # warning: …`` and a YAML block; a testcase with
  ``<system-out>``; ``warn``.
- unknown: TAP ``ok N - … # SKIP unknown: …``; JUnit ``<skipped>``; ``unknown``.
- bad input (a file that cannot be gated): TAP ``not ok N - FILE:LINE: field: …``;
  a testsuite of one ``<error>``; an entry of JSON ``errors``.

TAP has no warning verdict: a warning holds, so it is an ``ok`` line whose
``#`` comment starts with ``warning:`` (not ``SKIP``/``TODO``, so every TAP
consumer counts it as a plain pass). An unknown gate is never a silent pass:
it is a ``SKIP`` that names why it could not be evaluated.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from fakplan.gates import GateResult
from fakplan.gates.model import ProvenFix

GATES_SCHEMA = "fakplan.gates/1"
BUILTIN = "builtin"


@dataclass(frozen=True)
class ShapeGates:
    """Every gate's verdict on one shape."""

    name: str
    path: str
    gates: tuple[GateResult, ...]
    #: gate id -> where the gate came from: ``builtin`` or an operator gates file.
    sources: Mapping[str, str] = field(default_factory=dict)
    #: what the answer assumes (the plan's notices), said beside the verdicts
    notices: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(g.status == "fail" for g in self.gates)

    def source(self, gate_id: str) -> str:
        return self.sources.get(gate_id, BUILTIN)


@dataclass(frozen=True)
class BadInput:
    """A shape argument that could not be gated; ``message`` is the one line for stderr."""

    path: str
    message: str
    line: int | None = None
    field: str | None = None


Entry = ShapeGates | BadInput


@dataclass(frozen=True)
class GateRun:
    """The entries in argument order: a shape's verdicts, or why a file could not be read."""

    entries: tuple[Entry, ...]

    @property
    def shapes(self) -> tuple[ShapeGates, ...]:
        return tuple(e for e in self.entries if isinstance(e, ShapeGates))

    @property
    def errors(self) -> tuple[BadInput, ...]:
        return tuple(e for e in self.entries if isinstance(e, BadInput))

    @property
    def failed(self) -> bool:
        return any(s.failed for s in self.shapes)

    @property
    def exit_status(self) -> int:
        """0 every gate holds, 1 a gate failed, 2 some input could not be gated."""
        return 2 if self.errors else 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "warn": 0, "unknown": 0}
        for shape in self.shapes:
            for gate in shape.gates:
                out[gate.status] += 1
        return {**out, "bad_input": len(self.errors)}


# --- shared pieces --------------------------------------------------------------


def headline(shape: ShapeGates, result: GateResult) -> str:
    """``frank-archon: pool ≥ contract (6,912 MiB ≥ 6,064 MiB)``"""
    return f"{shape.name}: {result.title} ({result.summary})"


def unknown_reason(result: GateResult) -> str:
    """Why a gate could not be evaluated, without a repeated ``unknown:``."""
    return (result.detail or result.summary).removeprefix("unknown: ")


def diagnostic(shape: ShapeGates, result: GateResult) -> dict[str, Any]:
    """The numbers and words behind one verdict (TAP's YAML block, JUnit's failure text)."""
    out: dict[str, Any] = {
        "gate": result.id,
        "shape": shape.path,
        "status": result.status,
        "summary": result.summary,
    }
    if result.detail:
        out["detail"] = result.detail
    if result.fix:
        out["fix"] = result.fix
    if result.fixes:
        out["fixes"] = [fix_dict(f) for f in result.fixes]
    if result.numbers:
        out["numbers"] = dict(result.numbers)
    out["rationale"] = result.rationale
    out["source"] = shape.source(result.id)
    return out


def fix_dict(fix: ProvenFix) -> dict[str, Any]:
    """A proven fix as the outputs write it: its patch, what it gives up, in words."""
    return {
        "patch": [{"path": p.path, "value": p.value} for p in fix.patch],
        "gives_up": list(fix.gives_up),
        "summary": fix.summary,
    }


def bad_input_diagnostic(error: BadInput) -> dict[str, Any]:
    return {
        "status": "bad-input",
        "file": error.path,
        "line": error.line,
        "field": error.field,
        "message": error.message,
    }


def _yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(
        dict(data), allow_unicode=True, sort_keys=False, default_flow_style=False, width=10_000
    )


def diagnostic_text(shape: ShapeGates, result: GateResult) -> str:
    """A failing gate for a person: the headline, then the diagnostic as YAML."""
    body = _yaml(diagnostic(shape, result))
    return headline(shape, result) + "\n" + _indent(body, "  ").rstrip("\n")


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


def _summary_line(run: GateRun) -> str:
    c = run.counts()
    shapes = len(run.shapes)
    return (
        f"{shapes} shape{'' if shapes == 1 else 's'}: {c['pass']} pass, {c['fail']} fail, "
        f"{c['warn']} warn, {c['unknown']} unknown; {c['bad_input']} bad input"
    )


# --- TAP ------------------------------------------------------------------------

_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")


def _tap_text(text: str) -> str:
    """One TAP description: a single line, ``\\`` and ``#`` escaped (TAP 14 §Test Point)."""
    return _LINE_BREAKS.sub(" ", text).replace("\\", "\\\\").replace("#", "\\#")


def _tap_directive(text: str) -> str:
    return _LINE_BREAKS.sub(" ", text)


def _tap_block(data: Mapping[str, Any]) -> list[str]:
    return ["  ---", *_indent(_yaml(data), "  ").splitlines(), "  ..."]


def format_tap(run: GateRun) -> str:
    """TAP version 13 (a subset of 14 that ``prove`` and tap.py both read)."""
    total = sum(len(s.gates) for s in run.shapes) + len(run.errors)
    lines = ["TAP version 13", f"1..{total}"]
    n = 0
    for entry in run.entries:
        if isinstance(entry, BadInput):
            n += 1
            lines.append(f"not ok {n} - {_tap_text(entry.message)}")
            lines += _tap_block(bad_input_diagnostic(entry))
            continue
        lines += [f"# {entry.name}: note: {_tap_text(n)}" for n in entry.notices]
        for result in entry.gates:
            n += 1
            text = _tap_text(headline(entry, result))
            if result.status == "pass":
                lines.append(f"ok {n} - {text}")
            elif result.status == "fail":
                lines.append(f"not ok {n} - {text}")
                lines += _tap_block(diagnostic(entry, result))
            elif result.status == "warn":
                why = result.fix or result.rationale
                lines.append(f"ok {n} - {text} # warning: {_tap_directive(why)}")
                lines += _tap_block(diagnostic(entry, result))
            else:
                why = unknown_reason(result)
                lines.append(f"ok {n} - {text} # SKIP unknown: {_tap_directive(why)}")
                lines += _tap_block(diagnostic(entry, result))
    lines.append(f"# {_summary_line(run)}")
    return "\n".join(lines) + "\n"


# --- JUnit XML ------------------------------------------------------------------

# XML 1.0 cannot carry most C0 controls, even escaped.
_XML_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(text: str) -> str:
    return _XML_ILLEGAL.sub("\ufffd", text)


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    child = ET.SubElement(parent, tag, {k: _x(v) for k, v in attrs.items()})
    if text is not None:
        child.text = _x(text)
    return child


def _suite_for_shape(root: ET.Element, shape: ShapeGates) -> None:
    statuses = [g.status for g in shape.gates]
    suite = _element(
        root,
        "testsuite",
        name=shape.name,
        tests=str(len(statuses)),
        failures=str(statuses.count("fail")),
        errors="0",
        skipped=str(statuses.count("unknown")),
        time="0",
    )
    properties = _element(suite, "properties")
    _element(properties, "property", name="shape", value=shape.path)
    for result in shape.gates:
        case = _element(suite, "testcase", name=result.id, classname=shape.name, time="0")
        if result.status == "fail":
            _element(
                case,
                "failure",
                _yaml(diagnostic(shape, result)),
                message=headline(shape, result),
                type="fakplan.gate",
            )
        elif result.status == "unknown":
            _element(case, "skipped", message=f"unknown: {unknown_reason(result)}")
        text = headline(shape, result)
        if result.status == "warn":
            text = f"warning: {text}\n{_yaml(diagnostic(shape, result))}"
        _element(case, "system-out", text)


def _suite_for_error(root: ET.Element, error: BadInput) -> None:
    suite = _element(
        root,
        "testsuite",
        name=error.path,
        tests="1",
        failures="0",
        errors="1",
        skipped="0",
        time="0",
    )
    case = _element(suite, "testcase", name="load", classname=error.path, time="0")
    _element(
        case,
        "error",
        _yaml(bad_input_diagnostic(error)),
        message=error.message,
        type="fakplan.bad-input",
    )


def format_junit(run: GateRun) -> str:
    """JUnit XML: one testsuite per shape (or per unreadable file), one testcase per gate."""
    c = run.counts()
    root = ET.Element(
        "testsuites",
        {
            "name": "fakplan gate",
            "tests": str(sum(len(s.gates) for s in run.shapes) + c["bad_input"]),
            "failures": str(c["fail"]),
            "errors": str(c["bad_input"]),
            "time": "0",
        },
    )
    for entry in run.entries:
        if isinstance(entry, BadInput):
            _suite_for_error(root, entry)
        else:
            _suite_for_shape(root, entry)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


# --- JSON -----------------------------------------------------------------------


def gate_dict(shape: ShapeGates, result: GateResult) -> dict[str, Any]:
    return {
        "id": result.id,
        "ok": result.ok,
        "status": result.status,
        "title": result.title,
        "summary": result.summary,
        "detail": result.detail,
        "fix": result.fix,
        "fixes": [fix_dict(f) for f in result.fixes],
        "numbers": dict(result.numbers),
        "rationale": result.rationale,
        "source": shape.source(result.id),
    }


def run_dict(run: GateRun) -> dict[str, Any]:
    """The ``fakplan.gates/1`` object (documented in docs/json.md)."""
    return {
        "schema": GATES_SCHEMA,
        "ok": run.exit_status == 0,
        "exit": run.exit_status,
        "counts": run.counts(),
        "shapes": [
            {
                "name": shape.name,
                "path": shape.path,
                "ok": not shape.failed,
                "gates": [gate_dict(shape, g) for g in shape.gates],
            }
            for shape in run.shapes
        ],
        "errors": [
            {"path": e.path, "line": e.line, "field": e.field, "message": e.message}
            for e in run.errors
        ],
    }


def format_json(run: GateRun) -> str:
    return json.dumps(run_dict(run), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


FORMATS: dict[str, Callable[[GateRun], str]] = {
    "tap": format_tap,
    "junit": format_junit,
    "json": format_json,
}
