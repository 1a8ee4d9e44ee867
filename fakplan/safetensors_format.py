"""The safetensors header, read the same way wherever its bytes come from (a local file,
a ranged read from the Hub): an 8-byte little-endian length, that many bytes of JSON, one
entry per tensor with its dtype, shape and ``data_offsets``. Tensors are never read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fakplan.errors import FakplanError
from fakplan.files import load_json

MAX_HEADER = 100 << 20  # safetensors' own limit on a header
SIZE_LIMIT = 1 << 50  # byte offsets and totals: no checkpoint holds a PiB


@dataclass(frozen=True)
class Extents:
    """What one header says of its tensors."""

    tensors: int
    total_bytes: int
    dtypes: frozenset[str]


def read_header(
    head: Callable[[int], bytes], where: str, error: type[FakplanError]
) -> dict[str, Any]:
    """The JSON header, from ``head(n)`` (a file's or a URL's first ``n`` bytes): the
    length first, then exactly the header that length names."""
    prefix = head(8)
    if len(prefix) < 8:
        raise error(f"{where}: truncated safetensors file ({len(prefix)} bytes)")
    length = int.from_bytes(prefix[:8], "little")
    if length > MAX_HEADER:
        raise error(
            f"{where}: a safetensors header of {length:,} bytes is not plausible "
            f"(at most {MAX_HEADER:,})"
        )
    raw = head(8 + length)
    if len(raw) < 8 + length:
        raise error(f"{where}: truncated safetensors header")
    header = load_json(raw[8 : 8 + length], f"{where} (header)", error)
    if not isinstance(header, dict):
        raise error(f"{where}: safetensors header is not a JSON object")
    return header


def extents(header: dict[str, Any], where: str, error: type[FakplanError]) -> Extents:
    """The tensors' count, the sum of their extents and their dtypes, each extent checked."""
    total = count = 0
    dtypes: set[str] = set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise error(f"{where}: tensor {name[:60]!r} has no data_offsets pair")
        key = f"/{name[:60]}/data_offsets"
        for index, value in enumerate(offsets):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= SIZE_LIMIT
            ):
                raise error(
                    f"{where}: {key}/{index}: expected a whole number from 0 to "
                    f"{SIZE_LIMIT:,}, got {str(value)[:40]}"
                )
        start, end = offsets
        if end < start:
            raise error(f"{where}: {key}: ends at {end:,} before it starts at {start:,}")
        total += end - start
        count += 1
        dtypes.add(str(info.get("dtype")))
    if total > SIZE_LIMIT:
        raise error(f"{where}: the tensors claim {total:,} B: not plausible")
    return Extents(count, total, frozenset(dtypes))
