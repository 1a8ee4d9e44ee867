"""The record under kill -9 and concurrent writers: plan.json is the commit point.

Every writer here is a real process (tests/record_crash_driver.py, or ``fakplan verify``
itself), killed with SIGKILL at random points. After each kill the folder is read as a
reader would: plan.json parses and holds every verdict a writer had finished before the
kill; a header never shows a verdict plan.json lacks (it may lag, and the next writer
re-renders it); a killed writer's temporary file is removed by the next writer, so they
never accumulate. Writers running at once lose no verdict, compile included.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.errors import RecordError
from fakplan.predict import Verdict
from fakplan.record import locked, read_record, record_verdicts
from fakplan.render import render_plan
from fakplan.shape import load_shape
from tests.support.paths import PUBLIC, TESTS

DRIVER = TESTS / "support" / "record_crash_driver.py"
PREDICTIONS = ("kv-tokens", "sessions-at-window", "weights", "unclaimed")
RECORD_FILES = ["plan.json", "s.env", "serve.sh"]
LEDGER = PUBLIC / "ledgers" / "vllm-018.log"


def _shape(tmp_path: Path) -> Path:
    """A vLLM shape verify closes four predictions of (the ceiling adds unclaimed)."""
    path = tmp_path / "s.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "s",
                "engine": "vllm",
                "engine_version": "0.24.0",
                "model": str(PUBLIC / "configs" / "nvidia--Qwen3.6-35B-A3B-NVFP4"),
                "card": {"total": "31.5 GiB", "count": 1},
                "budget": {"weights": "20 GiB", "kv": "5.98 GiB"},
                "ceiling": "30 GiB",
                "serving": {
                    "max_num_seqs": 1,
                    "max_model_len": 131072,
                    "kv_cache_dtype": "fp8",
                    "max_num_batched_tokens": 8192,
                },
            }
        )
    )
    return path


def _compile(shape: Path, out: Path) -> None:
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output  # 1: a gate fails, files still written


def _drive(mode: str, config: dict[str, Any], timeout: float = 600) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(DRIVER), mode, json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _plan_tags(seen: dict[str, Any]) -> set[str]:
    return {source for _, source, _ in seen["plan"]}


def _temps(files: list[str]) -> set[str]:
    return {name for name in files if name.startswith(".")}


def _seed() -> int:
    """A fresh seed each run (random points), FAKPLAN_CRASH_SEED to replay a failure."""
    return int(os.environ.get("FAKPLAN_CRASH_SEED") or random.SystemRandom().randrange(2**32))


def _assert_headers_match_plan(shape: Path, out: Path) -> None:
    """The headers are exactly what plan.json renders to: nothing stale, nothing ahead."""
    loaded, folder = load_shape(shape), out / "s"
    for rendered in render_plan(loaded, read_record(folder / "plan.json"), None, folder):
        assert (folder / rendered.name).read_text() == rendered.text, rendered.name


def _kill_runs(tmp_path: Path, points: int, timers: int, writes: int) -> dict[str, int]:
    """Kill writers at random points and check what each kill left; returns the figures."""
    seed = _seed()
    rng = random.Random(seed)
    shape, out = _shape(tmp_path), tmp_path / "out"
    _compile(shape, out)
    (probe,) = _drive("count", {"shape": str(shape), "out": str(tmp_path / "count")})
    calls, seconds = int(probe["calls"]), float(probe["seconds"])
    runs: list[dict[str, Any]] = [{"at": rng.randint(1, calls * writes)} for _ in range(points)]
    runs += [{"delay": rng.uniform(0, seconds * writes)} for _ in range(timers)]
    rng.shuffle(runs)
    runs.append({})  # a writer that finishes: it repairs what the last kill left
    reports = _drive(
        "kills", {"shape": str(shape), "out": str(out), "runs": runs, "writes": writes}
    )
    assert len(reports) == len(runs), f"seed {seed}"
    acked: set[str] = set()
    temps_before: set[str] = set()
    stale = left = 0  # kills that left a header behind plan.json; that left a temporary
    for seen in reports:
        why = f"seed {seed}, writer {seen['writer']} ({seen['run']})"
        assert seen["error"] is None and seen["plan"] is not None, why
        acked |= set(seen["acked"])
        in_plan = set(map(tuple, seen["plan"]))
        for source in acked:  # every verdict written before the kill, intact
            observed = int(source.rpartition(".")[2])
            assert {(pid, source, observed) for pid in PREDICTIONS} <= in_plan, (why, source)
        for name, tags in seen["headers"].items():  # a header lags plan.json, never leads it
            assert set(tags) <= _plan_tags(seen), (why, name, set(tags) - _plan_tags(seen))
        stale += any(set(tags) != _plan_tags(seen) for tags in seen["headers"].values())
        temps = _temps(seen["files"])
        left += bool(temps)
        assert len(temps) <= 1, (why, temps)  # at most the one a kill interrupted
        if seen["acked"]:
            assert not temps & temps_before, (why, temps)  # the next writer removed it
        temps_before = temps
    points_killed = [r["killed"] for r in reports if "at" in r["run"]]
    assert all(points_killed), f"seed {seed}: a writer outlived its kill point"
    last = reports[-1]
    assert not last["killed"] and len(last["acked"]) == writes
    assert last["files"] == RECORD_FILES
    _assert_headers_match_plan(shape, out)
    return {
        "kills": sum(r["killed"] for r in reports),
        "stale": stale,
        "temps": left,
        "acked": len(acked),
        "verdicts": len(last["plan"]),
        "seed": seed,
    }


def test_kill_9_at_random_points_keeps_every_earlier_verdict(tmp_path: Path) -> None:
    """70 writers SIGKILLed: 45 before a random file-system call, 25 after a random delay
    (those may finish first)."""
    start = time.monotonic()
    figures = _kill_runs(tmp_path, points=45, timers=25, writes=2)
    assert figures["kills"] >= 50, figures
    assert figures["stale"] and figures["temps"], figures  # the kills hit the windows that matter
    assert figures["verdicts"] >= 4 * figures["acked"], figures
    print(f"{figures}, {time.monotonic() - start:.1f} s")


@pytest.mark.fuzz
def test_kill_9_at_random_points_many_times(tmp_path: Path) -> None:
    figures = _kill_runs(tmp_path, points=400, timers=200, writes=4)
    assert figures["kills"] >= 500, figures
    print(figures)


@pytest.mark.parametrize("onto", RECORD_FILES)
def test_a_kill_between_two_files_leaves_no_header_ahead_and_compile_repairs(
    tmp_path: Path, onto: str
) -> None:
    """Killed just before a file is renamed into place: plan.json has the write or not, the
    headers never show more than it, and the next ``fakplan compile`` re-renders them."""
    shape, out = _shape(tmp_path), tmp_path / "out"
    _compile(shape, out)
    (seen,) = _drive(
        "kills",
        {"shape": str(shape), "out": str(out), "runs": [{"before_replace": onto}], "writes": 1},
    )
    assert seen["killed"] and seen["acked"] == [] and seen["error"] is None
    for name, tags in seen["headers"].items():
        assert set(tags) <= _plan_tags(seen), (name, tags, seen["plan"])
    assert len(_temps(seen["files"])) == 1  # the file the kill interrupted
    _compile(shape, out)
    assert sorted(p.name for p in (out / "s").iterdir()) == RECORD_FILES
    _assert_headers_match_plan(shape, out)


def test_a_killed_writers_temporary_files_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    """Temporaries a kill left (mkstemp's names beside their target) go; other files stay."""
    shape, out = _shape(tmp_path), tmp_path / "out"
    _compile(shape, out)
    folder = out / "s"
    left = [".plan.json.k2x9_abc", ".s.env.0a1b2c3d", ".serve.sh.zz_99xyq"]
    kept = [".notes", "notes.txt", ".plan.json.bak.2024"]
    for name in left + kept:
        (folder / name).write_text("{")
    verdict = Verdict(status="held", observed=1, source="test", note="", at="T")
    record_verdicts(load_shape(shape), out, {"kv-tokens": verdict})
    assert sorted(p.name for p in folder.iterdir()) == sorted(RECORD_FILES + kept)
    for name in left:
        (folder / name).write_text("{")
    _compile(shape, out)  # compile, too, removes them
    assert sorted(p.name for p in folder.iterdir()) == sorted(RECORD_FILES + kept)


def test_compile_waits_for_the_records_lock(tmp_path: Path) -> None:
    """compile re-reads and rewrites the record under its lock, as verify and probe do."""
    shape, out = _shape(tmp_path), tmp_path / "out"
    _compile(shape, out)
    done = threading.Event()

    def compile_() -> None:
        _compile(shape, out)
        done.set()

    with locked(out / "s"):
        writer = threading.Thread(target=compile_)
        writer.start()
        assert not done.wait(1.0)  # blocked while the lock is held
    writer.join(30)
    assert done.is_set()


def _race(tmp_path: Path, writers: int, rounds: int, compiles: int) -> int:
    """``writers`` processes add 4 verdicts a round beside ``compiles`` fakplan compile runs."""
    shape, out, go = _shape(tmp_path), tmp_path / "out", tmp_path / "go"
    _compile(shape, out)
    base = {"shape": str(shape), "out": str(out), "go": str(go), "rounds": rounds}
    procs = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), "race", json.dumps({**base, "writer": f"w{n}"})],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(writers)
    ]
    procs += [
        subprocess.Popen(
            [sys.executable, str(DRIVER), "compile", json.dumps({**base, "rounds": compiles})],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(1 if compiles else 0)
    ]
    for proc in procs:  # every writer is loaded and waiting: start them at once
        assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": True}
    go.touch()
    for proc in procs:
        proc.communicate(timeout=300)
        assert proc.returncode == 0
    record = read_record(out / "s" / "plan.json")
    kept = {(p.id, v.source) for p in record.predictions for v in p.verdicts}
    expected = {
        (pid, f"crash w{n}.{i}")
        for n in range(writers)
        for i in range(rounds)
        for pid in PREDICTIONS
    }
    assert expected - kept == set(), f"{len(expected - kept)} of {len(expected)} verdicts lost"
    _assert_headers_match_plan(shape, out)
    assert sorted(p.name for p in (out / "s").iterdir()) == RECORD_FILES
    return len(expected)


def test_two_writers_at_once_keep_every_verdict(tmp_path: Path) -> None:
    """Two processes, 10 rounds of 4 verdicts each: 80 verdicts, none lost."""
    assert _race(tmp_path, writers=2, rounds=10, compiles=0) == 80


def test_compile_beside_two_writers_keeps_every_verdict(tmp_path: Path) -> None:
    """compile re-reads plan.json under the lock: a verdict added meanwhile is not dropped."""
    assert _race(tmp_path, writers=2, rounds=10, compiles=20) == 80


@pytest.mark.fuzz
def test_many_writers_and_compiles_at_once_keep_every_verdict(tmp_path: Path) -> None:
    assert _race(tmp_path, writers=4, rounds=100, compiles=50) == 1600


def _verify(shape: Path, ledger: Path, out: Path) -> subprocess.Popen[str]:
    fakplan = Path(sys.executable).with_name("fakplan")
    return subprocess.Popen(
        [str(fakplan), "verify", str(shape), "--ledger", str(ledger), "-o", str(out), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _verify_rounds(tmp_path: Path, rounds: int, at_once: int) -> None:
    """``at_once`` real ``fakplan verify`` runs per round, each reading its own copy of a
    boot log (so each of its 4 verdicts is a new observation)."""
    tmp_path.mkdir(exist_ok=True)
    shape, out = _shape(tmp_path), tmp_path / "out"
    ledgers: list[Path] = []
    for r in range(rounds):
        batch = [tmp_path / f"boot-{r}-{n}.log" for n in range(at_once)]
        for ledger in batch:
            shutil.copy(LEDGER, ledger)
        procs = [_verify(shape, ledger, out) for ledger in batch]
        for proc in procs:
            _, stderr = proc.communicate(timeout=120)
            assert proc.returncode in (0, 1), stderr
        ledgers += batch
    record = read_record(out / "s" / "plan.json")
    kept = {(p.id, v.source.partition(":")[0]) for p in record.predictions for v in p.verdicts}
    expected = {(pid, str(ledger)) for ledger in ledgers for pid in PREDICTIONS}
    assert expected - kept == set(), f"{len(expected - kept)} of {len(expected)} verdicts lost"
    _assert_headers_match_plan(shape, out)


def test_two_fakplan_verify_runs_at_once_keep_every_verdict(tmp_path: Path) -> None:
    """The issue's reproducer, shortened: two real verify processes per round."""
    _verify_rounds(tmp_path, rounds=2, at_once=2)


@pytest.mark.fuzz
def test_fakplan_verify_runs_at_once_ten_rounds(tmp_path: Path) -> None:
    """The issue's reproducer in full: 10 rounds x 2 runs x 4 verdicts, and 3 at once."""
    _verify_rounds(tmp_path, rounds=10, at_once=2)
    _verify_rounds(tmp_path / "three", rounds=10, at_once=3)


@pytest.mark.fuzz
def test_fakplan_verify_killed_at_random_delays(tmp_path: Path) -> None:
    """Real ``fakplan verify`` processes SIGKILLed somewhere between start-up and exit."""
    seed = _seed()
    rng = random.Random(seed)
    shape, out = _shape(tmp_path), tmp_path / "out"
    _compile(shape, out)
    runtimes = []
    for _ in range(3):  # how long a whole run takes here, now
        start = time.monotonic()
        _verify(shape, LEDGER, out).communicate(timeout=120)
        runtimes.append(time.monotonic() - start)
    runtime = sorted(runtimes)[1]
    finished: list[Path] = []
    committed = 0  # killed after plan.json took its verdicts
    for n in range(60):
        ledger = tmp_path / f"boot-{n}.log"
        shutil.copy(LEDGER, ledger)
        proc = _verify(shape, ledger, out)
        time.sleep(rng.uniform(0.6 * runtime, 1.5 * runtime))
        proc.kill()
        proc.communicate(timeout=120)
        if proc.returncode in (0, 1):
            finished.append(ledger)
        elif str(ledger) in (out / "s" / "plan.json").read_text():
            committed += 1
        record = read_record(out / "s" / "plan.json")  # parses after every kill
        kept = {(p.id, v.source.partition(":")[0]) for p in record.predictions for v in p.verdicts}
        lost = {(pid, str(done)) for done in finished for pid in PREDICTIONS} - kept
        assert not lost, f"seed {seed}: {lost}"
        temps = _temps(sorted(p.name for p in (out / "s").iterdir()))
        assert len(temps) <= 1, f"seed {seed}: {temps}"
    assert finished, f"seed {seed}: every run was killed before it ended; nothing was checked"
    _verify(shape, LEDGER, out).communicate(timeout=120)
    _assert_headers_match_plan(shape, out)
    killed = 60 - len(finished)
    print(f"seed {seed}: {killed} killed ({committed} after plan.json), {len(finished)} finished")


def test_a_record_that_cannot_be_written_is_a_record_error(tmp_path: Path) -> None:
    """A folder the system refuses is a RecordError (one line, exit 2), not a traceback."""
    shape, out = _shape(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "s").write_text("a file where the record's folder goes")
    verdict = Verdict(status="held", observed=1, source="test", note="", at="T")
    with pytest.raises(RecordError, match=r"out/s: cannot write the record"):
        record_verdicts(load_shape(shape), out, {"kv-tokens": verdict})
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code == 2 and result.exception is not None
    assert result.output.count("\n") == 1 and "cannot write the record" in result.output
