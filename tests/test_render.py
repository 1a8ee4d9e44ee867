"""Rendered launch files: golden per engine, shell-inert, and executing exactly the plan's argv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.golden import check_golden
from tests.support.paths import SHAPES

ENGINE_SHAPES = {
    "vllm": "example.yaml",
    "sglang": "qwen3-32b-sglang.yaml",
    "llamacpp": "qwen2.5-coder-llamacpp.yaml",
    "custom": "frank-archon.yaml",
}

HOSTILE = [
    "$(touch pwned-subst)",
    "`touch pwned-tick`",
    "'; touch pwned-quote; '",
    '"; touch pwned-dquote; "',
    "a b\tc",
    "line1\nline2; touch pwned-newline",
    "${HOME}$PATH",
    "-- --rm -rf",
    "ünï😀",
    "\\",
]


def compile_one(runner: CliRunner, shape: Path, out: Path) -> dict[str, object]:
    result = runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    folder = next(p for p in out.iterdir() if p.is_dir())
    return json.loads((folder / "plan.json").read_text())


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])  # custom: test_cli.py
def test_golden_per_engine(
    engine: str, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # compiled as an operator's repository would: shapes/ beside out/, so a script that
    # finds the shape's folder from its own place says ../../shapes on every machine
    shutil.copytree(SHAPES, tmp_path / "shapes")
    monkeypatch.chdir(tmp_path)
    shape = f"shapes/{ENGINE_SHAPES[engine]}"
    result = runner.invoke(main, ["compile", shape, "-o", "out"])
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "out").iterdir()
    for path in sorted(folder.iterdir()):
        if path.is_dir():  # kubernetes/: tests/test_kubernetes.py has its goldens
            continue
        check_golden(f"{engine}/{path.name}", path.read_text())


def test_rerender_is_byte_identical(runner: CliRunner, in_root: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    runner.invoke(main, ["compile", "shapes", "-o", str(a)])
    runner.invoke(main, ["compile", "shapes", "-o", str(b)])
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert len(names) >= 5 * 2 + 3  # every shape: plan.json + env (+ serve.sh for real engines)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _stub_bin(folder: Path, record: Path) -> Path:
    """Stub engine binaries that record the argv they were given, then exit 0."""
    folder.mkdir()
    code = (
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + '\\n')\n"
    )
    for name in ("vllm", "python3", "llama-server", "ray"):
        stub = folder / name
        stub.write_text(code)
        stub.chmod(0o755)
    return folder


def run_role(script: Path, tmp_path: Path) -> list[list[str]]:
    record = tmp_path / "argv.jsonl"
    record.unlink(missing_ok=True)
    stubs = tmp_path / "bin"
    if not stubs.exists():
        _stub_bin(stubs, record)
    syntax = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert syntax.returncode == 0, syntax.stderr
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, check=False, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_serve_executes_the_plans_argv(
    engine: str, runner: CliRunner, in_root: Path, tmp_path: Path
) -> None:
    plan = compile_one(runner, SHAPES / ENGINE_SHAPES[engine], tmp_path / "out")
    (role,) = plan["launch"]["roles"]  # type: ignore[index]
    calls = run_role(tmp_path / "out" / str(plan["name"]) / role["file"], tmp_path)
    assert calls == [list(role["argv"])]
    argv = role["argv"]
    if engine == "vllm":
        # the flags that realise the shape, as derived in plan.json
        assert argv[argv.index("--max-model-len") + 1] == str(plan["max_model_len"])
        assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(plan["kv_budget_bytes"])
    if engine == "sglang":
        assert argv[argv.index("--max-total-tokens") + 1] == str(plan["tokens_backed"])
    if engine == "llamacpp":
        assert argv[argv.index("-c") + 1] == str(plan["tokens_backed"]) == "65536"
        assert argv[argv.index("--cache-type-v") + 1] == "q8_0" and "-fa" in argv


def _hostile_shape(tmp_path: Path, engine: str, text: str, *, nodes: int = 1) -> Path:
    """A shape whose every free string field carries ``text`` (model: a folder named with it)."""
    model_dir = tmp_path / f"m{text}"
    model_dir.mkdir(parents=True)
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }
    (model_dir / "config.json").write_text(json.dumps(cfg))
    shape = {
        "name": "hostile",
        "engine": engine,
        "model": str(model_dir),
        "card": {"total": "24 GiB", "count": 2},
        "parallel": {"nodes": nodes},
        "budget": {"weights": "4 GiB", "kv": "1 GiB"},
        "serving": {
            "max_num_seqs": 1,
            "max_model_len": 2048,
            "kv_cache_dtype": "auto",
            "spec_tokens": 1,
        },
        "ceiling": {"bytes": "20 GiB", "note": text},
        "control": {"decode": {"value": 100, "note": text, "unit": text}},
        "expect": [
            {
                "id": "decode-x",
                "metric": "decode_tps",
                "control": "decode",
                "change_pct": [-5, 5],
                "note": text,
            }
        ],
        "launch": {
            "host": text,
            "weights": text,
            "served_model_name": text,
            "extra_args": [text, "--x", text],
            # a method that keeps no KV: the model is not resolved, only rendered (llama.cpp
            # counts a draft model's contexts, so it resolves -md: not this one's text)
            **({"speculative": {"method": "ngram", "model": text}} if engine != "llamacpp" else {}),
            **({"head_address": text} if nodes > 1 else {}),
        },
    }
    path = tmp_path / "hostile.yaml"
    path.write_text(json.dumps(shape, ensure_ascii=False), encoding="utf-8")  # JSON is YAML
    return path


def _refused_as_an_option(runner: CliRunner, shape: Path, out: Path) -> None:
    result = runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "starts with '-', so the engine would read it as an option" in result.output
    assert not out.exists()


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize(("engine", "nodes"), [("vllm", 1), ("vllm", 2), ("sglang", 2)])
def test_hostile_strings_render_inert(
    text: str, engine: str, nodes: int, runner: CliRunner, tmp_path: Path
) -> None:
    shape = _hostile_shape(tmp_path / "in", engine, text, nodes=nodes)
    if text.startswith("-"):  # placed as a word of its own, the engine would read an option
        _refused_as_an_option(runner, shape, tmp_path / "out")
        return
    plan = compile_one(runner, shape, tmp_path / "out")
    folder = tmp_path / "out" / "hostile"
    for role in plan["launch"]["roles"]:  # type: ignore[index]
        calls = run_role(folder / role["file"], tmp_path)
        assert calls[-1] == list(role["argv"])
        assert any(text in word for word in role["argv"])
        for before, call in zip(role["before"], calls, strict=False):
            assert call == list(before)
    # the env file sources to exactly the values in plan.json
    env_file = folder / "hostile.env"
    keys = list(plan["launch"]["env"])  # type: ignore[index]
    dump = "; ".join(f'printf "%s\\0" "${k}"' for k in keys)
    proc = subprocess.run(
        ["bash", "-c", f'set -eu; source "$1"; {dump}', "_", str(env_file)],
        capture_output=True,
        check=True,
        cwd=tmp_path,
    )
    values = proc.stdout.decode().split("\0")[:-1]
    assert values == [plan["launch"]["env"][k] for k in keys]  # type: ignore[index]
    # the header cannot be escaped: every line before the first command is a comment
    for path in folder.iterdir():
        if path.suffix in (".env", ".sh"):
            lines = path.read_text().splitlines()
            first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
            assert lines[first].startswith(("set -euo pipefail", "MODEL=")), lines[first]
    assert not list(tmp_path.rglob("pwned*"))


@pytest.mark.parametrize("text", [t for t in HOSTILE if not t.startswith("-")])
def test_a_hostile_speculative_method_is_refused_before_anything_is_written(
    text: str, runner: CliRunner, tmp_path: Path
) -> None:
    """vLLM takes only the methods it names; fakplan reads which layers each one's draft
    keeps in the pool, so any other is one line at the field, and no file is written."""
    shape = _hostile_shape(tmp_path / "in", "vllm", "x")
    document = json.loads(shape.read_text(encoding="utf-8"))
    document["launch"]["speculative"]["method"] = text
    shape.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "launch.speculative.method" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.rglob("pwned*"))


def test_llamacpp_python_server_refuses_slots(runner: CliRunner, tmp_path: Path) -> None:
    text = (
        (SHAPES / "qwen2.5-coder-llamacpp.yaml")
        .read_text()
        .replace("  weights: models/", "  binary: llama-cpp-python\n  weights: models/")
    )
    shape = tmp_path / "s.yaml"
    shape.write_text(text)
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert (
        "serving.max_num_seqs: llama-cpp-python's server serves one sequence at a time"
        in result.output
    )


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_in_a_custom_shape_render_inert(
    text: str, runner: CliRunner, tmp_path: Path
) -> None:
    shape = {
        "name": "hostile",
        "engine": "custom",
        "engine_version": text,
        "model": text,
        "card": {"total": "24 GiB"},
        "budget": {"weights": "4 GiB", "kv": "1 GiB"},
        "serving": {"max_num_seqs": 1, "max_model_len": 2048, "kv_cache_dtype": "bf16"},
        "contract": {
            "per_token": [{"name": "attn", "per_token": "1 KiB", "dtype": "bf16", "note": text}]
        },
        "launch": {"extra_args": [text]},
    }
    path = tmp_path / "hostile.yaml"
    path.write_text(json.dumps(shape, ensure_ascii=False), encoding="utf-8")
    if text.startswith("-"):  # MODEL is a word an engine's launch line would take as-is
        _refused_as_an_option(runner, path, tmp_path / "out")
        return
    plan = compile_one(runner, path, tmp_path / "out")
    env_file = tmp_path / "out" / "hostile" / "hostile.env"
    proc = subprocess.run(
        [
            "bash",
            "-c",
            'set -eu; source "$1"; printf "%s\\0%s" "$MODEL" "$ENGINE_ARGS"',
            "_",
            str(env_file),
        ],
        capture_output=True,
        check=True,
        cwd=tmp_path,
    )
    model, args = proc.stdout.decode().split("\0")
    assert model == text
    assert args == plan["launch"]["env"]["ENGINE_ARGS"]  # type: ignore[index]
    lines = env_file.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert lines[first].startswith("MODEL=")
    assert not list(tmp_path.rglob("pwned*"))
