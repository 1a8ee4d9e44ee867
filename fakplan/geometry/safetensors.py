"""Weight bytes from safetensors files, read from their headers: tensors are never read.

The index's ``metadata.total_size`` where a sharded checkpoint has one, else the sum of
every file's tensor extents.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from fakplan.errors import GeometryError
from fakplan.files import load_json, read_bounded
from fakplan.geometry.facts import check_int

MAX_INDEX = 64 << 20  # a weight map of 100,000 tensors is a few MiB
MAX_HEADER = 100 << 20  # safetensors' own limit on a header
SIZE = (0, 1 << 50)  # byte offsets and totals: no checkpoint holds a PiB


def safetensors_bytes(folder: Path) -> tuple[int | None, str | None]:
    """Exact weight bytes from the index's total_size, else from every header."""
    index = folder / "model.safetensors.index.json"
    if index.exists() or index.is_symlink():
        document = load_json(
            read_bounded(index, MAX_INDEX, GeometryError, "a safetensors index"),
            str(index),
            GeometryError,
        )
        metadata = document.get("metadata") if isinstance(document, dict) else None
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if total is not None:
            return check_int(total, SIZE, str(index), "/metadata/total_size"), (
                f"{index.name} metadata.total_size"
            )
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
    prefix = read_bounded(path, 8, GeometryError, "a safetensors file", head=True)
    if len(prefix) < 8:
        raise GeometryError(f"{path}: truncated safetensors file")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER:
        raise GeometryError(f"{path}: safetensors header of {length:,} bytes is not plausible")
    # exactly the header the length names: a shard's tensors are never read
    raw = read_bounded(path, 8 + length, GeometryError, "a safetensors file", head=True)
    if len(raw) < 8 + length:
        raise GeometryError(f"{path}: truncated safetensors header")
    header = load_json(raw[8 : 8 + length], f"{path} (header)", GeometryError)
    if not isinstance(header, dict):
        raise GeometryError(f"{path}: safetensors header is not a JSON object")
    return header


def _header_bytes(path: Path) -> int:
    """Sum of tensor extents from one file's header."""
    total = 0
    for name, info in _header(path).items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise GeometryError(f"{path}: tensor {name[:60]!r} has no data_offsets pair")
        start = check_int(offsets[0], SIZE, str(path), f"/{name[:60]}/data_offsets/0")
        end = check_int(offsets[1], SIZE, str(path), f"/{name[:60]}/data_offsets/1")
        if end < start:
            raise GeometryError(
                f"{path}: /{name[:60]}/data_offsets: ends at {end:,} before it starts at {start:,}"
            )
        total += end - start
    return total
