"""One rule for paths: every path a shape names resolves against the shape file's folder.

Each command runs from a working directory that is not the shape's folder, so a reading
that fell back on the working directory would find nothing there (or something else).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.probes.run import eos_ids_for
from fakplan.shape import load_shape
from tests.support.paths import DATA, SHAPES
from tests.support.tinymodels import TinyLlama, write_tiny_llama

TINY = TinyLlama()
# 2 layers x 2 KV heads x (16 + 16) x 2 B (f16): what one cell of the tiny model costs
CELL = 2 * 2 * (16 + 16) * 2
SHAPE = """\
name: tiny
engine: llamacpp
model: ../models/tiny.gguf
card: {total: 32 GiB, device: cpu}  # the boot table is a 31.86 GiB card's
budget: {weights: 64 MiB, kv: 256 KiB}
serving: {max_num_seqs: 1, max_model_len: 1024, kv_cache_dtype: f16}
ceiling: {ledger: ../boots/table.log}
launch: {binary: llama-cpp-python}
"""


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """repo/shapes/tiny.yaml naming ../models/tiny.gguf and ../boots/table.log; the working
    directory is a sibling folder that holds none of them."""
    repo = tmp_path / "repo"
    (repo / "shapes").mkdir(parents=True)
    (repo / "models").mkdir()
    (repo / "boots").mkdir()
    write_tiny_llama(repo / "models" / "tiny.gguf", TINY)
    shutil.copy(DATA / "ledgers" / "table-seed002.log", repo / "boots" / "table.log")
    (repo / "shapes" / "tiny.yaml").write_text(SHAPE, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return repo


def _plan(shape: Path) -> dict[str, object]:
    result = CliRunner().invoke(main, ["plan", str(shape), "--json"])
    assert result.exit_code in (0, 1), result.output
    plan: dict[str, object] = json.loads(result.output)
    return plan


def test_plan_reads_model_and_ledger_beside_the_shape(layout: Path) -> None:
    plan = _plan(layout / "shapes" / "tiny.yaml")
    assert plan["rate_bytes_per_token"] == CELL
    assert plan["ceiling_bytes"] is not None
    derivations = plan["derivations"]
    assert isinstance(derivations, dict)
    assert str(layout / "boots" / "table.log") in derivations["ceiling_bytes"]
    weights = next(g for g in plan["gates"] if g["id"] == "weights-fit")  # type: ignore[attr-defined]
    assert weights["status"] == "pass"  # the GGUF's tensor bytes were read


def test_a_spelling_relative_to_the_working_directory_is_refused(
    layout: Path, tmp_path: Path
) -> None:
    """The file exists beside the working directory, not beside the shape: refused, with the
    path the shape's folder gives, so no spelling works for one command and not another."""
    shutil.copytree(layout / "models", tmp_path / "elsewhere" / "models")
    shape = layout / "shapes" / "cwd.yaml"
    shape.write_text(
        SHAPE.replace("../models/tiny.gguf", "models/tiny.gguf").replace(
            "ceiling: {ledger: ../boots/table.log}", "ceiling: 512 MiB"
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["plan", str(shape)])
    assert result.exit_code == 2
    assert f"{shape}:3: model:" in result.output
    assert str(layout / "shapes" / "models" / "tiny.gguf") in result.output
    assert "relative to the shape's folder" in result.output


def test_compile_gate_and_verify_from_elsewhere(layout: Path, tmp_path: Path) -> None:
    shape = layout / "shapes" / "tiny.yaml"
    out = tmp_path / "out"
    compiled = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert compiled.exit_code == 0, compiled.output
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert record["ceiling_bytes"] is not None and record["rate_bytes_per_token"] == CELL
    gated = CliRunner().invoke(main, ["gate", str(shape)])
    assert gated.exit_code == 0, gated.output
    assert "ok 3 - tiny: weights fit their budget" in gated.output
    boot = DATA / "ledgers" / "llama-cpp-python-0.3.36.log"
    verified = CliRunner().invoke(
        main, ["verify", str(shape), "--ledger", str(boot), "-o", str(out), "--json"]
    )
    assert verified.exit_code in (0, 1), verified.output
    verdicts = json.loads(verified.output)["verdicts"]
    # the boot printed "CPU_Mapped model buffer size = 0.41 MiB": the GGUF beside the shape
    # was weighed, so the weights prediction is judged rather than unverifiable
    assert verdicts["weights"]["status"] == "held"


def test_probe_finds_the_eos_id_in_the_gguf_beside_the_shape(layout: Path) -> None:
    ids, note = eos_ids_for(load_shape(layout / "shapes" / "tiny.yaml"))
    # tests/tinymodels.py: the vocabulary is 256 bytes, "Ġt", "he", "<|bos|>", "<|eos|>"
    assert ids == (259,)
    assert note == "EOS id(s) 259 from ../models/tiny.gguf"


def test_diff_from_elsewhere(layout: Path) -> None:
    old = layout / "shapes" / "tiny.yaml"
    new = layout / "shapes" / "tiny-2.yaml"
    new.write_text(SHAPE.replace("kv: 256 KiB", "kv: 512 KiB"), encoding="utf-8")
    result = CliRunner().invoke(main, ["diff", str(old), str(new)])
    assert result.exit_code == 0, result.output
    assert "  budget.kv: 256 KiB -> 512 KiB\n" in result.output


def test_the_pytest_plugin_from_elsewhere(layout: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path / "elsewhere"),
            "--fakplan-shapes",
            str(layout / "shapes"),
            "-rA",
        ],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)},
    )
    assert "PASSED" in done.stdout and "tiny.yaml::weights-fit" in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rendered_script_opens_the_files_fakplan_read(layout: Path, tmp_path: Path) -> None:
    """serve.sh, run from a third folder, starts the engine where ../models/tiny.gguf is the
    file fakplan weighed: the shape's folder, found from the script's own place."""
    shape = layout / "shapes" / "tiny.yaml"
    out = layout / "out"
    assert CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)]).exit_code == 0
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert record["launch"]["shape_paths"] == ["../models/tiny.gguf"]
    seen = tmp_path / "seen.json"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    stub = stubs / "python3"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "model = sys.argv[sys.argv.index('--model') + 1]\n"
        f"json.dump([os.getcwd(), model, os.path.isfile(model)], open({str(seen)!r}, 'w'))\n"
    )
    stub.chmod(0o755)
    third = tmp_path / "third"
    third.mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin"}
    done = subprocess.run(
        ["bash", str(out / "tiny" / "serve.sh")], cwd=third, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(seen.read_text()) == [str(layout / "shapes"), "../models/tiny.gguf", True]
    # the trees apart: FAKPLAN_SHAPE_DIR names the shape's folder
    moved = tmp_path / "moved"
    shutil.copytree(out / "tiny", moved)
    env["FAKPLAN_SHAPE_DIR"] = str(layout / "shapes")
    done = subprocess.run(["bash", str(moved / "serve.sh")], cwd=third, env=env, check=True)
    assert json.loads(seen.read_text())[2] is True


def test_a_draft_model_inside_vllms_speculative_json_runs_from_the_shapes_folder(
    tmp_path: Path,
) -> None:
    """vLLM takes the draft model inside --speculative-config's JSON, not as a word of its
    own: the script still runs from the shape's folder, where ``draft/`` is."""
    shapes = tmp_path / "shapes"
    (shapes / "draft").mkdir(parents=True)
    # an EAGLE head of one layer with the target's attention (its layer joins the pool)
    head = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    (shapes / "draft" / "config.json").write_text(json.dumps(head))
    shape = shapes / "spec.yaml"
    shape.write_text(
        (SHAPES / "example.yaml")
        .read_text()
        .replace("  max_num_seqs: 2\n", "  max_num_seqs: 2\n  spec_tokens: 2\n")
        .replace("launch:\n", "launch:\n  speculative: {method: eagle, model: draft}\n")
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    record = json.loads((out / "example" / "plan.json").read_text())
    (role,) = record["launch"]["roles"]
    assert '"model":"draft"}' in role["argv"][-1]
    assert record["launch"]["shape_paths"] == ["draft"]
    assert "/../../shapes; fi" in (out / "example" / "serve.sh").read_text()
