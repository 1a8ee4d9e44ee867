"""Engine releases: which rule set a stated ``engine_version`` selects.

Each engine lists its rule sets newest first, each with the first release it
applies to and where it was read; an unstated version takes the newest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fakplan.errors import FakplanError


@dataclass(frozen=True)
class Release:
    rule: str
    first: tuple[int, ...]
    read_in: str


def parse_version(text: str) -> tuple[int, ...]:
    match = re.match(r"^v?(\d+(?:\.\d+)*)", text.strip())
    if not match:
        raise FakplanError(f"engine version {text!r}: expected a release number such as 0.11.0")
    return tuple(int(part) for part in match[1].split("."))


def select(engine: str, releases: tuple[Release, ...], version: str | None) -> tuple[Release, str]:
    """The rule set for ``version`` and the version text reported as used."""
    if version is None:
        newest = releases[0]
        return newest, newest.read_in
    wanted = parse_version(version)
    for release in releases:
        if wanted >= release.first:
            return release, version
    oldest = releases[-1]
    raise FakplanError(
        f"{engine} {version}: older than the oldest release fakplan models "
        f"({'.'.join(map(str, oldest.first))})"
    )
