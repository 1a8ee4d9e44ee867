"""Issue 27's cases, each a regression test: what a shape points at is read as hostile.

Each case on main at 9fcf43b was a traceback, a hang, a memory blow-up or a script that
ran what a file said. Now each is one line on stderr with exit 2 (or the documented
exit), nothing written, in bounded time and memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main

from .conftest import PUBLIC, SHAPES

LLAMA = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _one_line(result: Any) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output + result.stderr
    return str(lines[0])


def _model_shape(folder: Path, model: str, name: str = "m.yaml") -> Path:
    path = folder / name
    path.write_text(
        f"name: m\nengine: vllm\nmodel: {json.dumps(model)}\ncard: {{total: 80 GiB}}\n"
        "budget: {weights: 20 GiB, kv: 20 GiB}\nserving: {max_num_seqs: 2, max_model_len: 4096}\n"
    )
    return path


def _config(folder: Path, **changes: Any) -> Path:
    config = json.loads(LLAMA.read_text())
    config.update(changes)
    model = folder / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(config))
    return model


# -------------------------------------------------------------------- model files


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('"max_position_embeddings": Infinity', "Infinity is not a JSON number"),
        ('"max_position_embeddings": NaN', "NaN is not a JSON number"),
        ('"max_position_embeddings": "abc"', "/max_position_embeddings: expected a whole number"),
        ('"max_position_embeddings": ' + "9" * 5000, "an integer of 5,000 digits"),
        ('"vocab_size": 1e400', "1e400 is out of a number's range"),
        ('"rope_scaling": {"rope_type": "llama3", "factor": 1e400}', "out of a number's range"),
        ('"head_dim": 0', "/head_dim: expected a whole number from 1 to 1,048,576, got 0"),
        (
            '"num_hidden_layers": 1e18',
            "/num_hidden_layers: expected a whole number from 1 to 4,096",
        ),
        ('"num_hidden_layers": 1000000000', "/num_hidden_layers: expected a whole number"),
        ('"num_hidden_layers": 10000000', "/num_hidden_layers: expected a whole number"),
        ('"deep": ' + "[" * 5000 + "]" * 5000, "nested 5,001 levels deep"),
    ],
)
def test_a_hostile_config_is_one_line(tmp_path: Path, raw: str, expected: str) -> None:
    """9fcf43b: OverflowError, ValueError, ZeroDivisionError, RecursionError, MemoryError."""
    model = tmp_path / "model"
    model.mkdir()
    text = LLAMA.read_text().rstrip().rstrip("}").rstrip().rstrip(",")
    (model / "config.json").write_text(f"{text}, {raw}}}")
    line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
    assert expected in line, line
    assert "config.json" in line


def test_a_huge_config_is_refused_by_its_size(tmp_path: Path) -> None:
    """9fcf43b: a 300 MB config.json reached 637 MB RSS before its refusal."""
    model = tmp_path / "model"
    model.mkdir()
    with (model / "config.json").open("wb") as handle:
        handle.truncate(300 << 20)  # sparse: 300 MB of zeros, no disk used
    line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
    assert "314,572,800 bytes, more than the 8,388,608 a config.json can be" in line


@pytest.mark.parametrize("index", [
    '{"metadata": {"total_size": Infinity}}',
    '{"metadata": {"total_size": -5}}',
    '{"metadata": ' * 200 + "{}" + "}" * 200,
])  # fmt: skip
def test_a_hostile_safetensors_index_is_one_line(tmp_path: Path, index: str) -> None:
    model = _config(tmp_path)
    (model / "model.safetensors.index.json").write_text(index)
    line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
    assert "model.safetensors.index.json" in line


def test_negative_tensor_sizes_never_pass_the_weights_gate(tmp_path: Path) -> None:
    """9fcf43b: a header whose offsets run backwards made `weights fit their budget` pass."""
    model = _config(tmp_path)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [100, 0]}}).encode()
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
    assert "/w/data_offsets: ends at 0 before it starts at 100" in line


def _gguf(path: Path, **overrides: Any) -> Path:
    """The suite's tiny llama GGUF with some keys of its header replaced."""
    import gguf

    from .tinymodels import TinyLlama, write_tiny_llama

    write_tiny_llama(path, TinyLlama())
    reader = gguf.GGUFReader(path)
    writer = gguf.GGUFWriter(path.with_suffix(".new.gguf"), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        name = field.name
        if name.removeprefix("llama.") in overrides:
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), kind)
    for key, (value, kind) in overrides.items():
        writer.add_key_value(f"llama.{key}", value, kind)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = path.with_suffix(".new.gguf")
    out.replace(path)
    return path


