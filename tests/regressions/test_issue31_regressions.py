"""Issue 31's quoted misses that this tree answers, each a regression test.

"No engine_version: a shape without it takes the newest rules (0.33) silently; a real 0.2x
hybrid boot was then 4.3 % off" — every output now says which release's rules applied
and that the answer depends on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from fakplan.cli import main
from tests.support.paths import SHAPES

NOTICE = "engine_version is not stated: vllm 0.33.0's rules applied"


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _without_release(tmp_path: Path) -> Path:
    text = (SHAPES / "example.yaml").read_text(encoding="utf-8")
    kept = [line for line in text.splitlines() if not line.startswith("engine_version:")]
    path = tmp_path / "norelease.yaml"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return path


def test_a_shape_without_engine_version_says_so_in_every_output(tmp_path: Path) -> None:
    shape = _without_release(tmp_path)
    plan = json.loads(_run("plan", str(shape), "--json").output)
    assert plan["engine_version"] == "0.33.0"
    assert len(plan["notices"]) == 1 and plan["notices"][0].startswith(NOTICE)
    assert NOTICE in " ".join(_run("plan", str(shape)).output.split())
    compiled = _run("compile", str(shape), "-o", str(tmp_path / "out"))
    assert NOTICE in compiled.output
    document = json.loads(_run("compile", str(shape), "-o", str(tmp_path / "o2"), "--json").output)
    assert document["shapes"][0]["notes"][0].startswith(NOTICE)
    tap = _run("gate", str(shape)).output
    assert f"# norelease: note: {NOTICE}" in tap or f"# example: note: {NOTICE}" in tap


def test_a_stated_release_says_nothing(tmp_path: Path) -> None:
    plan = json.loads(_run("plan", str(SHAPES / "example.yaml"), "--json").output)
    assert plan["notices"] == []
    assert "engine_version is not stated" not in _run("gate", str(SHAPES / "example.yaml")).output


def test_kv_without_engine_version_says_which_rules_applied() -> None:
    out = json.loads(_run("kv", "meta-llama/Llama-3.1-8B-Instruct", "--json").output)
    assert out["notices"][0].startswith(NOTICE)
    text = _run("kv", "meta-llama/Llama-3.1-8B-Instruct").output
    assert NOTICE in " ".join(text.split())
    stated = _run("kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.19.0", "--json")
    assert json.loads(stated.output)["notices"] == []


def test_kv_pool_over_several_ranks_says_the_engine_keeps_the_smallest() -> None:
    """ "vLLM with TP > 1: the pool any one worker prints is not the one the engine uses —
    it keeps the smallest over workers — and kv --pool from one rank's figure overshoots"."""
    base = ["kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.19.0"]
    two = json.loads(_run(*base, "--tp", "2", "--pool", "63.76 GiB", "--json").output)
    assert any("the minimum over workers" in n for n in two["notices"])
    one = json.loads(_run(*base, "--pool", "63.76 GiB", "--json").output)
    assert one["notices"] == []


