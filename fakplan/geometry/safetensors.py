"""Weight bytes from safetensors files, read from their headers: tensors are never read.

The index's ``metadata.total_size`` where a sharded checkpoint has one, else the sum of
every file's tensor extents.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

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


def _header_bytes(path: Path) -> int:
    """Sum of tensor extents from the 8-byte length + JSON header; tensors are never read."""
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
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        total += int(end) - int(start)
    return total
