"""Benchmark ``parse_ledger`` on big logs: wall time, and peak RSS that must stay flat.

    .venv/bin/python tests/bench/bench_ledger.py            # 50 MB and 500 MB, plus gzip
    .venv/bin/python tests/bench/bench_ledger.py --sizes 20  # a quick run

Not a test (pytest collects ``test_*.py`` only). It writes each log to a temporary
folder (deleted afterwards): real boot lines from ``tests/data/public/ledgers`` (a first boot at
the top, a restart at 60 %) buried in realistic noise, including near misses such as
vLLM's "GPU KV cache usage" stats line. Each file is parsed in a fresh child process,
which reports its own wall time and peak RSS (``resource.getrusage``), so the sizes
compare fairly: a flat RSS means memory does not grow with the file. Each plain log is
also counted by ``grep -c`` (every row's needle as fixed strings, and one literal), and
fakplan's speed is reported as a share of grep's, measured in the same run (goal: 25 %).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "tests" / "data" / "public"
MB = 10**6

NOISE = (
    "(APIServer pid=1) INFO {d} [loggers.py:123] Engine 000: Avg prompt throughput: {f:.1f} "
    "tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: {n} reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: {p:.1f}%, Prefix cache hit rate: {q:.1f}%",
    '(APIServer pid=1) INFO:     10.0.{n}.{m}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(EngineCore_DP0 pid=107) DEBUG {d} [core.py:812] scheduled {port} tokens for cmpl-{h}",
    "[2026-01-31 13:50:{s:02d} TP0] Decode batch. #running-req: {n}, #token: {port}, token usage:"
    " 0.{m:02d}, gen throughput (token/s): {f:.2f}, #queue-req: 0",
    "llama_perf_context_print:        eval time = {f:10.2f} ms / {n:5d} runs   (    0.35 ms per "
    "token,  2884.07 tokens per second)",
    "slot update_slots: id  0 | task {port} | new prompt, n_ctx_slot = 8192, n_keep = 0, "
    "n_prompt_tokens = {n}",
    "slot update_slots: id  0 | task {port} | kv cache rm [{m}, end)",
    "WARNING {d} [protocol.py:73] The following fields were present in the request but ignored: "
    "{{'metadata'}}",
)


def _noise_block(rng: random.Random, size: int) -> str:
    lines = []
    total = 0
    while total < size:
        line = rng.choice(NOISE).format(
            d=f"07-06 22:{rng.randrange(60):02d}:{rng.randrange(60):02d}",
            f=rng.random() * 500,
            g=rng.random() * 80,
            n=rng.randrange(1, 64),
            m=rng.randrange(100),
            p=rng.random() * 100,
            q=rng.random() * 100,
            s=rng.randrange(60),
            port=rng.randrange(1024, 65535),
            h=f"{rng.getrandbits(64):016x}",
        )
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def write_log(path: Path, size: int) -> None:
    """About ``size`` bytes: boot 1 (vllm-009) at the top, boot 2 (vllm-018) at 60 %."""
    rng = random.Random(size)
    blocks = [_noise_block(rng, 1 << 20).encode() for _ in range(8)]
    first = (PUBLIC / "ledgers" / "vllm-009.log").read_bytes()
    second = (PUBLIC / "ledgers" / "vllm-018.log").read_bytes()
    written = 0
    restarted = False
    with path.open("wb") as out:
        out.write(first)
        while written < size:
            if not restarted and written >= size * 0.6:
                out.write(second)
                restarted = True
            block = blocks[rng.randrange(len(blocks))]
            out.write(block)
            written += len(block)


def child(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from fakplan.engines import parse_ledger

    start = time.perf_counter()
    ledger = parse_ledger(path)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "peak_rss_mib": round(peak_kib / 1024, 1),
                "kv_tokens": ledger.kv_tokens,
                "boots": ledger.boots,
                "boot_lines": list(ledger.boot_lines),
            }
        )
    )


def grep_seconds(path: Path, needles: Path | None) -> float:
    """Best of two ``grep -c`` runs: every row's needle as fixed strings (the same search
    fakplan's prefilter makes), or with ``needles`` None one literal, "KV cache"."""
    args = ["grep", "-c", "-F", "-f", str(needles)] if needles else ["grep", "-c", "KV cache"]
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        subprocess.run([*args, str(path)], capture_output=True, check=False)
        best = min(best, time.perf_counter() - started)
    return best


def write_needles(path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from fakplan.engines import bootlog_formats

    needles = sorted({row.needle for fmt in bootlog_formats().values() for row in fmt.rows})
    path.write_text("\n".join(needles) + "\n")


def measure(path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,500", help="file sizes in MB, comma-separated")
    parser.add_argument("--no-gzip", action="store_true", help="skip the gzip run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="fakplan-bench-"))
    rows: list[tuple[str, float, dict[str, object]]] = []
    greps: list[tuple[str, str, float, float]] = []
    try:
        tiny = folder / "tiny.log"
        shutil.copy(PUBLIC / "ledgers" / "vllm-018.log", tiny)
        rows.append(("baseline (3-line log)", tiny.stat().st_size / MB, measure(tiny)))
        needles = folder / "needles.txt"
        write_needles(needles)
        for size in sizes:
            path = folder / f"boot-{size}MB.log"
            write_log(path, size * MB)
            result = measure(path)
            rows.append((f"{size} MB plain", path.stat().st_size / MB, result))
            ours = float(str(result["seconds"]))
            for label, which in (
                ("grep -c -F (every needle)", needles),
                ("grep -c 'KV cache'", None),
            ):
                theirs = grep_seconds(path, which)
                greps.append((f"{size} MB", label, theirs, theirs / ours))
            if not args.no_gzip and size == min(sizes):
                packed = folder / f"boot-{size}MB.log.gz"
                with path.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                result = measure(packed)
                rows.append((f"{size} MB gzip ({packed.stat().st_size / MB:.0f} MB)", size, result))
            path.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{'file':<26} {'MB':>7} {'seconds':>8} {'MB/s':>7} {'peak RSS MiB':>13}  result")
    for name, megabytes, result in rows:
        seconds = float(str(result["seconds"]))
        rate = f"{megabytes / seconds:7.0f}" if seconds > 0.05 else "      -"
        print(
            f"{name:<26} {megabytes:7.1f} {seconds:8.2f} {rate} {result['peak_rss_mib']!s:>13}  "
            f"kv_tokens={result['kv_tokens']} boots={result['boots']} "
            f"boot_lines={result['boot_lines']}"
        )
    for size_name, label, seconds, ratio in greps:
        print(f"{size_name:<8} {label:<28} {seconds:6.2f} s; fakplan at {ratio:6.1%} of its speed")
    for name, _, result in rows[1:]:
        assert result["kv_tokens"] == 567_978 and result["boots"] == 2, (name, result)


if __name__ == "__main__":
    main()
