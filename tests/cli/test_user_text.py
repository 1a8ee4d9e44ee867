"""What fakplan prints cites nothing a reader cannot open: no internal document numbers.

A message, a derivation, a rendered header or --help that says "seed 004" or
"engines.md §3" points at a document the user does not have; each says the thing
itself (the engine's source file and release) instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.paths import ROOT, SHAPES

INTERNAL = re.compile(r"seed[ -]?0\d\d|§|engines(?:-on-cpu)?\.md|\breference/")
LEDGERS = sorted(
    [
        *(ROOT / "tests" / "data" / "ledgers").glob("*.log"),
        *(ROOT / "tests" / "data" / "public" / "ledgers").glob("*.log"),
    ]
)


def _cited(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 20] for m in INTERNAL.finditer(text)]


def test_the_pattern_catches_what_it_must() -> None:
    for text in ("seed 004", "seed-002's", "docs/engines.md §1.10", "engines-on-cpu.md"):
        assert _cited(text), text
    assert not _cited("seeds the corpus; 0c1e57098 src/llama-context.cpp; vLLM v0.33.0")


@pytest.mark.parametrize("shape", sorted(SHAPES.glob("*.yaml")), ids=lambda p: p.name)
def test_plans_and_rendered_files_cite_no_internal_document(shape: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    texts = [
        runner.invoke(main, ["plan", str(shape)]).output,
        runner.invoke(main, ["plan", str(shape), "--json"]).output,
        runner.invoke(main, ["gate", str(shape), "--format", "json"]).output,
    ]
    out = tmp_path / "out"
    runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    texts += [path.read_text(encoding="utf-8") for path in sorted(out.rglob("*")) if path.is_file()]
    assert texts[0] and len(texts) > 3
    assert [c for text in texts for c in _cited(text)] == []


def test_ledger_figures_and_their_sources_cite_no_internal_document() -> None:
    assert LEDGERS
    runner = CliRunner()
    cited = []
    for log in LEDGERS:
        result = runner.invoke(main, ["ledger", str(log), "--json"])
        # the test log's own file name (table-seed002.log) is the user's file, not a citation
        cited += [f"{log.name}: {c}" for c in _cited(result.output.replace(str(log), "LOG"))]
    assert cited == []


def test_every_ledger_row_and_refusal_source_says_the_thing_itself() -> None:
    """Sources of rows a log might not contain, and of refusals no test server sends."""
    from fakplan.engines import bootlog_formats, context_refusals
    from fakplan.gates import BUILTIN_GATES

    texts = [row.source for fmt in bootlog_formats().values() for row in fmt.rows]
    texts += [f"{r.engine} {r.version} {r.note}" for r in context_refusals()]
    texts += [g.rationale for g in BUILTIN_GATES]
    assert [c for text in texts for c in _cited(text)] == []


def test_help_and_probe_refusals_cite_no_internal_document() -> None:
    runner = CliRunner()
    commands = ["", *sorted(main.commands)]  # type: ignore[attr-defined]
    texts = [runner.invoke(main, [*filter(None, [name]), "--help"]).output for name in commands]
    # a decode figure under 128 tokens is refused before any request is sent
    refused = runner.invoke(
        main,
        [
            "probe",
            str(SHAPES / "example.yaml"),
            "--url",
            "http://127.0.0.1:9/v1",
            "--max-tokens",
            "8",
        ],
    )
    assert refused.exit_code == 2 and "first-token noise" in refused.output
    texts.append(refused.output)
    assert [c for text in texts for c in _cited(text)] == []
