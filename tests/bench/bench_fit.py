"""Benchmark: a whole `fakplan fit` frontier against one `plan` of the same model.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_fit.py [--runs 5]
In one process, best of N: one compile of shapes/example.yaml (a catalog model on one
card), then the frontier of that shape over its ladder for two KV dtypes (what
`fakplan fit shapes/example.yaml` computes). Reports both, the ratio, and the compiles
the search made. Then llama.cpp's partial offload: Mistral-Nemo's Q8_0 tensor table (a
header, tests/test_llamacpp_offload.py) on an 8 GiB card, where every window is answered
by a search over -ngl. The target: each frontier well under a second.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fakplan.fit import FitRequest, Fitter, Layout, run_fit  # noqa: E402
from fakplan.plan import compile_plan  # noqa: E402
from fakplan.shape import load_shape, load_shape_text  # noqa: E402
from fakplan.shape.source import read_shape_file, read_yaml  # noqa: E402
from tests.engines.llamacpp.test_llamacpp_offload import _nemo  # noqa: E402


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
    offload(options.runs)


def offload(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        gguf = _nemo(Path(folder) / "nemo.gguf")
        data = {
            "name": "nemo",
            "engine": "llamacpp",
            "engine_version": "b7475",
            "model": gguf.name,
            "card": {"total": "8 GiB"},
            "serving": {"max_num_seqs": 1, "max_model_len": 1024},
        }
        path = Path(folder) / "nemo.yaml"
        shape = dict(data, budget={"weights": "7 GiB", "kv": "1 GiB"})
        path.write_text(yaml.safe_dump(shape))
        loaded = load_shape(path)
        compile_plan(loaded)
        plan_best = fit_best = float("inf")
        compiles = 0
        for _ in range(runs):
            started = time.perf_counter()
            compile_plan(loaded)
            plan_best = min(plan_best, time.perf_counter() - started)
            probe = load_shape_text(yaml.safe_dump(shape), path)
            fitter = Fitter(data, path, probe.lines, probe.budget)
            started = time.perf_counter()
            run_fit(fitter, FitRequest((Layout("f16"),)))
            fit_best = min(fit_best, time.perf_counter() - started)
            compiles = fitter.compiles
    print(f"llama.cpp one plan:      {plan_best * 1000:8.2f} ms")
    print(f"llama.cpp -ngl frontier: {fit_best * 1000:8.2f} ms ({compiles} compiles, 8 windows)")
    print(f"ratio:                   {fit_best / plan_best:8.0f}x one plan")


if __name__ == "__main__":
    main()
