from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "shapes"
GOLDEN = Path(__file__).resolve().parent / "golden"
SHARED = ROOT.parent / "shared"


@dataclass(frozen=True)
class BuiltWheel:
    names: frozenset[str]
    entry_points: str


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """The wheel `pip install .` would install, built once per session."""
    folder = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(folder),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = folder.glob("fakplan-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = frozenset(archive.namelist())
        (entry,) = [n for n in names if n.endswith("entry_points.txt")]
        return BuiltWheel(names, archive.read(entry).decode())


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root so shape paths read as in the README."""
    monkeypatch.chdir(ROOT)
    return ROOT


def check_golden(name: str, text: str) -> None:
    """Compare with a reviewed golden file; FAKPLAN_UPDATE_GOLDEN=1 rewrites it on purpose."""
    path = GOLDEN / name
    if os.environ.get("FAKPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), (
        f"no golden file {path}; review the output and set FAKPLAN_UPDATE_GOLDEN=1"
    )
    assert text == path.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One real llama-cpp-python server for the session (skipped where it is not installed)."""
    from .realserver import have_llama_cpp, start_server, stop_server

    if not have_llama_cpp():
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-python is not installed, but CI must boot the real engine")
        pytest.skip("llama-cpp-python not installed")
    server = start_server(tmp_path_factory.mktemp("llama"))
    yield server
    stop_server(server.process)
