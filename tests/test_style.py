"""The one check command CI runs: ruff (lint + format) and mypy, as tests."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


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
