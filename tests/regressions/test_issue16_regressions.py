"""Rules issue 16 quoted from public boot logs, each a regression test on its own line.

The log lines are the shapes the issue quotes; the figures are what those lines state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakplan.engines import parse_ledger
from fakplan.engines.llamacpp.cache import cache_for, layout_cells
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import GIB
from tests.support.paths import PUBLIC

VLLM = "(EngineCore pid=107) INFO 07-06 22:52:09 [{}] {}\n"


def _vllm_log(tmp_path: Path, *messages: tuple[str, str]) -> Path:
    path = tmp_path / "boot.log"
    path.write_text("".join(VLLM.format(where, text) for where, text in messages))
    return path


@pytest.mark.parametrize(("original", "blocks"), [(0, None), (30_000, 512)])
def test_a_profiling_override_describes_a_dummy_pool(
    tmp_path: Path, original: int, blocks: int | None
) -> None:
    # "Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512" is printed while the
    # profiling run sizes a dummy pool: not the pool the engine keeps
    log = _vllm_log(
        tmp_path,
        (
            "kv_cache_utils.py:1190",
            f"Overriding num_gpu_blocks={original} with num_gpu_blocks_override=512",
        ),
        ("gpu_worker.py:508", "Available KV cache memory: 5.98 GiB"),
        ("kv_cache_utils.py:2146", "GPU KV cache size: 567,978 tokens"),
    )
    ledger = parse_ledger(log, "vllm")
    assert ledger.num_blocks == blocks
    assert ledger.kv_tokens == 567_978


def test_vllm_drops_trailing_zeros(tmp_path: Path) -> None:
    # "57.5 GiB" is printed by round(x, 2): the ledger reads 57.50 GiB
    log = _vllm_log(
        tmp_path,
        ("gpu_worker.py:508", "Available KV cache memory: 57.5 GiB"),
        ("kv_cache_utils.py:2146", "GPU KV cache size: 1,234,560 tokens"),
    )
    assert parse_ledger(log, "vllm").kv_bytes == 57 * GIB + GIB // 2


def test_a_split_cache_prints_cells_per_stream(tmp_path: Path) -> None:
    # "512 cells … 10/10 seqs": ten streams of 512 cells, 5,120 cells in all
    path = tmp_path / "boot.log"
    path.write_text(
        "llama_kv_cache:      CUDA0 KV buffer size =   160.00 MiB\n"
        "llama_kv_cache: size =  160.00 MiB (   512 cells,  40 layers, 10/10 seqs), "
        "K (f16):   80.00 MiB, V (f16):   80.00 MiB\n"
    )
    ledger = parse_ledger(path, "llamacpp")
    assert (ledger.kv_cells, ledger.n_stream, ledger.kv_tokens) == (512, 10, 5_120)


def test_rounding_down_can_round_up() -> None:
    # "n_ctx is not divisible by n_seq_max - rounding down to 33280" for -c 32768 -np 5
    # (b6981 on): pad(32768, 256) // 5 = 6553 -> pad 6656 a stream, x 5 = 33,280 > 32,768
    config = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
    q = KvQuery(
        geometry=load_geometry(str(config)),
        engine="llamacpp",
        engine_version="b10573",
        max_num_seqs=5,
        kv_unified=False,
    )
    per_stream, streams, _ = layout_cells(q, cache_for(q), 32_768)
    assert (per_stream, streams, per_stream * streams) == (6_656, 5, 33_280)
