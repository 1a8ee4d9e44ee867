"""A fast start: each command loads what it uses, and `fakplan --help` loads no command.

Timings are the benchmark's (tests/bench/bench_startup.py); here, what is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from fakplan.cli import COMMANDS, main
from tests.support.paths import ROOT

HEAVY = (
    "httpx",
    "numpy",
    "gguf",
    "jinja2",
    "prometheus_client",
    "fakplan.ledger",
    "fakplan.probes",
)


def _modules_after(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_registry_names_every_command_with_its_own_help_line() -> None:
    ctx = click.Context(main)
    for name, (_, _, text) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(limit=500) == text, name


def test_help_loads_no_command() -> None:
    loaded = _modules_after(
        "from fakplan.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert not {f"fakplan.cli.{name}" for name in COMMANDS} & loaded
    assert not [m for m in HEAVY if m in loaded]


def test_plan_loads_neither_the_probes_nor_the_ledger_parsers() -> None:
    loaded = _modules_after(
        "from fakplan.cli import main\n"
        "try:\n    main(['plan', 'shapes/example.yaml'])\nexcept SystemExit:\n    pass"
    )
    assert "fakplan.plan" in loaded  # it did plan
    assert not [m for m in HEAVY if m in loaded]


def test_a_vllm_plan_loads_only_vllms_folder_and_no_rich_for_json(tmp_path: Path) -> None:
    """9fcf43b: the SGLang and llama.cpp modules loaded for a vLLM shape, and rich for
    every plan. The example without its 512 MiB warning threshold passes every gate
    (1,024 MiB unclaimed is the default's limit): nothing to prove either."""
    text = (ROOT / "shapes" / "example.yaml").read_text()
    shape = tmp_path / "example.yaml"
    shape.write_text(text.replace("limits:\n  unclaimed_warn_above: 512 MiB\n", ""))
    loaded = _modules_after(
        "from fakplan.cli import main\n"
        f"try:\n    main(['plan', {str(shape)!r}, '--json'])\nexcept SystemExit:\n    pass"
    )
    assert "fakplan.engines.vllm" in loaded  # it did load the shape's engine
    others = ("fakplan.engines.sglang", "fakplan.engines.llamacpp", "fakplan.engines.custom")
    assert not [m for m in loaded if m.startswith(others)]
    assert not [m for m in loaded if m == "rich" or m.startswith("rich.")]
    assert "fakplan.fit" not in loaded  # no fix to prove
