"""The checkpoint dtype as the engines resolve it, so KV ``auto`` always resolves.

Expectations are hand derivations from vLLM's own rules (vllm/utils/torch_utils.py
is_lossless_cast / common_broadcastable_dtype and get_torch_dtype,
vllm/transformers_utils/model_arch_config_convertor.py, v0.33.0) and SGLang's
(_get_and_verify_dtype, python/sglang/srt/configs/model_config.py, v0.5.23).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from fakplan.engines import kv_breakdown
from fakplan.errors import RuleError
from fakplan.geometry import load_geometry
from fakplan.geometry.catalog import catalog_ids
from fakplan.geometry.checkpoint_dtype import checkpoint_dtype, common_dtype
from fakplan.kv import KvQuery
from tests.support.paths import PUBLIC

CONFIGS = PUBLIC / "configs"


@pytest.mark.parametrize(
    ("stored", "common"),
    [
        # uint8 (packed mxfp4 blocks) is an integer: every integer casts to a float
        ({"BF16", "U8"}, ("bf16",)),
        # bf16 (range 3.39e38) and e4m3 (range 448, resolution 1) fit float32
        ({"BF16", "F8_E4M3", "F32"}, ("fp32",)),
        # fp16 lacks bf16's range, bf16 lacks fp16's resolution (0.01 < 0.001): a tie
        ({"F16", "BF16"}, ("bf16", "fp16")),
        # e4m3 (448) fits e5m2 (57344) at the same resolution 1.0, not the reverse
        ({"F8_E4M3", "F8_E5M2"}, ("fp8_e5m2",)),
        ({"I32", "U8", "BOOL"}, ("int32",)),
        # names vLLM's safetensors map lacks are skipped
        ({"F8_E8M0", "F4"}, ()),
    ],
)
def test_common_dtype_is_vllms_lossless_majority(stored: set[str], common: tuple[str, ...]) -> None:
    assert common_dtype(stored) == common


def test_search_order_root_then_nested_then_headers() -> None:
    # transformers' dtype key wins over torch_dtype (both are read)
    assert checkpoint_dtype({"dtype": "float16", "torch_dtype": "bfloat16"}).name == "fp16"
    nested = checkpoint_dtype({"text_config": {"torch_dtype": "bfloat16"}})
    assert (nested.name, nested.origin) == ("bf16", "text_config")
    vision = checkpoint_dtype({"text_config": {}, "vision_config": {"dtype": "float32"}})
    assert (vision.name, vision.origin) == ("fp32", "vision_config")
    headers = checkpoint_dtype({}, {"BF16", "U8"})
    assert (headers.name, headers.origin) == ("bf16", "safetensors")
    assert "BF16, U8" in headers.source
    none = checkpoint_dtype({}, None)
    assert (none.name, none.origin) == ("unstated", "none")


def _safetensors(path: Path, dtypes: dict[str, str]) -> None:
    offset = 0
    header: dict[str, object] = {}
    for name, dtype in dtypes.items():
        header[name] = {"dtype": dtype, "shape": [2], "data_offsets": [offset, offset + 2]}
        offset += 2
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_a_local_folder_without_a_dtype_reads_its_headers(tmp_path: Path) -> None:
    config = json.loads((CONFIGS / "openai--gpt-oss-20b" / "config.json").read_text())
    assert "torch_dtype" not in config and "dtype" not in config
    (tmp_path / "config.json").write_text(json.dumps(config))
    _safetensors(tmp_path / "model.safetensors", {"a.blocks": "U8", "a.scales": "U8", "n": "BF16"})
    g = load_geometry(str(tmp_path))
    assert (g.dtype, g.dtype_origin) == ("bf16", "safetensors")
    assert g.weight_bytes == 6  # three 2-byte tensors, from the same headers


def _query(model: str, engine: str, **kw: object) -> KvQuery:
    return KvQuery(geometry=load_geometry(model), engine=engine, **kw)  # type: ignore[arg-type]


def test_gpt_oss_auto_kv_resolves_on_both_engines() -> None:
    path = str(CONFIGS / "openai--gpt-oss-20b" / "config.json")
    vllm = kv_breakdown(_query(path, "vllm", max_model_len=4096))
    # 12 full layers x 8 KV heads x (64 + 64) x 2 B: a 16-bit cache, stated as why
    assert vllm.rate == 12 * 8 * 128 * 2
    assert any("states no dtype" in n for n in vllm.rules)
    sglang = kv_breakdown(_query(path, "sglang", max_model_len=4096))
    assert sglang.dtype == "bf16"  # the GPT-OSS mxfp4 override, not float32 -> fp16
    assert any("mxfp4" in n for n in sglang.rules)


def test_a_stated_fp8_dtype_is_served_in_16_bits() -> None:
    config = json.loads((CONFIGS / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text())
    config["torch_dtype"] = "float8_e4m3fn"
    from fakplan.geometry.hf import geometry_from_config

    g = geometry_from_config(config, source="fp8-llama")
    b = kv_breakdown(KvQuery(geometry=g, engine="vllm"))
    assert b.rate == 32 * 8 * 256 * 2
    assert any("not a dtype vllm serves activations in" in n for n in b.rules)


def test_a_gguf_on_vllm_still_asks_for_the_dtype(tmp_path: Path) -> None:
    from tests.support.tinymodels import TinyLlama, write_tiny_llama

    gguf = write_tiny_llama(tmp_path / "m.gguf", TinyLlama())
    with pytest.raises(RuleError, match="GGUF"):
        kv_breakdown(_query(str(gguf), "vllm"))


MODELS = [f"catalog:{m}" for m in catalog_ids()] + sorted(
    str(p) for p in CONFIGS.glob("*/config.json")
)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
@pytest.mark.parametrize("model", MODELS)
def test_every_model_resolves_auto(model: str, engine: str) -> None:
    g = load_geometry(model.removeprefix("catalog:"))
    b = kv_breakdown(KvQuery(geometry=g, engine=engine, max_model_len=4096))
    # llama.cpp's auto is its f16 default for K and V
    assert b.dtype in {"bf16", "fp16", "fp8", "fp8_e4m3", "f16/f16", "f16"}
    assert b.rate > 0 or b.components


NVFP4_GEMMA = CONFIGS / "nvidia--Gemma-4-31B-IT-NVFP4" / "config.json"


@pytest.mark.parametrize(
    ("release", "kv", "rate"),
    [
        # 0.13.0 reads no checkpoint KV rule: bf16, 10 full layers x 4 heads x 1024 x 2 B
        ("0.13.0", "bf16", 10 * 4 * 1024 * 2),
        # 0.14.0 on: the ModelOpt {dynamic: false, num_bits: 8, type: float} scheme -> fp8_e4m3
        ("0.14.0", "fp8_e4m3", 10 * 4 * 1024 * 1),
        ("0.33.0", "fp8_e4m3", 10 * 4 * 1024 * 1),
    ],
)
def test_vllm_modelopt_kv_scheme_by_release(release: str, kv: str, rate: int) -> None:
    b = kv_breakdown(_query(str(NVFP4_GEMMA), "vllm", engine_version=release, max_model_len=4096))
    assert (b.dtype, b.rate) == (kv, rate)


def _compressed(kv_dtype: str, release: str) -> str:
    from fakplan.geometry.hf import geometry_from_config

    config = json.loads((CONFIGS / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    }
    g = geometry_from_config(config, source="ct-llama")
    return kv_breakdown(
        KvQuery(geometry=g, engine="vllm", engine_version=release, kv_dtype=kv_dtype)
    ).dtype


def test_vllm_compressed_tensors_kv_scheme_by_release() -> None:
    # before 0.15 the attention layer ignores it; 0.15-0.21 it wins even over a stated
    # dtype; from 0.22 only under auto
    assert _compressed("auto", "0.14.0") == "bf16"
    assert _compressed("auto", "0.15.0") == "fp8"
    assert _compressed("bfloat16", "0.21.0") == "fp8"
    assert _compressed("bfloat16", "0.22.0") == "bfloat16"
    assert _compressed("auto", "0.33.0") == "fp8"
