from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "shapes"
GOLDEN = Path(__file__).resolve().parent / "golden"
SHARED = ROOT.parent / "shared"


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
