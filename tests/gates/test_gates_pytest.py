"""The pytest plugin, driven through pytester: items per gate per shape, readable failures.

The subprocess runs load the plugin the way an installed fakplan does, through
its ``pytest11`` entry point; nothing here passes ``-p``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT, SHAPES

pytest_plugins = ["pytester"]

SUITE = """
from fakplan.gates.pytest_plugin import ShapeSuite

test_shapes = ShapeSuite("../shapes", xfail={xfail!r})
"""


def _shapes(pytester: pytest.Pytester, *names: str) -> Path:
    folder = pytester.path / "shapes"
    folder.mkdir(exist_ok=True)
    for name in names or ("frank-archon-fp8.yaml", "frank-archon.yaml"):
        shutil.copy(SHAPES / name, folder / name)
    return folder


def _suite(pytester: pytest.Pytester, xfail: dict[str, str]) -> None:
    (pytester.path / "gates").mkdir(exist_ok=True)
    (pytester.path / "gates" / "test_suite.py").write_text(SUITE.format(xfail=xfail))


def test_option_collects_one_item_per_gate_per_shape(pytester: pytest.Pytester) -> None:
    _shapes(pytester)
    result = pytester.runpytest_subprocess("--fakplan-shapes", "shapes", "-W", "error", "-v")
    result.assert_outcomes(passed=5, failed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines([r"plugins:.*fakplan-"])  # loaded by its entry point
    result.stdout.fnmatch_lines(
        [
            "shapes/frank-archon-fp8.yaml::pool-contract FAILED*",
            "shapes/frank-archon-fp8.yaml::pair-ceiling FAILED*",
            "shapes/frank-archon-fp8.yaml::spec-rows PASSED*",
            "shapes/frank-archon-fp8.yaml::unclaimed FAILED*",
            "shapes/frank-archon.yaml::spec-rows PASSED*",
        ]
    )


def test_failure_reads_as_the_gate_not_a_traceback(pytester: pytest.Pytester) -> None:
    _shapes(pytester, "frank-archon-fp8.yaml")
    result = pytester.runpytest_subprocess("--fakplan-shapes", "shapes", "-k", "pool")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ frank-archon-fp8::pool-contract _*",
            "frank-archon-fp8: pool ≥ contract (3,543 MiB < 5,063 MiB)",
            "  fix: grow budget.kv to at least 5,063 MiB and take 2,014 MiB out of budget.weights*",
            "  numbers:",
            f"    pool_bytes: {3543 * 1024 * 1024}",
            "  rationale: a pool below the contract boots*",
        ]
    )
    text = result.stdout.str()
    for noise in ("Traceback", "pytest_plugin.py", "raise GateFailed", "def runtest"):
        assert noise not in text


def test_collect_only_node_ids(pytester: pytest.Pytester) -> None:
    _shapes(pytester, "frank-archon.yaml")
    result = pytester.runpytest("--fakplan-shapes", "shapes", "--collect-only", "-q")
    assert result.outlines[:4] == [
        "shapes/frank-archon.yaml::pool-contract",
        "shapes/frank-archon.yaml::pair-ceiling",
        "shapes/frank-archon.yaml::spec-rows",
        "shapes/frank-archon.yaml::unclaimed",
    ]


def test_suite_marks_the_before_shape_as_expected_to_fail(pytester: pytest.Pytester) -> None:
    _shapes(pytester)
    _suite(
        pytester,
        {
            "frank-archon-fp8::pool-contract": "seed 004 before-shape",
            "frank-archon-fp8::pair-ceiling": "seed 004 before-shape",
            "frank-archon-fp8::unclaimed": "seed 004 before-shape",
        },
    )
    result = pytester.runpytest("gates", "-v", "-W", "error", "-rx")
    result.assert_outcomes(passed=5, xfailed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "gates/test_suite.py::frank-archon-fp8::pool-contract XFAIL*",
            "gates/test_suite.py::frank-archon::pool-contract PASSED*",
            "XFAIL gates/test_suite.py::frank-archon-fp8::pool-contract - seed 004 before-shape",
        ]
    )


def test_expected_failure_that_holds_fails_the_suite(pytester: pytest.Pytester) -> None:
    _shapes(pytester, "frank-archon.yaml")
    _suite(pytester, {"frank-archon::pool-contract": "was short once"})
    result = pytester.runpytest("gates")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*was short once*"])


def test_bad_shape_fails_one_load_item_and_the_others_run(pytester: pytest.Pytester) -> None:
    folder = _shapes(pytester, "frank-archon.yaml")
    text = (SHAPES / "frank-archon.yaml").read_text().replace("max_num_seqs: 2", "max_num_seqs: 0")
    (folder / "bad.yaml").write_text(text.replace("name: frank-archon", "name: bad"))
    line = text.splitlines().index("  max_num_seqs: 0") + 1
    result = pytester.runpytest("--fakplan-shapes", "shapes", "-rf")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [f"FAILED shapes/bad.yaml::load - shapes/bad.yaml:{line}: serving.max_num_seqs: *"]
    )
    assert "Traceback" not in result.stdout.str()


def test_unknown_gate_is_skipped_with_its_reason(pytester: pytest.Pytester) -> None:
    folder = _shapes(pytester, "frank-archon.yaml")
    text = (folder / "frank-archon.yaml").read_text()
    (folder / "frank-archon.yaml").write_text(
        "\n".join(x for x in text.splitlines() if not x.startswith("ceiling:")) + "\n"
    )
    result = pytester.runpytest("--fakplan-shapes", "shapes", "-rs")
    # no ceiling: pair-ceiling and unclaimed cannot be judged (the card holds the pair)
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED * unknown: the shape states no ceiling*"])


def test_warning_passes_and_is_listed(pytester: pytest.Pytester) -> None:
    folder = _shapes(pytester, "frank-archon.yaml")
    # 1,024 MiB off the weights: 1,024 MiB of the ceiling unclaimed, above a 512 MiB floor
    text = (folder / "frank-archon.yaml").read_text()
    text = text.replace("weights: 22208 MiB", "weights: 21184 MiB")
    text = text.replace("limits:\n", "limits:\n  unclaimed_warn_above: 512 MiB\n")
    (folder / "frank-archon.yaml").write_text(text)
    result = pytester.runpytest("--fakplan-shapes", "shapes", "-W", "error")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*= fakplan gate warnings =*",
            "frank-archon: unclaimed VRAM (1,024 MiB unclaimed > 512 MiB) — give the unclaimed*",
        ]
    )


def test_operator_gates_run_in_the_suite(pytester: pytest.Pytester) -> None:
    _shapes(pytester, "frank-archon.yaml")
    _suite(pytester, {})
    (pytester.path / "gates" / "house.py").write_text(
        "from fakplan.gates.operator import gate\n"
        "@gate(id='two-windows', title='two windows', rationale='failover')\n"
        "def two(plan):\n"
        "    return plan.whole_sessions_at_window >= 2, 'windows'\n"
        "@gate(id='divides', title='divides', rationale='raises')\n"
        "def divides(plan):\n"
        "    return True, str(1 // 0)\n"
    )
    result = pytester.runpytest("gates", "-v")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            "gates/test_suite.py::frank-archon::two-windows PASSED*",
            "gates/test_suite.py::frank-archon::divides FAILED*",
            "frank-archon: divides (raised ZeroDivisionError: integer division or modulo by zero)",
        ]
    )


def test_gates_file_that_cannot_be_imported_is_a_collection_error(
    pytester: pytest.Pytester,
) -> None:
    _shapes(pytester, "frank-archon.yaml")
    _suite(pytester, {})
    (pytester.path / "gates" / "house.py").write_text("import no_such_module_here\n")
    message = (
        "gates/house.py:1: cannot import operator gates: "
        "ModuleNotFoundError: No module named 'no_such_module_here'"
    )
    result = pytester.runpytest("gates")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting gates/test_suite.py*", message])
    result = pytester.runpytest("--fakplan-shapes", "shapes", "-p", "no:python")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([message])


def test_plugin_is_inert_without_its_option(pytester: pytest.Pytester) -> None:
    _shapes(pytester)
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-W", "error")
    result.assert_outcomes(passed=1)
    assert "fakplan" not in result.stdout.str().replace("fakplan-0.1.0", "")


def test_repo_gate_suite_runs_over_shapes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "gates/", "-q", "-p", "no:cacheprovider", "-rx"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "XFAIL gates/test_shapes.py::frank-archon-fp8::pool-contract" in proc.stdout
    assert " failed" not in proc.stdout
