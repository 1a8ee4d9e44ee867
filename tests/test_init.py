"""``fakplan init``: a shapes repository that gates clean, and never a clobbered file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import fakplan.init
from fakplan.cli import main
from fakplan.errors import FakplanError
from fakplan.init import requirement_from
from tests.support.paths import ROOT
from tests.support.wheel import BuiltWheel

# what the scaffold's CI installs in the tests that do not install it
SPEC = "fakplan @ git+https://github.com/OWNER/fakplan@0123456789abcdef0123456789abcdef01234567"

WRITTEN = [  # in the order init reports them
    "shapes/example.yaml",
    "gates/headroom.py",
    "gates/test_shapes.py",
    "gates/conftest.py",
    ".github/workflows/fakplan.yml",
    "README.md",
    ".gitignore",
]
SCAFFOLD = [
    ".github/workflows/fakplan.yml",
    ".gitignore",
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
    result = runner.invoke(main, ["init", str(target), "--install", SPEC])
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
    # issue 26: the example is the engine operators run, with a catalog model
    example = yaml.safe_load((repo / "shapes" / "example.yaml").read_text())
    assert (example["engine"], example["model"]) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    # 4 slots x 8,192 tokens x 131,072 B (32 layers x 8 KV heads x 256 x 2 B) = 4 GiB;
    # the pool is 5 GiB
    assert gates["pool-contract"]["numbers"]["contract_bytes"] == 4 * 8192 * 131_072
    # the example operator gate ran from gates/headroom.py: 4 GiB x 1.1 <= 5 GiB
    headroom = gates["contract-headroom"]
    assert headroom["source"] == "gates/headroom.py"
    assert headroom["numbers"] == {
        "pool_bytes": 5 * 1024**3,
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


def _steps(repo: Path) -> list[dict[str, Any]]:
    workflow = yaml.safe_load((repo / ".github/workflows/fakplan.yml").read_text())
    (job,) = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _step(repo: Path, name: str) -> dict[str, Any]:
    (step,) = [s for s in _steps(repo) if s.get("name", "").startswith(name)]
    return step


def test_ci_workflow_gates_on_changes_to_shapes_and_gates(repo: Path) -> None:
    workflow = yaml.safe_load((repo / ".github/workflows/fakplan.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    for event in ("push", "pull_request"):
        assert {"shapes/**", "gates/**"} <= set(triggers[event]["paths"])
    runs = [step.get("run", "") for step in _steps(repo)]
    assert "fakplan gate shapes/" in runs
    assert any(run.startswith("fakplan gate shapes/ --format junit") for run in runs)
    assert any(run.startswith("pytest gates/") for run in runs)
    # the requirement travels as data: an env value the shell expands inside quotes
    install = _step(repo, "install fakplan")
    assert install["env"] == {"FAKPLAN_REQUIREMENT": SPEC}
    assert install["run"] == 'pip install "$FAKPLAN_REQUIREMENT" pytest'
    # pull requests: the whole history, then the change told against the base branch
    checkout = _steps(repo)[0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["fetch-depth"] == 0
    told = _step(repo, "what this pull request does to shapes/")
    assert 'fakplan diff --rev "origin/$GITHUB_BASE_REF" shapes/' in told["run"]
    assert '>> "$GITHUB_STEP_SUMMARY"' in told["run"]  # the review lands on the run's page
    assert told["if"].startswith("github.event_name == 'pull_request'")
    # issue 26: the pytest gates ran only when the gate step passed; they run after a failure
    suite = _step(repo, "the gate suite under pytest")
    assert "!cancelled()" in suite["if"] and "always" not in suite["if"]


def test_readme_stub(repo: Path) -> None:
    text = (repo / "README.md").read_text()
    assert text.startswith("# ")
    assert "fakplan gate shapes/" in text
    assert f"pip install '{SPEC}' pytest" in text  # the same requirement CI installs


def test_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, runner: CliRunner) -> None:
    target = tmp_path / "endpoints"
    target.mkdir()
    (target / "README.md").write_text("ours\n")
    result = runner.invoke(main, ["init", str(target), "--install", SPEC])
    assert result.exit_code == 2
    assert result.stderr == (
        f"{target.as_posix()}/README.md: already exists; "
        "fakplan init writes nothing over existing files (--force overwrites)\n"
    )
    assert _files(target) == ["README.md"]
    assert (target / "README.md").read_text() == "ours\n"

    result = runner.invoke(main, ["init", str(target), "--force", "--install", SPEC])
    assert result.exit_code == 0, result.output
    assert _files(target) == SCAFFOLD
    assert (target / "README.md").read_text() != "ours\n"


def test_refusal_counts_every_existing_file(repo: Path, runner: CliRunner) -> None:
    result = runner.invoke(main, ["init", str(repo), "--install", SPEC])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{repo.as_posix()}/shapes/example.yaml: already exists (and 6 more); "
        "fakplan init writes nothing over existing files (--force overwrites)"
    ]


def test_wheel_ships_init_templates_and_the_pytest_entry_point(built_wheel: BuiltWheel) -> None:
    names, entry_text = built_wheel.names, built_wheel.entry_points
    for target in WRITTEN:
        source = {
            ".github/workflows/fakplan.yml": "github/workflows/fakplan.yml.j2",
            "README.md": "README.md.j2",
            ".gitignore": "gitignore",
        }.get(target, target)
        assert f"fakplan/templates/init/{source}" in names
    assert "[pytest11]\nfakplan = fakplan.gates.pytest_plugin" in entry_text


# --- how the scaffolded workflow installs fakplan (issue 13: it must work as generated) ---


class _Installed(metadata.Distribution):
    """A fakplan distribution whose PEP 610 record (direct_url.json) the test states."""

    def __init__(self, direct_url: dict[str, Any] | None, version: str = "0.1.0") -> None:
        self._files = {"METADATA": f"Metadata-Version: 2.1\nName: fakplan\nVersion: {version}\n"}
        if direct_url is not None:
            self._files["direct_url.json"] = json.dumps(direct_url)

    def read_text(self, filename: str) -> str | None:
        return self._files.get(filename)

    def locate_file(self, path: Any) -> Any:
        raise NotImplementedError


# PEP 610's own examples of direct_url.json, and the pip requirement each one reinstalls
PEP_610_GIT = {
    "url": "https://github.com/pypa/pip.git",
    "vcs_info": {
        "vcs": "git",
        "requested_revision": "1.3.1",
        "commit_id": "7921be1537eac1e97bc40179a57f0349c2aee67d",
    },
}
PEP_610_ARCHIVE = {
    "url": "https://github.com/pypa/pip/archive/1.3.1.zip",
    "archive_info": {
        "hashes": {"sha256": "2dc6b5a470a1bde68946f263f1af1515a2574a150a30d6ce02c6ff742fcc0db8"}
    },
}


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, "fakplan==0.1.0"),  # no record: installed from an index
        (
            PEP_610_GIT,
            "fakplan @ git+https://github.com/pypa/pip.git@7921be1537eac1e97bc40179a57f0349c2aee67d",
        ),
        (
            {**PEP_610_GIT, "subdirectory": "python"},
            "fakplan @ git+https://github.com/pypa/pip.git@7921be1537eac1e97bc40179a57f0349c2aee67d"
            "#subdirectory=python",
        ),
        (
            PEP_610_ARCHIVE,
            "fakplan @ https://github.com/pypa/pip/archive/1.3.1.zip"
            "#sha256=2dc6b5a470a1bde68946f263f1af1515a2574a150a30d6ce02c6ff742fcc0db8",
        ),
    ],
)
def test_requirement_reinstalls_this_fakplan(
    direct_url: dict[str, Any] | None, expected: str
) -> None:
    assert requirement_from(_Installed(direct_url)).spec == expected


@pytest.mark.parametrize(
    ("direct_url", "where"),
    [
        ({"url": "file:///home/user/project", "dir_info": {}}, "a folder on this machine"),
        ({"url": "file:///home/user/project", "dir_info": {"editable": True}}, "a folder"),
        ({**PEP_610_GIT, "url": "file:///home/user/project"}, "a git checkout on this machine"),
        ({**PEP_610_ARCHIVE, "url": "file:///tmp/fakplan-0.1.0-py3-none-any.whl"}, "an archive"),
    ],
)
def test_a_local_install_is_refused(direct_url: dict[str, Any], where: str) -> None:
    with pytest.raises(FakplanError) as caught:
        requirement_from(_Installed(direct_url))
    message = str(caught.value)
    assert where in message and "pass --install 'fakplan @ git+https://" in message
    assert "\n" not in message


def test_init_without_install_derives_or_refuses(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fakplan.init, "installed", lambda: _Installed(PEP_610_GIT))
    derived = runner.invoke(main, ["init", str(tmp_path / "a")])
    assert derived.exit_code == 0, derived.output
    install = _step(tmp_path / "a", "install fakplan")
    assert install["env"]["FAKPLAN_REQUIREMENT"] == (
        "fakplan @ git+https://github.com/pypa/pip.git@7921be1537eac1e97bc40179a57f0349c2aee67d"
    )

    local = {"url": "file:///home/user/project", "dir_info": {"editable": True}}
    monkeypatch.setattr(fakplan.init, "installed", lambda: _Installed(local))
    refused = runner.invoke(main, ["init", str(tmp_path / "b")])
    assert refused.exit_code == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith(
        "fakplan init: this fakplan was installed from a folder on this machine "
        "(file:///home/user/project), which a CI runner cannot reach"
    )
    assert "pass --install" in line
    assert not (tmp_path / "b").exists()


def _stub_pip(folder: Path) -> Path:
    """A `pip` that records its argv as JSON in $ARGV_LOG, and does nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "pip"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "with open(os.environ['ARGV_LOG'], 'w') as f:\n"
        "    json.dump(sys.argv[1:], f)\n"
    )
    stub.chmod(0o755)
    return folder


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A workflow step's `run:` as GitHub's ubuntu runners run it."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )


