"""Model geometry: what a model's KV cache is made of, from any of three sources.

    load_geometry("meta-llama/Llama-3.1-8B-Instruct")   # the built-in catalog
    load_geometry("models/qwen3-8b/")                   # an HF folder (config.json + safetensors)
    load_geometry("models/tiny.gguf")                   # a GGUF header

Every source becomes one frozen ``Geometry``. Layers are listed one by one
(``layer_kinds``) so hybrids — sliding windows, MLA, linear attention, Mamba —
are data, not special cases scattered through the engines.
"""

from __future__ import annotations

from pathlib import Path

from fakplan.errors import GeometryError
from fakplan.geometry import catalog, hf
from fakplan.geometry.model import (
    AttentionHeads,
    Geometry,
    LayerKind,
    LinearAttentionDims,
    MambaDims,
    MlaDims,
)

__all__ = [
    "AttentionHeads",
    "Geometry",
    "LayerKind",
    "LinearAttentionDims",
    "MambaDims",
    "MlaDims",
    "load_geometry",
]


def load_geometry(reference: str | Path) -> Geometry:
    """A GGUF path, an HF folder or config.json, or a catalog id."""
    text = str(reference)
    path = Path(text).expanduser()
    if text.endswith(".gguf") or (path.is_file() and _is_gguf(path)):
        # the gguf package (and numpy behind it) loads only for a GGUF
        from fakplan.geometry import gguf_header

        return gguf_header.read_gguf(path)
    if path.is_dir() or path.name.endswith(".json"):
        if not path.exists():
            raise GeometryError(f"{path}: no such file or folder")
        return hf.read_hf(path)
    entry = catalog.lookup(text)
    if entry is not None:
        return entry
    if path.exists():
        raise GeometryError(
            f"{path}: not a GGUF file, an HF folder or a config.json; cannot read its geometry"
        )
    raise GeometryError(
        f"{text!r}: not a file, not a folder and not in the built-in catalog; "
        "give a GGUF path, an HF folder or config.json, or a catalog id "
        "(fakplan kv --list shows the catalog)"
    )


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False