@pytest.mark.parametrize(
    ("key", "value", "kind", "expected"),
    [
        ("block_count", 0, "UINT32", "llama.block_count: expected a whole number from 1 to 4,096, got 0"),
        ("block_count", 1 << 60, "UINT64", "llama.block_count: expected a whole number"),
        ("block_count", 10**9, "UINT32", "llama.block_count: expected a whole number"),
        ("attention.head_count", 0, "UINT32", "llama.attention.head_count: expected a whole number from 1"),
        ("context_length", float("nan"), "FLOAT32", "llama.context_length: expected a finite number"),
        ("embedding_length", float("inf"), "FLOAT32", "llama.embedding_length: expected a finite number"),
    ],
)  # fmt: skip
def test_a_hostile_gguf_is_one_line(
    tmp_path: Path, key: str, value: Any, kind: str, expected: str
) -> None:
    """9fcf43b: ValueError, OverflowError, ZeroDivisionError and MemoryError tracebacks."""
    import gguf

    path = _gguf(tmp_path / "m.gguf", **{key: (value, getattr(gguf.GGUFValueType, kind))})
    line = _one_line(_run("kv", str(path), "--engine", "llamacpp"))
    assert expected in line, line


@pytest.mark.parametrize("what", ["config", "gguf"])
def test_a_fifo_or_a_device_is_refused_not_read(tmp_path: Path, what: str) -> None:
    """9fcf43b: a FIFO hung (killed at 20 s); /dev/zero read 15.5 GB."""
    if what == "config":
        folder = tmp_path / "fifo"
        folder.mkdir()
        os.mkfifo(folder / "config.json")
        zero = tmp_path / "zero"
        zero.mkdir()
        (zero / "config.json").symlink_to("/dev/zero")
        targets = [str(folder), str(zero)]
    else:
        os.mkfifo(tmp_path / "f.gguf")
        (tmp_path / "z.gguf").symlink_to("/dev/zero")
        targets = [str(tmp_path / "f.gguf"), str(tmp_path / "z.gguf")]
    for target in targets:
        proc = subprocess.run(
            [sys.executable, "-m", "fakplan", "kv", target, "--engine", "vllm"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 2, proc.stderr
        assert "not a file" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_symlink_loops_are_one_line(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    line = _one_line(_run("kv", str(loop / "config.json"), "--engine", "vllm"))
    assert "symlink loop" in line or "no such file" in line
    shape = SHAPES / "example.yaml"
    line = _one_line(_run("verify", str(shape), "--ledger", str(loop)))
    assert "symlink loop" in line


# ------------------------------------------------------ records into scripts


def test_a_hostile_record_cannot_put_a_command_in_a_script(tmp_path: Path) -> None:
    """9fcf43b: a newline in a verdict's `at` or a retired prediction's `id`, read back
    from plan.json, was rendered into the headers of <name>.env and serve.sh with the
    newline intact, so the line after it ran when the script was sourced or started."""
    out = tmp_path / "out"
    shape = tmp_path / "example.yaml"
    shape.write_text((SHAPES / "example.yaml").read_text())
    assert _run("compile", str(shape), "-o", str(out)).exit_code == 0
    record = out / "example" / "plan.json"
    plan = json.loads(record.read_text())
    evil = "x\ntouch PWNED\n#"
    verdict = {"status": "held", "observed": evil, "source": evil, "note": evil, "at": evil}
    plan["predictions"][0]["verdicts"] = [verdict]
    gone = dict(plan["predictions"][0], id=f"old{evil}", claim=evil, command=evil)
    plan["predictions"].append(gone)  # no longer the shape's: retired on the next compile
    record.write_text(json.dumps(plan))
    assert _run("compile", str(shape), "-o", str(out)).exit_code == 0
    for name in ("example.env", "serve.sh"):
        text = (out / "example" / name).read_text()
        assert "touch PWNED" in text  # kept, as text inside a comment
        assert not any(line.startswith("touch") for line in text.splitlines())
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    subprocess.run(
        ["bash", "-c", f"source {out / 'example' / 'example.env'}"],
        cwd=sandbox,
        check=True,
        timeout=30,
    )
    assert not (sandbox / "PWNED").exists()
