from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.paths import IN_CI, ROOT
from tests.support.realvllm import compile_serve_sh, write_vllm_shape
from tests.support.wheel import BuiltWheel

# A Hub id resolves the same on every machine in the suite: an empty Hugging Face cache,
# offline, no token (a test that talks to its own Hub server says so with monkeypatch;
# the commands run in subprocesses inherit this)
_HUB_CACHE = tempfile.mkdtemp(prefix="fakplan-hf-cache-")
os.environ.update(
    HF_HUB_OFFLINE="1",
    HF_HUB_CACHE=_HUB_CACHE,
    HF_HOME=_HUB_CACHE,
    FAKPLAN_CACHE=os.path.join(_HUB_CACHE, "fakplan"),
)
for _name in ("HF_TOKEN", "HF_ENDPOINT", "HUGGINGFACE_HUB_CACHE"):
    os.environ.pop(_name, None)


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


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One real llama-cpp-python server for the session (skipped where it is not installed)."""
    from tests.support.realserver import have_llama_cpp, start_server, stop_server

    if not have_llama_cpp():
        if IN_CI:
            pytest.fail("llama-cpp-python is not installed, but CI must boot the real engine")
        pytest.skip("llama-cpp-python not installed")
    server = start_server(tmp_path_factory.mktemp("llama"))
    yield server
    stop_server(server.process)


@pytest.fixture(scope="session")
def vllm_environment() -> tuple[Path, Path]:
    """vLLM's CPU build and the tiny model: (its python, the model folder)."""
    from tests.support.realvllm import ensure_environment, ensure_tiny_model

    try:
        python = ensure_environment()
    except (RuntimeError, OSError) as exc:
        if IN_CI:
            pytest.fail(f"CI must boot the real vLLM, and it could not be installed: {exc}")
        pytest.skip(f"vLLM's CPU build could not be installed here: {exc}")
    return python, ensure_tiny_model(python)


@pytest.fixture(scope="session")
def vllm_server(vllm_environment: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One vLLM server for the tier, started from the serve.sh fakplan rendered."""
    from tests.support.realserver import free_port, stop_server
    from tests.support.realvllm import RunningVllm, run_serve_sh, wait_ready

    python, model = vllm_environment
    folder = tmp_path_factory.mktemp("vllm")
    port = free_port()
    shape = write_vllm_shape(folder, model, port)
    out = folder / "out"
    serve = compile_serve_sh(shape, out)
    log = folder / "boot.log"
    process = run_serve_sh(serve, python, log)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log)
    except BaseException:
        stop_server(process)
        raise
    yield RunningVllm(
        url=f"http://127.0.0.1:{port}", log=log, shape=shape, out=out, model=model, process=process
    )
    stop_server(process)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that boots the real llama-cpp-python server (its ``llama_server`` fixture)
    carries the tier's marker, as the ones that boot it themselves do."""
    for item in items:
        if "llama_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llama_server)
