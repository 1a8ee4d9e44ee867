"""``fakplan init``: a shapes repository that gates clean, and never a clobbered file."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fakplan.cli import main

from .conftest import BuiltWheel

WRITTEN = [  # in the order init reports them
    "shapes/example.yaml",
    "gates/headroom.py",
    "gates/test_shapes.py",
    "gates/conftest.py",
    ".github/workflows/fakplan.yml",
    "README.md",
]
SCAFFOLD = [
    ".github/workflows/fakplan.yml",
    "README.md",
    "gates/conftest.py",
    "gates/headroom.py",
    "gates/test_shapes.py",
    "shapes/example.yaml",
]


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def repo(tmp_path: Path, runner: CliRunner) -> Path:
    target = tmp_path / "endpoints"
    result = runner.invoke(main, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"wrote {target.as_posix()}/{f}" for f in WRITTEN]
    return target


def test_init_writes_the_scaffold(repo: Path) -> None:
    assert _files(repo) == SCAFFOLD


def test_example_shape_passes_every_gate(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    result = runner.invoke(main, ["gate", "shapes/", "--format", "json"])
    assert result.exit_code == 0, result.output
    (shape,) = json.loads(result.stdout)["shapes"]
    assert shape["name"] == "example"
    assert {g["status"] for g in shape["gates"]} == {"pass"}  # no warning, nothing unknown
    gates = {g["id"]: g for g in shape["gates"]}
    # 4 slots x 8,192 tokens x 131,072 B = 4 GiB; the pool is 6,656 MiB
    assert gates["pool-contract"]["numbers"]["contract_bytes"] == 4 * 8192 * 131_072
    # the example operator gate ran from gates/headroom.py: 4 GiB x 1.1 <= 6,656 MiB
    headroom = gates["contract-headroom"]
    assert headroom["source"] == "gates/headroom.py"
    assert headroom["numbers"] == {
        "pool_bytes": 6656 * 1024 * 1024,
        "needed_bytes": 4 * 8192 * 131_072 * 11 // 10,
    }


def test_scaffolded_pytest_suite_passes(repo: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "gates/", "-p", "no:cacheprovider", "-W", "error", "-v"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gates/test_shapes.py::example::contract-headroom PASSED" in proc.stdout
    assert "skipped" not in proc.stdout


def test_ci_workflow_gates_on_changes_to_shapes_and_gates(repo: Path) -> None:
    workflow = yaml.safe_load((repo / ".github/workflows/fakplan.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    for event in ("push", "pull_request"):
        assert {"shapes/**", "gates/**"} <= set(triggers[event]["paths"])
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert any(run.startswith("fakplan gate shapes/ --format junit") for run in runs)
    assert any(run.startswith("pytest gates/") for run in runs)
    assert any(f'"fakplan=={metadata.version("fakplan")}"' in run for run in runs)


def test_readme_stub(repo: Path) -> None:
    text = (repo / "README.md").read_text()
    assert text.startswith("# ")
    assert "fakplan gate shapes/" in text


def test_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, runner: CliRunner) -> None:
    target = tmp_path / "endpoints"
    target.mkdir()
    (target / "README.md").write_text("ours\n")
    result = runner.invoke(main, ["init", str(target)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"{target.as_posix()}/README.md: already exists; "
        "fakplan init writes nothing over existing files (--force overwrites)\n"
    )
    assert _files(target) == ["README.md"]
    assert (target / "README.md").read_text() == "ours\n"

    result = runner.invoke(main, ["init", str(target), "--force"])
    assert result.exit_code == 0, result.output
    assert _files(target) == SCAFFOLD
    assert (target / "README.md").read_text() != "ours\n"


def test_refusal_counts_every_existing_file(repo: Path, runner: CliRunner) -> None:
    result = runner.invoke(main, ["init", str(repo)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{repo.as_posix()}/shapes/example.yaml: already exists (and 5 more); "
        "fakplan init writes nothing over existing files (--force overwrites)"
    ]


def test_wheel_ships_init_templates_and_the_pytest_entry_point(built_wheel: BuiltWheel) -> None:
    names, entry_text = built_wheel.names, built_wheel.entry_points
    for target in WRITTEN:
        source = {
            ".github/workflows/fakplan.yml": "github/workflows/fakplan.yml.j2",
            "README.md": "README.md.j2",
        }.get(target, target)
        assert f"fakplan/templates/init/{source}" in names
    assert "[pytest11]\nfakplan = fakplan.gates.pytest_plugin" in entry_text
