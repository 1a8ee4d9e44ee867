"""Weight bytes from safetensors files, read from their headers: tensors are never read.

The index's ``metadata.total_size`` where a sharded checkpoint has one, else the sum of
every file's tensor extents.
"""

from __future__ import annotations

from pathlib import Path

from fakplan.errors import GeometryError
from fakplan.files import load_json, read_bounded
from fakplan.geometry.facts import check_int
from fakplan.safetensors_format import SIZE_LIMIT, Extents, extents, read_header

MAX_INDEX = 64 << 20  # a weight map of 100,000 tensors is a few MiB
SIZE = (0, SIZE_LIMIT)


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
        seen.update(_extents(file).dtypes)
    return frozenset(seen)


def _extents(path: Path) -> Extents:
    """One file's header: its length, then exactly the header it names (never a tensor)."""

    def head(size: int) -> bytes:
        return read_bounded(path, size, GeometryError, "a safetensors file", head=True)

    return extents(read_header(head, str(path), GeometryError), str(path), GeometryError)


def _header_bytes(path: Path) -> int:
    """Sum of tensor extents from one file's header."""
    return _extents(path).total_bytes
