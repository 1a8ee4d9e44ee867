"""Geometry from HF configs (the published files in tests/data/public/configs), GGUF headers and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakplan.errors import GeometryError
from fakplan.geometry import LayerKind, load_geometry
from fakplan.geometry.gguf_header import read_gguf
from fakplan.geometry.hf import geometry_from_config
from tests.support.paths import PUBLIC
from tests.support.tinymodels import TinyLlama, tiny_weight_bytes, write_tiny_llama

CONFIGS = PUBLIC / "configs"


def config(name: str) -> Path:
    return CONFIGS / name / "config.json"


def test_llama_31_8b() -> None:
    g = load_geometry(config("meta-llama--Llama-3.1-8B-Instruct"))
    assert g.num_layers == 32
    assert g.attention is not None
    assert (g.attention.num_kv_heads, g.attention.head_dim) == (8, 128)  # 4096 / 32 heads
    assert g.layer_kinds == (LayerKind.FULL,) * 32
    assert g.context_length == 131072
    assert g.rope_scaling == "llama3 x8"
    assert g.dtype == "bf16"


def test_gemma3_uses_class_defaults_and_every_sixth_layer_global() -> None:
    g = load_geometry(config("google--gemma-3-4b-it"))
    # text_config sets 34 layers; heads 8 / KV 4 / head_dim 256 come from Gemma3TextConfig
    assert g.num_layers == 34
    assert g.attention is not None and g.attention.num_kv_heads == 4
    assert g.attention.head_dim == 256
    globals_ = [i for i, k in enumerate(g.layer_kinds) if k == LayerKind.FULL]
    assert globals_ == [5, 11, 17, 23, 29]
    assert g.sliding_window == 1024
    assert any("Gemma3TextConfig" in note for note in g.notes)


def test_deepseek_v3_mla() -> None:
    g = load_geometry(config("deepseek-ai--DeepSeek-V3"))
    assert g.mla is not None
    assert (g.mla.kv_lora_rank, g.mla.qk_rope_head_dim) == (512, 64)
    assert g.num_layers == 61 and g.num_nextn_layers == 1
    assert set(g.layer_kinds) == {LayerKind.MLA}


def test_qwen3_next_every_fourth_layer_full() -> None:
    g = load_geometry(config("Qwen--Qwen3-Next-80B-A3B-Instruct"))
    full = [i for i, k in enumerate(g.layer_kinds) if k == LayerKind.FULL]
    assert full == list(range(3, 48, 4))
    assert g.count(LayerKind.LINEAR) == 36
    assert g.linear is not None and g.linear.num_v_heads == 32


def test_qwen36_text_config_nesting_and_ssm_dtype() -> None:
    g = load_geometry(config("nvidia--Qwen3.6-35B-A3B-NVFP4"))
    assert g.architecture == "qwen3_5_moe_text"
    assert g.num_layers == 40 and g.count(LayerKind.FULL) == 10
    assert g.linear is not None and g.linear.ssm_dtype == "fp32"
    assert g.dtype == "bf16"


def test_gpt_oss_alternating_windows() -> None:
    g = load_geometry(config("openai--gpt-oss-20b"))
    assert g.layer_kinds[:4] == (
        LayerKind.SLIDING,
        LayerKind.FULL,
        LayerKind.SLIDING,
        LayerKind.FULL,
    )
    assert g.count(LayerKind.SLIDING) == 12 and g.sliding_window == 128
    assert g.dtype == "unstated" and g.dtype_origin == "none"  # no torch_dtype or dtype
    assert g.quant_method == "mxfp4"


def test_mimo_swa_heads_differ_from_full() -> None:
    g = load_geometry(config("XiaomiMiMo--MiMo-V2-Flash"))
    assert g.count(LayerKind.FULL) == 9 and g.count(LayerKind.SLIDING) == 39
    assert g.attention is not None and g.sliding is not None
    assert (g.attention.num_kv_heads, g.sliding.num_kv_heads) == (4, 8)
    assert (g.attention.head_dim, g.attention.v_head_dim) == (192, 128)


def test_gemma4_full_layers_have_heads_of_their_own() -> None:
    # text_config: 60 layers, every 6th full; sliding layers 16 KV heads x 256; full
    # layers global_head_dim 512 and, as attention_k_eq_v holds, num_global_key_value_heads 4
    g = load_geometry(config("nvidia--Gemma-4-31B-IT-NVFP4"))
    assert g.count(LayerKind.FULL) == 10 and g.count(LayerKind.SLIDING) == 50
    assert g.attention is not None and g.sliding is not None
    assert (g.attention.num_kv_heads, g.attention.head_dim, g.attention.v_head_dim) == (4, 512, 512)
    assert (g.sliding.num_kv_heads, g.sliding.head_dim) == (16, 256)
    assert g.sliding_window == 1024
    assert (g.dtype, g.dtype_origin) == ("bf16", "config")


def test_gemma4_shared_kv_layers_cache_nothing() -> None:
    cfg = json.loads(Path(config("nvidia--Gemma-4-31B-IT-NVFP4")).read_text())
    cfg["text_config"]["num_kv_shared_layers"] = 20
    g = geometry_from_config(cfg, source="shared")
    # the last 20 layers read earlier layers' caches: 40 own caches, 6 or 7 of them full
    assert g.count(LayerKind.NONE) == 20
    assert g.count(LayerKind.FULL) + g.count(LayerKind.SLIDING) == 40
    assert g.count(LayerKind.FULL) == 40 // 6


def test_unknown_architecture_names_what_is_missing() -> None:
    with pytest.raises(GeometryError, match="model_type 'rwkv7' is not one fakplan knows"):
        geometry_from_config({"model_type": "rwkv7", "num_hidden_layers": 4}, source="x")


def test_known_architecture_missing_field() -> None:
    with pytest.raises(GeometryError, match="needs num_attention_heads"):
        geometry_from_config(
            {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64}, source="x"
        )


def test_hf_folder_weight_bytes_from_safetensors_headers(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    # two tensors: 10 x 64 and 64 bf16 elements -> 1,280 + 128 bytes
    header = {
        "a": {"dtype": "BF16", "shape": [10, 64], "data_offsets": [0, 1280]},
        "b": {"dtype": "BF16", "shape": [64], "data_offsets": [1280, 1408]},
        "__metadata__": {"format": "pt"},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(
        len(raw).to_bytes(8, "little") + raw + b"\0" * 1408
    )
    g = load_geometry(tmp_path)
    assert g.weight_bytes == 1408
    assert g.attention is not None and g.attention.head_dim == 16


def test_gguf_header(tmp_path: Path) -> None:
    spec = TinyLlama()
    path = write_tiny_llama(tmp_path / "tiny.gguf", spec)
    g = read_gguf(path)
    assert g.architecture == "llama"
    assert g.num_layers == 2
    assert g.attention is not None
    assert (g.attention.num_kv_heads, g.attention.head_dim) == (2, 16)
    assert g.context_length == 2048
    assert g.weight_bytes == tiny_weight_bytes(spec)


def test_gguf_split_model_reads_as_one(tmp_path: Path) -> None:
    spec = TinyLlama()
    write_tiny_llama(tmp_path / "tiny.gguf", spec, split_max_tensors=8)
    shards = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(shards) == 3  # 21 tensors, 8 per shard
    for shard in (shards[0], shards[-1]):
        g = load_geometry(shard)
        assert g.weight_bytes == tiny_weight_bytes(spec)
        assert g.weight_source is not None and "3 shards" in g.weight_source
    shards[1].unlink()
    with pytest.raises(GeometryError, match="shard of a split GGUF is missing"):
        load_geometry(shards[0])


def test_gguf_sliding_pattern_follows_llamacpp(tmp_path: Path) -> None:
    path = write_tiny_llama(
        tmp_path / "g.gguf", TinyLlama(layers=12, sliding_window=64), arch="gemma3"
    )
    g = read_gguf(path)
    # llama.cpp set_swa_pattern(6): layer il is SWA when il % 6 < 5 -> 5 and 11 are global
    assert [i for i, k in enumerate(g.layer_kinds) if k == LayerKind.FULL] == [5, 11]
    assert g.sliding_window == 64


@pytest.mark.parametrize("damage", ["truncate", "magic", "version"])
def test_corrupt_gguf_is_one_line_exit_2(tmp_path: Path, damage: str) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    if damage == "truncate":
        data = data[:3000]  # inside the token table
    elif damage == "magic":
        data = b"GGUX" + data[4:]
    else:
        data = data[:4] + (99).to_bytes(4, "little") + data[8:]
    path.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "fakplan", "kv", str(path), "--engine", "llamacpp"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(str(path))
    expected = {
        "truncate": "truncated GGUF",
        "magic": "not a GGUF file",
        "version": "GGUF version 99",
    }
    assert expected[damage] in proc.stderr


def test_missing_model_reference() -> None:
    with pytest.raises(GeometryError, match="not in the built-in catalog"):
        load_geometry("nobody/no-such-model")


def test_every_catalog_entry_reads_or_is_refused_with_a_reason() -> None:
    from fakplan.geometry.catalog import catalog_ids, lookup

    ids = catalog_ids()
    assert len(ids) >= 25
    refused = []
    for model_id in ids:
        try:
            g = lookup(model_id)
        except GeometryError as exc:
            refused.append(model_id)
            assert "not model" in str(exc)
            continue
        assert g is not None and g.num_layers > 0
        assert g.source.startswith(f"catalog:{model_id} (")
    assert refused == []


def test_catalog_lookup_is_case_insensitive() -> None:
    from fakplan.geometry.catalog import lookup

    g = lookup("META-LLAMA/llama-3.1-8b-instruct")
    assert g is not None and g.num_layers == 32


def test_a_geometry_is_hashable_and_keeps_its_config() -> None:
    # the config rides along as JSON text (the weights per rank count from it), so the
    # frozen record still hashes and compares
    g = load_geometry("meta-llama/Llama-3.1-8B-Instruct")
    assert hash(g) == hash(load_geometry("meta-llama/Llama-3.1-8B-Instruct"))
    assert g.text_config is not None and g.text_config["vocab_size"] == 128256
    assert "text_config_json" not in g.model_dump()


def test_gemma4_without_k_eq_v_keeps_its_kv_heads() -> None:
    # transformers 5.19 Gemma4TextConfig: attention_k_eq_v defaults to False, and only
    # then is num_global_key_value_heads not applied; global_head_dim still is
    cfg = json.loads(Path(config("nvidia--Gemma-4-31B-IT-NVFP4")).read_text())
    del cfg["text_config"]["attention_k_eq_v"]
    g = geometry_from_config(cfg, source="no-k-eq-v")
    assert g.attention is not None
    assert (g.attention.num_kv_heads, g.attention.head_dim) == (16, 512)
