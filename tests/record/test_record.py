"""The compiled record: verdicts added once per observation, under the record's lock."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from fakplan.predict import Verdict
from fakplan.record import locked, record_verdicts
from fakplan.shape import load_shape
from tests.support.paths import PUBLIC, SHAPES


def _shape(tmp_path: Path) -> Path:
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


def _kv_verdicts(out: Path) -> list[dict[str, object]]:
    record = json.loads((out / "s" / "plan.json").read_text())
    kv = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    return list(kv["verdicts"])


def _probe_verdict(run: str, observed: int, at: str) -> Verdict:
    return Verdict(
        status="held",
        observed=observed,
        source=f"fakplan probe kv http://10.0.0.5:8000/v1 (run {run}): GET /metrics",
        note=f"the engine states {observed:,} KV tokens",
        at=at,
    )


def test_a_probe_observation_recorded_twice_is_one_verdict(tmp_path: Path) -> None:
    """The rule lives in Prediction.with_verdict, so probes' verdicts get it too."""
    loaded, out = load_shape(_shape(tmp_path)), tmp_path / "out"
    first = record_verdicts(loaded, out, {"kv-tokens": _probe_verdict("1", 567_978, "T1")})
    assert (first.added, first.already) == (("kv-tokens",), ())
    # the same run's figure recorded again (a retried write): the earlier verdict stays
    again = record_verdicts(loaded, out, {"kv-tokens": _probe_verdict("1", 567_978, "T2")})
    assert (again.added, again.already) == ((), ("kv-tokens",))
    assert [v["at"] for v in _kv_verdicts(out)] == ["T1"]
    # another run is another source, and another figure another observation
    record_verdicts(loaded, out, {"kv-tokens": _probe_verdict("2", 567_978, "T3")})
    record_verdicts(loaded, out, {"kv-tokens": _probe_verdict("2", 567_990, "T4")})
    assert [v["at"] for v in _kv_verdicts(out)] == ["T1", "T3", "T4"]
    header = (out / "s" / "s.env").read_text()
    assert header.count("(run 1)") == 1 and header.count("(run 2)") == 2


def test_recording_waits_for_the_records_lock(tmp_path: Path) -> None:
    """A writer holding the record's lock keeps another from reading a record it will replace."""
    loaded, out = load_shape(_shape(tmp_path)), tmp_path / "out"
    done = threading.Event()

    def record() -> None:
        record_verdicts(loaded, out, {"kv-tokens": _probe_verdict("1", 567_978, "T1")})
        done.set()

    with locked(out / "s"):
        writer = threading.Thread(target=record)
        writer.start()
        assert not done.wait(0.5)  # blocked while the lock is held
    writer.join(30)
    assert done.is_set() and len(_kv_verdicts(out)) == 1
    assert sorted(p.name for p in (out / "s").iterdir()) == ["plan.json", "s.env", "serve.sh"]


def test_one_durable_commit_per_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """9fcf43b synced every file and the folder after each (9 fsyncs a shape): now plan.json,
    the commit point, and its folder are synced, the rendered files are renamed whole and
    the folder synced once after them: 3 fsyncs, whatever the number of files."""
    from fakplan.plan import compile_plan
    from fakplan.record import write_record
    from fakplan.render import render_plan

    loaded = load_shape(SHAPES / "example.yaml")
    plan = compile_plan(loaded)
    folder = tmp_path / "example"
    files = render_plan(loaded, plan, None, folder)
    assert len(files) >= 2
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    write_record(folder, plan, files)
    assert len(synced) == 3
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["plan.json", *(f.name for f in files)]
    )


def test_one_template_environment_per_folder() -> None:
    """9fcf43b rebuilt the jinja environment on every render (twice a shape)."""
    from fakplan.render import default_templates, environment

    assert environment() is environment(default_templates())
