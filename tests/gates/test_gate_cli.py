"""``fakplan gate``: the seed-004 story, bad input in a folder, operator gates.

The contract numbers are derived by hand from the shapes' own figures (seed
002's frank-archon contract), not read back from fakplan.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from click.testing import CliRunner, Result
from tap.parser import Parser

from fakplan.cli import main
from tests.gates.test_gates_report import XSD, perl_tap
from tests.support.paths import SHAPES

KIB, MIB = 1024, 1024 * 1024

# seed 002: 26 KiB of attention per 4-token page at fp8 (twice that at bf16)
# plus the 3.25 KiB block key at both dtypes; 110 MiB per slot; 448 MiB fixed.
FP8_PAGE = 26 * KIB + 3 * KIB + KIB // 4  # 29,952 B per page = 7,488 B/token
BF16_PAGE = 2 * 26 * KIB + 3 * KIB + KIB // 4  # 56,576 B per page = 14,144 B/token
FP8_CONTRACT = 3 * 200_000 * (FP8_PAGE // 4) + 3 * 110 * MIB + 448 * MIB
BF16_CONTRACT = 2 * 200_000 * (BF16_PAGE // 4) + 2 * 110 * MIB + 448 * MIB


def _gate(*args: str) -> Result:
    return CliRunner().invoke(main, ["gate", *args])


def _tests(text: str) -> list[tuple[bool, str, bool]]:
    return [
        (line.ok, line.description, line.skip)
        for line in Parser().parse_text(text)
        if line.category == "test"
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An operator repository: shapes/ with seed 004's before and after."""
    (tmp_path / "shapes").mkdir()
    for name in ("frank-archon.yaml", "frank-archon-fp8.yaml"):
        shutil.copy(SHAPES / name, tmp_path / "shapes" / name)
    return tmp_path


def test_hand_derived_contracts() -> None:
    assert FP8_CONTRACT == 5_308_592_128  # 5,062.67 MiB
    assert BF16_CONTRACT == 6_358_048_768  # 6,063.51 MiB


def test_before_shape_fails_pool_contract_with_its_numbers(in_root: Path) -> None:
    result = _gate("shapes/frank-archon-fp8.yaml")
    assert result.exit_code == 1
    assert (
        "not ok 1 - frank-archon-fp8: pool ≥ contract "
        f"(3,543 MiB < {round(FP8_CONTRACT / MIB):,} MiB)\n" in result.stdout
    )
    data = json.loads(_gate("shapes/frank-archon-fp8.yaml", "--format", "json").stdout)
    (shape,) = data["shapes"]
    pool = next(g for g in shape["gates"] if g["id"] == "pool-contract")
    assert pool["ok"] is False
    assert pool["summary"] == "3,543 MiB < 5,063 MiB"
    assert pool["numbers"]["pool_bytes"] == 3543 * MIB
    assert pool["numbers"]["contract_bytes"] == FP8_CONTRACT
    assert pool["numbers"]["short_bytes"] == FP8_CONTRACT - 3543 * MIB
    assert pool["numbers"]["tokens_needed"] == 3 * 200_000
    # floor((pool - slots x state - fixed) / page) pages of 4 tokens
    assert (
        pool["numbers"]["tokens_backed"] == (3543 * MIB - 3 * 110 * MIB - 448 * MIB) // FP8_PAGE * 4
    )
    # growing the pool to the contract must keep the pair under the 29,120 MiB ceiling:
    # 5,063 + 26,071 - 29,120 = 2,014 MiB comes out of the weights (issue 26: the fix once
    # said "grow budget.kv by at least 1,520 MiB", which the pair gate then failed)
    assert pool["fix"].startswith(
        "grow budget.kv to at least 5,063 MiB and take 2,014 MiB out of budget.weights "
        "(the pair must fit in the ceiling's 29,120 MiB)"
    )


def test_after_shape_passes_every_gate(in_root: Path) -> None:
    result = _gate("shapes/frank-archon.yaml")
    assert result.exit_code == 0, result.output
    tests = _tests(result.stdout)
    assert tests[0] == (
        True,
        f"- frank-archon: pool ≥ contract (6,912 MiB ≥ {round(BF16_CONTRACT / MIB):,} MiB)",
        False,
    )
    assert [ok for ok, _, _ in tests] == [True] * 4
    assert not any(skip for _, _, skip in tests)
    assert [d.split(": ")[1].split(" (")[0] for _, d, _ in tests] == [
        "pool ≥ contract",
        "pair ≤ ceiling",
        "speculative rows within bound",
        "unclaimed VRAM",
    ]
    data = json.loads(_gate("shapes/frank-archon.yaml", "--format", "json").stdout)
    assert data["ok"] is True
    assert data["exit"] == 0
    assert all(g["status"] == "pass" for g in data["shapes"][0]["gates"])


