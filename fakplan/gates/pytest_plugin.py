"""fakplan's pytest plugin: one test item per gate per shape.

Registered through the ``pytest11`` entry point ``fakplan``, so installing
fakplan is enough. It does nothing unless asked, in one of two ways:

``pytest --fakplan-shapes shapes/ [--fakplan-gates DIR]``
    gates every shape in the folder (or file); items are
    ``shapes/frank-archon.yaml::pool-contract``.

A ``ShapeSuite`` in a test module, e.g. ``gates/test_shapes.py``::

    from fakplan.gates.pytest_plugin import ShapeSuite

    test_shapes = ShapeSuite(
        "../shapes",  # relative to this file
        xfail={"frank-archon-fp8::pool-contract": "the before-shape, kept to show the refusal"},
    )

    items are ``gates/test_shapes.py::frank-archon::pool-contract``.

A failing gate fails its item with the summary, the numbers and the fix (no
Python traceback); an unknown gate is skipped with its reason; a warning
passes and is listed under "fakplan gate warnings" at the end. A shape file
that cannot be read fails one ``load`` item and the other shapes still run; a
gates file that cannot be imported is a collection error. ``xfail`` keys are
``shape-name::gate-id``; those items are expected to fail (strict: when the
gate starts to hold, the item fails and says to remove the key).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fakplan.errors import FakplanError
from fakplan.fit import with_proven_fixes
from fakplan.gates import GateResult
from fakplan.gates.operator import gate_paths
from fakplan.gates.report import BadInput, ShapeGates, diagnostic_text, unknown_reason

_WARNING = "fakplan_warning"


class ShapeSuite:
    """Gate the shapes at ``paths`` (relative to the declaring module) as test items.

    ``gates`` is a folder of operator gates; by default the ``gates/`` folder
    next to each shape's folder. ``xfail`` maps ``shape-name::gate-id`` to the
    reason that gate is known to fail.
    """

    def __init__(
        self,
        *paths: str | os.PathLike[str],
        gates: str | os.PathLike[str] | None = None,
        xfail: Mapping[str, str] | None = None,
    ) -> None:
        if not paths:
            raise ValueError("ShapeSuite needs at least one shape file or folder")
        self.paths = tuple(Path(p) for p in paths)
        self.gates = Path(gates) if gates is not None else None
        self.xfail = dict(xfail or {})


class GateFailed(Exception):
    """A gate that does not hold; the message is the whole report."""


class BadShape(Exception):
    """A shape file that cannot be gated; the message is its one line."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakplan", "fakplan gates")
    group.addoption(
        "--fakplan-shapes",
        action="append",
        default=[],
        metavar="PATH",
        help="gate the shapes in PATH (a file or a folder of *.yaml); repeatable",
    )
    group.addoption(
        "--fakplan-gates",
        default=None,
        metavar="DIR",
        help="operator gates for --fakplan-shapes (default: gates/ next to each shape folder)",
    )


def _relative(path: Path) -> str:
    """Relative to the working folder, as the CLI shows paths."""
    return os.path.relpath(os.path.normpath(path), Path.cwd())


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> list[pytest.Item | pytest.Collector] | None:
    if not isinstance(obj, ShapeSuite):
        return None
    base = collector.path.parent
    gates = base / obj.gates if obj.gates is not None else None
    try:
        run = gate_paths(
            [_relative(base / p) for p in obj.paths],
            Path(_relative(gates)) if gates is not None else None,
            prove=with_proven_fixes,
        )
    except FakplanError as exc:
        raise collector.CollectError(str(exc)) from None
    nodes: list[pytest.Item | pytest.Collector] = []
    for entry in run.entries:
        if isinstance(entry, ShapeGates):
            nodes.append(
                ShapeNode.from_parent(
                    collector,
                    name=entry.name,
                    path=Path(entry.path).resolve(),
                    entry=entry,
                    xfail=obj.xfail,
                )
            )
        else:
            nodes.append(
                ShapeNode.from_parent(
                    collector,
                    name=Path(entry.path).name,
                    path=Path(entry.path).resolve(),
                    entry=entry,
                    xfail={},
                )
            )
    return nodes


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if not isinstance(collector, pytest.Session) or not report.passed:
        return report
    shapes: list[str] = collector.config.getoption("fakplan_shapes")
    if not shapes:
        return report
    gates: str | None = collector.config.getoption("fakplan_gates")
    try:
        run = gate_paths(shapes, Path(gates) if gates else None, prove=with_proven_fixes)
    except FakplanError as exc:
        report.result.append(_Broken.from_parent(collector, name="fakplan-gates", message=str(exc)))
        return report
    root = collector.config.rootpath
    for entry in run.entries:
        path = Path(entry.path).resolve()
        nodeid = Path(os.path.relpath(path, root)).as_posix()
        report.result.append(
            ShapeFile.from_parent(collector, path=path, nodeid=nodeid, entry=entry)
        )
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        str(value)
        for report in terminalreporter.stats.get("passed", [])
        for key, value in getattr(report, "user_properties", ())
        if key == _WARNING
    ]
    if lines:
        terminalreporter.write_sep("=", "fakplan gate warnings")
        for line in lines:
            terminalreporter.write_line(line)


# --- nodes ----------------------------------------------------------------------


def _items(
    parent: pytest.Collector, entry: ShapeGates | BadInput, xfail: Mapping[str, str]
) -> list[pytest.Item]:
    if isinstance(entry, BadInput):
        return [LoadItem.from_parent(parent, name="load", error=entry)]
    items: list[pytest.Item] = []
    for result in entry.gates:
        item = GateItem.from_parent(parent, name=result.id, shape=entry, result=result)
        reason = xfail.get(f"{entry.name}::{result.id}")
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=GateFailed))
        items.append(item)
    return items


class ShapeNode(pytest.Collector):
    """One shape inside a ``ShapeSuite``, named by the shape's ``name:``."""

    def __init__(
        self, *, entry: ShapeGates | BadInput, xfail: Mapping[str, str], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.entry = entry
        self.xfail = xfail

    def collect(self) -> list[pytest.Item]:
        return _items(self, self.entry, self.xfail)


class ShapeFile(pytest.File):
    """One shape file given by ``--fakplan-shapes``."""

    def __init__(self, *, entry: ShapeGates | BadInput, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry = entry

    def collect(self) -> list[pytest.Item]:
        return _items(self, self.entry, {})


class _Broken(pytest.Collector):
    """A collection error of one line (an operator gates file that cannot be imported)."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def collect(self) -> list[pytest.Item]:
        raise self.CollectError(self.message)


class GateItem(pytest.Item):
    """One gate on one shape."""

    def __init__(self, *, shape: ShapeGates, result: GateResult, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shape = shape
        self.result = result
        self.extra_keyword_matches.update({shape.name, result.id, result.status})

    def runtest(self) -> None:
        status = self.result.status
        if status == "fail":
            raise GateFailed(diagnostic_text(self.shape, self.result))
        if status == "unknown":
            pytest.skip(f"unknown: {unknown_reason(self.result)}")
        if status == "warn":
            text = f"{self.shape.name}: {self.result.title} ({self.result.summary})"
            if self.result.fix:
                text += f" — {self.result.fix}"
            self.user_properties.append((_WARNING, text))

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, GateFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.shape.name}::{self.result.id}"


class LoadItem(pytest.Item):
    """A shape file that cannot be gated: fails with its one line."""

    def __init__(self, *, error: BadInput, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise BadShape(self.error.message)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, BadShape):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        line = self.error.line - 1 if self.error.line else None
        return self.path, line, f"{self.error.path}: cannot be gated"
