"""The boot-refusal table (issue 26): one row per refusal a shape can cause at boot.

Each row is tested on a shape that triggers it: the ``boots`` gate fails with the engine's
own message, filled in with figures worked out here by hand, and each message is the
row's format string from the engine's source (docs/boot-refusals.md names file, lines and
tag). The llama.cpp block-size rule is also seen refused by the real llama-cpp-python
server of this suite, booted from the serve.sh fakplan rendered.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import boot_refusals
from fakplan.engines.refusals import markdown_table
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from tests.support.paths import IN_CI, ROOT
from tests.support.realserver import free_port, have_llama_cpp
from tests.support.tinymodels import TinyLlama, write_tiny_llama

DOCS = ROOT / "docs" / "boot-refusals.md"

VLLM = """name: s
engine: vllm
engine_version: "{version}"
model: {model}
card: {{total: {card}, count: {cards}{sms}}}
parallel: {{tensor: {tp}}}
{pool}
serving:
  max_num_seqs: {seqs}
  max_model_len: {window}
{serving}
{extra}"""


def vllm(
    *,
    version: str = "0.19.0",
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    card: str = "80 GiB",
    tp: int = 1,
    sms: int | None = None,
    pool: str = "budget: {weights: 16 GiB, kv: 40 GiB}",
    seqs: int = 4,
    window: int = 8192,
    serving: str = "",
    extra: str = "",
    engine: str = "vllm",
) -> str:
    text = VLLM.format(
        version=version,
        model=model,
        card=card,
        cards=tp,
        sms=f", sms: {sms}" if sms else "",
        tp=tp,
        pool=pool,
        seqs=seqs,
        window=window,
        serving=serving,
        extra=extra,
    )
    return text.replace("engine: vllm", f"engine: {engine}")


def tiny(cache: str, *, binary: str = "llama-server", seqs: int = 1, extra: str = "") -> str:
    return (
        "name: s\nengine: llamacpp\nmodel: tiny.gguf\ncard: {total: 1 GiB}\n"
        "budget: {weights: 64 MiB, kv: 512 MiB}\n"
        f"serving: {{max_num_seqs: {seqs}, max_model_len: 256, kv_cache_dtype: {cache}}}\n"
        f"ceiling: 900 MiB\nlaunch: {{binary: {binary}{extra}}}\n"
    )


def _gate(folder: Path, text: str) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "tiny.gguf").exists():
        write_tiny_llama(folder / "tiny.gguf", TinyLlama())  # head size 64 / 4 = 16
    path = folder / "s.yaml"
    path.write_text(text)
    plan = compile_plan(load_shape(path))
    (gate,) = [g for g in plan.gates if g.id == "boots"]
    return gate.model_dump()


def _message(gate: dict[str, Any], row: str) -> str:
    assert gate["status"] == "fail", gate
    found = dict(part.split(": ", 1) for part in gate["summary"].split("; ") if ": " in part)
    return found[row]


def _format_of(row_id: str) -> re.Pattern[str]:
    """The row's format string as a regex: each placeholder (%s, %u, {name}) any text."""
    (row,) = [r for r in boot_refusals() if r.id == row_id]
    parts = re.split(r"%[su]|\{[a-z_]+\}", row.message)
    return re.compile(".*".join(re.escape(p) for p in parts) + "$", re.DOTALL)


