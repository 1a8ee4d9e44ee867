"""Engine releases: a version past the newest read says whose rules it got; one before
the oldest modelled is refused, listing the rule sets fakplan knows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.errors import ShapeError
from fakplan.shape import load_shape
from tests.support.paths import SHAPES

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
# vLLM's newest rules were read in v0.33.0 (fakplan/engines/vllm.py): 1.0.0 is past them
NEWER = (
    "vllm 1.0.0 is newer than the newest release fakplan has read (0.33.0): rules of 0.33.0 used"
)


def _example(tmp_path: Path, version: str) -> Path:
    text = (SHAPES / "example.yaml").read_text()
    assert "engine_version: 0.11.0" in text
    path = tmp_path / "example.yaml"
    path.write_text(text.replace("engine_version: 0.11.0", f"engine_version: {version}"))
    return path


def test_a_newer_vllm_says_whose_rules_it_got_in_every_output(
    runner: CliRunner, tmp_path: Path
) -> None:
    shape = _example(tmp_path, "1.0.0")
    text = runner.invoke(main, ["plan", str(shape)])
    assert NEWER in " ".join(text.output.replace("│", " ").split())  # the table wraps it
    plan = json.loads(runner.invoke(main, ["plan", str(shape), "--json"]).output)
    assert plan["engine_version"] == "1.0.0"
    assert NEWER in plan["derivations"]["engine_rules"]
    out = tmp_path / "out"
    assert runner.invoke(main, ["compile", str(shape), "-o", str(out)]).exit_code in (0, 1)
    for name in ("serve.sh", "example.env"):
        header = (out / "example" / name).read_text()
        rules = next(line for line in header.splitlines() if line.startswith("#   rules"))
        assert NEWER in rules, name


def test_the_newest_release_read_and_an_unstated_one_say_nothing_extra(
    runner: CliRunner, tmp_path: Path
) -> None:
    for version in ("0.33.0", "0.24.0"):
        plan = json.loads(
            runner.invoke(main, ["plan", str(_example(tmp_path, version)), "--json"]).output
        )
        assert "newer than" not in plan["derivations"]["engine_rules"], version
    result = runner.invoke(main, ["kv", LLAMA8, "--json"])
    assert json.loads(result.output)["rules"] == ["vllm v1-0.28 arithmetic (read in 0.33.0)"]


@pytest.mark.parametrize(
    ("engine", "version", "note"),
    [
        (
            "vllm",
            "0.33.1",
            "vllm 0.33.1 is newer than the newest release fakplan has read (0.33.0): rules of 0.33.0 used",
        ),
        (
            "sglang",
            "0.6.0",
            "sglang 0.6.0 is newer than the newest release fakplan has read (0.5.23): rules of 0.5.23 used",
        ),
    ],
)
def test_kv_json_rules_state_the_rules_used(
    runner: CliRunner, engine: str, version: str, note: str
) -> None:
    result = runner.invoke(
        main, ["kv", LLAMA8, "--engine", engine, "--engine-version", version, "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["engine_version"] == version
    assert note in data["rules"]


def test_an_older_release_is_refused_at_the_shapes_engine_version_line(tmp_path: Path) -> None:
    path = _example(tmp_path, "0.2.1")
    with pytest.raises(ShapeError) as info:
        load_shape(path)
    err = info.value
    lines = path.read_text().splitlines()
    assert err.line == lines.index("engine_version: 0.2.1") + 1
    assert err.field == "engine_version"
    # the four rule sets of fakplan/engines/vllm.py, each with the release it was read in
    for known in (
        "from 0.28 (read in 0.33.0)",
        "from 0.11 (read in 0.11.0)",
        "from 0.8 (read in 0.8.5.post1)",
        "from 0.3 (read in 0.6.6.post1)",
    ):
        assert known in err.detail
    assert "state 0.3 or later" in err.detail


def test_an_older_release_through_the_cli_is_one_line_exit_2(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = _example(tmp_path, "0.2.1")
    result = runner.invoke(main, ["plan", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"{path}:6: engine_version: vllm 0.2.1 is older than")


def test_a_version_that_is_no_number_is_refused_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ShapeError, match=r":6: engine_version: engine version 'latest': expected"):
        load_shape(_example(tmp_path, "latest"))


def test_kv_refuses_an_older_release_as_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["kv", LLAMA8, "--engine", "sglang", "--engine-version", "0.3.9"])
    assert result.exit_code == 2
    assert "Invalid value for '--engine-version': sglang 0.3.9 is older than" in result.output
    assert "from 0.5 (read in 0.5.23), from 0.4 (read in 0.4.6.post5)" in result.output
    assert "Traceback" not in result.output


def test_llamacpp_rules_name_the_commit_they_were_read_in(runner: CliRunner) -> None:
    """A stated build is not where the rules were read: b9500 takes the rules read at 0c1e57098."""
    result = runner.invoke(
        main,
        [
            "kv",
            "Qwen/Qwen2.5-Coder-32B-Instruct",
            "--engine",
            "llamacpp",
            "--engine-version",
            "b9500",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rules"] == ["llama.cpp b9191 arithmetic (read in b10573)"]
