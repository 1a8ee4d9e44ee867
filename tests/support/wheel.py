"""The wheel `pip install .` would install, as the packaging tests read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltWheel:
    names: frozenset[str]
    entry_points: str
