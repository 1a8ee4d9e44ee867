"""Repetitions into one figure: median, spread, and the noise band that judges it.

A rate is measured several times; the median is the figure and half the
range, over the median, is its spread. The noise band is the larger of the
spread and a floor of ±3 % (two arms inside ±3 % on one endpoint are noise).
A figure is judged against a predicted range with that band: a median that
misses the range by less than the band cannot tell held from killed, and is
reported "inside noise". Two runs whose medians differ by less than the band
are "inside noise" too, never a trend.

    >>> s = summarize([98.0, 100.0, 104.0])
    >>> s.median, s.spread_pct
    (100.0, 3.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fakplan.predict import VerdictStatus

NOISE_FLOOR_PCT = 3.0  # two arms inside ±3 % on one endpoint are noise


@dataclass(frozen=True)
class Summary:
    """Repetitions of one figure."""

    n: int
    median: float
    low: float
    high: float

    @property
    def spread_pct(self) -> float:
        """Half the range, as a percentage of the median (0 for one repetition)."""
        if self.median == 0:
            return 0.0
        return round((self.high - self.low) / 2 / abs(self.median) * 100, 4)

    @property
    def noise_pct(self) -> float:
        """The band this figure is judged with: its spread, at least the floor."""
        return max(NOISE_FLOOR_PCT, self.spread_pct)

    def to_dict(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "median": round(self.median, 3),
            "low": round(self.low, 3),
            "high": round(self.high, 3),
            "spread_pct": round(self.spread_pct, 2),
            "noise_pct": round(self.noise_pct, 2),
        }


def summarize(values: Sequence[float]) -> Summary:
    """Median and range of ``values`` (at least one)."""
    if not values:
        raise ValueError("summarize needs at least one value")
    return Summary(
        n=len(values),
        median=float(statistics.median(values)),
        low=float(min(values)),
        high=float(max(values)),
    )


def judge_band(observed: float, noise_pct: float, low: float, high: float) -> VerdictStatus:
    """held inside [low, high]; killed when even the noise band misses it; else inside noise."""
    if low <= observed <= high:
        return "held"
    band = abs(observed) * noise_pct / 100
    if observed + band < low or observed - band > high:
        return "killed"
    return "inside noise"


TrendWord = Literal["inside noise", "faster", "slower"]


@dataclass(frozen=True)
class Trend:
    """This run against an earlier one."""

    word: TrendWord
    change_pct: float
    previous: float
    noise_pct: float

    def text(self) -> str:
        if self.word == "inside noise":
            return (
                f"{self.change_pct:+.1f} % vs the previous {self.previous:g}: inside the "
                f"±{self.noise_pct:.3g} % noise band, not a trend"
            )
        return f"{self.word} than the previous {self.previous:g} by {self.change_pct:+.1f} %"


def trend(previous: float, current: float, noise_pct: float) -> Trend:
    """``current`` against ``previous``: inside noise unless the change exceeds the band."""
    change = (current - previous) / previous * 100 if previous else 0.0
    if abs(change) <= noise_pct:
        word: TrendWord = "inside noise"
    else:
        word = "faster" if change > 0 else "slower"
    return Trend(word=word, change_pct=round(change, 2), previous=previous, noise_pct=noise_pct)
