"""The values an engine's own command line takes, release by release, as data.

Each row is one option's choices from a release on, quoted from the engine's argument
parser at the release read (file and line beside it). A value the engine refuses is
bad input where the shape states it, with the accepted list and, for a near miss, the
spelling the engine takes (``bf16`` on vLLM means ``bfloat16``; engines compare
exactly, so ``FP8`` is not ``fp8``).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.dtypes import ALIASES
from fakplan.engines.releases import parse_version

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup


@dataclass(frozen=True)
class Choices:
    """One option's accepted values from release ``first`` on, as read in ``read_in``."""

    first: tuple[int, ...]
    read_in: str
    source: str
    values: tuple[str, ...]


def choices_for(table: tuple[Choices, ...], version: str | None) -> Choices:
    """The newest row at or before ``version`` (the newest row when it is not stated).

    A release between two rows read takes the older row: a value first read in a later
    release is not assumed to exist before it (the refusal says where it was read)."""
    if version is None:
        return table[0]
    wanted = parse_version(version)
    for row in table:
        if wanted >= row.first:
            return row
    return table[-1]


def _storage(value: str) -> str:
    key = value.lower()
    return ALIASES.get(key, key)


def suggest(value: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """The accepted spellings a near miss meant: the same letters in another case, the
    same storage under the engine's name for it, or a close spelling."""
    same_case = [v for v in values if v.lower() == value.lower()]
    if same_case:
        return tuple(same_case)
    same_storage = [v for v in values if v != "auto" and _storage(v) == _storage(value)]
    if same_storage:
        return tuple(same_storage)
    return tuple(difflib.get_close_matches(value, values, n=2, cutoff=0.8))


def refusal(engine: str, option: str, value: str, row: Choices, later: Choices | None) -> str:
    """One line: what the engine takes, what was given, and what was probably meant."""
    meant = suggest(value, row.values)
    hint = f" (did you mean {' or '.join(repr(m) for m in meant)}?)" if meant else ""
    newer = ""
    if later is not None and value in later.values and value not in row.values:
        newer = (
            f"; {engine} {later.read_in} takes it ({later.source}): state that "
            "engine_version if you run it"
        )
    return (
        f"{engine} {option} {value!r} is refused by the engine{hint}: {engine} "
        f"{row.read_in} takes {', '.join(row.values)} ({row.source}){newer}"
    )


def check_choice(
    engine: str, option: str, value: str, table: tuple[Choices, ...], version: str | None
) -> str | None:
    """Why ``value`` is refused by ``engine`` at ``version``, or None when it is taken."""
    row = choices_for(table, version)
    if value in row.values:
        return None
    return refusal(engine, option, value, row, table[0] if table[0] is not row else None)


def unsized(engine: str, name: str, sized: Collection[str]) -> str:
    """A KV dtype the engine takes whose layout fakplan has not read: said so, not guessed."""
    return (
        f"{engine} takes --kv-cache-dtype {name!r}, but fakplan has not read its layout's "
        f"bytes (it packs scales); fakplan sizes {', '.join(sized)}"
    )


def check_dtypes(
    setup: Setup,
    engine: str,
    kv_table: tuple[Choices, ...],
    model_table: tuple[Choices, ...],
    sized: Collection[str],
) -> None:
    """The shape's KV and model dtypes as the engine's parser takes them, and a KV dtype
    fakplan can size: each refusal at its field of ``serving``."""
    serving, version = setup.serving, setup.engine_version
    for value, option, table, loc in (
        (serving.kv_dtype, "--kv-cache-dtype", kv_table, "kv_cache_dtype"),
        (serving.model_dtype, "--dtype", model_table, "dtype"),
    ):
        refused = check_choice(engine, option, value, table, version)
        if refused:
            raise setup.error(refused, "serving", loc)
    if serving.kv_dtype not in sized:
        raise setup.error(unsized(engine, serving.kv_dtype, sized), "serving", "kv_cache_dtype")