def test_folder_gates_every_shape(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    result = _gate("shapes/")
    assert result.exit_code == 1
    lines = list(Parser().parse_text(result.stdout))
    assert lines[1].expected_tests == 8
    tests = _tests(result.stdout)
    # the before-shape fails pool, pair and (over its ceiling, no VRAM left) unclaimed
    assert [ok for ok, _, _ in tests] == [False, False, True, False, True, True, True, True]
    assert tests[0][1].startswith("- frank-archon-fp8: pool ≥ contract")
    assert tests[1][1].startswith("- frank-archon-fp8: pair ≤ ceiling (29,614 MiB > 29,120 MiB)")
    assert tests[3][1].startswith("- frank-archon-fp8: unclaimed VRAM (-494 MiB unclaimed")
    rows = perl_tap(result.stdout)
    assert ["plan", "8"] in rows
    assert not [row for row in rows if row[0] == "error"]


def _write_bad(repo: Path) -> int:
    """shapes/bad.yaml: frank-archon with a bare number for budget.kv; its line number."""
    text = (SHAPES / "frank-archon.yaml").read_text().replace("kv: 6912 MiB", "kv: 6912")
    text = text.replace("name: frank-archon", "name: frank-archon-bad")
    (repo / "shapes" / "bad.yaml").write_text(text)
    return text.splitlines().index("  kv: 6912") + 1


@pytest.mark.parametrize("format_", ["tap", "junit", "json"])
def test_folder_with_a_bad_shape_reports_it_and_gates_the_others(
    repo: Path, monkeypatch: pytest.MonkeyPatch, format_: str
) -> None:
    line = _write_bad(repo)
    monkeypatch.chdir(repo)
    result = _gate("shapes", "--format", format_)
    assert result.exit_code == 2
    expected = (
        f'shapes/bad.yaml:{line}: budget.kv: expected a byte size such as "5120 MiB", got 6912'
    )
    assert result.stderr == expected + "\n"
    if format_ == "tap":
        tests = _tests(result.stdout)
        assert len(tests) == 9  # the bad file + 4 gates x 2 shapes
        assert tests[0] == (False, "- " + expected, False)  # bad.yaml sorts first
        assert [ok for ok, _, _ in tests[-4:]] == [True] * 4  # frank-archon still gated
    elif format_ == "junit":
        xmlschema.XMLSchema(str(XSD)).validate(result.stdout)
        root = ET.fromstring(result.stdout)
        assert root.get("errors") == "1"
        suites = root.findall("testsuite")
        assert [s.get("name") for s in suites] == [
            "shapes/bad.yaml",
            "frank-archon-fp8",
            "frank-archon",
        ]
        assert suites[0].find("testcase/error").get("message") == expected
    else:
        data = json.loads(result.stdout)
        assert data["exit"] == 2
        assert data["errors"] == [
            {"path": "shapes/bad.yaml", "line": line, "field": "budget.kv", "message": expected}
        ]
        assert [s["name"] for s in data["shapes"]] == ["frank-archon-fp8", "frank-archon"]


def test_missing_file_empty_folder_and_duplicate_name_are_bad_input(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "empty").mkdir()
    shutil.copy(repo / "shapes" / "frank-archon.yaml", repo / "again.yaml")
    monkeypatch.chdir(repo)
    result = _gate("nope.yaml", "empty", "shapes/frank-archon.yaml", "again.yaml")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "nope.yaml: no such file",
        "empty: no *.yaml shapes in this folder",
        "again.yaml: name: 'frank-archon' is also the name of shapes/frank-archon.yaml",
    ]
    assert [ok for ok, _, _ in _tests(result.stdout)] == [
        False,
        False,
        True,
        True,
        True,
        True,
        False,
    ]


def test_unknown_gate_is_a_skip_never_a_silent_pass(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (SHAPES / "frank-archon.yaml").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("ceiling:"))
    (repo / "shapes" / "frank-archon.yaml").write_text(text + "\n")
    monkeypatch.chdir(repo)
    result = _gate("shapes/frank-archon.yaml")
    assert result.exit_code == 0
    # the card (31.86 GiB = 32,625 MiB) holds the pair, so nothing decides: a skip
    assert (
        "ok 2 - frank-archon: pair ≤ ceiling (pair 29,120 MiB ≤ 32,625 MiB the card holds, "
        "ceiling unknown) # SKIP unknown: the shape states no ceiling" in result.stdout
    )
    tests = _tests(result.stdout)
    assert [skip for _, _, skip in tests] == [False, True, False, True]


# --- operator gates -------------------------------------------------------------

OPERATOR_GATES = """
from fakplan import Plan
from fakplan.gates.operator import Verdict, gate


@gate(id="two-windows", title="backs two full windows", rationale="failover needs two")
def two_windows(plan: Plan) -> Verdict:
    return Verdict(
        ok=plan.whole_sessions_at_window >= 2,
        summary=f"{plan.whole_sessions_at_window} full windows",
        fix="grow budget.kv",
        numbers={"windows": plan.whole_sessions_at_window},
    )


@gate(id="fp8-only", title="fp8 KV", rationale="house rule")
def fp8_only(plan: Plan) -> tuple[bool, str, str]:
    return plan.kv_cache_dtype == "fp8", plan.kv_cache_dtype, "set serving.kv_cache_dtype: fp8"


@gate(id="divides", title="divides", rationale="shows a raising gate")
def divides(plan: Plan) -> tuple[bool, str]:
    return True, str(plan.max_num_seqs // 0)
"""


