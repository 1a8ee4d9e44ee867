"""fakplan diff: seed 004's change told the way its commit message tells it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.paths import SHAPES


def _moves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A gates row as it moved (the new side's summary, fix and numbers left out)."""
    return [{k: row[k] for k in ("field", "old", "new")} for row in rows]


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
    assert {"field": "pool-contract", "old": "pass", "new": "fail"} in _moves(shape["gates"])


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
    assert "new-one: added (shapes/new.yaml); gated in full\n" in result.output
    bad = runner.invoke(main, ["diff", "--rev", "no-such-rev", "shapes/frank-archon.yaml"])
    assert bad.exit_code == 2 and "git" in bad.stderr


def test_diff_needs_two_shapes(runner: CliRunner) -> None:
    assert runner.invoke(main, ["diff", "one.yaml"]).exit_code == 2


# --- added, deleted and renamed shapes under --rev (issue 13: nothing slips past review) ---

AFTER = (SHAPES / "frank-archon.yaml").read_text()  # seed 004's after-shape: every gate holds
BEFORE_FP8 = (SHAPES / "frank-archon-fp8.yaml").read_text()  # fails pool-contract and pair-ceiling


class Repo:
    """A scratch git repository, the working directory of the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git("init", "-q")
        self.git("config", "user.email", "t@example.invalid")
        self.git("config", "user.name", "t")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=self.root, check=True, capture_output=True, text=True
        )
        return proc.stdout

    def write(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def commit(self, message: str) -> None:
        self.git("add", "--all", "--", ".")
        self.git("commit", "-qm", message)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    monkeypatch.chdir(tmp_path)
    return Repo(tmp_path)


def _named(text: str, name: str) -> str:
    return text.replace("name: frank-archon\n", f"name: {name}\n", 1)


def _by_status(output: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in json.loads(output)["shapes"]}


def test_rev_added_shape_is_gated_in_full(repo: Repo, runner: CliRunner) -> None:
    repo.write("shapes/frank-archon.yaml", AFTER)
    repo.commit("one shape")
    repo.write("shapes/b.yaml", BEFORE_FP8)
    repo.commit("add the fp8 shape, which fails its pool contract")
    result = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    # was: "b.yaml: new since HEAD~1; nothing to compare" and exit 0
    assert result.exit_code == 1, result.output
    assert "nothing to compare" not in result.output
    text = result.stdout
    assert text.startswith("frank-archon-fp8: added (shapes/b.yaml); gated in full\n")
    # fp8 rate 7,488 B/token = 29,952 B per 4-token page; 200,000 tokens = 50,000 pages:
    # 3 x 50,000 x 29,952 B + 3 x 110 MiB + 448 MiB = 4,284.7 + 778 MiB = 5,063 MiB
    assert "  contract: 5,063 MiB\n" in text
    assert "  KV pool: 3,543 MiB\n" in text
    assert "  tokens backed: 387,192\n" in text  # seed 004's before figure
    assert "  pair: 29,614 MiB\n" in text  # 26,071 + 3,543 MiB
    lines = text.splitlines()
    failing = lines.index("  pool-contract: fail (3,543 MiB < 5,063 MiB)")
    # a failing gate brings its fix (the gate's own wording; it names what to change)
    assert lines[failing + 1].startswith("    fix: ") and "budget.kv" in lines[failing + 1]
    pair_line = next(line for line in text.splitlines() if line.startswith("  pair-ceiling:"))
    assert pair_line.startswith("  pair-ceiling: fail") and "29,614 MiB" in pair_line
    assert "  kv-tokens: the boot ledger reports 387,192 KV tokens (± 0.5 %)\n" in text
    assert "  sessions-at-window: backs 1 sequence at 200,000 tokens at once\n" in text
    # the unchanged shape is not reported
    assert "frank-archon:" not in text

    as_json = runner.invoke(main, ["diff", "--rev", "HEAD~1", "--json"])
    assert as_json.exit_code == 1
    (shape,) = json.loads(as_json.output)["shapes"]
    assert shape["status"] == "added"
    assert (shape["old_path"], shape["new_path"]) == (None, "shapes/b.yaml")
    assert {"field": "pool-contract", "old": None, "new": "fail"} in _moves(shape["gates"])
    assert {"field": "pair-ceiling", "old": None, "new": "fail"} in _moves(shape["gates"])
    assert {"field": "tokens_backed", "old": None, "new": 387_192} in shape["derived"]
    assert {"field": "serving.max_num_seqs", "old": None, "new": 3} in shape["declared"]


def test_rev_deleted_shape_lists_the_predictions_it_retires(repo: Repo, runner: CliRunner) -> None:
    repo.write("shapes/frank-archon.yaml", AFTER)
    repo.write("shapes/other.yaml", _named(AFTER, "other"))
    repo.commit("two shapes")
    repo.git("rm", "-q", "shapes/frank-archon.yaml")
    repo.commit("retire frank-archon")

    result = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    # was: no output at all, exit 0
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("frank-archon: deleted (shapes/frank-archon.yaml, at HEAD~1)\n")
    assert (
        "  no compiled record at out/frank-archon/plan.json: no verdicts to retire; "
        "the predictions it retires, from the shape at HEAD~1:\n"
    ) in text
    # the after-shape's figures: 462,900 tokens backed, 2 whole windows of 200,000
    assert "  kv-tokens: the boot ledger reports 462,900 KV tokens (± 0.5 %)\n" in text
    assert "  sessions-at-window: backs 2 sequences all at 200,000 tokens at once\n" in text
    assert "  decode-vs-fp8: decode -8..-3 % vs decode_fp8 (136 tokens/s)" in text
    (shape,) = json.loads(runner.invoke(main, ["diff", "--rev", "HEAD~1", "--json"]).output)[
        "shapes"
    ]
    assert shape["status"] == "deleted"
    assert (shape["old_path"], shape["new_path"]) == ("shapes/frank-archon.yaml", None)
    assert shape["record"] is None
    assert [p["id"] for p in shape["retires"]] == [
        "kv-tokens",
        "sessions-at-window",
        "boundary",
        "weights",
        "unclaimed",
        "decode-vs-fp8",
    ]
    assert {"field": "pool-contract", "old": "pass", "new": None} in _moves(shape["gates"])


def test_rev_deleted_shape_retires_the_verdicts_of_its_record(
    repo: Repo, runner: CliRunner
) -> None:
    repo.write("shapes/frank-archon.yaml", AFTER)
    repo.commit("one shape")
    assert runner.invoke(main, ["compile", "shapes/", "-o", "out"]).exit_code == 0
    record = repo.root / "out" / "frank-archon" / "plan.json"
    data = json.loads(record.read_text())
    # a verdict as fakplan verify would have recorded it after the boot
    verdict = {
        "status": "held",
        "observed": 462_900,
        "source": "boot.log:7: KV cache size: 462,900 tokens",
        "note": "",
        "at": "2025-06-01T00:00:00Z",
    }
    for prediction in data["predictions"]:
        if prediction["id"] == "kv-tokens":
            prediction["verdicts"] = [verdict]
    record.write_text(json.dumps(data))
    repo.git("rm", "-q", "shapes/frank-archon.yaml")
    repo.commit("retire frank-archon")

    result = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "  it retires these predictions and their verdicts (out/frank-archon/plan.json):\n" in (
        text
    )
    assert (
        "  kv-tokens: the boot ledger reports 462,900 KV tokens (± 0.5 %)\n"
        "    held: observed 462,900 (boot.log:7: KV cache size: 462,900 tokens) "
        "at 2025-06-01T00:00:00Z\n"
    ) in text
    assert (
        "  sessions-at-window: backs 2 sequences all at 200,000 tokens at once\n"
        "    no verdict recorded\n"
    ) in text
    (shape,) = json.loads(runner.invoke(main, ["diff", "--rev", "HEAD~1", "--json"]).output)[
        "shapes"
    ]
    assert shape["record"] == "out/frank-archon/plan.json"
    retired = {p["id"]: p["verdicts"] for p in shape["retires"]}
    assert retired["kv-tokens"] == [verdict]
    assert retired["sessions-at-window"] == []

    record.write_text("{ not json")
    damaged = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    assert damaged.exit_code == 0
    assert "out/frank-archon/plan.json: not a readable plan record" in damaged.stdout
    assert "  kv-tokens: the boot ledger reports 462,900 KV tokens (± 0.5 %)\n" in damaged.stdout


def test_rev_rename_is_diffed_as_a_change(repo: Repo, runner: CliRunner) -> None:
    repo.write("shapes/frank-archon.yaml", AFTER)
    repo.commit("one shape")
    repo.git("mv", "shapes/frank-archon.yaml", "shapes/frank.yaml")
    repo.write("shapes/frank.yaml", AFTER.replace("kv: 6912 MiB", "kv: 6400 MiB"))
    repo.commit("move and shrink the pool")

    result = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith(
        "frank-archon: renamed shapes/frank-archon.yaml -> shapes/frank.yaml; "
        "1 declared value moved\n"
    )
    assert "  budget.kv: 6,912 MiB -> 6,400 MiB\n" in text
    # 6,400 MiB - 2 x 110 - 448 = 5,732 MiB = 6,010,437,632 B // 56,576 = 106,236 pages x 4
    assert "  tokens backed: 462,900 -> 424,944" in text
    assert "deleted" not in text and "added" not in text
    (shape,) = json.loads(runner.invoke(main, ["diff", "--rev", "HEAD~1", "--json"]).output)[
        "shapes"
    ]
    assert shape["status"] == "renamed"
    assert (shape["old_path"], shape["new_path"]) == (
        "shapes/frank-archon.yaml",
        "shapes/frank.yaml",
    )

    # moved again in the working tree only (untracked copy, old file removed): same name
    (repo.root / "shapes" / "frank.yaml").rename(repo.root / "shapes" / "again.yaml")
    moved = runner.invoke(main, ["diff", "--rev", "HEAD", "--json"])
    (shape,) = json.loads(moved.output)["shapes"]
    assert (shape["status"], shape["old_path"], shape["new_path"]) == (
        "renamed",
        "shapes/frank.yaml",
        "shapes/again.yaml",
    )
    assert shape["declared"] == shape["derived"] == shape["gates"] == []
    # naming either path selects the rename
    for path in ("shapes/again.yaml", "shapes/frank.yaml"):
        one = runner.invoke(main, ["diff", "--rev", "HEAD", path])
        assert one.stdout == (
            "frank-archon: renamed shapes/frank.yaml -> shapes/again.yaml; no change in the "
            "shape or in anything derived from it\n"
        )


def test_rev_shapes_unreadable_at_the_old_revision_are_reported(
    repo: Repo, runner: CliRunner
) -> None:
    # at the old revision: a bare number where a byte size belongs, and a shape missing fields
    repo.write("shapes/x.yaml", AFTER.replace("kv: 6912 MiB", "kv: 6912"))
    repo.write("shapes/gone.yaml", "name: gone\nengine: vllm\n")
    repo.write("shapes/broken.yaml", "name: [unclosed\n")
    repo.commit("shapes that never loaded")
    repo.write("shapes/x.yaml", AFTER)
    repo.git("rm", "-q", "shapes/gone.yaml", "shapes/broken.yaml")
    repo.commit("fix x, drop the others")

    result = runner.invoke(main, ["diff", "--rev", "HEAD~1"])
    # was: a ShapeError for the old x.yaml, exit 2
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    text = result.stdout
    assert (
        "frank-archon: shapes/x.yaml at HEAD~1 cannot be read anymore "
        "(shapes/x.yaml:18: budget.kv: expected a byte size"
    ) in text
    assert "  pool-contract: pass (6,912 MiB ≥ 6,064 MiB)\n" in text  # the new side, in full
    assert "gone: deleted (shapes/gone.yaml, at HEAD~1)" in text
    assert "  shapes/gone.yaml at HEAD~1 cannot be read anymore (shapes/gone.yaml:" in text
    # malformed YAML is not taken for a shape when no SHAPE is named ...
    assert "broken.yaml" not in text
    assert "skipped shapes/broken.yaml" in result.stderr
    # ... and is reported when its folder is named
    named = runner.invoke(main, ["diff", "--rev", "HEAD~1", "shapes/", "--json"])
    assert named.exit_code == 0, named.output
    shapes = {s["old_path"]: s for s in json.loads(named.output)["shapes"]}
    assert set(shapes) == {"shapes/broken.yaml", "shapes/gone.yaml", "shapes/x.yaml"}
    assert shapes["shapes/broken.yaml"]["status"] == "deleted"
    assert "malformed YAML" in shapes["shapes/broken.yaml"]["old_error"]
    assert shapes["shapes/x.yaml"]["status"] == "changed"
    assert shapes["shapes/x.yaml"]["new_error"] is None
    assert {"field": "pool-contract", "old": None, "new": "pass"} in _moves(
        shapes["shapes/x.yaml"]["gates"]
    )


def test_rev_alone_covers_committed_uncommitted_and_untracked(
    repo: Repo, runner: CliRunner
) -> None:
    for name in ("a", "b", "c", "d"):
        repo.write(f"shapes/{name}.yaml", _named(AFTER, name))
    repo.write("notes.yaml", "- not a shape\n")
    repo.write("ci/workflow.yml", "name: ci\non: push\n")
    repo.commit("four shapes")
    repo.write("shapes/a.yaml", _named(AFTER, "a").replace("max_num_seqs: 2", "max_num_seqs: 1"))
    repo.commit("a: one slot")  # committed since HEAD~1
    repo.write("shapes/b.yaml", _named(AFTER, "b").replace("kv: 6912 MiB", "kv: 7000 MiB"))
    (repo.root / "shapes" / "c.yaml").unlink()  # deleted, not staged
    repo.write("shapes/e.yaml", BEFORE_FP8.replace("name: frank-archon-fp8", "name: e"))
    repo.write("notes.yaml", "- still not a shape\n")
    repo.write("ci/workflow.yml", "name: ci\non: pull_request\n")

    result = runner.invoke(main, ["diff", "--rev", "HEAD~1", "--json"])
    assert result.exit_code == 1, result.output  # e is the fp8 before-shape
    shapes = _by_status(result.stdout)
    assert {name: s["status"] for name, s in shapes.items()} == {
        "a": "changed",
        "b": "changed",
        "c": "deleted",
        "e": "added",
    }
    assert {"field": "serving.max_num_seqs", "old": 2, "new": 1} in shapes["a"]["declared"]
    assert "skipped notes.yaml" in result.stderr and "skipped ci/workflow.yml" in result.stderr


def test_rev_a_new_shape_that_cannot_be_read_is_bad_input(repo: Repo, runner: CliRunner) -> None:
    repo.write("shapes/a.yaml", AFTER)
    repo.write("shapes/b.yaml", _named(AFTER, "b"))
    repo.commit("two shapes")
    repo.write("shapes/a.yaml", AFTER.replace("kv: 6912 MiB", "kv: 6912"))
    repo.write("shapes/b.yaml", _named(AFTER, "b").replace("kv: 6912 MiB", "kv: 6400 MiB"))
    line = AFTER.splitlines().index("  kv: 6912 MiB") + 1
    result = runner.invoke(main, ["diff", "--rev", "HEAD"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        f'shapes/a.yaml:{line}: budget.kv: expected a byte size such as "5120 MiB", got 6912'
    ]
    assert "  budget.kv: 6,912 MiB -> 6,400 MiB\n" in result.stdout  # b is still reported

    missing = runner.invoke(main, ["diff", "--rev", "HEAD", "shapes/nope.yaml"])
    assert missing.exit_code == 2
    assert missing.stderr == "shapes/nope.yaml: no such file, now or at HEAD\n"


def test_two_files_are_a_change_with_both_paths(runner: CliRunner, in_root: Path) -> None:
    result = runner.invoke(
        main, ["diff", "shapes/frank-archon-fp8.yaml", "shapes/frank-archon.yaml", "--json"]
    )
    (shape,) = json.loads(result.output)["shapes"]
    assert shape["status"] == "changed"
    assert shape["old_path"] == "shapes/frank-archon-fp8.yaml"
    assert shape["new_path"] == "shapes/frank-archon.yaml"