def test_a_small_slot_count_takes_the_forward_as_the_peaks_top() -> None:
    """ "At max_num_seqs: 4 the predicted activation peak of Llama-3.1-8B is 59,631,616 B —
    less than one MLP gate_up output for 2,048 tokens": the peak is now a range up to the
    forward's, where the MLP intermediate (2,048 x 3 x 14,336 x 2 B = 176,160,768 B)
    outgrows the sampler: fakplan's estimate + the margin a first PP stage, which runs no
    sampler, printed beyond it (the sampler phase is checked at 1,024 slots, the forward by
    those stages), and the pool's low end takes the top; its bottom is what the forward must
    hold at once at its MLP. At 1,024 slots it is the sampler phase, up to the caching
    allocator's spare (1 MiB for each of its 9 tensors over 1 MiB)."""
    base = [
        "kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.19.0",
        "--gpu-memory-utilization", "0.9", "--card-total", "24 GiB", "--json",
    ]  # fmt: skip
    small = json.loads(_run(*base, "--max-num-seqs", "4").output)
    text = small["floor"]["activation_derivation"]
    assert "the forward by PP stages that run no sampler" in text and "176,160,768 B" in text
    # sampler 4 x 128,256 x (14 + 4) B, hidden states 2 x 2,048 x 4,096 + 4 x 4 x 4,096,
    # cuBLAS 32 MiB; the forward: 2 x 2 x 2,048 x 4,096 + 176,160,768 B, + cuBLAS, + the
    # margin a first PP stage printed beyond that estimate at 8,192 x 4,096 (prof-004: 1.1
    # GiB, so 1.105, against 872,415,232 B), scaled to 2,048 x 4,096: a quarter
    sampler_model = 4 * 128_256 * 18 + 2 * 2048 * 4096 + 4 * 4 * 4096 + (32 << 20)
    margin = (round(1.105 * (1 << 30)) - 872_415_232) // 4
    forward = 2 * 2 * 2048 * 4096 + 2048 * 3 * 14_336 * 2 + (32 << 20) + margin
    # and the low end is what the forward cannot avoid holding at once, above the sampler's
    # sum here: gate_up's output, its activation and the residual stream, 2,048 rows
    least = 2048 * (2 * 14_336 + 14_336 + 4096) * 2
    assert least > sampler_model
    assert small["floor"]["activation_range"] == [least, forward]
    assert "the forward's least at its MLP" in text
    (peak,) = [t for t in small["sizing"]["terms"] if t["id"] == "activation-peak"]
    assert (peak["low_bytes"], peak["high_bytes"]) == (least, forward)
    large = json.loads(
        _run(*base[:-3], "--card-total", "79.19 GiB", "--json", "--max-num-seqs", "1024").output
    )
    assert "PP stages that run no sampler" not in large["floor"]["activation_derivation"]
    low, high = large["floor"]["activation_range"]
    assert high == low + (9 << 20)


# "llama.cpp: for models with sliding-window or recurrent layers, counts from a printed pool
# come out 0.6-9.4 % low (e.g. 7,424 for a printed 8,192; 29,696 for 32,768; 259,072 for
# 262,144): fakplan subtracts an SWA cache or recurrent state from a figure that was the
# attention cache alone." The dev corpus's llama.cpp boots print that line beside their cells.


def _printed_caches() -> list[dict[str, Any]]:
    from tests.support.corpus import cases

    return [
        c
        for c in cases()
        if c["engine"] == "llamacpp" and "size" in c.get("printed", {}) and "n_ctx" in c["query"]
    ]


def test_a_printed_attention_cache_gives_the_cells_it_printed() -> None:
    import re

    from fakplan.engines import printed_pool_tokens
    from fakplan.units import printed_interval
    from tests.support.corpus import DATA, query_of

    checked = []
    for case in _printed_caches():
        log = (DATA / "public" / "corpus" / case["log"]).read_text(encoding="utf-8")
        # the boot's own line: "size = 768.00 MiB ( 32768 cells,  12 layers,  4/1 seqs)"
        line = re.search(
            r"llama_kv_cache(?:_unified)?: size = +([\d.]+ MiB) \( *(\d+) cells, +\d+ layers, +(\d+)/(\d+) seqs",
            log,
        )
        if line is None:
            continue
        size, cells, _, streams = line.groups()
        assert size == str(case["printed"]["size"]), case["id"]
        low, _, high = printed_interval(size)
        result = printed_pool_tokens(query_of(case), low, high)
        assert result.tokens == int(cells) * int(streams), (case["id"], result.derivation)
        checked.append(case["id"])
    # SWA (iSWA: its own line) and recurrent (hybrid: its own line) boots among them
    assert {"llamacpp-101", "llamacpp-102", "llamacpp-108", "llamacpp-109"} <= set(checked)


# "Ledgers: a V0-style log whose GPU block line is followed by a CPU block line gives the
# CPU count (2,048 for 1,952)". The lines below are V0's own format (llm_engine.py, the
# GPU and CPU block counts the issue quotes) printed on lines of their own.
V0_APART = (
    "INFO 02-29 19:21:45 llm_engine.py:338] # GPU blocks: 1952\n"
    "INFO 02-29 19:21:45 llm_engine.py:339] # CPU blocks: 2048\n"
)
# vLLM's CPU backend prints its pool alone (v0.6 cpu_executor.py: "# CPU blocks: %d")
CPU_BACKEND = "INFO 10-22 11:16:53 cpu_executor.py:211] # CPU blocks: 7281\n"


