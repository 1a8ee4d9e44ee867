"""The built-in catalog: published config.json files of widely served models.

The data file (``fakplan/data/catalog.json``) ships in the wheel; each entry
cites where its config was read. Geometry comes from the same reader as an HF
folder, so a catalog entry and the model's own config.json cannot disagree.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from fakplan.errors import GeometryError
from fakplan.geometry.hf import geometry_from_config
from fakplan.geometry.model import Geometry


@cache
def entries() -> dict[str, dict[str, Any]]:
    text = (resources.files("fakplan") / "data" / "catalog.json").read_text(encoding="utf-8")
    document = json.loads(text)
    return {entry["id"]: entry for entry in document["models"]}


def lookup(model_id: str) -> Geometry | None:
    """The geometry of a catalog id (case-insensitive), or None if not catalogued; read
    once per process (a frozen record: every plan of the id shares it)."""
    return _lookup(model_id)


@cache
def _lookup(model_id: str) -> Geometry | None:
    table = entries()
    entry = table.get(model_id)
    if entry is None:
        folded = {k.casefold(): k for k in table}
        key = folded.get(model_id.casefold())
        entry = table[key] if key else None
    if entry is None:
        return None
    try:
        return geometry_from_config(
            entry["config"],
            source=f"catalog:{entry['id']} ({entry['source']})",
            weight_bytes=entry.get("weight_bytes"),
            weight_source=entry.get("weight_source"),
        )
    except GeometryError as exc:
        raise GeometryError(f"catalog entry {entry['id']}: {exc}") from None


def catalog_ids() -> list[str]:
    return sorted(entries())
