"""vLLM's hybrid (Gated DeltaNet) arithmetic release by release.

Expectations: Qwen3-Next-80B-A3B at TP 2, fp8 KV, a 40 GiB pool per rank, the model's
262,144-token window. They were computed by calling each release's own
vllm/v1/core/kv_cache_utils.py (kv_cache_planning.py in 0.33.0) get_kv_cache_groups,
get_kv_cache_config_from_groups, get_max_concurrency_for_kv_cache_config and the boot
report on these specs, and agree with this hand derivation:

- attention: 1 KV head/rank x (256 + 256) x 1 B = 512 B per token per layer;
- GDN state per layer and rank: conv (2*128*16 + 128*32)/2 x 3 x 2 B = 24,576 B plus
  temporal 32/2 x 128 x 128 x 2 B = 524,288 B, 548,864 B in all;
- attention block raised to 16 x cdiv(548,864, 16 x 512) = 1,072 tokens (page 548,864 B);
- 12 full + 36 GDN layers: group size 12, 4 groups; num_blocks = 40 GiB // (12 x 548,864)
  = 6,520;
- blocks per request: full cdiv(262,144, 1,072) = 245, GDN 3 groups x (1 page, or 2 under
  mamba_cache_mode align) -> 248 or 251.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import kv_breakdown, pool_tokens
from fakplan.errors import RuleError
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from tests.support.paths import PUBLIC, ROOT

QWEN3_NEXT = PUBLIC / "configs" / "Qwen--Qwen3-Next-80B-A3B-Instruct" / "config.json"
POOL = 40 * 2**30


def _pool(version: str, prefix: bool | None = None, block: int | None = None) -> tuple[int, ...]:
    q = KvQuery(
        geometry=load_geometry(str(QWEN3_NEXT)),
        engine="vllm",
        engine_version=version,
        tp=2,
        kv_dtype="fp8",
        prefix_caching=prefix,
        block_size=block,
    )
    r = pool_tokens(q, POOL)
    assert r.max_concurrency is not None
    return kv_breakdown(q).page_tokens, r.num_blocks or 0, r.tokens, round(r.max_concurrency * 100)


@pytest.mark.parametrize(
    ("version", "prefix", "expected"),
    [
        # 0.11-0.20 print num_blocks // 4 groups x 1,072 = 1,747,360; 6,520 / 248 = 26.29x
        ("0.11.0", None, (1072, 6520, 1_747_360, 2629)),
        ("0.14.0", True, (1072, 6520, 1_747_360, 2629)),  # prefix caching impossible
        ("0.15.0", None, (1072, 6520, 1_747_360, 2629)),  # off by default for hybrids
        ("0.15.0", True, (1072, 6520, 1_747_360, 2598)),  # align: 6,520 / 251
        ("0.20.0", None, (1072, 6520, 1_747_360, 2629)),
        # 0.21 on: int(6,520 / 248 x 262,144) = 6,891,850
        ("0.21.0", None, (1072, 6520, 6_891_850, 2629)),
        ("0.27.0", True, (1072, 6520, 6_809_477, 2598)),
        # 0.28 on: prefix caching on by default for hybrids, mode align
        ("0.28.0", None, (1072, 6520, 6_809_477, 2598)),
        ("0.33.0", None, (1072, 6520, 6_809_477, 2598)),
        ("0.33.0", False, (1072, 6520, 6_891_850, 2629)),
    ],
)
def test_qwen3_next_printed_tokens_per_release(
    version: str, prefix: bool | None, expected: tuple[int, ...]
) -> None:
    assert _pool(version, prefix) == expected


def test_a_stated_block_raises_in_its_own_steps_from_0_20() -> None:
    # 0.19: steps of 16 -> 1,072 still; 0.20: steps of max(16, 32) = 32 -> 32 x
    # cdiv(548,864, 32 x 512) = 1,088; 40 GiB // (12 x 1,088 x 512) = 6,425 blocks,
    # 6,425 // 4 x 1,088 = 1,747,328 tokens
    assert _pool("0.19.0", block=32)[:3] == (1072, 6520, 1_747_360)
    assert _pool("0.20.0", block=32)[:3] == (1088, 6425, 1_747_328)


def test_group_size_ratio_per_release() -> None:
    # gemma-3-27b: 10 full, 52 sliding layers; 52 >= 1.5 x 10 -> group size 10 in every
    # release; the ratio matters only for close counts (tested on the rule itself)
    from fakplan.engines.vllm.layout import LayerGroup, _group_size
    from fakplan.engines.vllm.rules import RELEASES
    from fakplan.geometry import LayerKind

    def size(rule: str, counts: tuple[int, int]) -> int:
        release = next(r for r in RELEASES if r.rule == rule)
        groups = [
            LayerGroup(LayerKind.FULL, counts[0], 1, 0),
            LayerGroup(LayerKind.SLIDING, counts[1], 1, 0),
        ]
        return _group_size(groups, release)

    # 6 full + 5 sliding (vLLM tests/v1/core/test_kv_cache_planning.py at v0.33.0: group
    # size 6); 0.11.0 always takes the smallest count (5)
    assert size("v1-0.28", (6, 5)) == 6
    assert size("v1-0.11", (6, 5)) == 5
    # 8 vs 6: under 1.5 x but not under 1.25 x -> 8 from 0.18, 6 in 0.12-0.17
    assert size("v1-0.18", (8, 6)) == 8
    assert size("v1-0.15", (8, 6)) == 6


@pytest.mark.parametrize(
    ("stated", "flags"),
    [
        (None, []),  # the release's own default: no flag
        (True, ["--enable-prefix-caching"]),
        (False, ["--no-enable-prefix-caching"]),
    ],
)
def test_prefix_caching_reaches_the_argv_only_where_stated(
    stated: bool | None, flags: list[str], tmp_path: Path
) -> None:
    import yaml

    shape = yaml.safe_load((ROOT / "shapes" / "example.yaml").read_text())
    if stated is not None:
        shape["serving"]["prefix_caching"] = stated
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(shape))
    result = CliRunner().invoke(main, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (role,) = json.loads(result.output)["launch"]["roles"]
    assert [w for w in role["argv"] if "prefix-caching" in w] == flags


def test_an_mtp_draft_caches_in_the_same_pool() -> None:
    """Qwen3.6-27B (16 full + 48 GDN layers, mtp_num_hidden_layers 1) at TP 2, fp8, with
    3 MTP tokens on 0.24: the draft's attention layer joins the pool.

    - attention: 4/2 KV heads x (256 + 256) x 1 B = 1,024 B a token a layer;
    - GDN state: conv (2*128*16 + 128*48)/2 x (4 - 1 + 3) x 2 B = 61,440 B plus temporal
      48/2 x 128 x 128 x 4 B (mamba_ssm_dtype float32) = 1,572,864 B: 1,634,304 B;
    - block raised to 16 x cdiv(1,634,304, 16 x 1,024) = 1,600 tokens, page 1,638,400 B;
    - 17 full layers (16 + 1 draft) and 48 GDN: group size 17, 4 groups; 10 GiB //
      (17 x 1,638,400) = 385 blocks;
    - a request: cdiv(262,144, 1,600) = 164 + 3 GDN groups x (1 + 3) pages = 176;
    - printed: int(385 / 176 x 262,144) = 573,440.
    """
    config = PUBLIC / "configs" / "nvidia--Qwen3.6-27B-NVFP4" / "config.json"
    q = KvQuery(
        geometry=load_geometry(str(config)),
        engine="vllm",
        engine_version="0.24.0",
        tp=2,
        kv_dtype="fp8",
        spec_tokens=3,
        max_model_len=262_144,
    )
    assert kv_breakdown(q).page_tokens == 1600
    r = pool_tokens(q, 10 * 2**30)
    assert (r.num_blocks, r.tokens, r.extra["blocks_per_request"]) == (385, 573_440, 176)
    # an EAGLE draft is a model of its own, not the checkpoint's nextn layer: without it
    # named, its layers cannot be counted
    with pytest.raises(RuleError, match="name the draft model"):
        pool_tokens(replace(q, spec_method="eagle3"), 10 * 2**30)


@pytest.mark.parametrize(
    ("version", "temporal_bytes"),
    [
        # 0.16: both GDN states follow the model dtype (bf16); 0.17 on: the checkpoint's
        # mamba_ssm_dtype float32 (gated_delta_net_state_dtype takes mamba_ssm_cache_dtype)
        ("0.16.0", 2),
        ("0.17.0", 4),
    ],
)
def test_gdn_ssm_dtype_from_the_checkpoint_from_0_17(version: str, temporal_bytes: int) -> None:
    config = PUBLIC / "configs" / "nvidia--Qwen3.6-27B-NVFP4" / "config.json"
    q = KvQuery(geometry=load_geometry(str(config)), engine="vllm", engine_version=version, tp=2)
    state = next(c for c in kv_breakdown(q).components if c.kind == "linear")
    # per layer and rank: conv 5,120 x 3 x 2 B + temporal 24 x 128 x 128 x b, 48 layers
    unpadded = 5_120 * 3 * 2 + 24 * 128 * 128 * temporal_bytes
    assert f"{unpadded:,} B state" in state.derivation


@pytest.mark.parametrize(
    ("version", "ssm_bytes"),
    [
        ("0.12.0", 2),  # no NemotronH rule yet: the model dtype
        ("0.13.0", 4),  # the checkpoint's mamba_ssm_cache_dtype (float32 here)
        ("0.20.0", 4),
    ],
)
def test_nemotron_h_ssm_dtype_per_release(version: str, ssm_bytes: int) -> None:
    from fakplan.geometry import load_geometry as load

    g = load("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert g.mamba is not None and g.mamba.ssm_dtype == "fp32"
    q = KvQuery(geometry=g, engine="vllm", engine_version=version, max_model_len=8192)
    state = next(c for c in kv_breakdown(q).components if c.kind == "mamba")
    # conv (4096 + 2 x 8 x 128) x 3 x 2 B + ssm 64 x 64 x 128 x b
    unpadded = (4_096 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * ssm_bytes
    assert f"{unpadded:,} B state" in state.derivation