# (row id, shape text, the message by hand)
CASES: list[tuple[str, str, str]] = [
    (
        # tiny.gguf: 64 / 4 heads = 16; q8_0 stores blocks of 32 (ggml-common.h QK8_0);
        # llama-server leaves flash attention on auto, so the check runs
        "llamacpp-k-block",
        tiny("q8_0/f16"),
        "llama_init_from_model: K cache type q8_0 with block size 32 does not divide "
        "n_embd_head_k=16",
    ),
    (
        # a quantized V: fakplan's launch turns flash attention on, and V's head is 16
        "llamacpp-v-block",
        tiny("f16/q4_0", binary="llama-cpp-python"),
        "llama_init_from_model: V cache type q4_0 with block size 32 does not divide "
        "n_embd_head_v=16",
    ),
    (
        "llamacpp-quantized-v-flash",
        tiny("f16/q8_0", binary="llama-cpp-python", extra=", extra_args: [--flash_attn, 'false']"),
        "llama_init_from_model: quantized V cache requires flash_attn to be enabled",
    ),
    (
        "llamacpp-max-seq",
        tiny("f16", seqs=300),
        "llama_init_from_model: failed to initialize the context: n_seq_max must be <= 256",
    ),
    (
        # DeepSeek-V3's latent attention (catalog geometry) with K and V apart
        "llamacpp-mla-kv-types",
        "name: s\nengine: llamacpp\nmodel: deepseek-ai/DeepSeek-V3\ncard: {total: 80 GiB}\n"
        "budget: {weights: 60 GiB, kv: 16 GiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 4096, kv_cache_dtype: q8_0/f16}\n"
        "launch: {weights: models/deepseek-v3.gguf}\n",
        "llama_init_from_model: model does not support different K (q8_0) and V (f16) cache types",
    ),
    (
        # Llama-3.1-8B: max_position_embeddings 131,072, rope_type llama3 (no factor applied)
        "vllm-max-model-len",
        vllm(window=200_000, pool="budget: {weights: 16 GiB, kv: 60 GiB}", seqs=1),
        "User-specified max_model_len (200000) is greater than the derived max_model_len "
        "(max_position_embeddings=131072 or model_max_length=None in model's config.json). "
        "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
        "relative position encoding (RoPE), positions exceeding derived_max_model_len lead "
        "to nan. If the model uses absolute position encoding, positions exceeding "
        "derived_max_model_len will cause a CUDA array out-of-bounds error.",
    ),
    (
        # one sequence of 16,384 tokens: 1,024 blocks of 16 x 2,097,152 B = 2 GiB > 1 GiB;
        # the pool holds 512 blocks = 8,192 tokens
        "vllm-one-sequence",
        vllm(window=16384, seqs=1, pool="budget: {weights: 16 GiB, kv: 1 GiB}"),
        "To serve at least one request with the models's max seq len (16384), (2.0 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (1.0 GiB). "
        "Based on the available memory, the estimated maximum model length is 8192. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
        "more details.",
    ),
    (
        "vllm-batched-below-seqs",
        vllm(seqs=512, serving="  max_num_batched_tokens: 256"),
        "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512).",
    ),
    (
        "vllm-tp-heads",
        vllm(tp=3),
        "Total number of attention heads (32) must be divisible by tensor parallel size (3).",
    ),
    (
        # Qwen2.5-7B: 28 heads (TP 14 divides them), 4 KV heads (14 % 4 = 2)
        "vllm-tp-kv-heads",
        vllm(model="Qwen/Qwen2.5-7B-Instruct", tp=14),
        "14 is not divisible by 4",
    ),
    (
        # TP 2 on an H100's 79.19 GiB: at least 1.525 GiB is in use at the worker's start
        # (1.53 GiB printed in 0.19.0 boots); 0.99 asks ceil(79.19 GiB x 0.99) = 78.4 GiB
        # of the 79.19 - 1.525 = 77.665 GiB free (round(..., 2) prints 77.67)
        "vllm-startup-free",
        vllm(
            card="79.19 GiB",
            tp=2,
            sms=132,
            pool="",
            serving="  gpu_memory_utilization: 0.99",
        ),
        "Free memory on device cuda:0 (77.67/79.19 GiB) on startup is less than desired GPU "
        "memory utilization (0.99, 78.4 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
    ),
    (
        # vllm serve 0.16.0's parser has no --language-model-only (0.17.0's has)
        "vllm-language-model-only",
        vllm(version="0.16.0", serving="  language_model_only: true"),
        "unrecognized arguments: --language-model-only",
    ),
    (
        # Qwen3-32B: max_position_embeddings 40,960, no rope_scaling
        "sglang-context-length",
        vllm(
            engine="sglang",
            version="0.5.2",
            model="Qwen/Qwen3-32B",
            tp=2,
            window=65536,
            pool="budget: {weights: 36 GiB, kv: 30 GiB}",
        ),
        "Warning: User-specified context_length (65536) is greater than the derived "
        "context_length (40960). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config. To allow overriding this maximum, set the env var "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    ),
    (
        "sglang-tp-heads",
        vllm(engine="sglang", version="0.5.2", model="Qwen/Qwen3-32B", tp=3),
        "AssertionError: assert self.total_num_heads % tp_size == 0",
    ),
    (
        "sglang-tp-kv-heads",
        vllm(engine="sglang", version="0.5.2", model="Qwen/Qwen2.5-7B-Instruct", tp=14),
        # 4 KV heads under TP 14: replicated, and 14 % 4 = 2
        "AssertionError: assert tp_size % self.total_num_kv_heads == 0",
    ),
]


def test_every_row_has_a_case_and_the_documented_table_is_the_code_s() -> None:
    ids = [r.id for r in boot_refusals()]
    assert sorted(ids) == sorted(case[0] for case in CASES)
    assert len(set(ids)) == len(ids)
    text = DOCS.read_text(encoding="utf-8")
    head, _, rest = text.partition("-->\n")
    table, _, tail = rest.partition("<!-- end of the generated table -->")
    generated = markdown_table(boot_refusals())
    if os.environ.get("FAKPLAN_UPDATE_GOLDEN") == "1":
        DOCS.write_text(f"{head}-->\n{generated}<!-- end of the generated table -->{tail}")
        table = generated
    assert table == generated


