"""Public SGLang boots that print the free memory around their weights, and the tokens
SGLang's rule gives for them (tests/test_sglang_sized_pool.py, tests/bench/accuracy.py)."""

from __future__ import annotations

from typing import Any

import yaml

from fakplan.engines.sglang.sizing import profiled_tokens
from tests.support.paths import DATA

BOOTS_FILE = DATA / "public" / "sizing" / "sglang-boots.yaml"
HALF = 0.005  # a figure printed with two decimals


def boots() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(BOOTS_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, list)
    return loaded


def rule_span(boot: dict[str, Any]) -> tuple[int, int]:
    """The tokens the rule gives over the printed figures' rounding: the fewest at the
    least free after and the most free before the digits allow, the most at the other
    ends (where before is after + usage, the two move together)."""
    f, after, cell = boot["fraction"], boot["free_after_gib"], boot["cell"]
    before = boot["free_before_gib"]
    if before is not None:
        return (
            profiled_tokens(before + HALF, after - HALF, f, cell),
            profiled_tokens(before - HALF, after + HALF, f, cell),
        )
    usage = boot["usage_gib"]
    ends = [
        profiled_tokens(after + da + usage + du, after + da, f, cell)
        for da in (-HALF, HALF)
        for du in (-HALF, HALF)
    ]
    return min(ends), max(ends)


def rule_table() -> str:
    lines = [
        "| boot | model | card | TP | fraction | free before, after (GiB) | printed tokens "
        "| rule | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for boot in boots():
        low, high = rule_span(boot)
        printed = boot["tokens"]
        miss = 0 if low <= printed <= high else min(abs(printed - low), abs(printed - high))
        before = boot["free_before_gib"]
        before_text = (
            f"{before:.2f}"
            if before is not None
            else f"{boot['free_after_gib'] + boot['usage_gib']:.2f}*"
        )
        lines.append(
            f"| {boot['id']} | {boot['model']} | {boot['card']} | {boot['tp']} "
            f"| {boot['fraction']} | {before_text}, {boot['free_after_gib']:.2f} | {printed:,} "
            f"| {low:,}..{high:,} | {100 * miss / printed:+.2f} % |"
        )
    lines.append("")
    lines.append("\\* not printed: the free memory after the weights + their mem usage")
    return "\n".join(lines)
