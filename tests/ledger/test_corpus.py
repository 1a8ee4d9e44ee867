"""The dev corpus (tests/data/public/corpus): every boot reproduced to the printed count.

Each case names its public source, its log (verbatim lines), the model config it served
and its launch; tests/corpus.py holds what is compared. The printed figures in
cases.yaml are checked against the log itself, so the expectation is the engine's own.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.bench.accuracy import BLOCKS
from tests.support.corpus import CORPUS, PUBLIC, cases, outcomes

CASES = cases()
ROOT = PUBLIC.parent.parent.parent


def _printed_texts(case: dict[str, Any]) -> list[str]:
    """The printed figures as the log spells them (counts with or without thousands commas)."""
    texts = []
    for value in case["printed"].values():
        if isinstance(value, int):
            texts.append(rf"(?:{value}|{value:,})")
        else:
            number = str(value).split()[0]
            texts.append(re.escape(number))
    return texts


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_printed_figures_are_in_the_log(case: dict[str, Any]) -> None:
    log = (CORPUS / case["log"]).read_text(encoding="utf-8")
    for pattern in _printed_texts(case):
        assert re.search(rf"(?<![\d.]){pattern}(?![\d])", log), (case["id"], pattern)
    assert case["source"].startswith("https://")
    assert (PUBLIC / "configs" / case["config"] / "config.json").exists()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fakplan_gives_the_printed_count(case: dict[str, Any]) -> None:
    for o in outcomes(case):
        assert o.low <= o.printed <= o.high, (
            f"{case['id']} {o.figure}: printed {o.printed:,}, fakplan {o.low:,}..{o.high:,} "
            f"({o.error:+.3f} %)"
        )


def test_the_corpus_is_large_and_spans_the_engines() -> None:
    engines = {c["engine"] for c in CASES}
    assert engines == {"vllm", "sglang", "llamacpp"}
    assert len({c["id"] for c in CASES}) == len(CASES) >= 25


def test_the_accuracy_tables_are_generated_from_the_corpus() -> None:
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    pages = [p.read_text(encoding="utf-8") for p in files]
    for start_mark, end_mark, made in BLOCKS:
        (page,) = [text for text in pages if start_mark in text]  # one page holds each
        start, end = page.index(start_mark), page.index(end_mark) + len(end_mark)
        assert page[start:end] == made(), (
            "run: python tests/bench/accuracy.py --write docs/*.md README.md"
        )


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fakplan_ledger_reads_every_cache_line(case: dict[str, Any]) -> None:
    """`fakplan ledger` finds the figures the case checks: counts exactly, sizes within
    their printed rounding (full, SWA and recurrent caches alike)."""
    from fakplan.engines import parse_ledger
    from fakplan.units import printed_interval

    ledger = parse_ledger(CORPUS / case["log"], "auto")
    assert ledger.engine == case["engine"]
    printed = case["printed"]
    counts = {"tokens": "kv_tokens", "cells": "kv_cells", "swa_cells": "swa_kv_tokens"}
    sizes = {"size": "kv_bytes", "swa_size": "swa_kv_bytes", "recurrent_size": "recurrent_bytes"}
    for key, name in counts.items():
        if key in printed:
            assert getattr(ledger, name) == printed[key], (case["id"], name)
    for key, name in {**sizes, "k": "k_bytes", "v": "v_bytes"}.items():
        if key in printed:
            low, _, high = printed_interval(str(printed[key]))
            value = getattr(ledger, name)
            assert value is not None and low <= value <= high, (case["id"], name, value)
