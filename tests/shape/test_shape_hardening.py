"""Hostile shapes: every one ends in one line naming file, line and field, exit 2.

Each case is a reproducer found by fuzzing (a traceback, a hang, a half-written output,
an option smuggled into argv); the expectation is written here, not read off the code.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fakplan.cli import main
from tests.support.paths import SHAPES

EXAMPLE = (SHAPES / "example.yaml").read_text()
SGLANG = (SHAPES / "qwen3-32b-sglang.yaml").read_text()


def _plan(tmp_path: Path, text: str | bytes, *args: str) -> Result:
    shape = tmp_path / "s.yaml"
    if isinstance(text, bytes):
        shape.write_bytes(text)
    else:
        shape.write_text(text, encoding="utf-8", errors="surrogatepass")
    return CliRunner().invoke(main, ["plan", "--json", str(shape), *args])


def _refused(result: Result, line: int | None, *words: str) -> str:
    """Exit 2, one line on stderr naming the file (and line), no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text: str = result.stderr if result.stderr else result.output
    lines = text.strip().splitlines()
    assert len(lines) == 1, text[:2000]
    assert "Traceback" not in text
    where = "s.yaml" if line is None else f"s.yaml:{line}:"
    assert where in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert len(lines[0]) < 400  # never an echo of an expanded value
    return lines[0]


# ------------------------------------------------------------------- YAML itself


def test_a_python_object_tag_is_refused(tmp_path: Path) -> None:
    text = EXAMPLE.replace("name: example", "name: !!python/object/apply:os.system ['touch pwned']")
    _refused(_plan(tmp_path, text), 4, "not plain YAML data")
    assert not Path("pwned").exists()


@pytest.mark.parametrize(
    ("value", "kind"),
    [("!!int 0x", "int"), ("!!bool maybe", "bool"), ("!!float 1.2.3", "float"), ("!!int", "int")],
)
def test_a_scalar_its_tag_cannot_read_is_refused_at_its_line(
    tmp_path: Path, value: str, kind: str
) -> None:
    text = EXAMPLE.replace("  max_num_seqs: 2", f"  max_num_seqs: {value}")
    _refused(_plan(tmp_path, text), 15, f"is not a valid {kind}")


def test_a_mapping_used_as_a_key_is_refused(tmp_path: Path) -> None:
    _refused(_plan(tmp_path, EXAMPLE + "? {a: 1}\n: x\n"), 23, "a key must be a plain value")


def test_deep_nesting_is_refused_before_it_recurses(tmp_path: Path) -> None:
    text = EXAMPLE + "notes: " + "[" * 3000 + "]" * 3000 + "\n"
    _refused(_plan(tmp_path, text), 23, "nested more than 32 levels")


def test_an_alias_that_contains_itself_is_a_cycle(tmp_path: Path) -> None:
    _refused(_plan(tmp_path, EXAMPLE + "notes: &loop [*loop]\n"), 23, "(a cycle)")


def test_billion_laughs_is_refused_by_arithmetic(tmp_path: Path) -> None:
    # 9 levels of 9 aliases each: 9**9 = 387,420,489 values once expanded
    levels = ['a0: &a0 "lol"'] + [
        f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(9))}]" for i in range(1, 10)
    ]
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = _refused(_plan(tmp_path, "\n".join(levels) + "\n" + EXAMPLE), None, "expands to more")
    assert time.monotonic() - started < 10
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024, grown_kib
    assert "lol" not in line


def test_an_expansion_inside_one_field_is_not_echoed(tmp_path: Path) -> None:
    # 8 levels of 8 inside serving.max_num_seqs: 16.7 million values, refused, not quoted
    levels = ['x0: &x0 "lol"'] + [
        f"x{i}: &x{i} [{', '.join(f'*x{i - 1}' for _ in range(8))}]" for i in range(1, 9)
    ]
    text = "\n".join(levels) + "\n" + EXAMPLE.replace("max_num_seqs: 2", "max_num_seqs: *x8")
    _refused(_plan(tmp_path, text), None, "expands to more")


