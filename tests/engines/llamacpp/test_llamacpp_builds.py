"""llama.cpp's cache layout build by build (fakplan/engines/llamacpp/rules.py RELEASES).

Expectations are hand derivations from llama.cpp's source at the builds named
(src/llama-context.cpp, llama-kv-cache.cpp, llama-kv-cache-iswa.cpp at b10573; the
boundaries are the upstream commits that changed them), in cells and bytes.
"""

from __future__ import annotations

import pytest

from fakplan.engines.llamacpp.cache import cache_for, layout_cells, own_cache_bytes
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import MIB
from tests.support.paths import PUBLIC

CONFIGS = PUBLIC / "configs"


def _query(model: str, build: str, **kw: object) -> KvQuery:
    geometry = load_geometry(str(CONFIGS / model / "config.json"))
    return KvQuery(geometry=geometry, engine="llamacpp", engine_version=build, **kw)  # type: ignore[arg-type]


def _cells(model: str, build: str, n_ctx: int, **kw: object) -> tuple[int, int, int]:
    q = _query(model, build, **kw)
    return layout_cells(q, cache_for(q), n_ctx)


GPT_OSS = "openai--gpt-oss-20b"  # 12 full + 12 SWA layers (window 128), 8 KV heads x 64


@pytest.mark.parametrize(
    ("unified", "expected", "mib"),
    [
        # split: pad(32768 // 4, 256) = 8192 cells x 4 streams; SWA pad(min(8192, 128 + 512))
        # = 768 per stream; f16: 12 layers x 1024 B x 2 (K, V) = 24 KiB a cell
        (False, (8192, 4, 768), 768 + 72),
        # unified: one stream of 32768; SWA pad(min(32768, 128 x 4 + 512), 256) = 1024
        (True, (32768, 1, 1024), 768 + 24),
    ],
)
def test_gpt_oss_slots_and_swa(unified: bool, expected: tuple[int, int, int], mib: int) -> None:
    q = _query(GPT_OSS, "b10573", max_num_seqs=4, kv_unified=unified)
    cache = cache_for(q)
    assert layout_cells(q, cache, 32768) == expected
    assert own_cache_bytes(q, cache, 32768) == mib * MIB


@pytest.mark.parametrize(
    ("build", "per_stream"),
    [
        # b6981 on: 10000 -> pad 10240; 10240 // 3 = 3413 -> pad 3584 a stream
        ("b10573", 3584),
        # b6931-b6980: no padding, floor(10000 / 3) ("rounding down")
        ("b6931", 3333),
        # b6869-b6930: no padding, ceil(10000 / 3)
        ("b6869", 3334),
        # b6325-b6868: pad(ceil(10000 / 3), 256) with flash attention (auto from b6325)
        ("b6325", 3584),
    ],
)
def test_n_ctx_split_per_build(build: str, per_stream: int) -> None:
    llama = "meta-llama--Llama-3.1-8B-Instruct"
    assert _cells(llama, build, 10_000, max_num_seqs=3, kv_unified=False)[:2] == (per_stream, 3)


def test_before_streams_one_cache_serves_every_slot() -> None:
    # before b5913 (#14363) there is one cache of pad(n_ctx) cells, whatever -np says
    llama = "meta-llama--Llama-3.1-8B-Instruct"
    assert _cells(llama, "b5554", 32768, max_num_seqs=4, kv_unified=False)[:2] == (32768, 1)


GEMMA3 = "google--gemma-3-27b-it"  # window 1024


@pytest.mark.parametrize(
    ("build", "swa"),
    [
        ("b10573", 1536),  # pad(min(8192, 1024 + 512), 256)
        ("b5913", 1536),  # min(8192, pad(1024 + 512, 256))
        ("b5554", 2560),  # min(8192, pad(1024 x 2 slots + 512, 256)), no streams
        ("b5429", 4096),  # min(8192, pad(1024 x 2 + min(8192, 2048), 256)): n_batch
        ("b5137", 8192),  # no SWA cache yet: every layer holds the whole context
    ],
)
def test_gemma3_swa_cells_per_build(build: str, swa: int) -> None:
    seqs = 1 if build in {"b10573", "b5913"} else 2
    assert _cells(GEMMA3, build, 8192, max_num_seqs=seqs, kv_unified=True)[2] == swa


DEEPSEEK = "deepseek-ai--DeepSeek-V3"  # 61 layers, kv_lora_rank 512, rope 64, 128 heads


@pytest.mark.parametrize(
    ("build", "cell"),
    [
        # b7836 on: K only, 576 elements of q8_0 = 18 blocks x 34 B = 612 B a layer
        ("b10573", 61 * 612),
        # b5137-b7835: K 576 plus a V of kv_lora_rank 512 = 16 blocks x 34 B
        ("b7000", 61 * (612 + 544)),
        # before b5137: per-head K of 128 x (128 + 64) and V of 128 x 128
        ("b4094", 61 * ((128 * 192 // 32 + 128 * 128 // 32) * 34)),
    ],
)
def test_deepseek_mla_cache_per_build(build: str, cell: int) -> None:
    q = _query(DEEPSEEK, build, kv_dtype="q8_0")
    assert cache_for(q).cell_bytes() == cell


def test_qwen3_next_recurrent_state_per_slot() -> None:
    # 12 attention layers (2 KV heads x 256) + 36 Gated DeltaNet layers; -c 32768 -np 4:
    # KV 8192 cells x 4 x 12 x 2 x 512 x 2 B = 768 MiB; state per slot 36 x (3 x (4096 +
    # 2 x 16 x 128) + 128 x 128 x 32) x 4 B = 75.375 MiB, x 4 slots = 301.50 MiB
    q = _query("Qwen--Qwen3-Next-80B-A3B-Instruct", "b10573", max_num_seqs=4, kv_unified=False)
    cache = cache_for(q)
    assert cache.cell_bytes() * 8192 * 4 == 768 * MIB
    assert cache.state_per_seq * 4 == round(301.5 * MIB)
