"""The one check command CI runs: ruff (lint + format) and mypy, as tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint() -> None:
    proc = _run("ruff", "check", "fakplan", "tests", "gates", "probes")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = _run("ruff", "format", "--check", "fakplan", "tests", "gates", "probes")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = _run("mypy", "fakplan")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    """README.md opens with two sh blocks: install-and-compile, then install-and-test;
    .ci/run must execute the second exactly as written there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = readme.split("```sh\n")[1:3]
    commands = [block.split("\n```", 1)[0].strip() for block in blocks]
    assert commands[0].endswith("fakplan compile shapes/example.yaml -o out")
    assert commands[1].endswith(".venv/bin/python -m pytest")
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[1] in ci_lines


def test_ci_runs_from_a_fresh_temporary_copy() -> None:
    """.ci/run copies the checkout into a new temporary directory and runs the suite there,
    so a test that reads something beside the repository fails CI instead of skipping."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    made = next(i for i, line in enumerate(lines) if "mktemp -d" in line)
    copied = next(i for i, line in enumerate(lines) if "git ls-files" in line)
    entered = lines.index('cd "$scratch"')
    command = next(i for i, line in enumerate(lines) if line.endswith(".venv/bin/python -m pytest"))
    assert made < copied < entered < command


def test_nothing_reaches_outside_the_repository() -> None:
    """No file of the project reads or cites a folder beside the checkout (a user's clone has
    none): the data the tests use lives in tests/data, the engine references in docs/."""
    outside = re.compile(
        "|".join(
            (
                "[.][.]/shared",
                'parent / "[s]hared"',
                r"(?<![\w/.-])shared/(?:reference|ledgers|configs|seeds)",
                r"(?<!docs/)(?<![\w/])reference/engines",
                r"seeds/\d{3}",
            )
        )
    )
    hits = []
    for top in ("fakplan", "tests", "gates", "probes", "templates", "shapes", "docs", ".ci"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix not in {".pyc", ".gguf"} and path != Path(__file__):
                text = path.read_text(encoding="utf-8", errors="replace")
                hits += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in outside.finditer(text)]
    for name in ("README.md", "pyproject.toml"):
        hits += [f"{name}: {m.group(0)}" for m in outside.finditer((ROOT / name).read_text())]
    assert not hits


def test_the_layers_hold() -> None:
    """import-linter's layers contract (pyproject.toml [tool.importlinter]): each module
    imports only the layers below it, so the pipeline has no back-edge."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


# An import inside a function is for a heavy library a command may not need, never to
# dodge a cycle (the layers above rule those out): each one is listed here with why.
DEFERRED_IMPORTS = {
    ("fakplan/cli/plan.py", "fakplan.fit"): "the search loads only where a fix is proven",
    ("fakplan/cli/plan.py", "rich.console"): "rich loads only for the terminal",
    ("fakplan/cli/plan.py", "rich.table"): "rich loads only for the terminal",
    ("fakplan/cli/plan.py", "rich.text"): "rich loads only for the terminal",
    (
        "fakplan/plan.py",
        "fakplan.ceiling",
    ): "the ledger parsers load only for a shape that reads a log",
    (
        "fakplan/plan.py",
        "fakplan.engines",
    ): "the ledger parsers load only for a shape that reads a log",
    (
        "fakplan/engines/__init__.py",
        "fakplan.ledger",
    ): "the boot-log reader loads only where a log is read: a plan never compiles its rows",
    ("fakplan/geometry/__init__.py", "fakplan.geometry"): "gguf (and numpy) load only for a GGUF",
    ("fakplan/probes/run.py", "fakplan.geometry.gguf_header"): "gguf loads only for an EOS id",
    ("fakplan/hub.py", "huggingface_hub"): "huggingface_hub loads only for a Hub id",
    ("fakplan/hub.py", "fakplan.files"): "files are read and kept only for a Hub id",
    ("fakplan/hub.py", "huggingface_hub.utils"): "huggingface_hub loads only for a Hub id",
    (
        "fakplan/engines/query.py",
        "fakplan.engines",
    ): "the registry imports this module: a draft's engine is asked when a shape names one",
    ("fakplan/geometry/resolve.py", "fakplan.geometry"): "gguf (and numpy) load only for a GGUF",
    ("fakplan/hub.py", "huggingface_hub.errors"): "huggingface_hub loads only for a Hub id",
    (
        "fakplan/engines/llamacpp/launch.py",
        "gguf",
    ): "gguf loads only for llama-cpp-python's type ids",
}


def test_imports_inside_functions_are_only_the_deferred_ones() -> None:
    import ast

    found = set()
    for path in sorted((ROOT / "fakplan").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.module:
                        found.add((path.relative_to(ROOT).as_posix(), inner.module))
    assert found == set(DEFERRED_IMPORTS)


def test_engines_take_the_setup_never_the_shape() -> None:
    """Issue 28 item 2: an engine is asked about a compiled, shape-free ``Setup``. Only
    ``engines/setup.py``, which compiles it, names the shape's modules (type-only imports
    included), and every method of the plug-in takes the setup where it takes the endpoint."""
    import ast
    import inspect

    from fakplan.engines import Engine, ModelledEngine

    naming = set()
    for path in sorted((ROOT / "fakplan" / "engines").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fakplan.shape"):
                naming.add(path.relative_to(ROOT).as_posix())
            if isinstance(node, ast.Import) and any(
                alias.name.startswith("fakplan.shape") for alias in node.names
            ):
                naming.add(path.relative_to(ROOT).as_posix())
            if isinstance(node, ast.Constant) and "LoadedShape" in str(node.value):
                naming.add(path.relative_to(ROOT).as_posix())  # a string annotation too
            if isinstance(node, ast.Name | ast.Attribute) and "LoadedShape" in ast.unparse(node):
                naming.add(path.relative_to(ROOT).as_posix())
    assert naming == {"fakplan/engines/setup.py"}
    asked = []
    for cls in (Engine, ModelledEngine):
        for name, method in vars(cls).items():
            if name.startswith("_") or not inspect.isfunction(method):
                continue
            said = method.__annotations__  # strings: the module defers its annotations
            assert not any("Shape" in str(hint) for hint in said.values()), name
            first = list(inspect.signature(method).parameters)[1:2]
            if first and said.get(first[0]) == "Setup":
                asked.append(name)
    assert len(asked) >= 12, asked  # check, probe_hint, kv_cost, capacity, ..., launch


def test_no_engine_is_named_outside_its_folder() -> None:
    """Outside fakplan/engines/ no string literal is an engine's name or one of its servers'
    (a branch on one is knowledge that belongs in the engine's folder); help texts and
    docstrings that mention an engine in prose are not names."""
    import ast

    from fakplan.engines import ENGINES, flavours

    names = set(ENGINES) | {f.name for f in flavours().values() if f.engine is not None}
    assert {"vllm", "sglang", "llamacpp", "llama-server"} <= names  # the check checks names
    found = []
    for path in sorted((ROOT / "fakplan").rglob("*.py")):
        if path.relative_to(ROOT / "fakplan").parts[0] == "engines":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found
