"""Benchmark: issue 27's heaviest hostile inputs, each refused in a fresh process.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_hostile.py [--runs 3]
For each case (the ones that took GBs or tens of seconds on 9fcf43b) it reports the
best wall time of N runs, the process's own peak RSS, and the time as a ratio of
``fakplan --help`` measured in the same run. The targets: under 10 s and 200 MB each.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.regressions.test_issue27_regressions import _heavy_cases  # noqa: E402
from tests.support.peakrss import RUN_FAKPLAN  # noqa: E402

KV_LINE = (
    b"(EngineCore pid=1) INFO 11-29 20:58:45 [kv_cache_utils.py:2327] "
    b"GPU KV cache size: 2,745,600 tokens\n"
)


def _more_cases(folder: Path) -> dict[str, list[str]]:
    """The gzip ledger bomb and the 2.3 MB YAML on diff's old side."""
    log = folder / "bomb" / "boot.log.gz"
    log.parent.mkdir()
    with gzip.open(log, "wb") as out:
        out.write(KV_LINE * ((100 << 20) // len(KV_LINE)))
    repo = folder / "repo"
    (repo / "shapes").mkdir(parents=True)
    (repo / "shapes" / "big.yaml").write_text("engine: vllm\n" + "# padding\n" * 240_000)
    git = ["git", "-c", "user.email=b@example.invalid", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "big"], cwd=repo, check=True)
    (repo / "shapes" / "big.yaml").unlink()
    return {
        "ledger-gzip-1M-lines": ["ledger", str(log)],
        "diff-2.3MB-yaml": ["diff", "--rev", "HEAD", str(repo / "shapes")],
    }


def measure(args: list[str], folder: Path, runs: int) -> tuple[float, float, int]:
    """Best wall time, the peak RSS (MiB) of that run's process, and its exit status."""
    best = (float("inf"), 0.0, 0)
    for n in range(runs):
        peak = folder / f"peak-{n}"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", RUN_FAKPLAN, str(peak), *args],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        took = time.perf_counter() - started
        if took < best[0]:
            best = (took, float(peak.read_text()), done.returncode)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        floor, _, _ = measure(["--help"], folder, options.runs)
        cases = {**_heavy_cases(folder), **_more_cases(folder)}
        print(f"fakplan --help: {floor:.2f} s (the ratio's unit)")
        print(f"{'case':<24} {'exit':>4} {'time':>8} {'x help':>7} {'peak RSS':>9}")
        for name, args in cases.items():
            took, peak, code = measure(args, folder, options.runs)
            print(f"{name:<24} {code:>4} {took:>7.2f}s {took / floor:>6.1f}x {peak:>6.0f} MiB")


if __name__ == "__main__":
    main()
