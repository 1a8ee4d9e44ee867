"""KV arithmetic per engine: hand derivations, and the token counts engines printed at boot.

Each ledger test takes the model (tests/data/public/configs) and the pool the engine
printed (tests/data/public/ledgers/*.log, figures from truth.yaml) and asks for the token
count the engine printed beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import kv_breakdown, pool_tokens
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import GIB, MIB
from tests.support.paths import PUBLIC
from tests.support.tinymodels import TinyLlama, write_tiny_llama

CONFIGS = PUBLIC / "configs"


def query(model: str, **kw: object) -> KvQuery:
    return KvQuery(geometry=load_geometry(CONFIGS / model / "config.json"), **kw)  # type: ignore[arg-type]


LLAMA8 = "meta-llama--Llama-3.1-8B-Instruct"
LLAMA70 = "meta-llama--Llama-3.1-70B-Instruct"


# ------------------------------------------------------------- hand derivations


def test_llama8b_bf16_one_rank_and_tp8() -> None:
    # 32 layers x 8 KV heads x (128 + 128) x 2 B
    assert kv_breakdown(query(LLAMA8, engine="vllm")).rate == 32 * 8 * 256 * 2 == 131_072
    # TP 8: one KV head per rank
    assert kv_breakdown(query(LLAMA8, engine="vllm", tp=8)).rate == 32 * 1 * 256 * 2 == 16_384
    assert kv_breakdown(query(LLAMA8, engine="sglang", tp=8)).rate == 16_384


def test_llama70b_tp16_replicates_kv_heads() -> None:
    # 8 KV heads over 16 ranks: max(1, 8 // 16) = 1 head per rank, 80 layers
    b = kv_breakdown(query(LLAMA70, engine="vllm", tp=16))
    assert b.rate == 80 * 1 * 256 * 2 == 40_960
    assert "replicated" in b.components[0].derivation
    assert kv_breakdown(query(LLAMA70, engine="vllm", tp=8)).rate == 40_960


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_v3_mla_is_not_split_by_tp(engine: str, tp: int) -> None:
    b = kv_breakdown(
        query(
            "deepseek-ai--DeepSeek-V3",
            engine=engine,
            tp=tp,
            kv_dtype="bf16" if engine == "sglang" else "bfloat16",
        )
    )
    assert b.rate == 61 * (512 + 64) * 2 == 70_272


def test_deepseek_v3_mla_fp8_variants() -> None:
    assert (
        kv_breakdown(query("deepseek-ai--DeepSeek-V3", engine="vllm", kv_dtype="fp8")).rate
        == 35_136
    )
    assert (
        kv_breakdown(query("deepseek-ai--DeepSeek-V3", engine="vllm", kv_dtype="fp8_ds_mla")).rate
        == 61 * 656
    )


def test_deepseek_v3_llamacpp_caches_k_only() -> None:
    b = kv_breakdown(query("deepseek-ai--DeepSeek-V3", engine="llamacpp"))
    assert b.rate == 576 * 2 * 61 == 70_272


def test_gemma3_sliding_window_vllm_and_llamacpp() -> None:
    # gemma-3-27b: 62 layers, 10 global; 16 KV heads x (128 + 128) x 2 B = 8,192 B per layer
    def sliding(version: str) -> int:
        q = query(
            "google--gemma-3-27b-it",
            engine="vllm",
            engine_version=version,
            max_model_len=32768,
            max_num_batched_tokens=8192,
        )
        b = kv_breakdown(q)
        assert b.rate == 10 * 8_192 == 81_920
        return next(c for c in b.components if c.kind == "sliding").per_seq_bytes

    # 0.25: cdiv(min(1024 - 1 + 8192, 32768), 16) + 1 = 577 blocks of 16 tokens, 52 layers
    assert sliding("0.25.0") == 52 * 8_192 * 577 * 16
    # 0.26 on: 2 batches in flight under async scheduling at PP 1 (config/vllm.py:512):
    # cdiv(min(1023 + 2 x 8192, 32768), 16) + 1 = 1089 blocks
    assert sliding("0.33.0") == 52 * 8_192 * 1089 * 16
    # llama.cpp, -c 8192, one slot: SWA cells = pad(min(8192, 1024 + 512), 256) = 1536
    lq = query("google--gemma-3-27b-it", engine="llamacpp", max_model_len=8192)
    lb = kv_breakdown(lq)
    assert lb.rate == 10 * 8_192
    assert next(c for c in lb.components if c.kind == "sliding").per_seq_bytes == 52 * 8_192 * 1536


def test_qwen3_next_linear_attention_state_per_sequence() -> None:
    b = kv_breakdown(
        query("Qwen--Qwen3-Next-80B-A3B-Instruct", engine="vllm", prefix_caching=False)
    )
    # 12 full layers x 2 KV heads x (256 + 256) x 2 B
    assert b.rate == 12 * 2 * 512 * 2 == 24_576
    # per linear layer: conv (2*128*16 + 128*32) x (4 - 1) x 2 B + state 32 x 128 x 128 x 2 B
    per_layer = 8_192 * 3 * 2 + 32 * 128 * 128 * 2
    assert per_layer == 1_097_728
    # mamba_cache_mode none keeps one page per sequence; the attention block is raised to
    # 16 x cdiv(1,097,728, 16 x 2,048) = 544 tokens and the state page padded to 544 x 2,048
    state = next(c for c in b.components if c.kind == "linear")
    assert b.page_tokens == 544
    assert state.per_seq_bytes == 36 * 544 * 2_048


@pytest.mark.parametrize(
    ("cache", "per_token"),
    [
        ("f16", 32 * 2 * 1024 * 2),
        ("q8_0", 32 * 2 * 1024 // 32 * 34),
        ("q4_0", 32 * 2 * 1024 // 32 * 18),
    ],
)
def test_llamacpp_block_quantized_caches(cache: str, per_token: int) -> None:
    assert per_token in (131_072, 69_632, 36_864)
    b = kv_breakdown(query(LLAMA8, engine="llamacpp", kv_dtype=cache))
    assert b.rate == per_token


def test_llamacpp_mixed_k_v_types() -> None:
    b = kv_breakdown(query(LLAMA8, engine="llamacpp", kv_dtype="f16/q8_0"))
    assert b.rate == 32 * (1024 * 2 + 1024 // 32 * 34)


def test_llamacpp_context_padding_and_slots() -> None:
    # docs/engines.md §3.3: -c 10000 -np 3 --no-kv-unified -> n_ctx_seq 3584, n_ctx 10,752
    q = query(LLAMA8, engine="llamacpp", max_num_seqs=3, kv_unified=False)
    from fakplan.engines.llamacpp.cache import cache_for as _cache
    from fakplan.engines.llamacpp.cache import layout_cells as _layout_cells

    assert _layout_cells(q, _cache(q), 10_000) == (3_584, 3, 0)


def test_vllm_worked_example_60_gib() -> None:
    # docs/engines.md §1.13: 60 GiB -> 30,720 blocks, 491,520 tokens, concurrency 3.75 at 131,072
    r = pool_tokens(query(LLAMA8, engine="vllm", max_model_len=131_072), 60 * GIB)
    assert (r.num_blocks, r.tokens, r.max_concurrency) == (30_720, 491_520, 3.75)
    r8 = pool_tokens(query(LLAMA8, engine="vllm", kv_dtype="fp8", max_model_len=131_072), 60 * GIB)
    assert (r8.num_blocks, r8.tokens) == (61_440, 983_040)


def test_sglang_worked_example() -> None:
    # docs/engines.md §2.9: rest 51.65 GiB of 131,072 B cells -> 423,116 tokens
    r = pool_tokens(query(LLAMA8, engine="sglang"), round(51.65 * GIB))
    assert r.tokens == 423_116


# ------------------------------------------------------------- boot ledgers


def within(observed: int, printed: int, pct: float = 0.5) -> bool:
    return abs(observed - printed) <= printed * pct / 100


def test_ledger_vllm_004_v0_llama3_8b() -> None:
    # V0: 53.29 GiB for KV; 2 MiB blocks of 16 tokens; truth: about 436,551 tokens
    r = pool_tokens(query(LLAMA8, engine="vllm", engine_version="0.6.5"), round(53.29 * GIB))
    assert r.num_blocks == int(53.29 * GIB // (2 * MIB))
    assert within(r.tokens, 436_551)


def test_ledger_vllm_009_v1_08() -> None:
    # 0.8.x V1 printed 158,656 tokens, 4.84x at 32,768; pool 158,656 x 128 KiB = 19.37 GiB
    r = pool_tokens(
        query(LLAMA8, engine="vllm", engine_version="0.8.5", max_model_len=32_768),
        round(19.37 * GIB),
    )
    assert within(r.tokens, 158_656)
    assert round(r.tokens / 32_768, 2) == 4.84


def test_ledger_vllm_012_estimated_max_len() -> None:
    # 0.10.1, Qwen3-Coder-480B at DP 8 (no TP split): 48.66 GiB available -> 205,728 tokens
    q = query(
        "Qwen--Qwen3-Coder-480B-A35B-Instruct",
        engine="vllm",
        engine_version="0.10.1",
        max_model_len=262_144,
    )
    b = kv_breakdown(q)
    assert b.rate == 62 * 8 * 256 * 2  # 248 KiB
    # the log: 262,144 tokens need 62.00 GiB
    assert round(262_144 * b.rate / GIB, 2) == 62.00
    assert pool_tokens(q, round(48.66 * GIB)).tokens == 205_728


def test_ledger_vllm_018_hybrid_exact() -> None:
    # 0.24.0, Qwen3.6-35B-A3B, fp8 KV, prefix caching: 5.98 GiB -> 567,978 tokens, 4.33x
    q = query(
        "nvidia--Qwen3.6-35B-A3B-NVFP4",
        engine="vllm",
        engine_version="0.24.0",
        kv_dtype="fp8",
        max_model_len=131_072,
        max_num_batched_tokens=8192,
        prefix_caching=True,  # stated among the log's non-default args: align mode, 2 pages
    )
    r = pool_tokens(q, round(5.98 * GIB))
    assert r.tokens == 567_978
    assert r.max_concurrency == 4.33


def test_ledger_sglang_002_gemma3_every_layer_full() -> None:
    # 0.4.x allocated every layer full-length: K 54.12 GB + V 54.12 GB for 834,615 tokens
    q = query("google--gemma-3-4b-it", engine="sglang", engine_version="0.4.4")
    assert kv_breakdown(q).rate == 34 * 4 * 256 * 2 * 2  # K + V
    assert within(pool_tokens(q, round(2 * 54.12 * GIB)).tokens, 834_615)


def test_ledger_sglang_005_mimo_swa_pool() -> None:
    # MiMo-V2-Flash, TP 4, page 64: swa_layer_tokens = 0.8 x full_layer_tokens, page-rounded
    q = query("XiaomiMiMo--MiMo-V2-Flash", engine="sglang", tp=4, block_size=64)
    b = kv_breakdown(q)
    swa = next(c for c in b.components if c.kind == "sliding")
    # 39 SWA layers x 2 KV heads/rank x (192 + 128) x 2 B = 49,920 B per SWA token
    assert "= 49,920 B/token" in swa.derivation
    assert int(375_360 * 0.8) // 64 * 64 == 300_288
    # the K size printed for the SWA pool: (300,288 + 64) x 39 x 2 x 192 x 2 B = 8.38 GiB
    assert round((300_288 + 64) * 39 * 2 * 192 * 2 / GIB, 2) == 8.38


def test_ledger_vllm_007_cpu_blocks_exact(tmp_path: Path) -> None:
    # OPT-125m (12 layers, 12 heads x 64, fp16) in vLLM 0.3: the 4 GiB swap space is exact
    cfg = {
        "model_type": "opt",
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "hidden_size": 768,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    q = KvQuery(
        geometry=load_geometry(tmp_path), engine="vllm", engine_version="0.3.3", max_model_len=2048
    )
    assert pool_tokens(q, 4 * GIB).num_blocks == 7_281  # "# CPU blocks: 7281"


# ------------------------------------------------------------- the command


def test_kv_json_keys(runner: CliRunner) -> None:
    result = runner.invoke(
        main,
        [
            "kv",
            str(CONFIGS / LLAMA8),
            "--tp",
            "8",
            "--pool",
            "8 GiB",
            "--max-model-len",
            "8192",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in (
        "engine",
        "engine_version",
        "kv_dtype",
        "bytes_per_token",
        "bytes_per_seq",
        "layers",
        "components",
        "tokens",
        "num_blocks",
    ):
        assert key in data
    assert data["engine_version"] == "0.33.0"  # the newest release the reference covers
    assert data["kv_dtype"] == "bf16"  # auto resolves to the model dtype (torch_dtype bfloat16)
    assert data["bytes_per_token"] == 16_384
    # 8 GiB / (16 tokens x 16,384 B) = 32,768 blocks
    assert data["num_blocks"] == 32_768 and data["tokens"] == 32_768 * 16


def test_kv_llamacpp_on_a_generated_gguf(runner: CliRunner, tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama())
    result = runner.invoke(
        main, ["kv", str(path), "--engine", "llamacpp", "--pool", "0.25 MiB", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # 2 layers x (32 + 32) x 2 B = 256 B per cell; 0.25 MiB = 1024 cells
    assert data["bytes_per_token"] == 256
    assert data["tokens"] == 1024


def test_kv_bad_pool(runner: CliRunner) -> None:
    result = runner.invoke(main, ["kv", str(CONFIGS / LLAMA8), "--pool", "8"])
    assert result.exit_code == 2
    assert 'expected a byte size such as "5120 MiB"' in result.output


def test_ledger_llamacpp_001_qwen25_coder_q8_0() -> None:
    # b4462, Qwen2.5-Coder-32B-Instruct, q8_0 K and V, 32,768 cells: K 2176.00 MiB, V 2176.00 MiB
    from fakplan.geometry.catalog import lookup

    g = lookup("Qwen/Qwen2.5-Coder-32B-Instruct")
    assert g is not None
    q = KvQuery(
        geometry=g, engine="llamacpp", engine_version="b4462", kv_dtype="q8_0", max_model_len=32_768
    )
    b = kv_breakdown(q)
    # 64 layers x (8 KV heads x 128 / 32 x 34 B) for K, the same for V
    assert b.rate == 64 * 2 * (1024 // 32 * 34)
    assert 2176 * MIB == 32_768 * 64 * (1024 // 32 * 34)
    r = pool_tokens(q, 4352 * MIB)  # "KV self size = 4352.00 MiB"
    assert r.tokens == 32_768


# ------------------------------------------------------------ a printed pool is rounded


def test_printed_sizes_are_intervals() -> None:
    from fakplan.units import printed_interval

    # two decimals of MiB: +-0.005 MiB = +-5,242.88 B, rounded inwards to whole bytes
    assert printed_interval("1166.62 MiB") == (1_223_284_491, 1_223_289_733, 1_223_294_976)
    # vLLM drops trailing zeros: "57.5 GiB" is 57.50 GiB +- 0.005 GiB
    low, nominal, high = printed_interval("57.5 GiB")
    assert (low, high) == (57_495 * GIB // 1000 + 1, 57_505 * GIB // 1000)
    assert nominal == 57 * GIB + GIB // 2
    # no decimal point: no engine prints so, the figure is exact
    assert printed_interval("7488 B") == (7488, 7488, 7488)
    assert printed_interval("8 GiB") == (8 * GIB, 8 * GIB, 8 * GIB)


def test_llamacpp_printed_cache_gives_the_printed_cells(runner: CliRunner) -> None:
    # DeepSeek-V3 at q8_0, -c 32768: 61 layers x 612 B (576 elements in 18 blocks of 34 B)
    # x 32,768 cells = 1,223,294,976 B = 1166.625 MiB, printed "1166.62" (%.2f, half to
    # even). Floored to 1166.62 MiB it would hold a padding step less (32,512 cells).
    model = str(CONFIGS / "deepseek-ai--DeepSeek-V3" / "config.json")
    args = ["kv", model, "--engine", "llamacpp", "--kv-dtype", "q8_0", "--max-model-len", "32768"]
    out = json.loads(runner.invoke(main, [*args, "--pool", "1166.62 MiB", "--json"]).output)
    assert out["tokens"] == 32_768 and out["cache_bytes"] == 61 * 612 * 32_768
    assert out["pool_interval"] == [1_223_284_491, 1_223_294_976]
    assert "any of 1,223,284,491..1,223,294,976 B" in out["pool_derivation"]
    exact = json.loads(runner.invoke(main, [*args, "--pool", "1223289733 B", "--json"]).output)
    assert exact["tokens"] == 32_512


def test_vllm_printed_pool_gives_the_range_its_digits_allow(runner: CliRunner) -> None:
    # 0.8.5, Llama-3.1-8B: blocks of 16 tokens x 128 KiB = 2 MiB; 19.37 GiB +- 0.005 GiB
    # spans 20,793,010,422..20,803,747,840 B = blocks 9,915..9,920 -> 158,640..158,720
    out = json.loads(
        runner.invoke(
            main,
            [
                "kv", LLAMA8.replace("--", "/"), "--engine-version", "0.8.5",
                "--max-model-len", "32768", "--pool", "19.37 GiB", "--json",
            ],
        ).output
    )  # fmt: skip
    assert (out["tokens_low"], out["tokens_high"]) == (20_793_010_422 // (2 * MIB) * 16, 158_720)
    # the log printed 158,656 tokens: inside the range
    assert out["tokens_low"] <= 158_656 <= out["tokens_high"]
