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
from tests.support.paths import PUBLIC, ROOT, SHAPES

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

    from tests.support.tinymodels import TinyLlama, write_tiny_llama

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


# ------------------------------------------------------------------- ledgers


def test_a_gzip_ledger_of_a_million_figure_lines_is_refused_quickly(tmp_path: Path) -> None:
    """9fcf43b: 356 KB of gzip (100 MiB of KV-size lines) as a shape's ceiling made `plan`
    take 28.6 s. Now the reader stops past 100,000 lines that name a figure (a boot states
    20-2,000) with one line; the subprocess's time is bounded loosely (a noisy machine)."""
    import gzip

    line = b"(EngineCore pid=1) INFO 11-29 20:58:45 [kv_cache_utils.py:2327] GPU KV cache size: 2,745,600 tokens\n"
    log = tmp_path / "boot.log.gz"
    with gzip.open(log, "wb") as out:
        out.write(line * ((100 << 20) // len(line)))
    assert log.stat().st_size < 1 << 20
    shape = tmp_path / "m.yaml"
    shape.write_text(
        "name: m\nengine: vllm\nmodel: meta-llama/Llama-3.1-8B-Instruct\n"
        "card: {total: 80 GiB}\nceiling: {ledger: boot.log.gz}\n"
        "budget: {weights: 20 GiB, kv: 20 GiB}\nserving: {max_num_seqs: 2, max_model_len: 4096}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "plan", str(shape)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "past the first 100,000 lines" in proc.stderr and "boot.log.gz" in proc.stderr


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


# ------------------------------------------------------------------- Kubernetes


def _k8s_shape(folder: Path, name: str, extra: str = "") -> Path:
    text = (SHAPES / "example.yaml").read_text().replace("name: example", f"name: {name}")
    path = folder / f"{name}.yaml"
    path.write_text(text + extra)
    return path


def test_object_names_are_unique_and_short_enough(tmp_path: Path) -> None:
    """9fcf43b: a_b and a-b (and a.b) compiled to one object name; a long name gave a probe
    Job name of 69 characters, which the API refuses (63 at most)."""
    from fakplan.kubernetes import object_name

    names = {n: object_name(n) for n in ("a-b", "a_b", "a.b", "x" * 60, "x" * 61)}
    assert len(set(names.values())) == len(names)
    assert names["a-b"] == "a-b"  # a name that already is a label is kept
    for shown in names.values():
        assert len(f"{shown}-probe") <= 63
    long = "l" + "o" * 59
    shape = _k8s_shape(tmp_path, long, "  kubernetes: {probe_image: registry.example/fakplan:1}\n")
    shape.write_text(
        shape.read_text().replace("launch:\n  port: 8000\n", "launch:\n  port: 8000\n")
    )
    out = tmp_path / "out"
    result = _run("compile", str(shape), "-o", str(out), "--target", "kubernetes")
    assert result.exit_code == 0, result.output
    import yaml

    for manifest in (out / long / "kubernetes").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            if isinstance(doc, dict) and "metadata" in doc:
                assert len(doc["metadata"]["name"]) <= 63, (manifest.name, doc["metadata"]["name"])


def test_a_sub_path_may_not_climb_out_of_its_volume(tmp_path: Path) -> None:
    shape = _k8s_shape(
        tmp_path, "vol", "  kubernetes: {shape_volume: {claim: models, sub_path: ../etc}}\n"
    )
    line = _one_line(_run("plan", str(shape)))
    assert "launch.kubernetes.shape_volume.sub_path" in line and "without '..'" in line


# ------------------------------------------------------------------- Prometheus


def test_two_shapes_of_one_name_are_refused_by_metrics_rules_and_report(tmp_path: Path) -> None:
    """9fcf43b: two shapes with the same name: in two folders gave duplicate series (exit
    0) and a repeated rule group."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "example.yaml").write_text((SHAPES / "example.yaml").read_text())
    args = [str(tmp_path / "a"), str(tmp_path / "b")]
    for command in (["metrics"], ["rules"], ["report", "-o", str(tmp_path / "r.html")]):
        result = _run(*command, *args)
        assert result.exit_code == 2, command
        assert "name: 'example' is also the name of" in result.stderr, command
    text = _run("metrics", *args).stdout
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(text))  # parses: one TYPE a family
    assert len({f.name for f in families}) == len(families)
    shapes = {s.labels["shape"] for f in families for s in f.samples if "shape" in s.labels}
    assert shapes == {"example"}


def test_alerts_select_the_name_the_engine_serves(tmp_path: Path) -> None:
    """9fcf43b: --served-model-name b through launch.extra_args got alerts selecting
    model_name="a"."""
    shape = tmp_path / "served.yaml"
    shape.write_text(
        (SHAPES / "example.yaml")
        .read_text()
        .replace(
            "launch:\n  port: 8000\n",
            "launch:\n  port: 8000\n  served_model_name: a\n  extra_args: [--served-model-name, b]\n",
        )
    )
    text = _run("rules", str(shape)).stdout
    assert 'model_name="b"' in text and 'model_name="a"' not in text


def test_alerts_and_probes_agree_on_the_name_of_a_model_loaded_from_weights(
    tmp_path: Path,
) -> None:
    """Review of issue 27: with launch.weights, vLLM lists the folder it loads (`vllm serve
    /models/llama8b`), but the alerts selected the shape's model id while the probes
    expected the folder. One definition now (launch.served_name), read by both."""
    from fakplan.probes.run import served_name
    from fakplan.shape import load_shape

    shape = tmp_path / "weights.yaml"
    shape.write_text(
        (SHAPES / "example.yaml")
        .read_text()
        .replace("launch:\n  port: 8000\n", "launch:\n  port: 8000\n  weights: /models/llama8b\n")
    )
    text = _run("rules", str(shape)).stdout
    assert 'model_name="/models/llama8b"' in text
    assert served_name(load_shape(shape)) == "/models/llama8b"


def test_launch_env_cannot_replace_a_variable_the_plan_sets(tmp_path: Path) -> None:
    """Review of issue 26: launch.env {KV_CACHE_MEMORY_BYTES: '999'} compiled with exit 0,
    and the env file and serve.sh exported 999 beside an argv passing the plan's figure."""
    shape = tmp_path / "env.yaml"
    shape.write_text(
        (SHAPES / "example.yaml")
        .read_text()
        .replace(
            "launch:\n  port: 8000\n",
            "launch:\n  port: 8000\n  env: {KV_CACHE_MEMORY_BYTES: '999'}\n",
        )
    )
    line = _one_line(_run("compile", str(shape), "-o", str(tmp_path / "out")))
    assert "launch.env.KV_CACHE_MEMORY_BYTES" in line and "remove it" in line
    assert not (tmp_path / "out" / "example" / "plan.json").exists()


def test_an_unterminated_string_of_escaped_quotes_is_read_in_linear_time(tmp_path: Path) -> None:
    """Review of issue 27: the nesting pre-check's string pattern rescanned to the end from
    every escaped quote of an unterminated string: a 60 KB config took 12 s."""
    model = tmp_path / "model"
    model.mkdir()
    text = LLAMA.read_text().rstrip().rstrip("}").rstrip().rstrip(",")
    (model / "config.json").write_text(
        text + ', "a": "' + '\\"' * 100_000
    )  # 200 KB: minutes before, under 1 s now
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "kv", str(model), "--engine", "vllm"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "Unterminated string" in proc.stderr


def test_a_snapshot_reached_through_a_symlinked_folder_is_read(tmp_path: Path) -> None:
    """Review of issue 27: a relative symlink was followed against the path as written, so
    an HF cache snapshot (config.json -> ../../blobs/<hash>) reached through a symlinked
    folder was "no such file", though the kernel opens it."""
    cache = tmp_path / "hub" / "models--m"
    (cache / "blobs").mkdir(parents=True)
    (cache / "blobs" / "h1").write_text(LLAMA.read_text())
    snapshot = cache / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/h1")
    (tmp_path / "llama").symlink_to(snapshot)
    result = _run("kv", str(tmp_path / "llama"), "--engine", "vllm", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bytes_per_token"] == 131072


def test_units_that_name_one_family_share_its_type_line() -> None:
    """9fcf43b: a unit collision printed two TYPE lines for one family, which the text
    parser refuses. "B" and "bytes" both name fakplan_prediction_bytes."""
    from prometheus_client.parser import text_string_to_metric_families

    from fakplan.metrics import exposition
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    plan = compile_plan(load_shape(SHAPES / "example.yaml"))
    in_bytes = next(p for p in plan.predictions if p.unit == "B")
    other = in_bytes.model_copy(update={"id": "other", "unit": "bytes"})
    text = exposition([plan.model_copy(update={"predictions": (*plan.predictions, other)})])
    assert text.count("# TYPE fakplan_prediction_bytes gauge") == 1
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))


# ------------------------------------------------- argv, paths, git and files


def test_an_argv_word_exec_cannot_take_is_refused_at_its_field(tmp_path: Path) -> None:
    """9fcf43b: a served_model_name past the kernel's single-argument limit compiled (ok),
    then the script failed at exec with "Argument list too long"."""
    shape = tmp_path / "long.yaml"
    shape.write_text(
        (SHAPES / "example.yaml")
        .read_text()
        .replace(
            "launch:\n  port: 8000\n",
            f"launch:\n  port: 8000\n  served_model_name: {'m' * 140_000}\n",
        )
    )
    line = _one_line(_run("compile", str(shape), "-o", str(tmp_path / "out")))
    assert "launch.served_model_name: a value of 140,000 bytes" in line
    assert "MAX_ARG_STRLEN" in line
    assert not (tmp_path / "out").exists()


def test_a_home_is_never_expanded_in_a_shape(tmp_path: Path) -> None:
    """9fcf43b: model: ~/.bashrc was read from the invoking user's home."""
    line = _one_line(_run("plan", str(_model_shape(tmp_path, "~/.bashrc"))))
    assert f"{tmp_path}/~/.bashrc" in line


def test_init_keeps_a_dangling_symlink_without_force(tmp_path: Path) -> None:
    target = tmp_path / "repo"
    (target / "shapes").mkdir(parents=True)
    (target / "shapes" / "example.yaml").symlink_to(tmp_path / "nowhere")
    line = _one_line(_run("init", str(target), "--install", "fakplan==0.1.0"))
    assert "already exists" in line
    assert (target / "shapes" / "example.yaml").is_symlink()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_diff_reads_the_old_side_and_the_tree_with_a_shapes_bounds(tmp_path: Path) -> None:
    """9fcf43b: a deeply nested YAML on the old side was a RecursionError; a 2.3 MB YAML took
    10.9 s at 324 MiB; `--rev ^HEAD` said "cannot be read"; a FIFO blocked forever; a
    folder symlink out of the repository was read."""
    repo = tmp_path / "repo"
    (repo / "shapes").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "shapes" / "deep.yaml").write_text("engine: vllm\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    (repo / "shapes" / "big.yaml").write_text("engine: vllm\n" + "# padding\n" * 240_000)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "hostile")
    (repo / "shapes" / "deep.yaml").unlink()
    (repo / "shapes" / "big.yaml").unlink()
    os.mkfifo(repo / "shapes" / "fifo.yaml")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text("engine: vllm\nname: secret\n")
    # a file symlink: git lists it as an untracked *.yaml (a folder symlink it never lists)
    (repo / "shapes" / "leak.yaml").symlink_to(outside / "secret.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "diff", "--rev", "HEAD", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "secret" not in proc.stdout
    excluded = subprocess.run(
        [sys.executable, "-m", "fakplan", "diff", "--rev", "^HEAD"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert excluded.returncode == 2
    assert "--rev ^HEAD: names no single commit" in excluded.stderr


# ------------------------------------------------------- secrets and terminals


@pytest.mark.parametrize("url", [
    "http://user:SECRETPW#x@127.0.0.1:1/v1",
    "http://user:SECRETPW/x@127.0.0.1:1/v1",
    "http://user:SECRETPW?x@127.0.0.1:1/v1",
    "http://user:SECRETPW@127.0.0.1:1/v1?token=SECRETPW",
])  # fmt: skip
def test_a_password_in_the_url_never_echoes(tmp_path: Path, url: str) -> None:
    """9fcf43b: `--url http://user:SECRETPW#x@127.0.0.1:1/v1` printed the password
    (`Invalid port: 'SECRETPW'`)."""
    result = _run("probe", str(SHAPES / "example.yaml"), "--url", url, "-o", str(tmp_path / "o"))
    assert result.exit_code in (1, 2)
    written = "".join(p.read_text() for p in (tmp_path / "o").rglob("*") if p.is_file())
    assert "SECRETPW" not in result.output + result.stderr + written


# ------------------------------------------------- environment and command line


def test_the_budget_variable_of_4301_digits_is_one_line(tmp_path: Path) -> None:
    """9fcf43b: FAKPLAN_DEVICE_BUDGET_BYTES of 4,301 digits was a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "budget"],
        env={**os.environ, "FAKPLAN_DEVICE_BUDGET_BYTES": "9" * 4301},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "FAKPLAN_DEVICE_BUDGET_BYTES" in proc.stderr


@pytest.mark.parametrize(
    ("engine", "option"),
    [("vllm", "--gpu-memory-utilization"), ("sglang", "--mem-fraction-static")],
)
def test_a_nan_fraction_is_one_line(engine: str, option: str) -> None:
    """9fcf43b: `fakplan kv … --gpu-memory-utilization nan` (and --mem-fraction-static) was
    `ValueError: cannot convert float NaN to integer`."""
    line = _one_line(_run("kv", str(LLAMA), "--engine", engine, option, "nan"))
    assert option in line and "nan" in line


def test_a_model_value_with_a_newline_is_one_line(tmp_path: Path) -> None:
    """9fcf43b: a model value holding a newline was echoed raw, so the one-line error was
    two (7 of 8,861 generated shapes)."""
    line = _one_line(_run("plan", str(_model_shape(tmp_path, "a\nb"))))
    assert "a\\nb" in line


# --------------------------------------------------------- shapes, report, gate


def test_report_on_a_deeply_nested_shape_is_one_section(tmp_path: Path) -> None:
    """9fcf43b: `fakplan report` on a deeply nested shape was a RecursionError."""
    shape = tmp_path / "deep.yaml"
    shape.write_text("name: deep\nengine: vllm\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    page = tmp_path / "report.html"
    result = _run("report", str(shape), "-o", str(page))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert "nested" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "could not be read" in page.read_text()  # the page marks it, as documented


@pytest.mark.parametrize("how", ["argument", "folder"])
def test_a_fifo_shape_is_refused_not_waited_on(tmp_path: Path, how: str) -> None:
    """9fcf43b: a FIFO given as a shape path (or a *.yaml FIFO in a gated folder) blocked
    forever."""
    folder = tmp_path / "shapes"
    folder.mkdir()
    os.mkfifo(folder / "fifo.yaml")
    target = folder / "fifo.yaml" if how == "argument" else folder
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "gate", str(target)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_hostile_safetensors_header_is_one_line(tmp_path: Path) -> None:
    """9fcf43b: deep nesting and Infinity in a safetensors header were tracebacks, and
    /dev/zero as the weights read 15.5 GB."""
    for header in ("[" * 5000 + "]" * 5000, '{"w": {"dtype": "BF16", "shape": [Infinity],'
                   ' "data_offsets": [0, 2]}}'):  # fmt: skip
        model = _config(tmp_path)
        data = header.encode()
        (model / "model.safetensors").write_bytes(len(data).to_bytes(8, "little") + data)
        line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
        assert "model.safetensors" in line
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to("/dev/zero")
    line = _one_line(_run("plan", str(_model_shape(tmp_path, str(model)))))
    assert "not a file" in line


# ------------------------------------------ bounded memory, in a process of its own


def _heavy_cases(tmp_path: Path) -> dict[str, list[str]]:
    """The quoted cases that blew up memory or time, each as fakplan's argv."""
    cases: dict[str, list[str]] = {}
    for name, raw in (
        ("layers-1e9", '"num_hidden_layers": 1000000000'),
        ("layers-1e7", '"num_hidden_layers": 10000000'),
        ("layers-1e18", '"num_hidden_layers": 1e18'),
    ):
        folder = tmp_path / name
        model = folder / "model"
        model.mkdir(parents=True)
        text = LLAMA.read_text().rstrip().rstrip("}").rstrip().rstrip(",")
        (model / "config.json").write_text(f"{text}, {raw}}}")
        cases[name] = ["plan", str(_model_shape(folder, str(model)))]
    big = tmp_path / "big" / "model"
    big.mkdir(parents=True)
    with (big / "config.json").open("wb") as handle:
        handle.truncate(300 << 20)
    cases["config-300MB"] = ["plan", str(_model_shape(big.parent, str(big)))]
    zero = tmp_path / "zero" / "model"
    zero.mkdir(parents=True)
    (zero / "config.json").symlink_to("/dev/zero")
    cases["config-dev-zero"] = ["plan", str(_model_shape(zero.parent, str(zero)))]
    gguf = _gguf(tmp_path / "huge.gguf", block_count=(10**9, _gguf_kind("UINT32")))
    cases["gguf-layers-1e9"] = ["kv", str(gguf), "--engine", "llamacpp"]
    return cases


def _gguf_kind(name: str) -> Any:
    import gguf

    return getattr(gguf.GGUFValueType, name)


def test_the_heavy_cases_stay_small(tmp_path: Path) -> None:
    """9fcf43b: `num_hidden_layers: 1e9` grew to 10.9-15.7 GB, 1e7 took 266 MB, a 300 MB
    config.json 637 MB, /dev/zero 15.5 GB, a GGUF of 1e9 blocks a MemoryError. Each is now
    refused in a process whose own peak RSS stays under 200 MB."""
    from tests.support.peakrss import RUN_FAKPLAN

    for name, args in _heavy_cases(tmp_path).items():
        peak = tmp_path / f"{name}.peak"
        proc = subprocess.run(
            [sys.executable, "-c", RUN_FAKPLAN, str(peak), *args],
            cwd=ROOT,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)
        assert float(peak.read_text()) * 2**20 < 200 * 10**6, (name, peak.read_text())


def test_an_operators_templates_are_read_with_bounds(tmp_path: Path) -> None:
    """Issue 27 (deliver 1): an operator's templates folder is read as any input: a
    template past 1 MiB (here a sparse 2 GiB file) is one line, not 2 GiB in memory."""
    import shutil

    from fakplan.render import default_templates

    templates = tmp_path / "templates"
    shutil.copytree(default_templates(), templates)
    with (templates / "vllm" / "env.j2").open("wb") as handle:
        handle.truncate(2 << 30)
    line = _one_line(
        _run("compile", str(SHAPES / "example.yaml"), "--templates", str(templates),
             "-o", str(tmp_path / "out"))
    )  # fmt: skip
    assert "env.j2: 2,147,483,648 bytes, more than the 1,048,576 a template can be" in line
    assert not (tmp_path / "out" / "example" / "plan.json").exists()
