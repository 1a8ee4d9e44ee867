"""Generated shapes: every one compiles, or is refused with a FakplanError — nothing else.

Two generators: the bundled shapes with leaves replaced by hostile values (zeros,
huge and negative numbers, NaN, dashes, control characters, surrogates, wrong
types), and their YAML text with bytes flipped, cut and spliced. The default run
takes a small budget; ``pytest -m fuzz`` runs 10,000 of them and reports the time
and memory the worst case took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakplan.errors import FakplanError
from fakplan.plan import compile_plan
from fakplan.render import render_plan
from fakplan.shape import load_shape_text
from tests.support.paths import ROOT, SHAPES
from tests.support.peakrss import peak_mib

BUNDLED = {path.name: path.read_text() for path in sorted(SHAPES.glob("*.yaml"))}
PARSED = {name: yaml.safe_load(text) for name, text in BUNDLED.items()}

HOSTILE: list[Any] = [
    0, -1, 1, 2**31, 2**63, 10**30, 1.5, float("nan"), float("inf"), -0.0, True, None,
    "", "-", "--trust-remote-code", "a\x00b", "x\ud800", "é" * 300, "w" * 300, "0 B",
    "1 PiB", "2048 TiB", f"{10**30} GiB", "1.2.3 GiB", "5120", "auto", "fp8", "FP8",
    "bf16", "q8_0", "../../etc/passwd", "$(touch pwned)", "`id`", "a\nb", [], [1, 2],
    {}, {"x": 1}, {"ledger": "/dev/zero"}, {"bytes": "0 B"},
]  # fmt: skip


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [path] + [p for k, v in node.items() for p in _leaves(v, (*path, k))]
    if isinstance(node, list):
        return [path] + [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))]
    return [path]


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _replace(node[head], rest, value)}
    copy = list(node)
    copy[head] = _replace(copy[head], rest, value)
    return copy


@st.composite
def mutated_shapes(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(PARSED)))
    data: Any = PARSED[name]
    for _ in range(draw(st.integers(1, 4))):
        leaves = _leaves(data)
        path = draw(st.sampled_from(leaves))
        data = _replace(data, path, draw(st.sampled_from(HOSTILE)))
    try:
        return yaml.safe_dump(data, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        return BUNDLED[name]


@st.composite
def mangled_texts(draw: st.DrawFn) -> str:
    text = BUNDLED[draw(st.sampled_from(sorted(BUNDLED)))]
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["cut", "insert", "flip", "splice"]))
        if action == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif action == "insert":
            text = text[:at] + draw(st.sampled_from(["&a ", "*a", "!!int ", "{", "[", ":", "- ", "\t", "\\", '"', "'", "? "])) + text[at:]  # fmt: skip
        elif action == "flip":
            text = text[:at] + draw(st.characters(max_codepoint=0x2FFFF)) + text[at + 1 :]
        else:
            other = BUNDLED[draw(st.sampled_from(sorted(BUNDLED)))]
            text = text[:at] + other[draw(st.integers(0, len(other))) :]
    return text


def _compile(text: str, folder: Path) -> None:
    """Load, plan, render and serialise as `fakplan compile` does; FakplanError is an answer."""
    try:
        loaded = load_shape_text(text, folder / "s.yaml", budget=_no_device)
        plan = compile_plan(loaded)
        render_plan(loaded, plan, None, folder / "out")
        plan.to_json()
    except FakplanError:
        pass


def _no_device(gpu: bool) -> Any:
    from fakplan.budget import DeviceBudget

    return DeviceBudget("env", (), 80 << 30, "80 GiB from a test")


QUICK = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@QUICK
@given(mutated_shapes())
def test_a_shape_with_hostile_values_is_compiled_or_refused(tmp_path: Path, text: str) -> None:
    _compile(text, tmp_path)


@QUICK
@given(mangled_texts())
def test_mangled_yaml_is_compiled_or_refused(tmp_path: Path, text: str) -> None:
    _compile(text, tmp_path)


def fuzz_run(count: int, folder: Path) -> dict[str, float]:
    """``count`` generated shapes, half of each generator, compiled in this process: the
    figures the fuzz run reports (run in a process of its own, so its peak is its own)."""
    slowest = [0.0]

    # batches of 500: hypothesis keeps a tree of every choice a run made, which grows with
    # the run; the peak measured is fakplan's, not the generator's
    batches = max(1, count // 500)

    @settings(
        max_examples=count // batches,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],  # a loaded machine, not fakplan
    )
    @given(st.one_of(mutated_shapes(), mangled_texts()))
    def run(text: str) -> None:
        started = time.monotonic()
        _compile(text, folder)
        slowest[0] = max(slowest[0], time.monotonic() - started)

    begun = time.monotonic()
    for _ in range(batches):
        run()
    return {
        "count": count,
        "seconds": time.monotonic() - begun,
        "slowest": slowest[0],
        "peak_mib": peak_mib(),
    }


@pytest.mark.fuzz
def test_ten_thousand_generated_shapes(tmp_path: Path) -> None:
    """10,000 shapes: 0 exceptions other than FakplanError (any other fails the run), none
    past 10 s, and a peak RSS under 200 MB in a process of their own."""
    code = (
        "import json, pathlib, sys\n"
        "from tests.shape.test_fuzz_shapes import fuzz_run\n"
        f"print(json.dumps(fuzz_run(10_000, pathlib.Path({str(tmp_path)!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"\nfuzz shapes: {figures['count']:,} in {figures['seconds']:.1f} s, slowest "
        f"{figures['slowest']:.2f} s, peak RSS {figures['peak_mib']:.0f} MiB"
    )
    assert figures["slowest"] < 10
    assert figures["peak_mib"] < 200
