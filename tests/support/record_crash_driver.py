"""A writer process for the record's crash and concurrency tests (tests/test_record_crash.py).

Run as ``python record_crash_driver.py MODE CONFIG_JSON``; it prints one JSON object per
line. Every writer is a real process: ``kills`` forks one child per run, which adds
verdicts through ``record_verdicts`` (as verify and probe do) and dies by SIGKILL — sent by
itself just before its k-th file-system call in the write path (``at``: those calls are the
points where a write can be torn), or by this process after a random delay (``delay``).
After each run this process reads the folder as a reader would and reports what it saw,
so the test judges the state a kill left before the next writer repairs it. ``race``
waits for a go file, then writes its rounds as fast as it can beside other writers;
``compile`` runs ``fakplan compile`` in a loop beside them. No hook lives in fakplan.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fakplan.render
from fakplan.errors import FakplanError
from fakplan.plan import compile_plan
from fakplan.predict import Verdict
from fakplan.record import read_record, record_verdicts
from fakplan.shape import load_shape

# one jinja environment per process, so templates compile once rather than once a record
# (~50 ms): the same files are rendered, and many more writes fit in the test's time
fakplan.render.environment = functools.lru_cache(maxsize=None)(fakplan.render.environment)

# the predictions verify closes for the tests' shape (it states a ceiling: unclaimed too)
PREDICTIONS = ("kv-tokens", "sessions-at-window", "weights", "unclaimed")
# the file-system calls a record write goes through; a point kill lands just before one
HOOKED = ("open", "fdopen", "fsync", "chmod", "replace", "rename", "unlink", "close")
TAG = re.compile(r"crash (\w+)\.(\d+)")


def tag(writer: str, i: int) -> str:
    return f"crash {writer}.{i}"


def verdicts(writer: str, i: int) -> dict[str, Verdict]:
    """Four verdicts no other write makes: the source names the writer and its write."""
    return {
        pid: Verdict(status="held", observed=i, source=tag(writer, i), note="", at="T")
        for pid in PREDICTIONS
    }


def snapshot(folder: Path) -> dict[str, Any]:
    """What a reader finds in the record's folder: files, plan.json's verdicts, headers' tags."""
    files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    seen: dict[str, Any] = {"files": files, "plan": None, "error": None, "headers": {}}
    plan = folder / "plan.json"
    if plan.exists():
        try:
            record = read_record(plan)
        except FakplanError as exc:
            seen["error"] = str(exc)
        else:
            seen["plan"] = sorted(
                [p.id, v.source, v.observed] for p in record.predictions for v in p.verdicts
            )
    for name in files:
        if not name.startswith(".") and name != "plan.json":
            text = (folder / name).read_text(encoding="utf-8")
            seen["headers"][name] = sorted({m.group(0) for m in TAG.finditer(text)})
    return seen


def _kill_before(run: dict[str, Any]) -> None:
    """Patch the hooked ``os`` calls so that this process SIGKILLs itself before the at-th
    one, or before the ``os.replace`` onto the file ``before_replace`` names."""
    at, onto = run.get("at"), run.get("before_replace")
    calls = 0

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == at or (name == "replace" and Path(args[1]).name == onto):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    for name in HOOKED:
        setattr(os, name, wrap(name, getattr(os, name)))


def _count_calls() -> list[int]:
    """Patch the hooked calls to count; the list holds the running count."""
    count = [0]

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            return real(*args, **kwargs)

        return call

    for name in HOOKED:
        setattr(os, name, wrap(getattr(os, name)))
    return count


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def kills(config: dict[str, Any]) -> None:
    loaded = load_shape(Path(config["shape"]))
    out = Path(config["out"])
    folder = out / loaded.shape.name
    writes = int(config["writes"])
    fakplan.render.render_plan(loaded, compile_plan(loaded), None, folder)  # warm the cache
    for number, run in enumerate(config["runs"]):
        writer = f"r{number}"
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the writer
            os.close(read_end)
            if "at" in run or "before_replace" in run:
                _kill_before(run)
            for i in range(writes):
                record_verdicts(loaded, out, verdicts(writer, i))
                os.write(write_end, f"{i}\n".encode())
            os._exit(0)
        os.close(write_end)
        if "delay" in run:
            time.sleep(float(run["delay"]))
            os.kill(child, signal.SIGKILL)
        _, status = os.waitpid(child, 0)
        with os.fdopen(read_end, "rb") as acks:
            acked = [tag(writer, int(line)) for line in acks.read().split()]
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        _emit({"run": run, "writer": writer, "killed": killed, "acked": acked, **snapshot(folder)})


def count(config: dict[str, Any]) -> None:
    """How many hooked calls and how many seconds one record_verdicts takes (the first is warm-up)."""
    loaded = load_shape(Path(config["shape"]))
    out = Path(config["out"])
    record_verdicts(loaded, out, verdicts("warm", 0))
    calls = _count_calls()
    start = time.perf_counter()
    record_verdicts(loaded, out, verdicts("count", 0))
    _emit({"calls": calls[0], "seconds": time.perf_counter() - start})


def _wait_for(go: Path) -> None:
    _emit({"ready": True})
    while not go.exists():
        time.sleep(0.001)


def race(config: dict[str, Any]) -> None:
    loaded = load_shape(Path(config["shape"]))
    out = Path(config["out"])
    _wait_for(Path(config["go"]))
    for i in range(int(config["rounds"])):
        record_verdicts(loaded, out, verdicts(config["writer"], i))
    _emit({"done": config["writer"]})


def compile_loop(config: dict[str, Any]) -> None:
    from fakplan.cli import main

    _wait_for(Path(config["go"]))
    for _ in range(int(config["rounds"])):
        try:
            main(["compile", config["shape"], "-o", config["out"]], standalone_mode=False)
        except SystemExit as exc:
            assert exc.code in (0, 1, None), exc.code  # 1: a gate fails, still written
    _emit({"done": "compile"})


if __name__ == "__main__":
    modes = {"kills": kills, "count": count, "race": race, "compile": compile_loop}
    modes[sys.argv[1]](json.loads(sys.argv[2]))
