"""``fakplan schema`` describes the language the loader reads.

Every shape the repository ships or the test suite writes must validate against the
printed schema (an editor must not flag an example), and shapes the loader refuses for
a reason a schema can state (an unknown key, a bare byte number, an unknown engine)
must fail it too. The loader is the judge: each sample is checked against both.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from fakplan.budget import DeviceBudget
from fakplan.cli import main
from fakplan.errors import ShapeError
from fakplan.shape import load_shape
from tests.support.paths import ROOT, SHAPES

GIB = 1 << 30


def _fixed_budget(gpu: bool) -> DeviceBudget:
    """``card.total: auto`` answered without asking this machine."""
    return DeviceBudget("env", (), 8 * GIB, "8 GiB from the schema test")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(document)
    return document


def _errors(schema: dict[str, Any], data: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}"
        for e in validator.iter_errors(data)
    ]


def _is_shape_text(text: str) -> bool:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and {"name", "engine", "card"} <= set(data)


def _shape_files() -> list[Path]:
    """Every shape file in the repository: the examples, init's scaffold, the test data."""
    found = [
        *sorted(SHAPES.glob("*.yaml")),
        *sorted((ROOT / "templates" / "init" / "shapes").glob("*.yaml")),
        *(
            path
            for path in sorted((ROOT / "tests" / "data").rglob("*.yaml"))
            if _is_shape_text(path.read_text(encoding="utf-8"))
        ),
    ]
    return found


def _written_by_the_tests(folder: Path) -> list[Path]:
    """The shapes the suite's own helpers write, each in a folder of its own."""
    from tests import test_cpu_device, test_render, test_verify
    from tests.probes import test_probes
    from tests.support import realvllm

    def fresh(name: str) -> Path:
        path = folder / name
        path.mkdir()
        return path

    model = fresh("model") / "tiny.gguf"
    model.write_bytes(b"")
    written = [
        realvllm.write_vllm_shape(fresh("vllm-cpu"), model, port=8123),
        test_cpu_device.tiny_shape(fresh("cpu-device")),
        test_cpu_device.llamacpp_cpu_shape(fresh("llamacpp-cpu"), "llama-server"),
        test_cpu_device.llamacpp_cpu_shape(fresh("llamacpp-py"), "llama-cpp-python"),
        test_probes.tiny_shape(fresh("probe"), SimpleNamespace(model=model)),  # type: ignore[arg-type]
        test_verify.write_shape(fresh("verify") / "s.yaml"),
    ]
    # the loader refuses a value that starts with '-' (an option); the rest load
    loadable = [text for text in test_render.HOSTILE if not text.startswith("-")]
    for index, text in enumerate(loadable):
        for engine in ("vllm", "sglang", "llamacpp"):
            written.append(
                test_render._hostile_shape(fresh(f"hostile-{engine}-{index}"), engine, text)
            )
        written.append(
            test_render._hostile_shape(fresh(f"hostile-nodes-{index}"), "vllm", text, nodes=2)
        )
    return written


