from __future__ import annotations

import json
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
# under CI a real engine that cannot be installed or booted fails the run instead of skipping
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
PUBLIC = Path(__file__).resolve().parent / "data" / "public"


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
        path.parent.mkdir(parents=True, exist_ok=True)
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
        if IN_CI:
            pytest.fail("llama-cpp-python is not installed, but CI must boot the real engine")
        pytest.skip("llama-cpp-python not installed")
    server = start_server(tmp_path_factory.mktemp("llama"))
    yield server
    stop_server(server.process)


TINY_VLLM_SHAPE = """\
# the tier's endpoint, as an operator would write it for vLLM's CPU build
name: tiny-vllm-cpu
engine: vllm
engine_version: 0.32.0
model: {model}
card: {{device: cpu, total: auto}}
budget: {{weights: 1 GiB, kv: {kv}}}
serving: {{max_num_seqs: 4, max_model_len: 1024, dtype: float32}}
control:
  cpu-decode: {{value: 300, note: "tiny model, 2 cores, non-streamed (docs/engines-on-cpu.md §6: ~156 t/s)"}}
expect:
  - {{id: decode-vs-control, metric: decode_tps, control: cpu-decode, change_pct: [-90, 900]}}
launch:
  binary: vllm-api-server
  host: 127.0.0.1
  port: {port}
  extra_args: [--enforce-eager]
"""


def write_vllm_shape(folder: Path, model: Path, port: int, kv: str = "1 GiB") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shape = folder / "tiny-vllm-cpu.yaml"
    shape.write_text(
        TINY_VLLM_SHAPE.format(model=json.dumps(str(model)), kv=kv, port=port), encoding="utf-8"
    )
    return shape


def compile_serve_sh(shape: Path, out: Path) -> Path:
    from fakplan.cli import main

    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output  # 1: a gate failed, files still written
    (serve,) = out.glob("*/serve.sh")
    return serve


@pytest.fixture(scope="session")
def vllm_environment() -> tuple[Path, Path]:
    """vLLM's CPU build and the tiny model: (its python, the model folder)."""
    from .realvllm import ensure_environment, ensure_tiny_model

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
    from .realserver import free_port, stop_server
    from .realvllm import RunningVllm, run_serve_sh, wait_ready

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
