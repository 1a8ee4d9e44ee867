from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakplan.errors import UnitsError
from fakplan.units import GIB, KIB, MIB, format_bytes, human, parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5120 MiB", 5120 * 2**20),
        ("7488 B", 7488),
        ("3.25 KiB", 3328),
        ("26 KiB", 26_624),
        ("29,120 MiB", 29_120 * 2**20),
        ("1_024 KiB", 2**20),
        ("1 TiB", 2**40),
        ("80 GB", 80 * 10**9),
        ("1.5 KB", 1500),
        ("2 MB", 2_000_000),
        ("1 TB", 10**12),
        ("  8 GiB ", 8 * 2**30),
        ("8GiB", 8 * 2**30),
        ("4 gib", 4 * 2**30),
        # 31 x 2^30 = 33,285,996,544; 0.86 x 2^30 = 923,417,968.64; sum rounded to the byte
        ("31.86 GiB", 34_209_414_513),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text", ["5120", "", "MiB", "-1 MiB", "5 parsecs", "1e3 MiB", "5 mb", "1.2.3 GiB"]
)
def test_parse_bytes_refuses(text: str) -> None:
    with pytest.raises(UnitsError):
        parse_bytes(text)


def test_bare_number_message_shows_the_accepted_form() -> None:
    with pytest.raises(UnitsError, match=r'expected a byte size such as "5120 MiB", got \'5120\''):
        parse_bytes("5120")


def test_unknown_unit_lists_units() -> None:
    with pytest.raises(UnitsError, match="use B, KiB, MiB, GiB, TiB"):
        parse_bytes("5 parsecs")


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (29_120 * MIB, "29120 MiB"),  # not "28.4375 GiB": two decimals at most
        (7488, "7488 B"),
        (3328, "3.25 KiB"),
        (8 * GIB, "8 GiB"),
        (int(1.5 * GIB), "1.5 GiB"),
        (0, "0 B"),
        (1023, "1023 B"),
        (KIB, "1 KiB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


@given(st.integers(min_value=0, max_value=2**60))
def test_format_round_trips(n: int) -> None:
    assert parse_bytes(format_bytes(n)) == n


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["B", "KiB", "MiB", "GiB", "KB", "MB", "GB"]),
)
def test_whole_quantities_parse_exactly(number: int, unit: str) -> None:
    scale = {
        "B": 1,
        "KiB": 2**10,
        "MiB": 2**20,
        "GiB": 2**30,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
    }
    assert parse_bytes(f"{number} {unit}") == number * scale[unit]
    assert parse_bytes(format_bytes(number * scale[unit])) == number * scale[unit]


def test_human_rounds_for_display() -> None:
    assert human(6_358_048_768) == "6,064 MiB"
    assert human(6_358_048_768, "MiB", 2) == "6,063.51 MiB"
