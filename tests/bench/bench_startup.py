"""Benchmark: how fast fakplan starts, against the libraries it cannot start without.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_startup.py [--shapes 1000]
It times, in fresh processes, best of N runs each:
  - the floor: ``python -c "import pydantic, yaml, click"``;
  - ``fakplan --help`` and ``fakplan plan shapes/example.yaml``;
and reports each as a ratio of the floor (the target is at most 2x), beside the same
imports with one pydantic model defined (pydantic's schema machinery loads with the first
model, which is already about 2x). Then it gates
``--shapes`` generated copies of the bundled shapes in one ``fakplan gate`` run.

The commands run offline against an empty Hugging Face cache (``HF_HUB_OFFLINE=1``): a
catalog id then resolves without the network, so the figures are fakplan's own start;
online, a Hub id costs the Hub's answer (and importing huggingface_hub) on top.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_CACHE = tempfile.mkdtemp(prefix="fakplan-bench-hf-")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": _CACHE, "FAKPLAN_CACHE": _CACHE}


def best_of(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, capture_output=True, check=False, env=ENV)
        times.append(time.perf_counter() - started)
    return min(times)


def gate_many(count: int) -> float:
    """One `fakplan gate` over ``count`` shapes (copies of the bundled ones, renamed)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "shapes"
        folder.mkdir()
        sources = sorted((ROOT / "shapes").glob("*.yaml"))
        for index in range(count):
            source = sources[index % len(sources)]
            text = source.read_text()
            name = next(line for line in text.splitlines() if line.startswith("name: "))
            (folder / f"s{index:05d}.yaml").write_text(text.replace(name, f"name: s{index:05d}"))
        for source in sources:  # what the shapes name beside themselves
            for extra in ("models",):
                if (source.parent / extra).exists():
                    shutil.copytree(source.parent / extra, folder / extra)
        started = time.perf_counter()
        subprocess.run(
            [str(BIN / "fakplan"), "gate", str(folder)], capture_output=True, check=False, env=ENV
        )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--shapes", type=int, default=1000)
    options = parser.parse_args()
    python = str(BIN / "python")
    floor = best_of([python, "-c", "import pydantic, yaml, click"], options.runs)
    # pydantic imports its schema machinery lazily: the first model a program defines
    # pays for it, so a program that validates anything with pydantic starts above the floor
    one_model = "import yaml, click\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)"
    fakplan = str(BIN / "fakplan")
    rows = [
        ("python -c 'import pydantic, yaml, click'", floor),
        ("the same and one pydantic model", best_of([python, "-c", one_model], options.runs)),
        ("fakplan --help", best_of([fakplan, "--help"], options.runs)),
        (
            "fakplan plan shapes/example.yaml",
            best_of([fakplan, "plan", "shapes/example.yaml"], options.runs),
        ),
        (
            "fakplan plan shapes/frank-archon.yaml --json",
            best_of([fakplan, "plan", "shapes/frank-archon.yaml", "--json"], options.runs),
        ),
    ]
    for label, seconds in rows:
        print(f"{label:<46} {seconds * 1000:7.0f} ms  {seconds / floor:4.1f}x the floor")
    seconds = gate_many(options.shapes)
    print(
        f"fakplan gate over {options.shapes:,} shapes{'':<20} {seconds:7.2f} s  "
        f"({seconds / options.shapes * 1000:.1f} ms a shape)"
    )


if __name__ == "__main__":
    main()