def test_a_cpu_block_line_after_the_gpu_one_is_swap_not_the_pool(tmp_path: Path) -> None:
    log = tmp_path / "v0.log"
    log.write_text(V0_APART, encoding="utf-8")
    doc = json.loads(_run("ledger", str(log), "--json").output)
    assert doc["num_blocks"] == 1952 and doc["kv_tokens"] == 1952 * 16
    alone = tmp_path / "cpu.log"
    alone.write_text(CPU_BACKEND, encoding="utf-8")
    doc = json.loads(_run("ledger", str(alone), "--json").output)
    assert doc["num_blocks"] == 7281  # the CPU backend's only blocks line is its pool


# "some SGLang releases print max_total_num_tokens in a form the reader skips": before
# chunked_prefill_size and max_running_requests joined the line, the scheduler printed the
# summary without them: the first form is sgl-project/sglang at daecfd38057b,
# python/sglang/srt/managers/controller/tp_worker.py; the others add one field each
SGLANG_SUMMARIES = (
    ("[gpu_id=0] max_total_num_tokens=95870, max_prefill_tokens=16384, context_len=8192", None),
    (
        "[gpu=0] max_total_num_tokens=95870, max_prefill_tokens=16384, "
        "max_running_requests=2047, context_len=8192",
        2047,
    ),
    (
        "max_total_num_tokens=95870, max_prefill_tokens=16384, max_running_requests=2047, "
        "context_len=8192",
        2047,
    ),
)


def test_every_sglang_summary_form_is_read(tmp_path: Path) -> None:
    for line, running in SGLANG_SUMMARIES:
        log = tmp_path / "sglang.log"
        log.write_text(f"[2024-08-01 10:00:00 TP0] {line}\n", encoding="utf-8")
        doc = json.loads(_run("ledger", str(log), "--json").output)
        assert doc["kv_tokens"] == 95870, line
        assert doc["max_running_requests"] == running, line


# "ik_llama.cpp's MLA line (KV self size ... c^KV) is not read, so a partial sum of device
# lines is reported as the total." The summary as ik_llama.cpp prints it with -mla
# (ikawrakow/ik_llama.cpp #473, 2025-05-30), beside one device's buffer line of several.
IK_MLA = (
    "llama_kv_cache_init:      CUDA0 KV buffer size =  2684.95 MiB\n"
    "llama_new_context_with_model: KV self size  = 5369.91 MiB, c^KV (f16): 5369.91 MiB, "
    "kv^T: not used\n"
)


def test_ik_llama_mla_summary_is_the_cache_total(tmp_path: Path) -> None:
    log = tmp_path / "ik.log"
    log.write_text(IK_MLA, encoding="utf-8")
    doc = json.loads(_run("ledger", str(log), "--json").output)
    assert doc["kv_bytes"] == round(5369.91 * 2**20)
    assert doc["k_type"] == "f16" and doc["k_bytes"] == round(5369.91 * 2**20)


# "A boot with an MTP draft context reports the draft's 272 MiB cache where the target's
# 4,352 MiB is the pool." The lines as llama-server prints them (the MTP line is
# common/speculative.cpp's at llama.cpp 3f545becc; the cache lines llama_kv_cache's), with
# the figures the issue quotes: the target's 16 layers, then the MTP head's one.
MTP_BOOT = (
    "llama_context: n_ctx         = 131072\n"
    "llama_kv_cache:      CUDA0 KV buffer size =  4352.00 MiB\n"
    "llama_kv_cache: size = 4352.00 MiB (131072 cells,  16 layers,  4/1 seqs), "
    "K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB\n"
    "srv    load_model: creating MTP draft context against the target model 'model.gguf'\n"
    "llama_context: n_ctx         = 131072\n"
    "llama_kv_cache:      CUDA0 KV buffer size =   272.00 MiB\n"
    "llama_kv_cache: size =  272.00 MiB (131072 cells,   1 layers,  4/1 seqs), "
    "K (q8_0):  136.00 MiB, V (q8_0):  136.00 MiB\n"
)


def test_an_mtp_draft_cache_is_not_the_pool(tmp_path: Path) -> None:
    log = tmp_path / "mtp.log"
    log.write_text(MTP_BOOT, encoding="utf-8")
    doc = json.loads(_run("ledger", str(log), "--json").output)
    assert doc["kv_bytes"] == 4352 * 2**20
