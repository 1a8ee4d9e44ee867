"""vLLM's own KV planning tests, reproduced by fakplan's arithmetic.

Each case is an assertion of vLLM's tests/v1/core/test_kv_cache_utils.py at v0.11.0
(commit f71952c1c) or tests/v1/core/test_kv_cache_planning.py at v0.33.0 (commit
4ba787ec9; the planner tests moved there), cited by test and line; the specs are theirs
(``new_kv_cache_spec``: 16-token blocks, 2 KV heads of 64, float32, a 16,384 B page per
layer), fakplan is given the same layers as a model and must give the same numbers.
"""

from __future__ import annotations

import pytest

from fakplan.engines import pool_tokens
from fakplan.geometry import Geometry, LayerKind
from fakplan.geometry.model import AttentionHeads
from fakplan.kv import KvQuery


def _model(
    full: int,
    sliding: int = 0,
    *,
    heads: int = 2,
    head: int = 64,
    sliding_head: int | None = None,
    window: int = 1,
    context: int = 16,
) -> Geometry:
    full_heads = AttentionHeads(num_kv_heads=heads, head_dim=head, v_head_dim=head)
    swa = sliding_head or head
    return Geometry(
        source="vllm test specs",
        architecture="llama",
        num_layers=full + sliding,
        layer_kinds=(LayerKind.FULL,) * full + (LayerKind.SLIDING,) * sliding,
        num_attention_heads=heads,
        hidden_size=heads * head,
        attention=full_heads if full else None,
        sliding=AttentionHeads(num_kv_heads=heads, head_dim=swa, v_head_dim=swa)
        if sliding
        else None,
        sliding_window=window if sliding else None,
        context_length=context,
        dtype="fp32",
    )


def _blocks(version: str, geometry: Geometry, pool: int, **kw: object) -> int:
    q = KvQuery(
        geometry=geometry, engine="vllm", engine_version=version, model_dtype="float32", **kw
    )  # type: ignore[arg-type]
    blocks = pool_tokens(q, pool).num_blocks
    assert blocks is not None
    return blocks


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
@pytest.mark.parametrize(
    ("full", "sliding", "pool", "blocks", "where"),
    [
        # one group of 2 layers: 1,048,576 // (2 x 16,384)
        (2, 0, 1_048_576, 32, "0.11.0 :1139, 0.33.0 :845"),
        # full + sliding, one layer each: two groups of one layer share the pool
        (1, 1, 1_048_576, 64, "0.11.0 :1203, 0.33.0 :916"),
        # 2 full + 4 sliding: group size 2, 3 groups, a block is 2 pages
        (2, 4, 1_048_576, 32, "0.11.0 :1227, 0.33.0 :950"),
        # 3 full + 7 sliding: group size 3 (7 >= 1.5 x 3), a block is 3 pages
        (3, 7, 1_572_864, 32, "0.11.0 :1260, 0.33.0 :995"),
    ],
)
def test_num_blocks_of_one_worker(
    version: str, full: int, sliding: int, pool: int, blocks: int, where: str
) -> None:
    assert _blocks(version, _model(full, sliding), pool) == blocks, where


def test_six_full_five_sliding_share_a_group_size_of_six_in_0_33() -> None:
    # test_kv_cache_planning.py:1053 (v0.33.0): 6 < 1.5 x 5 -> group size 6, a block is 6
    # pages = 98,304 B; 3,145,728 // 98,304 = 32. 0.11.0 took the smaller count (5):
    # 3,145,728 // 81,920 = 38 (no v0.11.0 test asserts it)
    assert _blocks("0.33.0", _model(6, 5), 3_145_728) == 32
    assert _blocks("0.11.0", _model(6, 5), 3_145_728) == 38


def test_a_smaller_sliding_page_takes_a_larger_block() -> None:
    # test_kv_cache_planning.py:1133 (v0.33.0): sliding heads of 32 -> an 8,192 B page,
    # which divides 16,384: its block doubles to 32 tokens; 524,288 // 16,384 = 32
    assert _blocks("0.33.0", _model(1, 1, sliding_head=32), 524_288) == 32


def test_a_page_that_does_not_divide_is_padded() -> None:
    # test_kv_cache_planning.py:1169 (v0.33.0): sliding heads of 96 -> 24,576 B, not a
    # multiple of 16,384: the full page is padded to 24,576; 1,048,576 // 24,576 = 42
    assert _blocks("0.33.0", _model(1, 1, sliding_head=96), 1_048_576) == 42


QWEN_PAGE = 16 * 32 * 256 * 2  # 32 KV heads x (128 + 128) x fp16, 16-token blocks


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
@pytest.mark.parametrize(
    ("full", "sliding", "blocks", "concurrency", "where"),
    [
        # full: cdiv(16,384, 16) = 1,024 blocks a request; 1,536 / 1,024
        (32, 0, 1536, 1.5, "0.11.0 :1040, 0.33.0 :1556"),
        # sliding 1024: cdiv(min(1023 + 1024, 16384), 16) + 1 = 129; 387 / 129
        (0, 32, 387, 3.0, "0.11.0 :1052, 0.33.0 :1568"),
        # both: 1,024 + 129 = 1,153 a request; 3,459 / 1,153
        (32, 32, 3459, 3.0, "0.11.0 :1066, 0.33.0 :1583"),
    ],
)
def test_max_concurrency(
    version: str, full: int, sliding: int, blocks: int, concurrency: float, where: str
) -> None:
    geometry = _model(full, sliding, heads=32, head=128, window=1024, context=16_384)
    q = KvQuery(
        geometry=geometry,
        engine="vllm",
        engine_version=version,
        model_dtype="float16",
        max_num_batched_tokens=1024,
        async_scheduling=False,  # the tests' config: one batch in flight
    )
    group = 32  # layers per KV group
    result = pool_tokens(q, blocks * group * QWEN_PAGE)
    assert result.num_blocks == blocks
    assert result.max_concurrency == concurrency, where
    if version == "0.33.0" and full and sliding:
        # :1587, get_kv_cache_capacity: int(3.0 x 16,384) tokens
        assert result.tokens == 49_152
