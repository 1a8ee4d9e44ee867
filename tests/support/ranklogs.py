"""Multi-rank boot logs built from the public single-rank excerpts.

Each keeps the public lines verbatim for one rank and adds a second rank whose
figures differ slightly, as every real TP8 log's do. The changed figures are
written out here; the tests hold the parsers to the binding rank's by hand.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import PUBLIC

LEDGERS = PUBLIC / "ledgers"

# SGLang's old-format CUDA-graph end line (docs/engines.md §2.6, v0.4.6 / v0.5.2:
# "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB."),
# the placeholders filled by hand, so the log states what is free once settled.
_GRAPHS_END = (
    "[2025-03-27 21:33:40 TP0] Capture cuda graph end. Time elapsed: 9.71 s. "
    "mem usage=0.61 GB. avail mem=13.34 GB."
)

# TP1 of the SGLang log: its card had 0.15 GB less free before the load and its shard of
# the weights is 0.02 GB lighter, so after the weights it has 0.13 GB less free
# (130.95 GB against 131.08 GB) and every later free figure is 0.13 GB lower. The pool
# is the same on both ranks (#tokens 834615, K and V 54.12 GB), as SGLang sizes it from
# the smallest free memory over the ranks (docs/engines.md §2.4).
SGLANG_TP1 = {
    "avail mem=131.08 GB, mem usage=8.13 GB": "avail mem=130.95 GB, mem usage=8.11 GB",
    "avail mem=14.61 GB": "avail mem=14.48 GB",
    "avail mem=13.95 GB": "avail mem=13.82 GB",
    "avail mem=13.34 GB": "avail mem=13.21 GB",
}


def sglang_two_ranks() -> str:
    """sglang-002.log's TP0 lines and the graph-end line, each followed by TP1's."""
    lines = [*(LEDGERS / "sglang-002.log").read_text().splitlines(), _GRAPHS_END]
    out: list[str] = []
    for line in lines:
        out.append(line)
        other = line.replace(" TP0]", " TP1]")
        for old, new in SGLANG_TP1.items():
            other = other.replace(old, new)
        out.append(other)
    return "\n".join(out) + "\n"


def vllm_two_workers(prefix: str) -> str:
    """vllm-018.log with its KV-budget line printed by two workers, TP1's pool larger.

    ``prefix`` is the worker's process label with ``{n}`` for the rank: ``Worker_TP{n}``
    (v0.24) or ``VllmWorker TP{n}`` (v0.11). TP0 prints the public 5.98 GiB, TP1 6.00 GiB;
    the engine core's 567,978 tokens are sized by the smaller (docs/engines.md §1.3).
    """
    first, *rest = (LEDGERS / "vllm-018.log").read_text().splitlines()
    workers = [
        first.replace("(EngineCore pid=107)", f"({prefix.format(n=n)} pid={108 + n})").replace(
            "5.98 GiB", figure
        )
        for n, figure in ((0, "5.98 GiB"), (1, "6.00 GiB"))
    ]
    return "\n".join([*workers, *rest]) + "\n"


def vllm_v0_two_workers() -> str:
    """vllm-004.log (V0, the driver's profile, no prefix) and a second worker's copy.

    The worker ``(VllmWorkerProcess pid=486)`` names no rank; its non-torch memory is
    1.81 GiB (the driver's 1.79) and so its KV budget 53.27 GiB (the driver's 53.29).
    """
    lines = (LEDGERS / "vllm-004.log").read_text().splitlines()
    worker = [
        "(VllmWorkerProcess pid=486) "
        + line.replace("non_torch_memory     1.79GiB", "non_torch_memory     1.81GiB").replace(
            "available_kv_cache_memory    53.29GiB", "available_kv_cache_memory    53.27GiB"
        )
        for line in lines
    ]
    return "\n".join([*lines, *worker]) + "\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