HOSTILE = [
    'fakplan" pytest; touch pwned; echo "',
    "fakplan'; touch pwned; echo '",
    "$(touch pwned)",
    "`touch pwned`",
    "fakplan; touch pwned # \\",
    '", "evil": "key',
    "{evil: key} &anchor *alias !!python/object/apply:os.system ['touch pwned']",
    "fakplan # evil: key",
    "$FAKPLAN_REQUIREMENT ${PATH} $((1+1))",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_install_spec_stays_inert(
    hostile: str, repo: Path, tmp_path: Path, runner: CliRunner
) -> None:
    target = tmp_path / "hostile"
    result = runner.invoke(main, ["init", str(target), "--install", hostile])
    assert result.exit_code == 0, result.output
    # no key injected: the workflow is the plain scaffold's but for the one value
    steps = _steps(target)
    (install,) = [s for s in steps if s.get("name") == "install fakplan"]
    assert install["env"] == {"FAKPLAN_REQUIREMENT": hostile}
    install["env"]["FAKPLAN_REQUIREMENT"] = SPEC
    assert steps == _steps(repo)
    # no shell injection: pip gets the string as one word, and nothing else ran
    stubs = _stub_pip(tmp_path / "stub")
    log = tmp_path / "argv.json"
    env = {"PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "ARGV_LOG": str(log)}
    ran = _bash(install["run"], target, {**env, **_step(target, "install fakplan")["env"]})
    assert ran.returncode == 0, ran.stderr
    assert json.loads(log.read_text()) == ["install", hostile, "pytest"]
    # the README's copy of the command, shell-quoted
    readme = (target / "README.md").read_text()
    (line,) = [x for x in readme.splitlines() if x.startswith("pip install ")]
    log.unlink()
    assert _bash(line, target, env).returncode == 0
    assert json.loads(log.read_text()) == ["install", hostile, "pytest"]
    assert not (target / "pwned").exists()


@pytest.mark.parametrize(
    "refused",
    [
        "fakplan\nevil: key",
        "fakplan\u2028evil: key",
        "fakplan\rx",
        "${{ secrets.GITHUB_TOKEN }}",
        "--index-url=https://evil.invalid/simple",
        "  ",
    ],
)
def test_an_install_spec_that_cannot_stay_one_inert_word_is_refused(
    refused: str, tmp_path: Path, runner: CliRunner
) -> None:
    result = runner.invoke(main, ["init", str(tmp_path / "x"), "--install", refused])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("--install")
    assert not (tmp_path / "x").exists()


def _deps_only(site: Path, folder: Path) -> Path:
    """This environment's packages minus fakplan itself and pip: what the scratch
    environment may borrow, so the fakplan it runs is only the one the step installs."""
    folder.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("fakplan", "_editable_impl_fakplan", "__editable__", "pip")):
            continue
        if name.endswith(".pth") or name == "__pycache__":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def test_generated_workflow_installs_and_gates_in_a_scratch_environment(
    tmp_path: Path, runner: CliRunner
) -> None:
    """The workflow's install, gate and diff steps, run as generated in a fresh venv
    with fakplan pip-installed from a git repository of this project at a commit."""
    # the project as a git repository, the way a runner would fetch it
    source = tmp_path / "fakplan-src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("fakplan", "templates"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    git = [
        "git",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "user.name=t",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run([*git, "init", "-q"], cwd=source, check=True)
    subprocess.run([*git, "add", "--", "."], cwd=source, check=True)
    subprocess.run([*git, "commit", "-qm", "fakplan"], cwd=source, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=source, check=True, capture_output=True, text=True
    ).stdout.strip()
    # a netloc, as a runner's https URL has one (pip 23's PEP 508 parser wants it)
    spec = f"fakplan @ git+file://localhost{source.as_posix()}@{commit}"

    scaffold = tmp_path / "endpoints"
    assert runner.invoke(main, ["init", str(scaffold), "--install", spec]).exit_code == 0

    # a fresh venv that borrows the dependencies (offline), not fakplan
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    scratch_site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    borrowed = _deps_only(Path(sysconfig.get_paths()["purelib"]), tmp_path / "deps")
    (scratch_site / "borrowed-deps.pth").write_text(f"{borrowed}\n")
    # the step's own `pip`, kept offline: no index, no isolated build env, no resolution
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pip").write_text(
        f'#!/bin/sh\nexec "{venv}/bin/python" -m pip "$@" --no-index --no-deps '
        "--no-build-isolation --disable-pip-version-check -q\n"
    )
    (shim / "pip").chmod(0o755)
    env = {"PATH": os.pathsep.join([str(shim), str(venv / "bin"), os.environ["PATH"]])}

    install = _step(scaffold, "install fakplan")
    ran = _bash(install["run"], scaffold, {**env, **install["env"]})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert shutil.which("fakplan", path=env["PATH"]) == str(venv / "bin" / "fakplan")
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import fakplan, importlib.metadata as m, json; "
            "print(json.dumps([fakplan.__file__, m.distribution('fakplan').read_text('direct_url.json')]))",
        ],
        cwd=scaffold,  # not this tree, whose fakplan/ would shadow the installed one
        check=True,
        capture_output=True,
        text=True,
    )
    module, direct_url = json.loads(probe.stdout)
    assert Path(module).is_relative_to(scratch_site)  # the installed copy, not this tree
    record = json.loads(direct_url)
    assert record["vcs_info"]["commit_id"] == commit
    # what pip recorded is a clone on this machine: init run from there would refuse
    (dist_info,) = scratch_site.glob("fakplan-*.dist-info")
    with pytest.raises(FakplanError, match="a git checkout on this machine"):
        requirement_from(metadata.PathDistribution(dist_info))

    gated = _bash(_step(scaffold, "gate every shape")["run"], scaffold, env)
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "ok 1 - example: pool ≥ contract" in gated.stdout

    # a pull request adding a shape: the diff step tells it against origin/main
    subprocess.run([*git, "init", "-q"], cwd=scaffold, check=True)
    subprocess.run([*git, "add", "--", "."], cwd=scaffold, check=True)
    subprocess.run([*git, "commit", "-qm", "scaffold"], cwd=scaffold, check=True)
    subprocess.run(
        ["git", "update-ref", "refs/remotes/origin/main", "HEAD"], cwd=scaffold, check=True
    )
    example = (scaffold / "shapes" / "example.yaml").read_text()
    (scaffold / "shapes" / "second.yaml").write_text(
        example.replace("name: example", "name: second", 1)
    )
    summary = tmp_path / "step-summary.md"
    told = _bash(
        _step(scaffold, "what this pull request does")["run"],
        scaffold,
        {**env, "GITHUB_BASE_REF": "main", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert told.returncode == 0, told.stdout + told.stderr
    assert told.stdout.startswith("second: added (shapes/second.yaml); gated in full\n")
    page = summary.read_text()
    assert page.startswith("## fakplan diff\n\n```\nsecond: added (shapes/second.yaml)")
    assert page.endswith("```\n")

    # a change an operator gate refuses: the diff step fails and names the gate (issue 26:
    # it exited 0 and named none while fakplan gate failed)
    subprocess.run([*git, "add", "--", "."], cwd=scaffold, check=True)
    subprocess.run([*git, "commit", "-qm", "second"], cwd=scaffold, check=True)
    subprocess.run(
        ["git", "update-ref", "refs/remotes/origin/main", "HEAD"], cwd=scaffold, check=True
    )
    (scaffold / "shapes" / "second.yaml").write_text(
        (scaffold / "shapes" / "second.yaml")
        .read_text()
        .replace("max_model_len: 8192", "max_model_len: 10240")
    )
    refused = _bash(
        _step(scaffold, "what this pull request does")["run"],
        scaffold,
        {**env, "GITHUB_BASE_REF": "main", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "  contract-headroom: pass -> fail" in refused.stdout
    assert "    fix: grow budget.kv to at least 5,632 MiB" in refused.stdout
