"""Reviewed golden files: compared byte for byte, rewritten only on purpose."""

from __future__ import annotations

import os

from tests.support.paths import GOLDEN


def check_golden(name: str, text: str) -> None:
    """Compare with a reviewed golden file; FAKPLAN_UPDATE_GOLDEN=1 rewrites it on purpose."""
    path = GOLDEN / name
    if os.environ.get("FAKPLAN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), (
        f"no golden file {path}; review the output and set FAKPLAN_UPDATE_GOLDEN=1"
    )
    assert text == path.read_text(encoding="utf-8")
