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
        ("24 gb", 24 * 10**9),  # decimal units in any case, as binary ones (issue 26)
        ("2 mb", 2_000_000),
        # 31 x 2^30 = 33,285,996,544; 0.86 x 2^30 = 923,417,968.64; sum rounded to the byte
        ("31.86 GiB", 34_209_414_513),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text", ["5120", "", "MiB", "-1 MiB", "5 parsecs", "1e3 MiB", "5 mbit", "1.2.3 GiB"]
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


@given(st.integers(min_value=0, max_value=2**50))
def test_format_round_trips(n: int) -> None:
    assert parse_bytes(format_bytes(n)) == n


@pytest.mark.parametrize("text", ["1025 TiB", f"{10**30} GiB", "1125899906842625 B"])
def test_a_size_past_1_pib_is_refused(text: str) -> None:
    """1 PiB = 2**50 B = 1,024 TiB: no card, pool or budget holds more."""
    assert parse_bytes("1024 TiB") == 2**50
    with pytest.raises(UnitsError, match="more than 1 PiB"):
        parse_bytes(text)


def test_a_long_text_is_refused_without_echoing_it() -> None:
    with pytest.raises(UnitsError) as info:
        parse_bytes("9" * 5000 + " GiB")
    assert len(str(info.value)) < 200


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


# The byte-size grammar in the JSON Schema (BYTE_SIZE_PATTERN) and parse_bytes must agree:
# each sample below goes to both, with the verdict written here by hand.
GRAMMAR_SAMPLES = [
    ("5120 MiB", True),
    ("31.86 GiB", True),
    ("29,120 MiB", True),
    ("1_024 KiB", True),
    ("7488 B", True),
    ("8GiB", True),
    ("  8 GiB ", True),
    ("4 gib", True),  # binary units in any case
    ("4 GIB", True),
    ("1 b", True),
    ("80 GB", True),
    ("1.5 KB", True),
    ("2 MB", True),
    ("1 TB", True),
    ("1 TiB", True),
    ("5120", False),  # a bare number: MiB or bytes?
    ("", False),
    ("MiB", False),
    ("-1 MiB", False),
    ("1e3 MiB", False),
    ("1.2.3 GiB", False),
    ("5 mb", True),  # decimal units in any case, as binary ones (issue 26: "24 gb")
    ("5 Mb", True),
    ("5 gB", True),
    ("5 kB", True),
    ("5 parsecs", False),
    ("5 MiBs", False),
    (".5 GiB", False),
    ("5. GiB", False),
    ("5 Mi B", False),
]


@pytest.mark.parametrize(("text", "accepted"), GRAMMAR_SAMPLES)
def test_schema_pattern_and_parser_accept_the_same_sizes(text: str, accepted: bool) -> None:
    import re

    from fakplan.units import BYTE_SIZE_PATTERN

    assert (re.search(BYTE_SIZE_PATTERN, text) is not None) is accepted
    try:
        parse_bytes(text)
        parsed = True
    except UnitsError:
        parsed = False
    assert parsed is accepted


def test_the_schema_pattern_is_a_plain_ecma_regex() -> None:
    """JSON Schema patterns are ECMA-262: no Python named groups, no inline flags."""
    from fakplan.units import BYTE_SIZE_PATTERN

    assert "(?P<" not in BYTE_SIZE_PATTERN
    assert "(?i" not in BYTE_SIZE_PATTERN
    assert BYTE_SIZE_PATTERN.startswith("^") and BYTE_SIZE_PATTERN.endswith("$")


def test_human_never_shows_a_small_figure_as_zero() -> None:
    assert human(MIB) == "1 MiB"
    assert human(300 * KIB) == "300 KiB"  # 0.29 MiB would print "0 MiB"
    assert human(100) == "100 B"
    assert human(-300 * KIB) == "-300 KiB"
    assert human(0) == "0 MiB"  # a real zero stays in the unit asked for
    assert human(1000, "GiB", 2) == "0.98 KiB"  # 1000 / 1024


def test_human_pair_keeps_compared_figures_apart() -> None:
    from fakplan.units import human_pair

    # a 1 MiB pool against a 300 KiB contract: not "1 MiB ≥ 0 MiB"
    assert human_pair(MIB, 300 * KIB) == ("1.0 MiB", "0.3 MiB")
    # 6,064.4 MiB < 6,064.6 MiB: whole MiB would print "6,064 < 6,064"... and does not
    low, high = round(6_064.4 * MIB), round(6_064.6 * MIB)
    assert human_pair(low, high) == ("6,064 MiB", "6,065 MiB")
    low, high = round(6_064.1 * MIB), round(6_064.3 * MIB)
    assert human_pair(low, high) == ("6,064.1 MiB", "6,064.3 MiB")
    # one byte apart: only whole bytes tell them apart
    assert human_pair(MIB, MIB + 1) == ("1,048,576 B", "1,048,577 B")
    # equal figures, and figures far apart, keep the plain display
    assert human_pair(6_912 * MIB, 6_912 * MIB) == ("6,912 MiB", "6,912 MiB")
    assert human_pair(6_912 * MIB, 5_308_592_128) == ("6,912 MiB", "5,063 MiB")
    assert human_pair(0, 5) == ("0 B", "5 B")