def _operator_repo(repo: Path) -> Path:
    gates = repo / "gates"
    gates.mkdir()
    (gates / "house.py").write_text(OPERATOR_GATES)
    # never imported: pytest wiring and private helpers
    for name in ("conftest.py", "test_shapes.py", "_helpers.py", "shapes_test.py"):
        (gates / name).write_text("raise SystemExit('must not be imported')\n")
    return gates


def test_operator_gates_are_discovered_next_to_shapes(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _operator_repo(repo)
    monkeypatch.chdir(repo)
    result = _gate("shapes/frank-archon.yaml", "--format", "json")
    assert result.exit_code == 1  # fp8-only fails, divides raised
    gates = {g["id"]: g for g in json.loads(result.stdout)["shapes"][0]["gates"]}
    assert list(gates) == [
        "pool-contract",
        "pair-ceiling",
        "spec-rows",
        "unclaimed",
        "two-windows",
        "fp8-only",
        "divides",
    ]
    # 462,900 tokens backed // 200,000 = 2 full windows
    assert gates["two-windows"]["status"] == "pass"
    assert gates["two-windows"]["numbers"] == {"windows": 2}
    assert gates["two-windows"]["fix"] is None
    assert gates["two-windows"]["source"] == "gates/house.py"
    assert gates["pool-contract"]["source"] == "builtin"
    assert (gates["fp8-only"]["status"], gates["fp8-only"]["summary"]) == ("fail", "bf16")
    assert gates["fp8-only"]["fix"] == "set serving.kv_cache_dtype: fp8"
    raised = gates["divides"]
    assert raised["status"] == "fail"
    assert raised["summary"] == "raised ZeroDivisionError: integer division or modulo by zero"
    line = OPERATOR_GATES.splitlines().index("    return True, str(plan.max_num_seqs // 0)") + 1
    assert raised["detail"] == f"divides() raised at gates/house.py:{line}"


def test_operator_gate_that_raises_is_a_failing_tap_line(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _operator_repo(repo)
    monkeypatch.chdir(repo)
    result = _gate("shapes/frank-archon.yaml")
    assert result.exit_code == 1
    assert (
        "not ok 7 - frank-archon: divides (raised ZeroDivisionError: "
        "integer division or modulo by zero)\n" in result.stdout
    )


def test_gates_option_replaces_discovery(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _operator_repo(repo)
    elsewhere = repo / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "one.py").write_text(
        "from fakplan.gates.operator import gate\n"
        "@gate(id='always', title='always', rationale='r')\n"
        "def always(plan):\n"
        "    return True, 'holds'\n"
    )
    monkeypatch.chdir(repo)
    result = _gate("shapes/frank-archon.yaml", "--gates", "elsewhere", "--format", "json")
    assert result.exit_code == 0, result.output
    ids = [g["id"] for g in json.loads(result.stdout)["shapes"][0]["gates"]]
    assert ids == ["pool-contract", "pair-ceiling", "spec-rows", "unclaimed", "always"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "x = 1\nimport no_such_module_here\n",
            "gates/broken.py:2: cannot import operator gates: ModuleNotFoundError: "
            "No module named 'no_such_module_here'",
        ),
        (
            "def f(:\n",
            "gates/broken.py:1: cannot import operator gates: SyntaxError: invalid syntax",
        ),
        (
            "from fakplan.gates.operator import gate\n\n@gate(id='Bad Id', title='t', rationale='r')\n"
            "def f(plan):\n    return True, 'x'\n",
            "gates/broken.py:3: cannot import operator gates: ValueError: gate id 'Bad Id': "
            "lower-case letters, digits, '.', '_' and '-', 63 at most",
        ),
        (
            "from fakplan.gates.operator import gate\n\n@gate(id='pool-contract', title='t', "
            "rationale='r')\ndef f(plan):\n    return True, 'x'\n",
            # a gate's line is its decorator's
            "gates/broken.py:3: gate id 'pool-contract' is a built-in gate's id; choose another",
        ),
    ],
)
def test_gates_file_that_cannot_be_used_is_bad_input(
    repo: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    (repo / "gates").mkdir()
    (repo / "gates" / "broken.py").write_text(source)
    monkeypatch.chdir(repo)
    result = _gate("shapes/")
    assert result.exit_code == 2
    assert result.stderr == message + "\n"
    assert result.stdout == ""


def test_duplicate_operator_gate_id_is_bad_input(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = repo / "gates"
    gates.mkdir()
    body = "from fakplan.gates.operator import gate\n@gate(id='same', title='t', rationale='r')\ndef f(plan):\n    return True, 'x'\n"
    (gates / "a.py").write_text(body)
    (gates / "b.py").write_text(body)
    monkeypatch.chdir(repo)
    result = _gate("shapes/")
    assert result.exit_code == 2
    assert result.stderr == "gates/b.py:2: gate id 'same' is also defined at gates/a.py:2\n"
