"""Benchmark: a whole `fakplan fit` frontier against one `plan` of the same model.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_fit.py [--runs 5]
In one process, best of N: one compile of shapes/example.yaml (a catalog model on one
card), then the frontier of that shape over its ladder for two KV dtypes (what
`fakplan fit shapes/example.yaml` computes). Reports both, the ratio, and the compiles
the search made. The target: the frontier well under a second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fakplan.fit import FitRequest, Fitter, Layout, run_fit  # noqa: E402
from fakplan.plan import compile_plan  # noqa: E402
from fakplan.shape import load_shape  # noqa: E402
from fakplan.shape.source import read_shape_file, read_yaml  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    path = ROOT / "shapes" / "example.yaml"
    loaded = load_shape(path)
    compile_plan(loaded)  # warm: the geometry is read once, as in a fit
    plan_best = fit_best = float("inf")
    compiles = 0
    for _ in range(options.runs):
        started = time.perf_counter()
        compile_plan(loaded)
        plan_best = min(plan_best, time.perf_counter() - started)
        data, _ = read_yaml(path, read_shape_file(path))
        fitter = Fitter(data, path, loaded.lines, loaded.budget)
        started = time.perf_counter()
        run_fit(fitter, FitRequest((Layout("auto"), Layout("fp8")), sessions=2))
        fit_best = min(fit_best, time.perf_counter() - started)
        compiles = fitter.compiles
    print(f"one plan:      {plan_best * 1000:8.2f} ms")
    print(f"the frontier:  {fit_best * 1000:8.2f} ms ({compiles} compiles, 2 KV dtypes)")
    print(f"ratio:         {fit_best / plan_best:8.0f}x one plan")


if __name__ == "__main__":
    main()
