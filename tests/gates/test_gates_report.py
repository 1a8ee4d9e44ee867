"""The three written forms of a gate run, read back by real consumers.

TAP is parsed by tap.py and, where perl is installed, by TAP::Parser (the
parser behind ``prove``); JUnit XML is validated against ``data/junit.xsd``,
a transcription of the common JUnit schema; JSON against its documented keys.
The run is built by hand, so every expected value here is written out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml
from tap.line import Result
from tap.parser import Parser

from fakplan.gates import GateResult
from fakplan.gates.report import (
    BadInput,
    GateRun,
    ShapeGates,
    format_json,
    format_junit,
    format_tap,
)
from tests.support.paths import DATA, IN_CI

XSD = DATA / "junit.xsd"
MIB = 1024 * 1024


def _gate(id_: str, status: str, summary: str, **kw: Any) -> GateResult:
    return GateResult.model_validate(
        {
            "id": id_,
            "title": kw.pop("title", id_.replace("-", " ")),
            "status": status,
            "summary": summary,
            "detail": kw.pop("detail", f"{id_} detail"),
            "rationale": kw.pop("rationale", f"why {id_} matters"),
            **kw,
        }
    )


ALPHA = ShapeGates(
    name="alpha",
    path="shapes/alpha.yaml",
    gates=(
        _gate("pool-contract", "pass", "6,912 MiB ≥ 6,064 MiB", title="pool ≥ contract"),
        _gate(
            "pair-ceiling",
            "fail",
            "29,614 MiB > 29,120 MiB",
            title="pair ≤ ceiling",
            fix="take 494 MiB out of budget.weights or budget.kv",
            numbers={"pair_bytes": 29_614 * MIB, "ceiling_bytes": 29_120 * MIB, "over": 494 * MIB},
        ),
        _gate(
            "unclaimed",
            "warn",
            "1,024 MiB unclaimed > 512 MiB",
            title="unclaimed VRAM",
            fix="give the unclaimed bytes to budget.kv",
        ),
        _gate("ledger", "unknown", "pair 1 MiB, ceiling unknown", detail="unknown: no ledger yet"),
    ),
)
BETA = ShapeGates(
    name="beta",
    path="shapes/beta.yaml",
    gates=(
        _gate("slots", "pass", "slot #2 of 3 # SKIP not really"),
        _gate("bell", "pass", "rings\x07 twice\nover two lines"),
        _gate("mine", "fail", "raised ValueError: nope"),
    ),
    sources={"mine": "gates/mine.py"},
)
BAD = BadInput(
    path="shapes/bad.yaml",
    message='shapes/bad.yaml:12: budget.kv: expected a byte size such as "5120 MiB", got 5120',
    line=12,
    field="budget.kv",
)
RUN = GateRun((ALPHA, BAD, BETA))


def _tap_results(text: str) -> list[Result]:
    return [line for line in Parser().parse_text(text) if line.category == "test"]


# --- TAP ------------------------------------------------------------------------


def test_tap_plan_and_lines_parse_with_tap_py() -> None:
    lines = list(Parser().parse_text(format_tap(RUN)))
    assert lines[0].category == "version"
    assert lines[0].version == 13
    assert lines[1].category == "plan"
    assert lines[1].expected_tests == 8  # 4 + 1 bad input + 3
    results = [line for line in lines if line.category == "test"]
    assert [r.number for r in results] == list(range(1, 9))
    assert [r.ok for r in results] == [True, False, True, True, False, True, True, False]
    assert results[0].description == "- alpha: pool ≥ contract (6,912 MiB ≥ 6,064 MiB)"
    assert results[1].description == "- alpha: pair ≤ ceiling (29,614 MiB > 29,120 MiB)"
    assert not [line for line in lines if line.category == "unknown"]


def test_tap_warning_is_a_plain_pass_and_unknown_is_a_skip() -> None:
    results = _tap_results(format_tap(RUN))
    warn, unknown = results[2], results[3]
    assert warn.ok and not warn.skip and not warn.todo
    assert warn.directive.text == "warning: give the unclaimed bytes to budget.kv"
    assert unknown.ok and unknown.skip
    assert unknown.directive.reason == "unknown: no ledger yet"
    assert sum(r.skip for r in results) == 1


def test_tap_yaml_blocks_carry_numbers_detail_and_fix() -> None:
    pytest.importorskip("more_itertools", reason="tap.py reads YAML blocks with tap.py[yaml]")
    results = _tap_results(format_tap(RUN))
    failed = results[1].yaml_block
    assert failed == {
        "gate": "pair-ceiling",
        "shape": "shapes/alpha.yaml",
        "status": "fail",
        "summary": "29,614 MiB > 29,120 MiB",
        "detail": "pair-ceiling detail",
        "fix": "take 494 MiB out of budget.weights or budget.kv",
        "numbers": {
            "pair_bytes": 31_052_529_664,
            "ceiling_bytes": 30_534_533_120,
            "over": 517_996_544,
        },
        "rationale": "why pair-ceiling matters",
        "source": "builtin",
    }
    assert results[0].yaml_block is None  # a pass says nothing more
    assert results[2].yaml_block["status"] == "warn"
    assert results[3].yaml_block["status"] == "unknown"
    assert results[4].yaml_block == {
        "status": "bad-input",
        "file": "shapes/bad.yaml",
        "line": 12,
        "field": "budget.kv",
        "message": BAD.message,
    }
    assert results[7].yaml_block["source"] == "gates/mine.py"


def test_tap_bad_input_line_names_file_line_and_field() -> None:
    text = format_tap(RUN)
    assert f"not ok 5 - {BAD.message}\n" in text


def test_tap_descriptions_stay_on_one_line_with_hashes_escaped() -> None:
    text = format_tap(RUN)
    assert "ok 6 - beta: slots (slot \\#2 of 3 \\# SKIP not really)\n" in text
    assert "ok 7 - beta: bell (rings\x07 twice over two lines)\n" in text


_TAP_PARSER = """
use strict; use warnings; use TAP::Parser;
my $tap = do { local $/; <STDIN> };
my $p = TAP::Parser->new({ tap => $tap });
while (my $r = $p->next) {
  next unless $r->is_test;
  printf "%d\\t%s\\t%s\\t%s\\t%s\\n", $r->number, ($r->is_actual_ok ? "ok" : "not ok"),
    ($r->directive // ""), ($r->explanation // ""), ($r->description // "");
}
printf "plan\\t%s\\n", $p->tests_planned;
print "error\\t$_\\n" for $p->parse_errors;
"""


def perl_tap(text: str) -> list[list[str]]:
    """Each line TAP::Parser (prove's parser) reports, split on tabs."""
    perl = shutil.which("perl")
    if perl is None or subprocess.run([perl, "-MTAP::Parser", "-e1"], check=False).returncode:
        if IN_CI:
            pytest.fail("CI checks TAP with perl's TAP::Parser (Debian's perl), and it is missing")
        pytest.skip("perl with TAP::Parser is not installed")
    proc = subprocess.run(
        [perl, "-e", _TAP_PARSER], input=text.encode(), capture_output=True, check=True
    )
    return [line.split("\t") for line in proc.stdout.decode().splitlines()]


def test_tap_parses_with_perl_tap_parser() -> None:
    rows = perl_tap(format_tap(RUN))
    assert ["plan", "8"] in rows
    assert not [row for row in rows if row[0] == "error"]
    tests = [row for row in rows if row[0].isdigit()]
    assert [row[1] for row in tests] == ["ok", "not ok", "ok", "ok", "not ok", "ok", "ok", "not ok"]
    assert [row[2] for row in tests] == ["", "", "", "SKIP", "", "", "", ""]
    assert tests[3][3] == "unknown: no ledger yet"
    # an escaped "# SKIP" in a summary is text, not a directive
    assert tests[5][4] == "- beta: slots (slot \\#2 of 3 \\# SKIP not really)"


def test_prove_accepts_a_passing_run(tmp_path: Path) -> None:
    prove = shutil.which("prove")
    if prove is None:
        if IN_CI:
            pytest.fail("CI checks TAP with prove (Debian's perl), and it is missing")
        pytest.skip("prove is not installed")
    run = GateRun((ShapeGates("alpha", "shapes/alpha.yaml", (ALPHA.gates[0], *ALPHA.gates[2:])),))
    tap = tmp_path / "gates.tap"
    tap.write_text(format_tap(run), encoding="utf-8")
    proc = subprocess.run(
        [prove, "--exec", "cat", str(tap)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Result: PASS" in proc.stdout
    tap.write_text(format_tap(RUN), encoding="utf-8")
    proc = subprocess.run(
        [prove, "--exec", "cat", str(tap)], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert "Failed tests:  2, 5, 8" in proc.stdout
    assert "Parse errors" not in proc.stdout


# --- JUnit XML ------------------------------------------------------------------


def test_junit_validates_against_the_common_schema() -> None:
    schema = xmlschema.XMLSchema(str(XSD))
    schema.validate(format_junit(RUN))


def test_junit_schema_is_not_vacuous() -> None:
    schema = xmlschema.XMLSchema(str(XSD))
    assert not schema.is_valid('<testsuites><testsuite name="x"/></testsuites>')  # no tests=
    assert not schema.is_valid(
        '<testsuites><testsuite name="x" tests="one"><testcase name="a"/></testsuite></testsuites>'
    )
    assert not schema.is_valid(
        '<testsuites><testsuite name="x" tests="1"><bogus/></testsuite></testsuites>'
    )


def test_junit_suites_cases_and_counts() -> None:
    root = ET.fromstring(format_junit(RUN))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "2", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["alpha", "shapes/bad.yaml", "beta"]
    alpha = suites[0]
    assert [alpha.get(k) for k in ("tests", "failures", "errors", "skipped")] == [
        "4",
        "1",
        "0",
        "1",
    ]
    assert alpha.find("properties/property").attrib == {
        "name": "shape",
        "value": "shapes/alpha.yaml",
    }
    cases = {c.get("name"): c for c in alpha.findall("testcase")}
    assert list(cases) == ["pool-contract", "pair-ceiling", "unclaimed", "ledger"]
    assert all(c.get("classname") == "alpha" for c in cases.values())
    failure = cases["pair-ceiling"].find("failure")
    assert failure.get("message") == "alpha: pair ≤ ceiling (29,614 MiB > 29,120 MiB)"
    assert yaml.safe_load(failure.text)["numbers"]["over"] == 494 * MIB
    assert cases["ledger"].find("skipped").get("message") == "unknown: no ledger yet"
    assert cases["pool-contract"].find("failure") is None
    assert cases["unclaimed"].find("failure") is None
    assert cases["unclaimed"].find("system-out").text.startswith("warning: alpha: unclaimed VRAM")
    bad = suites[1]
    assert (bad.get("tests"), bad.get("errors")) == ("1", "1")
    error = bad.find("testcase/error")
    assert error.get("message") == BAD.message
    # a control character cannot travel in XML 1.0: it is replaced, the document parses
    bell = next(c for c in suites[2].findall("testcase") if c.get("name") == "bell")
    assert "\x07" not in bell.find("system-out").text


# --- JSON -----------------------------------------------------------------------


def test_json_object_is_the_documented_one() -> None:
    data = json.loads(format_json(RUN))
    assert list(data) == ["schema", "ok", "exit", "counts", "shapes", "errors"]
    assert data["schema"] == "fakplan.gates/1"
    assert data["ok"] is False
    assert data["exit"] == 2
    assert data["counts"] == {"pass": 3, "fail": 2, "warn": 1, "unknown": 1, "bad_input": 1}
    assert [(s["name"], s["path"], s["ok"]) for s in data["shapes"]] == [
        ("alpha", "shapes/alpha.yaml", False),
        ("beta", "shapes/beta.yaml", False),
    ]
    gates = data["shapes"][0]["gates"]
    for gate in gates:
        assert set(gate) == {
            "id",
            "ok",
            "status",
            "title",
            "summary",
            "detail",
            "fix",
            "fixes",
            "numbers",
            "rationale",
            "source",
        }
    assert [(g["id"], g["ok"], g["status"]) for g in gates] == [
        ("pool-contract", True, "pass"),
        ("pair-ceiling", False, "fail"),
        ("unclaimed", True, "warn"),
        ("ledger", None, "unknown"),
    ]
    assert gates[1]["numbers"] == {
        "pair_bytes": 31_052_529_664,
        "ceiling_bytes": 30_534_533_120,
        "over": 517_996_544,
    }
    assert gates[0]["fix"] is None
    assert data["shapes"][1]["gates"][2]["source"] == "gates/mine.py"
    assert data["errors"] == [
        {"path": "shapes/bad.yaml", "line": 12, "field": "budget.kv", "message": BAD.message}
    ]


@pytest.mark.parametrize(
    ("entries", "status"),
    [
        ((ShapeGates("a", "a.yaml", (ALPHA.gates[0], ALPHA.gates[2], ALPHA.gates[3])),), 0),
        ((ALPHA,), 1),
        ((ShapeGates("a", "a.yaml", (ALPHA.gates[0],)), BAD), 2),
        ((ALPHA, BAD), 2),
    ],
)
def test_exit_status(entries: tuple[ShapeGates | BadInput, ...], status: int) -> None:
    run = GateRun(entries)
    assert run.exit_status == status
    assert json.loads(format_json(run))["exit"] == status
