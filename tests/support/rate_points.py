"""Decode rates predicted for public measurements the bands were not fitted on.

Two kinds of row, both generated into docs/rates.md and README.md (a test keeps both
equal to this output):

- every fit point, predicted with the band of the *other* points of its set (leave one
  out): a point its own band would trivially hold;
- public points outside every fit set (other contexts, cards and batch sizes).

Run ``.venv/bin/python -m tests.support.rate_points --write docs/rates.md --write
README.md`` after a band or a point changes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from fakplan.cards import card_sku
from fakplan.engines.rate_bands import (
    _XD,
    LLAMA3_8B_F16,
    LLAMA3_8B_Q4_K_M,
    LLAMA31_8B_BF16,
    LLAMA31_8B_KV_PER_TOKEN,
    LLAMACPP_GPU_DECODE,
    VLLM_GPU_DECODE,
    MeasuredRun,
    band_of,
)
from fakplan.rates import DecodeInputs, EfficiencyBand, decode_point

GIB = 1 << 30
BEGIN, END = "<!-- rates:scored:begin -->", "<!-- rates:scored:end -->"
BANDS_BEGIN, BANDS_END = "<!-- rates:bands:begin -->", "<!-- rates:bands:end -->"
_CONCURRENCY = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"
LLAMA2_7B_KV = 32 * 32 * 128 * 2 * 2  # MHA: 32 layers x 32 KV heads x 128 x (K, V) x f16
LLAMA3_8B_KV = LLAMA31_8B_KV_PER_TOKEN


@dataclass(frozen=True)
class Held:
    """A public decode measurement outside every fit set."""

    what: str
    engine: str  # the fit set whose band predicts it: "vllm" or "llamacpp"
    card: str
    weights: float
    kv_per_token: int
    sessions: int
    context: tuple[int, int]  # the context it ran over
    measured: float  # tokens/s per session
    source: str
    quote: str


HELD_OUT = (
    Held(
        "vLLM 0.21, H100 SXM, Llama-3.1-8B bf16, 16 concurrent",
        "vllm",
        "H100-SXM-80GB",
        LLAMA31_8B_BF16,
        LLAMA3_8B_KV,
        16,
        (0, 1024),
        1000 / 10.94,
        _CONCURRENCY,
        " 16    1,384.2               41.69        64.71        10.94        1.000    0.700",
    ),
    Held(
        "vLLM 0.21, H100 SXM, Llama-3.1-8B bf16, 64 concurrent",
        "vllm",
        "H100-SXM-80GB",
        LLAMA31_8B_BF16,
        LLAMA3_8B_KV,
        64,
        (0, 1024),
        1000 / 46.91,
        _CONCURRENCY,
        " 64    1,312.3               86.92        464.7        46.91        1.000    0.691",
    ),
    Held(
        "llama.cpp, RTX 4090, Llama-3-8B Q4_K_M, tg 8192",
        "llamacpp",
        "RTX-4090",
        LLAMA3_8B_Q4_K_M,
        LLAMA3_8B_KV,
        1,
        (0, 8192),
        110.66,
        _XD,
        "| 4090 24GB | 8B Q4_K_M | 130.58 | 127.74 | 119.44 | 110.66 | 7138.99 |",
    ),
    Held(
        "llama.cpp, RTX 3090, Llama-3-8B F16, tg 8192",
        "llamacpp",
        "RTX-3090",
        LLAMA3_8B_F16,
        LLAMA3_8B_KV,
        1,
        (0, 8192),
        42.62,
        _XD,
        "|                 | 8B F16     | 47.40   | 46.51    | 44.79    | 42.62    | 4444.65 |",
    ),
    Held(
        "llama.cpp, RTX A6000, Llama-2-7B Q4_0 (Dec 2023)",
        "llamacpp",
        "RTX-A6000",
        3.56 * GIB,
        LLAMA2_7B_KV,
        1,
        (0, 1024),
        111.57,
        _XD,
        "RTX A6000 48GB | 111.57 | 44.01 | 15.18 | OOM",
    ),
    Held(
        "llama.cpp, RTX 6000 Ada, Llama-2-7B F16 (Dec 2023)",
        "llamacpp",
        "RTX-6000-Ada",
        12.55 * GIB,
        LLAMA2_7B_KV,
        1,
        (0, 1024),
        50.56,
        _XD,
        "RTX 6000 Ada 48GB | 127.45 | 50.56 | 17.02 | OOM",
    ),
    Held(
        "llama.cpp, H100 PCIe, Llama-2-7B F16 (Dec 2023)",
        "llamacpp",
        "H100-PCIE-80GB",
        12.55 * GIB,
        LLAMA2_7B_KV,
        1,
        (0, 1024),
        83.32,
        _XD,
        "H100 PCIe 80GB | 133.77 | **83.32**| **25.88** | OOM",
    ),
)

FIT_SETS = {"vllm": VLLM_GPU_DECODE, "llamacpp": LLAMACPP_GPU_DECODE}


def _interval(
    band: EfficiencyBand,
    card: str,
    weights: float,
    kv: int,
    sessions: int,
    context: tuple[int, int],
) -> tuple[float, float]:
    row = card_sku(card)
    assert row is not None, card
    inputs = DecodeInputs(
        weights_bytes=round(weights),
        experts=None,
        kv_bytes_per_token=kv,
        kv_bytes_per_seq=0,
        bandwidth=row.bandwidth,
        band=band,
    )
    slow = decode_point(inputs, sessions, context[1]).per_session[0]
    fast = decode_point(inputs, sessions, context[0]).per_session[1]
    return slow, fast


def _verdict(measured: float, interval: tuple[float, float]) -> str:
    low, high = interval
    if measured < low:
        return f"killed ({(measured / low - 1) * 100:+.1f} % below)"
    if measured > high:
        return f"killed ({(measured / high - 1) * 100:+.1f} % above)"
    return "held"


def _left_out(point: MeasuredRun, points: tuple[MeasuredRun, ...]) -> tuple[str, ...]:
    others = tuple(p for p in points if p.id != point.id)
    band = band_of(others, "decode", "the others")
    row = card_sku(point.card)
    assert row is not None
    slow = row.bandwidth * band.low / point.work
    fast = row.bandwidth * band.high / point.work
    return (
        f"{point.id} ({point.engine}), left out of its band",
        f"{point.tps:,.1f}",
        f"{slow:,.1f}..{fast:,.1f}",
        _verdict(point.tps, (slow, fast)),
        point.source,
    )


def rows() -> list[tuple[str, ...]]:
    out = [_left_out(p, points) for points in FIT_SETS.values() for p in points]
    for held in HELD_OUT:
        band = band_of(FIT_SETS[held.engine], "decode", held.engine)
        interval = _interval(
            band, held.card, held.weights, held.kv_per_token, held.sessions, held.context
        )
        out.append(
            (
                held.what,
                f"{held.measured:,.1f}",
                f"{interval[0]:,.1f}..{interval[1]:,.1f}",
                _verdict(held.measured, interval),
                held.source,
            )
        )
    return out


def table() -> str:
    lines = [
        "| point | measured t/s per session | predicted | verdict | source |",
        "|---|---:|---:|---|---|",
    ]
    lines += [f"| {what} | {m} | {p} | {v} | [link]({s}) |" for what, m, p, v, s in rows()]
    held = sum(1 for r in rows() if r[3] == "held")
    lines.append("")
    lines.append(f"{held} of {len(rows())} held.")
    return "\n".join(lines)


def bands_table() -> str:
    """Every engine's bands as the registry holds them, with the fit set each came from."""
    from fakplan.engines import ENGINES

    lines = ["| engine, device | kind | band | fit set | points |", "|---|---|---|---|---|"]
    for engine in ENGINES.values():
        for kind, bands in (("decode", engine.decode_bands), ("prefill", engine.prefill_bands)):
            for device, band in bands.items():
                share = "of the bandwidth" if kind == "decode" else "of the bf16 dense peak"
                borrowed = " (borrowed: see the plan's note)" if engine.borrowed_band else ""
                lines.append(
                    f"| {engine.title or engine.name}, {device} | {kind} | "
                    f"{band.low:.2f}–{band.high:.2f} {share} | {band.source}{borrowed} | "
                    f"{len(band.fit)} |"
                )
    return "\n".join(lines)


def _replace(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def write(doc: Path) -> None:
    text = _replace(doc.read_text(encoding="utf-8"), BEGIN, END, table())
    if BANDS_BEGIN in text:
        text = _replace(text, BANDS_BEGIN, BANDS_END, bands_table())
    doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", type=Path, action="append", default=[])
    args = parser.parse_args()
    for doc in args.write:
        write(doc)
    if not args.write:
        sys.stdout.write(table() + "\n")