def test_a_small_alias_is_still_yaml(tmp_path: Path) -> None:
    """Aliases within the budget keep working: operators share blocks with anchors."""
    text = EXAMPLE.replace("  max_model_len: 16384", "  max_model_len: &window 16384")
    text += "control:\n  w: {value: *window}\n"
    result = _plan(tmp_path, text)
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["max_model_len"] == 16384


def test_a_nul_names_its_line(tmp_path: Path) -> None:
    text = EXAMPLE.replace("  port: 8000", '  port: 8000\n  host: "a\x00b"')
    _refused(_plan(tmp_path, text), 23, "control character U+0000")


def test_invalid_utf8_names_its_line_not_a_byte_offset(tmp_path: Path) -> None:
    data = EXAMPLE.encode().replace(b"name: example", b"name: ex\xffample")
    line = _refused(_plan(tmp_path, data), 4, "not UTF-8")
    assert "position" not in line


def test_a_lone_surrogate_is_refused_at_load(tmp_path: Path) -> None:
    text = EXAMPLE.replace("  port: 8000", '  port: 8000\n  served_model_name: "x\\ud800"')
    _refused(_plan(tmp_path, text), 23, "surrogate")
    out = tmp_path / "out"
    shape = tmp_path / "s.yaml"
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()  # nothing half-written


def test_a_file_past_the_size_limit_is_refused(tmp_path: Path) -> None:
    _refused(_plan(tmp_path, EXAMPLE + "#" * (2 << 20) + "\n"), None, "larger than 1,024 KiB")


# ------------------------------------------------------------- numbers stay numbers


@pytest.mark.parametrize("nodes", ["1000000", "18446744073709551617"])
def test_node_counts_are_bounded(tmp_path: Path, nodes: str) -> None:
    text = SGLANG.replace("  tensor: 2\n", f"  tensor: 2\n  nodes: {nodes}\n")
    assert text.count("\nlaunch:\n") == 1
    text = text.replace("\nlaunch:\n", "\nlaunch:\n  head_address: 10.0.0.1\n")  # the only fault
    assert "nodes" in text
    started = time.monotonic()
    _refused(_plan(tmp_path, text), None, "parallel.nodes")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("version", "shape"), [("0.8.5", EXAMPLE), (None, SGLANG)], ids=["vllm-0.8.5", "sglang"]
)
def test_a_card_of_nothing_is_bad_input(tmp_path: Path, version: str | None, shape: str) -> None:
    text = (
        shape.replace("engine_version: 0.11.0", f"engine_version: {version}") if version else shape
    )
    for total in ("24 GiB", "80 GiB"):
        text = text.replace(f"total: {total}", "total: 0 B")
    _refused(_plan(tmp_path, text), None, "card.total")


def test_a_byte_size_past_any_hardware_is_refused(tmp_path: Path) -> None:
    text = EXAMPLE.replace("kv: 5 GiB", f"kv: {10**30} GiB")
    _refused(_plan(tmp_path, text), 13, "budget.kv")


def test_a_path_longer_than_the_system_takes_is_refused_at_its_line(tmp_path: Path) -> None:
    text = EXAMPLE.replace("  port: 8000", f"  port: 8000\n  weights: {'w' * 300}.gguf")
    _refused(_plan(tmp_path, text), 23, "launch.weights")


def test_no_nan_or_infinity_reaches_json(tmp_path: Path) -> None:
    """plan.json is strict JSON (RFC 8259): a figure that would be NaN is bad input first."""
    for bad in (".nan", ".inf", "-.inf", "1e400"):
        text = EXAMPLE + (
            f"control:\n  c: {{value: {bad}}}\n"
            "expect:\n  - {id: e, metric: decode_tps, control: c, change_pct: [-8, -3]}\n"
        )
        result = _plan(tmp_path, text)
        if result.exit_code == 2:
            continue
        json.loads(result.stdout, parse_constant=lambda c, bad=bad: pytest.fail(f"{bad}: {c}"))


