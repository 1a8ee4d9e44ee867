"""Shape loading: every refusal names file, line and field, in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakplan.errors import ShapeError
from fakplan.shape import Shape, load_shape
from tests.support.paths import DATA, SHAPES

GOOD = (SHAPES / "frank-archon.yaml").read_text()


def write(tmp_path: Path, text: str, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> ShapeError:
    with pytest.raises(ShapeError) as info:
        load_shape(path)
    message = str(info.value)
    assert "\n" not in message, "one line"
    return info.value


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_examples_load() -> None:
    for path in SHAPES.glob("*.yaml"):
        assert load_shape(path).shape.name == path.stem


def test_bare_number_for_bytes(tmp_path: Path) -> None:
    text = GOOD.replace("kv: 6912 MiB", "kv: 5120")
    path = write(tmp_path, text)
    err = error_of(path)
    assert str(err) == (
        f"{path}:{line_of(text, 'kv: 5120')}: budget.kv: "
        'expected a byte size such as "5120 MiB", got 5120'
    )


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    text = GOOD.replace("  max_num_seqs: 2", "  max_num_seq: 2\n  max_num_seqs: 2")
    path = write(tmp_path, text)
    err = error_of(path)
    assert err.line == line_of(text, "max_num_seq: 2")
    assert err.field == "serving.max_num_seq"
    assert (
        "unknown key 'max_num_seq' (did you mean 'max_num_seqs'?); expected one of: "
        "max_num_seqs, max_model_len" in str(err)
    )


def test_a_misspelled_key_is_reported_at_its_line_before_the_field_it_hides(
    tmp_path: Path,
) -> None:
    """Issue 26: `max_num_seq:` was reported as `serving.max_num_seqs: required field is
    missing (and 1 more)` at the `serving:` line; the typo itself was hidden."""
    text = GOOD.replace("  max_num_seqs: 2", "  max_num_seq: 2")
    path = write(tmp_path, text)
    err = error_of(path)
    assert err.line == line_of(text, "max_num_seq: 2")
    assert err.field == "serving.max_num_seq"
    assert str(err).startswith(
        f"{path}:{err.line}: serving.max_num_seq: unknown key 'max_num_seq' (did you mean "
        "'max_num_seqs'? serving.max_num_seqs is required and missing); expected one of: "
        "max_num_seqs, max_model_len"
    )
    assert str(err).endswith("(and 1 more)")


def test_a_misspelled_section_is_reported_at_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("serving:", "servng:")
    path = write(tmp_path, text)
    err = error_of(path)
    assert (err.field, err.line) == ("servng", line_of(text, "servng:"))
    assert "unknown key 'servng' (did you mean 'serving'? serving is required and missing)" in str(
        err
    )


def test_an_unknown_key_near_no_field_gets_no_guess(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "zzz: 1\n")
    assert "did you mean" not in str(error_of(path))


@pytest.mark.parametrize("spelling", ["24 gb", "24 Gb", "24 gB", "24 GB"])
def test_decimal_units_read_in_any_case(tmp_path: Path, spelling: str) -> None:
    """Issue 26: `24 gb` was `unknown unit 'gb'` while `5 gib` was accepted."""
    text = GOOD.replace("total: ", f"total: {spelling}  # was: ", 1).replace(
        "ceiling: 29120 MiB", "ceiling: 22000 MiB"
    )
    shape = load_shape(write(tmp_path, text)).shape
    assert shape.card.total == 24 * 10**9


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "budgets: {}\n")
    err = error_of(path)
    assert err.field == "budgets"
    assert err.line == len(GOOD.splitlines()) + 1


@pytest.mark.parametrize("value", ["0", "-1"])
def test_seq_count_must_be_positive(tmp_path: Path, value: str) -> None:
    text = GOOD.replace("max_num_seqs: 2", f"max_num_seqs: {value}")
    err = error_of(write(tmp_path, text))
    assert err.field == "serving.max_num_seqs"
    assert err.line == line_of(text, "max_num_seqs:")
    assert f"expected a value greater than 0, got {value}" in str(err)


def test_seq_count_must_be_a_whole_number(tmp_path: Path) -> None:
    text = GOOD.replace("max_num_seqs: 2", "max_num_seqs: true")
    err = error_of(write(tmp_path, text))
    assert err.field == "serving.max_num_seqs"
    assert "expected a whole number, got True" in str(err)


def test_malformed_yaml(tmp_path: Path) -> None:
    text = GOOD.replace("  count: 1", "  count: [1")
    path = write(tmp_path, text)
    err = error_of(path)
    assert str(err).startswith(f"{path}:")
    assert "malformed YAML" in str(err)
    assert err.line is not None and err.line >= line_of(text, "count: [1")


def test_missing_file(tmp_path: Path) -> None:
    err = error_of(tmp_path / "nope.yaml")
    assert str(err) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_missing_field_points_at_its_parent(tmp_path: Path) -> None:
    text = GOOD.replace("  weights: 22208 MiB\n", "")
    err = error_of(write(tmp_path, text))
    assert err.field == "budget.weights"
    assert err.line == line_of(text, "budget:")
    assert "required field is missing" in str(err)


def test_duplicate_key(tmp_path: Path) -> None:
    text = GOOD.replace("  max_num_seqs: 2", "  max_num_seqs: 2\n  max_num_seqs: 3")
    err = error_of(write(tmp_path, text))
    assert "key 'max_num_seqs' appears twice" in str(err)
    assert err.line == line_of(text, "max_num_seqs: 3")


def test_custom_engine_needs_a_contract(tmp_path: Path) -> None:
    text = GOOD.split("contract:")[0] + "limits:\n  max_spec_rows: 25\n"
    err = error_of(write(tmp_path, text))
    assert err.field == "engine"
    assert "engine custom needs a contract block" in str(err)


def test_unknown_engine(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, GOOD.replace("engine: custom", "engine: tgi")))
    assert err.field == "engine"
    assert "got 'tgi'" in str(err)


def test_component_needs_exactly_one_size(tmp_path: Path) -> None:
    text = GOOD.replace(
        "      per_page: 26 KiB\n", "      per_page: 26 KiB\n      per_token: 6656 B\n"
    )
    err = error_of(write(tmp_path, text))
    assert err.field == "contract.per_token[0]"
    assert "give exactly one of per_token or per_page" in str(err)


def test_parallel_needs_the_cards(tmp_path: Path) -> None:
    text = GOOD.replace("  tensor: 1", "  tensor: 2")
    err = error_of(write(tmp_path, text))
    assert err.field == "parallel"
    assert "tensor 2 x pipeline 1 needs 2 cards" in str(err)


def test_expectation_names_a_declared_control(tmp_path: Path) -> None:
    text = GOOD.replace("control: decode_fp8", "control: decode_bf16")
    err = error_of(write(tmp_path, text))
    assert err.field == "expect[0].control"
    assert "controls: decode_fp8" in str(err)


def test_not_a_mapping(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "- a\n- b\n"))
    assert err.line == 1
    assert "a shape is a YAML mapping" in str(err)


def test_empty_file(tmp_path: Path) -> None:
    assert "the file is empty" in str(error_of(write(tmp_path, "")))


def test_shape_is_immutable() -> None:
    shape = load_shape(SHAPES / "frank-archon.yaml").shape
    with pytest.raises(ValueError, match="frozen"):
        shape.budget.kv = 1  # type: ignore[misc]


def test_schema_lists_engines_and_byte_form() -> None:
    document = Shape.model_json_schema()
    text = json.dumps(document)
    assert document["additionalProperties"] is False
    assert "KiB, MiB, GiB" in text


def test_a_stated_ceiling_above_the_card_is_refused_at_its_line(tmp_path: Path) -> None:
    """30 GiB of ceiling on a 24 GiB card: the pair gate would pass on memory the card lacks."""
    text = (SHAPES / "example.yaml").read_text().replace("ceiling: 22 GiB", "ceiling: 30 GiB")
    path = write(tmp_path, text)
    err = error_of(path)
    assert err.line == line_of(text, "ceiling: 30 GiB")
    assert err.field == "ceiling"
    assert "30,720 MiB is above the card's 24,576 MiB (card.total)" in str(err)


def test_a_ceiling_mapping_above_the_card_points_at_its_bytes(tmp_path: Path) -> None:
    text = (
        (SHAPES / "example.yaml")
        .read_text()
        .replace("ceiling: 22 GiB", "ceiling:\n  note: typed in\n  bytes: 24.01 GiB")
    )
    err = error_of(write(tmp_path, text))
    assert err.line == line_of(text, "bytes: 24.01 GiB")
    assert err.field == "ceiling.bytes"
    # 24.01 GiB = 24,586.24 MiB: printed apart from the card's 24,576 MiB
    assert "24,586 MiB is above the card's 24,576 MiB" in str(err)


def test_a_ceiling_equal_to_the_card_loads(tmp_path: Path) -> None:
    text = (SHAPES / "example.yaml").read_text().replace("ceiling: 22 GiB", "ceiling: 24 GiB")
    assert load_shape(write(tmp_path, text)).shape.ceiling is not None


def test_a_ledger_ceiling_above_the_card_is_bad_input(tmp_path: Path) -> None:
    """table-seed002.log measures (2.01 GiB settled - 209.19 MiB floor) + 30 GiB pair
    = 31.81 GiB; on a shape whose card says 31 GiB the log cannot be this card's."""
    from fakplan.plan import compile_plan

    (tmp_path / "boot.log").write_text((DATA / "ledgers" / "table-seed002.log").read_text())
    text = (
        GOOD.replace("ceiling: 29120 MiB", "ceiling: {ledger: boot.log}")
        .replace("total: 31.86 GiB", "total: 31 GiB")
        .replace("weights: 22208 MiB", "weights: 21000 MiB")
    )
    path = write(tmp_path, text)
    with pytest.raises(ShapeError) as info:
        compile_plan(load_shape(path))
    err = info.value
    assert err.line == line_of(text, "ceiling: {ledger: boot.log}")
    assert err.field == "ceiling.ledger"
    measured = round(2.01 * 2**30) - round(209.19 * 2**20) + 30 * 2**30
    assert f"{measured / 2**20:,.0f} MiB, is above the card's 31,744 MiB" in str(err)


def test_a_ceiling_above_an_auto_card_says_the_card_came_from_auto(tmp_path: Path) -> None:
    """card.total: auto read 16 GiB from the device; a 22 GiB ceiling cannot be this card's."""
    from fakplan.budget import DeviceBudget

    text = (SHAPES / "example.yaml").read_text().replace("total: 24 GiB ", "total: auto")
    assert "total: auto" in text
    path = write(tmp_path, text)
    with pytest.raises(ShapeError) as info:
        load_shape(path, budget=lambda gpu: DeviceBudget("env", (), 16 << 30, "16 GiB"))
    assert info.value.line == line_of(text, "ceiling: 22 GiB")
    assert "22,528 MiB is above the card's 16,384 MiB (card.total, auto)" in str(info.value)
