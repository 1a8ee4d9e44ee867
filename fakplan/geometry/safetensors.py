"""Weight bytes from safetensors files, read from their headers: tensors are never read.

The index's ``metadata.total_size`` where a sharded checkpoint has one, else the sum of
every file's tensor extents.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from fakplan.errors import GeometryError


def safetensors_bytes(folder: Path) -> tuple[int | None, str | None]:
    """Exact weight bytes from the index's total_size, else from every header."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
            return int(total), f"{index.name} metadata.total_size"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None, None
    total = 0
    for file in files:
        total += _header_bytes(file)
    return total, f"headers of {len(files)} safetensors file(s)"


def safetensors_dtypes(folder: Path) -> frozenset[str] | None:
    """The dtypes the folder's tensors are stored in (headers only); None without files."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    seen: set[str] = set()
    for file in files:
        seen.update(
            str(info.get("dtype"))
            for name, info in _header(file).items()
            if name != "__metadata__" and isinstance(info, dict)
        )
    return frozenset(seen)


def _header(path: Path) -> dict[str, Any]:
    """The 8-byte length + JSON header of one file; tensors are never read."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise GeometryError(f"{path}: truncated safetensors file")
            (length,) = struct.unpack("<Q", raw)
            if length > 100 * 2**20:
                raise GeometryError(
                    f"{path}: safetensors header of {length} bytes is not plausible"
                )
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as exc:
        raise GeometryError(f"{path}: unreadable safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise GeometryError(f"{path}: safetensors header is not a JSON object")
    return header


def _header_bytes(path: Path) -> int:
    """Sum of tensor extents from one file's header."""
    total = 0
    for name, info in _header(path).items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            total += int(end) - int(start)
        except (KeyError, TypeError, ValueError):
            raise GeometryError(f"{path}: tensor {name!r} has no data_offsets pair") from None
    return total