@pytest.mark.parametrize(("row", "text", "message"), CASES, ids=[c[0] for c in CASES])
def test_each_row_refuses_in_the_engines_words(
    tmp_path: Path, row: str, text: str, message: str
) -> None:
    gate = _gate(tmp_path, text)
    said = _message(gate, row)
    assert said == message
    (source,) = [r.message for r in boot_refusals() if r.id == row]
    if re.search(r"%[su]|\{[a-z_]+\}", source):
        assert _format_of(row).match(said), (said, row)  # the source's format string, filled
    else:
        assert said in source  # a bare assert: the line the traceback shows
    assert f"{row}:" in gate["fix"]


def test_a_row_holds_its_fire_where_the_engine_does(tmp_path: Path) -> None:
    """The conditions' other side, each from the engine's own code."""
    # llama-cpp-python leaves flash attention off unless V is quantized: the K check is
    # skipped (llama-context.cpp runs it only when flash attention is not disabled)
    assert _gate(tmp_path / "a", tiny("q8_0/f16", binary="llama-cpp-python"))["status"] == "pass"
    # the override vLLM names turns its refusal into a warning
    allowed = vllm(
        window=200_000,
        seqs=1,
        pool="budget: {weights: 16 GiB, kv: 60 GiB}",
        extra="launch:\n  env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1'}",
    )
    assert _gate(tmp_path / "b", allowed)["status"] == "pass"
    # vllm/envs.py reads it as `.strip().lower() in ("1", "true")`: "yes" allows nothing
    yes = vllm(
        window=200_000,
        seqs=1,
        pool="budget: {weights: 16 GiB, kv: 60 GiB}",
        extra="launch:\n  env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: 'yes'}",
    )
    assert _gate(tmp_path / "b2", yes)["status"] == "fail"
    # the window whose blocks the pool holds exactly: 8,192 tokens in 1 GiB
    fits = vllm(window=8192, seqs=1, pool="budget: {weights: 16 GiB, kv: 1 GiB}")
    assert _gate(tmp_path / "c", fits)["status"] == "pass"
    # 0.95 at TP 2 leaves 79.19 x 0.05 = 3.96 GiB for the 1.53 in use at the start
    sized = vllm(card="79.19 GiB", tp=2, sms=132, pool="", serving="  gpu_memory_utilization: 0.95")
    assert _gate(tmp_path / "d", sized)["status"] == "pass"
    # the flag is in 0.17.0's parser
    text_only = vllm(version="0.17.0", serving="  language_model_only: true")
    assert _gate(tmp_path / "e", text_only)["status"] == "pass"


def test_rows_older_than_their_first_release_are_not_applied(tmp_path: Path) -> None:
    """vLLM's startup check arrived in the V1 worker (0.11): a 0.8 shape is not held to it."""
    old = vllm(version="0.8.5", window=8192)
    gate = _gate(tmp_path, old)
    assert "vllm-startup-free" not in gate["detail"]


def _boot(serve: Path, log: Path, timeout_s: float = 120) -> tuple[int, str]:
    """Run a rendered serve.sh past its gate guard, with this interpreter's folder first on
    PATH (its python3 has llama-cpp-python), until it exits or the timeout."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "FAKPLAN_IGNORE_GATES": "1",
    }
    with log.open("wb") as handle:
        process = subprocess.Popen(
            ["bash", str(serve)], stdout=handle, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return process.returncode, log.read_text(errors="replace")


@pytest.mark.llama_server
def test_the_real_llama_cpp_server_refuses_what_the_gate_predicted(tmp_path: Path) -> None:
    """Issue 26: kv_cache_dtype q8_0 on a head size of 16 passed every gate and compiled
    (ok); the rendered script booted to this refusal. Now the gate predicts it word for
    word, and the real llama-cpp-python 0.3.36 server prints it and exits."""
    if not have_llama_cpp():
        if IN_CI:
            pytest.fail("llama-cpp-python is not installed, but CI must boot the real engine")
        pytest.skip("llama-cpp-python not installed")
    shape = tmp_path / "s.yaml"
    write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama())
    port = free_port()
    shape.write_text(
        tiny("q8_0", binary="llama-cpp-python", extra=f", host: 127.0.0.1, port: {port}")
    )
    out = tmp_path / "out"
    compiled = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert compiled.exit_code == 1, compiled.output  # the boots gate fails
    plan = json.loads((out / "s" / "plan.json").read_text())
    (gate,) = [g for g in plan["gates"] if g["id"] == "boots"]
    predicted = _message(gate, "llamacpp-k-block")
    code, log = _boot(out / "s" / "serve.sh", tmp_path / "boot.log")
    assert code != 0, log
    assert predicted in log, log[-3000:]
    assert "Failed to create llama_context" in log