# ------------------------------------------------------- nothing becomes an option

LLAMACPP = (SHAPES / "qwen2.5-coder-llamacpp.yaml").read_text()


@pytest.mark.parametrize(
    ("shape", "field", "yaml_line"),
    [
        (EXAMPLE, "launch.weights", "  weights: --trust-remote-code"),
        (EXAMPLE, "launch.host", "  host: --trust-remote-code"),
        (EXAMPLE, "launch.served_model_name", '  served_model_name: "-x"'),
        (SGLANG, "launch.served_model_name", "  served_model_name: --enable-torch-compile"),
        (LLAMACPP, "launch.host", "  host: --no-mmap"),
    ],
)
def test_a_value_that_starts_with_a_dash_is_refused(
    tmp_path: Path, shape: str, field: str, yaml_line: str
) -> None:
    """``exec vllm serve --trust-remote-code …`` from launch.weights was argument injection."""
    if "launch:\n" in shape:
        head, _, tail = shape.partition("launch:\n")
        tail = "\n".join(
            line for line in tail.splitlines() if not line.startswith(yaml_line.split(":")[0])
        )
        text = f"{head}launch:\n{yaml_line}\n{tail}\n"
    else:
        text = shape + f"launch:\n{yaml_line}\n"
    line = text.splitlines().index(yaml_line) + 1
    out = tmp_path / "out"
    (tmp_path / "s.yaml").write_text(text)
    result = CliRunner().invoke(main, ["compile", str(tmp_path / "s.yaml"), "-o", str(out)])
    _refused(result, line, f"{field}:", "starts with '-'")
    assert not out.exists()


def test_a_model_that_starts_with_a_dash_is_refused(tmp_path: Path) -> None:
    text = EXAMPLE.replace("model: meta-llama/Llama-3.1-8B-Instruct", "model: --model=evil")
    _refused(_plan(tmp_path, text), 7, "model:", "starts with '-'")


def test_options_stay_possible_where_they_are_meant(tmp_path: Path) -> None:
    text = EXAMPLE.replace("  port: 8000", "  port: 8000\n  extra_args: [--enforce-eager]")
    result = _plan(tmp_path, text)
    assert result.exit_code in (0, 1), result.output
    (role,) = json.loads(result.stdout)["launch"]["roles"]
    assert role["argv"][-1] == "--enforce-eager"


@pytest.mark.parametrize("escape", ["\\0", "\\x07", "\\e", "\\x85"])
def test_an_escaped_control_character_in_a_value_is_refused(tmp_path: Path, escape: str) -> None:
    """A NUL inside a launch value compiled: bash dropped it (``ab``), plan.json kept it."""
    text = EXAMPLE.replace("  port: 8000", f'  port: 8000\n  served_model_name: "a{escape}b"')
    _refused(_plan(tmp_path, text), 23, "control character")


@pytest.mark.parametrize("value", ['"yes"', '"true"', "1", "0"])
def test_a_switch_is_true_or_false_as_yaml_writes_them(tmp_path: Path, value: str) -> None:
    """A quoted word or a number is not read as a switch (pydantic's lax mode would take
    "yes" and 1 as true): the shape says what it means or is refused at the line."""
    text = EXAMPLE.replace("  max_num_seqs: 2\n", f"  max_num_seqs: 2\n  prefix_caching: {value}\n")
    assert text != EXAMPLE
    line = text.splitlines().index(f"  prefix_caching: {value}") + 1
    _refused(_plan(tmp_path, text), line, "serving.prefix_caching", "boolean")
    unquoted = EXAMPLE.replace("  max_num_seqs: 2\n", "  max_num_seqs: 2\n  prefix_caching: yes\n")
    assert _plan(tmp_path, unquoted).exit_code == 0  # YAML's own yes is true
