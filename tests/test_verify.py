"""fakplan verify: ledger predictions closed against real boot logs, verdicts kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.ceiling import ceiling_from_ledger
from fakplan.cli import main
from fakplan.ledger import parse_ledger
from fakplan.units import GIB, MIB

from .conftest import IN_CI, PUBLIC
from .realserver import free_port, have_llama_cpp, stop_server, wait_ready
from .tinymodels import write_tiny_llama

LEDGERS = PUBLIC / "ledgers"
DATA = Path(__file__).parent / "data" / "ledgers"


def write_shape(path: Path, **overrides: object) -> Path:
    shape: dict[str, object] = {
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
    shape.update(overrides)
    path.write_text(json.dumps(shape))
    return path


def test_vllm_018_kv_tokens_held_exactly(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "s.yaml")
    out = tmp_path / "out"
    result = runner.invoke(
        main,
        ["verify", str(shape), "--ledger", str(LEDGERS / "vllm-018.log"), "-o", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.output)["verdicts"]
    kv = verdicts["kv-tokens"]
    assert kv["status"] == "held"
    assert kv["observed"] == 567_978  # "GPU KV cache size: 567,978 tokens", line 2
    assert kv["source"].startswith(f"{LEDGERS / 'vllm-018.log'}:2:")
    # 567,978 // 131,072 = 4 whole sessions; the plan predicted the same from its own arithmetic
    assert verdicts["sessions-at-window"] == {
        **verdicts["sessions-at-window"],
        "status": "held",
        "observed": 4,
    }
    assert verdicts["weights"]["status"] == "unverifiable"  # this excerpt has no weights line
    record = json.loads((out / "s" / "plan.json").read_text())
    kv_record = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    assert kv_record["verdicts"][0]["status"] == "held"
    env = (out / "s" / "s.env").read_text()
    assert "verdict: held, observed 567978" in env


def test_wrong_pool_kills_the_prediction(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "s.yaml", budget={"weights": "20 GiB", "kv": "5 GiB"})
    result = runner.invoke(
        main,
        [
            "verify",
            str(shape),
            "--ledger",
            str(LEDGERS / "vllm-018.log"),
            "-o",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1
    assert "killed" in result.output


def test_boot_failure_kills_every_ledger_prediction(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(
        tmp_path / "s.yaml",
        engine_version="0.10.1",
        model="Qwen/Qwen3-Coder-480B-A35B-Instruct",
        card={"total": "96 GiB", "count": 1},
        budget={"weights": "30 GiB", "kv": "48.66 GiB"},
        serving={"max_num_seqs": 1, "max_model_len": 262144, "kv_cache_dtype": "auto"},
    )
    result = runner.invoke(
        main,
        [
            "verify",
            str(shape),
            "--ledger",
            str(LEDGERS / "vllm-012.log"),
            "-o",
            str(tmp_path / "o"),
            "--json",
        ],
    )
    assert result.exit_code == 1
    verdicts = json.loads(result.output)["verdicts"]
    assert {v["status"] for v in verdicts.values()} == {"killed"}
    assert "boot failed" in verdicts["kv-tokens"]["observed"]


def test_table_ceiling_is_seed_002s_formula() -> None:
    ledger = parse_ledger(DATA / "table-seed002.log")
    reading = ceiling_from_ledger(ledger)
    # settled 2.01 GiB free, floor 209.19 MiB, pair 25 GiB + 5 GiB (seed 002 §1)
    settled, floor, pair = round(2.01 * GIB), round(209.19 * MIB), 30 * GIB
    assert reading.bytes == settled - floor + pair
    assert reading.lines


def test_ceiling_unknown_names_what_is_missing() -> None:
    ledger = parse_ledger(DATA / "llama-cpp-python-0.3.36.log")
    reading = ceiling_from_ledger(ledger)
    assert reading.bytes is None
    assert "does not state" in reading.derivation


def test_shape_ceiling_from_a_ledger_file(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "boot.log").write_text((DATA / "table-seed002.log").read_text())
    text = (Path(__file__).parent.parent / "shapes" / "frank-archon.yaml").read_text()
    text = text.replace("ceiling: 29120 MiB", "ceiling: {ledger: boot.log}")
    (tmp_path / "s.yaml").write_text(text)
    result = runner.invoke(main, ["plan", str(tmp_path / "s.yaml"), "--json"])
    data = json.loads(result.output)
    expected = round(2.01 * GIB) - round(209.19 * MIB) + 30 * GIB
    assert data["ceiling_bytes"] == expected
    assert "boot.log line" in data["derivations"]["ceiling_bytes"]


def test_verdicts_accumulate_and_retire(runner: CliRunner, tmp_path: Path) -> None:
    """A second verify appends; a changed shape retires the old prediction with its verdicts."""
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    shape = tmp_path / "t.yaml"

    def write(kv: str) -> None:
        shape.write_text(
            json.dumps(
                {
                    "name": "tiny",
                    "engine": "llamacpp",
                    "model": str(model),
                    "card": {"total": "1 GiB"},
                    "budget": {"weights": "1 MiB", "kv": kv},
                    "serving": {"max_num_seqs": 1, "max_model_len": 1024, "kv_cache_dtype": "f16"},
                    "launch": {"binary": "llama-cpp-python"},
                }
            )
        )

    write("0.25 MiB")
    out = tmp_path / "out"
    log = DATA / "llama-cpp-python-0.3.36.log"
    for _ in range(2):
        assert (
            runner.invoke(
                main, ["verify", str(shape), "--ledger", str(log), "-o", str(out)]
            ).exit_code
            == 0
        )
    record = json.loads((out / "tiny" / "plan.json").read_text())
    kv = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    assert [v["status"] for v in kv["verdicts"]] == ["held", "held"]
    # re-compiling the unchanged shape keeps them
    runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert len(next(p for p in record["predictions"] if p["id"] == "kv-tokens")["verdicts"]) == 2
    # a new pool is a new prediction: the old one retires with its verdicts
    write("0.5 MiB")
    runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert next(p for p in record["predictions"] if p["id"] == "kv-tokens")["verdicts"] == []
    retired = [p for p in record["retired_predictions"] if p["id"] == "kv-tokens"]
    assert len(retired) == 1 and len(retired[0]["verdicts"]) == 2
    assert "Earlier predictions of this endpoint" in (out / "tiny" / "tiny.env").read_text()


def test_real_llamacpp_boot_from_the_rendered_serve_sh(runner: CliRunner, tmp_path: Path) -> None:
    """Compile a shape for a generated GGUF, boot the engine with its serve.sh, verify the ledger."""
    if not have_llama_cpp():
        if IN_CI:
            pytest.fail("CI must boot the real llama.cpp engine")
        pytest.skip("llama-cpp-python not installed")
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    port = free_port()
    shape = tmp_path / "tiny.yaml"
    shape.write_text(
        json.dumps(
            {
                "name": "tiny",
                "engine": "llamacpp",
                "model": str(model),
                "card": {"total": "1 GiB"},
                "budget": {"weights": "1 MiB", "kv": "0.25 MiB"},
                "serving": {"max_num_seqs": 1, "max_model_len": 1024, "kv_cache_dtype": "f16"},
                "ceiling": "1 GiB",
                "launch": {"binary": "llama-cpp-python", "host": "127.0.0.1", "port": port},
            }
        )
    )
    out = tmp_path / "out"
    assert runner.invoke(main, ["compile", str(shape), "-o", str(out)]).exit_code == 0
    plan = json.loads((out / "tiny" / "plan.json").read_text())
    # 2 layers x (32 + 32) x 2 B = 256 B per cell; 0.25 MiB -> 1,024 cells
    assert plan["tokens_backed"] == 1024
    log = tmp_path / "boot.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with log.open("wb") as handle:
        process = subprocess.Popen(
            ["bash", str(out / "tiny" / "serve.sh")],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop_server(process)
    result = runner.invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.output)["verdicts"]
    assert verdicts["kv-tokens"]["status"] == "held"
    assert (
        verdicts["kv-tokens"]["observed"] == 1024
    )  # "llama_kv_cache: size = 0.25 MiB (1024 cells, ..."
    assert verdicts["sessions-at-window"]["status"] == "held"
    assert verdicts["weights"]["status"] == "held"  # "CPU_Mapped model buffer size = 0.41 MiB"


def test_gate_with_a_ledger_uses_its_ceiling(runner: CliRunner, in_root: Path) -> None:
    # seed 002 table: 2.01 GiB (2,058.24 MiB) - 209.19 MiB + 30,720 MiB = 32,569.05 MiB:
    # the fp8 before-shape's pair (29,614 MiB) fits under it, though not under 29,120 MiB
    result = runner.invoke(
        main, ["gate", "shapes/frank-archon-fp8.yaml", "--ledger", str(DATA / "table-seed002.log")]
    )
    assert "ok" in result.output
    line = next(x for x in result.output.splitlines() if "pair ≤ ceiling" in x)
    assert line.startswith("ok ") and "29,614 MiB ≤ 32,569 MiB" in line
    bad = runner.invoke(
        main, ["gate", "shapes/frank-archon.yaml", "--ledger", str(DATA / "nope.log")]
    )
    assert bad.exit_code == 2