def _module_constants() -> list[tuple[str, str]]:
    """Shape texts kept as module constants in the test modules (GOOD, AFTER, ...)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.stem == "test_toy_engine":  # its engine exists only inside its own tests
            continue
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(dotted)
        for name, value in vars(module).items():
            if isinstance(value, str) and _is_shape_text(value):
                found.append((f"{path.stem}.{name}", value))
    return found


def test_every_shape_the_repository_and_the_tests_hold_validates(
    schema: dict[str, Any], tmp_path: Path
) -> None:
    samples: list[tuple[str, Path]] = [(str(p.relative_to(ROOT)), p) for p in _shape_files()]
    samples += [(str(p.relative_to(tmp_path)), p) for p in _written_by_the_tests(tmp_path)]
    for index, (name, text) in enumerate(_module_constants()):
        path = tmp_path / f"constant-{index}" / "shape.yaml"
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        samples.append((name, path))
    names = {name for name, _ in samples}
    # the repository's own examples are all here, and the suite's writers with them
    assert {
        "shapes/example.yaml",
        "shapes/frank-archon.yaml",
        "templates/init/shapes/example.yaml",
    } <= names
    assert "test_shape.GOOD" in names
    assert {"vllm-cpu/tiny-vllm-cpu.yaml", "probe/tiny-probe.yaml", "verify/s.yaml"} <= names
    assert len(samples) >= 50
    failures = []
    for name, path in samples:
        load_shape(path, budget=_fixed_budget)  # the loader takes it: so must the schema
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        failures += [f"{name}: {e}" for e in _errors(schema, data)]
    assert not failures


def test_engines_are_the_registrys(schema: dict[str, Any]) -> None:
    from fakplan.engines import ENGINES

    assert schema["properties"]["engine"]["enum"] == sorted(ENGINES)


def test_byte_sizes_carry_the_parsers_pattern(schema: dict[str, Any]) -> None:
    from fakplan.units import BYTE_SIZE_PATTERN

    budget = schema["$defs"]["Budget"]["properties"]
    for field in ("weights", "kv"):
        assert budget[field]["type"] == "string"
        assert budget[field]["pattern"] == BYTE_SIZE_PATTERN
    assert re.search(BYTE_SIZE_PATTERN, "29,120 MiB")


def test_every_default_is_valid_shape_text(schema: dict[str, Any]) -> None:
    """An editor that inserts a default must not insert what the loader refuses (a bare 0)."""
    bad = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if "default" in node and node["default"] is not None:
                rule = {k: v for k, v in node.items() if k != "default"}
                document = {"$defs": schema["$defs"], **rule}
                if _errors(document, node["default"]):
                    bad.append(f"{where}: {node['default']!r}")
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]")

    walk(schema["properties"], "properties")
    walk(schema["$defs"], "$defs")
    assert not bad


GOOD = (SHAPES / "frank-archon.yaml").read_text()

# shapes the loader refuses, each for a reason a schema can state, and where the schema says so
REFUSED = {
    "unknown top-level key": (GOOD + "colour: blue\n", "<top>"),
    "unknown nested key": (GOOD.replace("  max_num_seqs: 2", "  max_num_seq: 2"), "serving"),
    "bare number for bytes": (GOOD.replace("kv: 6912 MiB", "kv: 6912"), "budget.kv"),
    "bare number for a ceiling": (GOOD.replace("ceiling: 29120 MiB", "ceiling: 29120"), "ceiling"),
    "unknown unit": (GOOD.replace("kv: 6912 MiB", "kv: 6912 mbit"), "budget.kv"),
    "unknown engine": (GOOD.replace("engine: custom", "engine: tgi"), "engine"),
    "ceiling with two sources": (
        GOOD.replace("ceiling: 29120 MiB", "ceiling: {ledger: boot.log, bytes: 29120 MiB}"),
        "ceiling",
    ),
    "ceiling with none": (
        GOOD.replace("ceiling: 29120 MiB", "ceiling: {note: measured}"),
        "ceiling",
    ),
    "component with two sizes": (
        GOOD.replace("per_page: 26 KiB", "per_page: 26 KiB\n      per_token: 6.5 KiB"),
        "contract",
    ),
    "no budget and no fraction": (
        GOOD.replace("budget:\n  weights: 22208 MiB\n  kv: 6912 MiB\n", ""),
        "<top>",
    ),
    "a null budget": (
        GOOD.replace("budget:\n  weights: 22208 MiB\n  kv: 6912 MiB\n", "budget: null\n"),
        "budget",
    ),
    "a card named by a sku whose CUDA totals disagree, without its total": (
        GOOD.replace("total: 31.86 GiB", "sku: RTX-4090"),
        "card",
    ),
    "card total as a number": (
        GOOD.replace("total: 31.86 GiB", "total: 34209414513"),
        "card.total",
    ),
}


def _refused_by_the_tests(folder: Path) -> dict[str, tuple[Path, str]]:
    """test_cli's bad shapes, those a schema can state, with where it says so."""
    from tests.cli import test_cli

    folder.mkdir()
    cases = test_cli._bad_shapes(folder)
    where = {
        "unknown-key": "<top>",
        "bare-number": "budget.kv",
        "zero-seqs": "serving.max_num_seqs",
        "negative-seqs": "serving.max_num_seqs",
    }
    return {f"test_cli {name}": (cases[name], at) for name, at in where.items()}


def test_what_the_loader_refuses_fails_the_schema_too(
    schema: dict[str, Any], tmp_path: Path
) -> None:
    assert not _errors(schema, yaml.safe_load(GOOD)), "each case below is GOOD with one fault"
    cases: dict[str, tuple[Path, str]] = {}
    for name, (text, at) in REFUSED.items():
        assert text != GOOD, f"{name}: the replacement did not apply"
        path = tmp_path / f"{name.replace(' ', '-')}.yaml"
        path.write_text(text, encoding="utf-8")
        cases[name] = (path, at)
    cases.update(_refused_by_the_tests(tmp_path / "cli"))
    wrong = []
    for name, (path, at) in cases.items():
        with pytest.raises(ShapeError):
            load_shape(path)
        errors = _errors(schema, yaml.safe_load(path.read_text(encoding="utf-8")))
        if not errors or not all(e.startswith(f"{at}:") for e in errors):
            wrong.append(f"{name}: expected a schema error at {at}, got {errors}")
    assert not wrong
