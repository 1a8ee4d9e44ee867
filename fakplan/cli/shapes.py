"""Shape arguments shared by the sub-commands: files, or folders of *.yaml."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fakplan.errors import FakplanError


def shape_files(paths: tuple[str, ...]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                raise FakplanError(f"{path}: no *.yaml shapes in this folder")
            yield from found
        else:
            yield path
