"""Benchmark: `fakplan compile` per shape, this tree against another revision, one run.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_compile.py [--shapes 40] [--against REV] [--runs 3]
It writes ``--shapes`` copies of the bundled shapes (each its own name) into a temporary
folder, then compiles them all in one fresh process (``fakplan compile DIR -o OUT``), best
of ``--runs``, and reports wall and CPU time per shape. With ``--against REV`` (default:
main before issue 28's compile work, 1282afa) it checks that revision out into a
temporary worktree, compiles the same shapes with it in the same way, says whether the two
outputs are byte-identical (against 1282afa they differ where a warning now carries its
proven fix), and reports the ratio. The target: at least 4x.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "1282afa"  # main before issue 28's compile work (and before warnings got proven fixes)


def _shapes(folder: Path, count: int) -> None:
    bundled = sorted((ROOT / "shapes").glob("*.yaml"))
    for n in range(count):
        source = bundled[n % len(bundled)]
        text = source.read_text()
        name = next(line for line in text.splitlines() if line.startswith("name:"))
        text = text.replace(name, f"{name}-{n}", 1)
        (folder / f"{source.stem}-{n}.yaml").write_text(text)
        for extra in source.parent.iterdir():  # what a shape points at (a GGUF, a ledger)
            if extra.is_dir() and not (folder / extra.name).exists():
                shutil.copytree(extra, folder / extra.name)


def _compile(tree: Path, shapes: Path, out: Path, runs: int) -> tuple[float, float]:
    """Best wall and CPU seconds of compiling every shape in a fresh process of ``tree``."""
    best_wall = best_cpu = float("inf")
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = "import sys; from fakplan.cli import main; sys.exit(main())"
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(  # run from the scratch folder: -c puts the cwd first on the path
            [sys.executable, "-c", code, "compile", str(shapes), "-o", str(out)],
            cwd=shapes.parent,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{tree}: compile failed:\n{proc.stderr}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
    return best_wall, best_cpu


def _same(a: Path, b: Path) -> bool:
    compared = filecmp.dircmp(a, b)
    if compared.left_only or compared.right_only or compared.diff_files:
        return False
    return all(_same(a / d, b / d) for d in compared.common_dirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", default=BASELINE, help="a revision to compare with")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        shapes = work / "shapes"
        shapes.mkdir()
        _shapes(shapes, options.shapes)
        wall, cpu = _compile(ROOT, shapes, work / "out-here", options.runs)
        n = options.shapes
        print(f"this tree:  {wall / n * 1000:7.1f} ms wall, {cpu / n * 1000:7.1f} ms CPU a shape")
        if not options.against:
            return
        other = work / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other),
             options.against],
            check=True,
        )  # fmt: skip
        try:
            old_wall, old_cpu = _compile(other, shapes, work / "out-there", options.runs)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=False
            )
        print(
            f"{options.against}:    {old_wall / n * 1000:7.1f} ms wall, "
            f"{old_cpu / n * 1000:7.1f} ms CPU a shape"
        )
        print(f"ratio:      {old_wall / wall:7.2f}x wall, {old_cpu / cpu:7.2f}x CPU")
        same = _same(work / "out-here", work / "out-there")
        print(f"outputs byte-identical: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
