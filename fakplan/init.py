"""The pip requirement a scaffolded CI workflow installs fakplan with.

The workflow runs on a CI runner that has none of this machine's paths, so
the requirement must be one the runner can fetch: what ``--install`` says, or
else what PEP 610's ``direct_url.json`` records about how this fakplan was
installed (a VCS checkout pinned to its commit, an archive URL, or an index
release). A local folder or file is refused: a workflow that cannot install
fakplan would fail on its first run.

The requirement reaches the workflow only as a YAML single-quoted scalar in a
step's ``env:``, and the shell reads it as ``"$FAKPLAN_REQUIREMENT"``: it is
never part of the YAML structure or of the shell script.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from fakplan.errors import FakplanError

# control characters, and the line and paragraph separators YAML and editors break on
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_EXAMPLES = (
    "--install 'fakplan @ git+https://github.com/OWNER/fakplan@COMMIT' (a pushed commit) "
    "or --install 'fakplan==VERSION' (a release on your package index)"
)


@dataclass(frozen=True)
class Requirement:
    """The requirement and, in a few words, where it came from."""

    spec: str
    origin: str


def check_spec(spec: str) -> str:
    """A requirement as the workflow will carry it: one printable line that pip reads
    as a requirement, not an option, and that GitHub Actions does not evaluate."""
    text = spec.strip()
    if not text:
        raise FakplanError("--install: empty; give a pip requirement, e.g. " + _EXAMPLES)
    if _UNPRINTABLE.search(text):
        raise FakplanError(
            f"--install {text!r}: a pip requirement is one line of printable characters"
        )
    if text.startswith("-"):
        raise FakplanError(
            f"--install {text!r}: starts with '-', which pip reads as an option; "
            "give a requirement, e.g. " + _EXAMPLES
        )
    if "${{" in text:
        raise FakplanError(
            f"--install {text!r}: GitHub Actions would evaluate '${{{{ ... }}}}' in the "
            "workflow; a pip requirement does not contain it"
        )
    return text


def _refuse(where: str) -> FakplanError:
    return FakplanError(
        f"fakplan init: this fakplan was installed from {where}, which a CI runner cannot "
        f"reach, so the workflow could not install it; pass {_EXAMPLES}"
    )


def _archive_hash(archive: dict[str, Any]) -> str | None:
    """``sha256=<hex>`` of an archive record, so pip checks it fetched the same bytes."""
    hashes = archive.get("hashes")
    if isinstance(hashes, dict) and isinstance(hashes.get("sha256"), str):
        return f"sha256={hashes['sha256']}"
    legacy = archive.get("hash")
    return legacy if isinstance(legacy, str) and "=" in legacy else None


def _fragment(parts: list[str]) -> str:
    return "#" + "&".join(parts) if parts else ""


def requirement_from(dist: metadata.Distribution) -> Requirement:
    """The requirement that reinstalls ``dist`` elsewhere, from its ``direct_url.json``.

    No record: an index release, ``fakplan==<version>``. A VCS record: that
    repository at the commit installed. An archive: its URL (with its sha256).
    A folder, or anything under ``file:``: refused, no runner can reach it.
    """
    version = dist.version
    text = dist.read_text("direct_url.json")
    if text is None:
        return Requirement(
            f"fakplan=={version}", f"fakplan {version}, as installed here from a package index"
        )
    try:
        record = json.loads(text)
        url = record["url"]
        if not isinstance(url, str):
            raise TypeError("url is not a string")
    except (ValueError, KeyError, TypeError) as exc:
        raise FakplanError(
            f"fakplan init: this fakplan's direct_url.json cannot be read ({exc}); pass {_EXAMPLES}"
        ) from None
    local = url.lower().startswith("file:")
    subdirectory = record.get("subdirectory")
    parts = [f"subdirectory={subdirectory}"] if isinstance(subdirectory, str) else []
    vcs = record.get("vcs_info")
    if isinstance(vcs, dict):
        kind, commit = vcs.get("vcs"), vcs.get("commit_id")
        if local:
            raise _refuse(f"a {kind} checkout on this machine ({url})")
        if not isinstance(kind, str) or not isinstance(commit, str):
            raise _refuse(f"{url} (no commit recorded)")
        return Requirement(
            check_spec(f"fakplan @ {kind}+{url}@{commit}{_fragment(parts)}"),
            f"the {kind} commit this fakplan was installed from",
        )
    archive = record.get("archive_info")
    if isinstance(archive, dict):
        if not url.lower().startswith(("https://", "http://")):
            raise _refuse(f"an archive on this machine ({url})")
        digest = None if "#" in url else _archive_hash(archive)
        return Requirement(
            check_spec(f"fakplan @ {url}{_fragment([*([digest] if digest else []), *parts])}"),
            "the archive this fakplan was installed from",
        )
    if isinstance(record.get("dir_info"), dict):
        raise _refuse(f"a folder on this machine ({url})")
    raise _refuse(url)


def installed() -> metadata.Distribution:
    """This fakplan as installed here: its metadata holds PEP 610's record, if any."""
    try:
        return metadata.distribution("fakplan")
    except metadata.PackageNotFoundError:
        raise FakplanError(
            "fakplan init: fakplan runs here without being installed, so how CI should "
            f"install it is unknown; pass {_EXAMPLES}"
        ) from None


def ci_requirement(explicit: str | None) -> Requirement:
    """``--install`` when given, else derived from how this fakplan was installed."""
    if explicit is not None:
        return Requirement(check_spec(explicit), "given to fakplan init --install")
    return requirement_from(installed())


def yaml_quote(value: str) -> str:
    """A YAML single-quoted scalar: no escapes but ``''``, so one printable line stays
    one string (``#``, ``:``, ``&``, ``*``, ``!`` and quotes included)."""
    if _UNPRINTABLE.search(value):
        raise FakplanError(f"{value!r}: not one printable line, cannot be quoted for YAML")
    return "'" + value.replace("'", "''") + "'"
