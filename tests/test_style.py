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
