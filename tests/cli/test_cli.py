"""The CLI contract: exit codes, one-line errors, atomic and repeatable output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.golden import check_golden
from tests.support.paths import SHAPES


def test_plan_json_keys(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(main, ["plan", "shapes/frank-archon-fp8.yaml", "--json"])
    assert result.exit_code == 1, result.output  # pool < contract
    data = json.loads(result.output)
    for key in (
        "name",
        "engine",
        "rate_bytes_per_token",
        "contract_bytes",
        "kv_budget_bytes",
        "tokens_backed",
        "sessions_at_window",
        "pair_bytes",
        "ceiling_bytes",
        "unclaimed_bytes",
        "gates",
    ):
        assert key in data
    assert data["schema"] == "fakplan.plan/1"
    assert data["tokens_backed"] == 387_192
    pool = next(g for g in data["gates"] if g["id"] == "pool-contract")
    assert pool["ok"] is False
    assert set(pool) >= {"id", "ok", "detail"}


def test_plan_after_shape_passes(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(main, ["plan", "shapes/frank-archon.yaml", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["tokens_backed"] == 462_900
    assert all(g["ok"] for g in data["gates"])


def test_plan_table(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(main, ["plan", "shapes/frank-archon.yaml"])
    assert result.exit_code == 0
    assert "462,900" in result.output
    assert "ok pool ≥ contract (6,912 MiB ≥ 6,064 MiB)" in result.output


def _bad_shapes(tmp_path: Path) -> dict[str, Path]:
    good = (SHAPES / "frank-archon.yaml").read_text()
    cases = {
        "malformed": "name: [x\n",
        "unknown-key": good + "colour: blue\n",
        "bare-number": good.replace("kv: 6912 MiB", "kv: 6912"),
        "zero-seqs": good.replace("max_num_seqs: 2", "max_num_seqs: 0"),
        "negative-seqs": good.replace("max_num_seqs: 2", "max_num_seqs: -3"),
    }
    paths = {}
    for name, text in cases.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    paths["missing"] = tmp_path / "missing.yaml"
    return paths


@pytest.mark.parametrize(
    "case", ["malformed", "unknown-key", "bare-number", "zero-seqs", "negative-seqs", "missing"]
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path: Path, case: str) -> None:
    path = _bad_shapes(tmp_path)[case]
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "compile", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith(str(path))
    if case != "missing":
        assert lines[0].split(":")[1].isdigit(), "file:line"
    assert not out.exists()


def test_one_bad_shape_stops_the_whole_compile(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    out = tmp_path / "out"
    result = runner.invoke(
        main, ["compile", str(SHAPES / "frank-archon.yaml"), str(bad), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert not out.exists()


def test_compile_writes_plan_and_env_byte_identical(
    runner: CliRunner, in_root: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        result = runner.invoke(main, ["compile", "shapes/frank-archon.yaml", "-o", str(out)])
        assert result.exit_code == 0, result.output
    for name in ("plan.json", "frank-archon.env"):
        assert (first / "frank-archon" / name).read_bytes() == (
            second / "frank-archon" / name
        ).read_bytes()
    # a re-run over an existing output changes nothing either
    before = (first / "frank-archon" / "frank-archon.env").read_bytes()
    runner.invoke(main, ["compile", "shapes/frank-archon.yaml", "-o", str(first)])
    assert (first / "frank-archon" / "frank-archon.env").read_bytes() == before
    assert not list((first / "frank-archon").glob(".*")), "no temporary files left behind"


def test_env_golden(runner: CliRunner, in_root: Path, tmp_path: Path) -> None:
    runner.invoke(
        main,
        [
            "compile",
            "shapes/frank-archon.yaml",
            "shapes/frank-archon-fp8.yaml",
            "-o",
            str(tmp_path),
        ],
    )
    check_golden("frank-archon.env", (tmp_path / "frank-archon" / "frank-archon.env").read_text())
    check_golden(
        "frank-archon-fp8.env", (tmp_path / "frank-archon-fp8" / "frank-archon-fp8.env").read_text()
    )


def test_compile_folder_exit_1_when_a_gate_fails(
    runner: CliRunner, in_root: Path, tmp_path: Path
) -> None:
    result = runner.invoke(main, ["compile", "shapes", "-o", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAILS pool ≥ contract" in result.output
    assert (tmp_path / "frank-archon" / "plan.json").exists()
    assert (tmp_path / "frank-archon-fp8" / "frank-archon-fp8.env").exists()


def test_env_file_sources_in_bash(runner: CliRunner, in_root: Path, tmp_path: Path) -> None:
    runner.invoke(main, ["compile", "shapes/frank-archon.yaml", "-o", str(tmp_path)])
    env = tmp_path / "frank-archon" / "frank-archon.env"
    proc = subprocess.run(
        [
            "bash",
            "-c",
            'set -eu; source "$1"; printf "%s|%s|%s" "$MODEL" "$VRAM_KV_MIB" "$ENGINE_ARGS"',
            "_",
            str(env),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == (
        "Qwen3.8-Flash-Next w4|6912|--vram-kv-mib 6912 --vram-weights-mib 22208 "
        "--max-num-seqs 2 --max-model-len 200000 --kv-cache-dtype bf16"
    )


def test_hostile_model_name_renders_inert(tmp_path: Path, runner: CliRunner) -> None:
    hostile = "$(touch pwned)`touch pwned2`'\"; touch pwned3"
    text = (
        (SHAPES / "frank-archon.yaml")
        .read_text()
        .replace("model: Qwen3.8-Flash-Next w4", "model: " + json.dumps(hostile + "\nBAD=1"))
    )
    shape = tmp_path / "s.yaml"
    shape.write_text(text)
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    env = tmp_path / "out" / "frank-archon" / "frank-archon.env"
    proc = subprocess.run(
        [
            "bash",
            "-c",
            'set -eu; source "$1"; printf "%s" "$MODEL"; printf "|%s" "${BAD-unset}"',
            "_",
            str(env),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert proc.stdout == hostile + "\nBAD=1|unset"
    assert not list(tmp_path.glob("pwned*"))


def test_schema_is_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["schema"])
    assert result.exit_code == 0
    document = json.loads(result.output)
    assert document["title"] == "fakplan shape"
    assert "budget" in document["properties"]


def test_help_teaches(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--help"])
    assert "Exit status: 0 ok, 1 a gate or prediction failed, 2 bad input." in result.output
