"""Engine releases: which rule set a stated ``engine_version`` selects.

Each engine lists its rule sets newest first, each with the first release it
applies to and where it was read; an unstated version takes the newest. A
version newer than the newest release read takes the newest rules, and says so
(``newer_note``); one older than the oldest modelled is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

from fakplan.errors import ReleaseError


@dataclass(frozen=True)
class Release:
    """A rule set: the name its outputs give it, the first release it applies to, and the
    release it was read in. An engine subclasses it with the behaviours that differ."""

    rule: str
    first: tuple[int, ...]
    read_in: str

    @property
    def read_as_number(self) -> str | None:
        """The release these rules were read in, where it is a release number (not a commit)."""
        return self.read_in if re.fullmatch(r"v?\d+(\.\d+)*(\.?post\d+)?", self.read_in) else None


def parse_version(text: str) -> tuple[int, ...]:
    match = re.match(r"^v?(\d+(?:\.\d+)*)", text.strip())
    if not match:
        raise ReleaseError(f"engine version {text!r}: expected a release number such as 0.11.0")
    return tuple(int(part) for part in match[1].split("."))


def _spelled(first: tuple[int, ...], build: bool) -> str:
    return ("b" if build else "") + ".".join(map(str, first))


def _known(releases: tuple[Release, ...], build: bool) -> str:
    return ", ".join(f"from {_spelled(r.first, build)} (read in {r.read_in})" for r in releases)


R = TypeVar("R", bound=Release)


def select(
    engine: str, releases: tuple[R, ...], version: str | None, *, build: bool = False
) -> tuple[R, str]:
    """The rule set for ``version`` and the version text reported as used; ``build`` for an
    engine whose versions are build numbers (llama.cpp's b5000), spelled so in errors."""
    if version is None:
        newest = releases[0]
        return newest, newest.read_in
    wanted = parse_version(version)
    for release in releases:
        if wanted >= release.first:
            return release, version
    oldest = _spelled(releases[-1].first, build)
    kind = "build" if build else "release"
    raise ReleaseError(
        f"{engine} {version} is older than the oldest {kind} fakplan models "
        f"(rule sets {_known(releases, build)}); state {oldest} or later"
        + (f" ({engine} versions are build numbers such as b5000)" if build else "")
    )


def newer_note(engine: str, releases: tuple[Release, ...], version: str | None) -> tuple[str, ...]:
    """The rule to state when ``version`` is past the newest release read: whose rules apply."""
    newest = releases[0]
    read = newest.read_as_number
    if version is None or read is None or parse_version(version) <= parse_version(read):
        return ()
    return (
        f"{engine} {version} is newer than the newest release fakplan has read ({read}): "
        f"rules of {read} used",
    )
