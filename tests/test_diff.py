"""fakplan diff: seed 004's change told the way its commit message tells it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main

from .conftest import SHAPES


def test_seed_004_change(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(
        main, ["diff", "shapes/frank-archon-fp8.yaml", "shapes/frank-archon.yaml"]
    )
    assert result.exit_code == 0  # the new shape passes every gate
    text = result.output
    # declared: seed 004 "Pool 3543 -> 6912 MiB ... 26071 -> 22208 MiB", "--max-num-seqs 3 -> 2"
    assert "  budget.kv: 3,543 MiB -> 6,912 MiB\n" in text
    assert "  budget.weights: 26,071 MiB -> 22,208 MiB\n" in text
    assert "  serving.max_num_seqs: 3 -> 2\n" in text
    assert "  serving.kv_cache_dtype: fp8 -> bf16\n" in text
    # derived: 7,488 -> 14,144 B/token is 1.89x, not 2x (seed 002 §2)
    assert "  rate (B/token/rank): 7,488 -> 14,144 (1.89x)\n" in text
    assert "kv_qsa_bkey does not scale with the KV dtype" in text
    assert "  tokens backed: 387,192 -> 462,900 (1.20x)\n" in text
    assert "  pair: 29,614 MiB -> 29,120 MiB\n" in text
    assert "  pool-contract: fail -> pass (6,912 MiB ≥ 6,064 MiB)\n" in text
    assert "decode-vs-fp8: decode -8..-3 % vs decode_fp8 (136 tokens/s)" in text


def test_diff_json_and_exit_1_when_the_new_shape_fails(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(
        main, ["diff", "shapes/frank-archon.yaml", "shapes/frank-archon-fp8.yaml", "--json"]
    )
    assert result.exit_code == 1
    (shape,) = json.loads(result.output)["shapes"]
    assert {"field": "tokens_backed", "old": 462_900, "new": 387_192} in shape["derived"]
    assert {"field": "pool-contract", "old": "pass", "new": "fail"} in shape["gates"]


def test_no_change(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(main, ["diff", "shapes/example.yaml", "shapes/example.yaml"])
    assert result.output == "example: no change in the shape or in anything derived from it\n"


def test_diff_against_a_git_revision(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    shape = tmp_path / "shapes" / "frank-archon.yaml"
    shape.parent.mkdir()
    before = (SHAPES / "frank-archon.yaml").read_text()
    shape.write_text(before)
    git("add", ".")
    git("commit", "-qm", "before")
    shape.write_text(
        before.replace("kv: 6912 MiB", "kv: 6400 MiB").replace(
            "weights: 22208 MiB", "weights: 22720 MiB"
        )
    )
    (tmp_path / "shapes" / "new.yaml").write_text(
        before.replace("name: frank-archon", "name: new-one")
    )
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["diff", "--rev", "HEAD"])
    assert "  budget.kv: 6,912 MiB -> 6,400 MiB\n" in result.output
    # 6,400 MiB - 2 x 110 - 448 = 5,732 MiB = 6,010,437,632 B // 56,576 = 106,236 pages x 4
    assert "  tokens backed: 462,900 -> 424,944" in result.output
    assert "new.yaml: new since HEAD" in result.stderr
    bad = runner.invoke(main, ["diff", "--rev", "no-such-rev", "shapes/frank-archon.yaml"])
    assert bad.exit_code == 2 and "git" in bad.stderr


def test_diff_needs_two_shapes(runner: CliRunner) -> None:
    assert runner.invoke(main, ["diff", "one.yaml"]).exit_code == 2
