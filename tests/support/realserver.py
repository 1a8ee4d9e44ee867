"""A real llama.cpp server (llama-cpp-python) on a tiny generated GGUF, for tests.

Booted once per test session by the ``llama_server`` fixture in conftest.py;
readiness is GET /v1/models answering 200, within a deadline. The boot log
(stderr and stdout) is kept for the ledger tests. See
docs/engines-on-cpu.md §3-§5 for what this server does and does not do.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.tinymodels import TinyLlama, write_tiny_llama

N_CTX = 1024
EOS_ID = 259  # tinymodels: the last token of the 260-token vocabulary


@dataclass(frozen=True)
class RunningServer:
    url: str
    log: Path
    model: Path
    n_ctx: int
    process: subprocess.Popen[bytes]


def log_mark(server: RunningServer) -> int:
    """How much of the server's log is written now: ``ran_out_of_cells`` reads past it."""
    return server.log.stat().st_size if server.log.exists() else 0


def ran_out_of_cells(server: RunningServer, since: int = 0) -> bool:
    """The server logged llama.cpp's "no KV slot" error after ``since`` (its traceback lands
    after the cut stream, so the log is read for a few seconds). llama-cpp-python 0.3.36
    leaves KV cells of earlier requests taken, so a prompt near the window can find no slot
    for its first generated token: the wrapper's fault, not a probe's."""
    for _ in range(50):
        with server.log.open("rb") as log:
            log.seek(since)
            if b"llama_decode returned 1" in log.read():
                return True
        time.sleep(0.1)
    return False


def have_llama_cpp() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    deadline_s: float = 60.0,
    exited: Callable[[], Exception] | None = None,
) -> None:
    """Until GET /v1/models answers 200; ``exited()`` (default: the log's tail) is raised as
    soon as the server exits, and a RuntimeError at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process.poll() is not None:
            if exited is not None:
                raise exited()
            raise RuntimeError(
                f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"the server was not ready in {deadline_s:.0f} s:\n{log.read_text()[-3000:]}"
    )


def start_server(folder: Path, argv: list[str] | None = None, n_ctx: int = N_CTX) -> RunningServer:
    """Start ``argv`` (default: the llama-cpp-python server on a tiny GGUF) and wait for it."""
    folder.mkdir(parents=True, exist_ok=True)
    model = write_tiny_llama(folder / "tiny.gguf", TinyLlama())
    port = free_port()
    log = folder / "server.log"
    command = argv or [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--n_ctx",
        str(n_ctx),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--verbose",
        "true",
    ]
    with log.open("wb") as handle:  # the child keeps its own descriptor; ours must close
        process = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PORT": str(port)},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, log)
    except BaseException:
        stop_server(process)
        raise
    return RunningServer(url=url, log=log, model=model, n_ctx=n_ctx, process=process)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def boot_serve_sh(serve: Path, port: int, log: Path) -> str:
    """Run a rendered serve.sh until the server answers, stop it, and return its boot log.

    The script execs ``python3 -m llama_cpp.server``: this interpreter's folder goes first
    on PATH, so that is the python with llama-cpp-python installed."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with log.open("wb") as handle:
        process = subprocess.Popen(
            ["bash", str(serve)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop_server(process)
    return log.read_text(errors="replace")
