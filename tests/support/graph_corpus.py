"""vLLM's CUDA-graph estimate: the fit set and the check set, scored apart.

The fit set is the 0.19.0 H100 boots of tests/data/public/profiler, whose DEBUG lines print
each mode's first capture and per-graph cost (``floor.GRAPH_ESTIMATE_MEASURED`` is their
min-max by TP). The check set is tests/data/public/graphs: 0.20-0.24 boots on other cards
that print the graph counts and the estimate, never seen by the fit, but for one whose
print killed the range the fit gave and so widened it, or prompted the rule that did
(``widened`` in its case: in sample, and said so in the table). Used by
tests/engines/vllm/test_vllm_graphs.py and tests/bench/accuracy.py (docs/vllm-memory.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakplan.engines.vllm.floor import capture_sizes, graph_estimate
from fakplan.engines.weights import MLA_FAMILIES
from fakplan.units import GIB, printed_interval
from tests.support.floor_corpus import case_config
from tests.support.paths import DATA

GRAPHS = DATA / "public" / "graphs"
PROFILER = DATA / "public" / "profiler"
COUNTS = re.compile(r"Profiling CUDA graph memory: (.*)")
MODE = re.compile(r"(FULL|PIECEWISE)=(\d+) \(largest=(\d+)\)")
# "total" closes vLLM's line; an author's transcription may drop it (graphs-008)
TOTAL = re.compile(r"Estimated CUDA graph memory: (-?[\d.]+) GiB(?: total)?")
PER_MODE = re.compile(
    r"Estimated (FULL|PIECEWISE) CUDA graph memory: ([\d.]+) MiB first-capture "
    r"\+ \((\d+)-1\) × ([\d.]+) MiB per-graph"
)


@dataclass(frozen=True)
class GraphRow:
    case: dict[str, Any]
    counts: tuple[int, int]  # (PIECEWISE, FULL) as printed
    derived: tuple[int, int] | None  # as fakplan derives them from the launch
    printed: str  # "0.79"
    low: int
    high: int
    in_sample: bool  # its print widened the range (floor.GRAPH_FIRST_CAPTURE_WIDENED)

    @property
    def held(self) -> bool:
        p_low, _, p_high = printed_interval(f"{self.printed} GiB")
        return p_low <= self.high and self.low <= p_high


def printed_counts(text: str) -> tuple[int, int]:
    found = COUNTS.search(text)
    assert found is not None
    modes = {m[1]: int(m[2]) for m in MODE.finditer(found[1])}
    return modes.get("PIECEWISE", 0), modes.get("FULL", 0)


def check_rows() -> list[GraphRow]:
    cases = yaml.safe_load((GRAPHS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    out = []
    for case in cases:
        text = (GRAPHS / case["log"]).read_text(encoding="utf-8")
        capture = case.get("capture")
        derived = (
            capture_sizes(capture["max_num_seqs"], capture["max_num_batched_tokens"])
            if capture
            else None
        )
        # a quote that drops the counts line takes the counts its launch gives
        counts = printed_counts(text) if COUNTS.search(text) or derived is None else derived
        hidden, layers, mla = _geometry(case)
        found = graph_estimate(int(case["tp"]), counts, hidden, layers=layers, mla=mla)
        assert found is not None
        total = TOTAL.search(text)
        assert total is not None
        out.append(
            GraphRow(case, counts, derived, total[1], found[0], found[1], bool(case.get("widened")))
        )
    return out


def _geometry(case: dict[str, Any]) -> tuple[int | None, int | None, bool]:
    """The hidden size, decoder layers and MLA of the case's config, where it has one here
    (most check boots' are not)."""
    if not case.get("config"):
        return None, None, False
    architecture, text = case_config(case)
    return int(text["hidden_size"]), int(text["num_hidden_layers"]), architecture in MLA_FAMILIES


def fit_modes(log: Path) -> dict[str, tuple[float, int, float]]:
    """A fit-set boot's first rank: each mode's (first capture MiB, graphs, per-graph MiB)."""
    modes: dict[str, tuple[float, int, float]] = {}
    for m in PER_MODE.finditer(log.read_text(encoding="utf-8")):
        modes.setdefault(m[1], (float(m[2]), int(m[3]), float(m[4])))
    return modes


def graph_table() -> str:
    lines = [
        "| case | release | card | model | graphs (PIECEWISE, FULL) | printed GiB | "
        "fakplan's range GiB | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = check_rows()
    for r in rows:
        c = r.case
        lines.append(
            f"| {c['id']} | {c['engine_version']} | {c['card'].split(' (')[0]} | "
            f"{c['model']} | {r.counts[0]}, {r.counts[1]} | {r.printed} | "
            f"{r.low / GIB:.2f}–{r.high / GIB:.2f} | {_verdict(r)} |"
        )
    unseen = [r for r in rows if not r.in_sample]
    held = sum(r.held for r in unseen)
    widened = ", ".join(r.case["id"] for r in rows if r.in_sample)
    lines += [
        "",
        f"Held {held} of {len(unseen)} boots the fit did not see"
        + (
            f"; {widened} killed the range the fit gave and widened it (in sample)."
            if widened
            else "."
        ),
    ]
    return "\n".join(lines)


def _verdict(row: GraphRow) -> str:
    if row.in_sample:
        return "killed the fit's range; in sample after widening it"
    return "held" if row.held else "killed"
