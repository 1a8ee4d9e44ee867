"""Checks on the built-in model catalog, fakplan/data/catalog.json.

The catalog ships copies of published Hugging Face config.json files, addressed by HF id, so model
shapes resolve offline. These tests check the file's schema, and then check its contents against
two things written independently of it: the published files copied byte for byte into
tests/data/public/configs (sources in its SOURCES.md), and values read off model cards and config
files by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import PUBLIC, ROOT

CATALOG = ROOT / "fakplan" / "data" / "catalog.json"
PUBLIC_CONFIGS = PUBLIC / "configs"

ENTRY_KEYS = {"id", "source", "config", "weight_bytes", "weight_source"}
OPTIONAL_KEYS = {"notes"}

# Keys removed from a published config (dotted paths), per model. Each must also be named in the
# entry's notes. Everything else in the published file must be carried over unchanged.
DROPPED: dict[str, list[str]] = {
    "Qwen/Qwen3-235B-A22B-FP8": ["quantization_config.modules_to_not_convert"],
    "Qwen/Qwen3-30B-A3B-FP8": ["quantization_config.modules_to_not_convert"],
}

# Published configs that leave num_attention_heads to the transformers class default.
HEADS_FROM_CLASS_DEFAULT = {"google/gemma-3-4b-it"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)


@pytest.fixture(scope="module")
def catalog() -> dict[str, Any]:
    data: dict[str, Any] = _load(CATALOG)
    return data


@pytest.fixture(scope="module")
def by_id(catalog: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in catalog["models"]}


# configs the dev corpus needs that the catalog does not carry (tests/data/public/corpus)
CORPUS_ONLY = frozenset(
    {
        "Qwen--Qwen3-14B",
        "Qwen--Qwen3.5-397B-A17B",
        "deepseek-ai--DeepSeek-V2-Lite",
        "mistralai--Mistral-Nemo-Base-2407",
        "meta-llama--Meta-Llama-3.1-405B",
        "mistralai--Mixtral-8x7B-v0.1",
    }
)


def _public_dirs() -> list[Path]:
    return sorted(
        p
        for p in PUBLIC_CONFIGS.iterdir()
        if (p / "config.json").is_file() and p.name not in CORPUS_ONLY
    )


def _text(entry: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config: text_config where there is one."""
    config: dict[str, Any] = entry["config"]
    text: dict[str, Any] = config.get("text_config") or config
    return text


def _drop(config: dict[str, Any], dotted: str) -> None:
    *parents, last = dotted.split(".")
    node = config
    for key in parents:
        node = node[key]
    del node[last]


# --- the file itself ---------------------------------------------------------------------------


def test_file_is_small_and_canonically_formatted(catalog: dict[str, Any]) -> None:
    raw = CATALOG.read_bytes()
    assert len(raw) < 1_000_000
    text = raw.decode("utf-8")
    assert text == json.dumps(catalog, indent=1, ensure_ascii=False) + "\n"


def test_schema(catalog: dict[str, Any]) -> None:
    assert set(catalog) == {"schema", "models"}
    assert catalog["schema"] == "fakplan.catalog/1"
    assert isinstance(catalog["models"], list)
    assert len(catalog["models"]) >= 30


def test_ids_unique_and_sorted(catalog: dict[str, Any]) -> None:
    ids = [entry["id"] for entry in catalog["models"]]
    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)
    for model_id in ids:
        org, _, name = model_id.partition("/")
        assert org and name and "/" not in name, model_id


def test_entries(catalog: dict[str, Any]) -> None:
    for entry in catalog["models"]:
        model_id = entry["id"]
        assert ENTRY_KEYS <= set(entry) <= ENTRY_KEYS | OPTIONAL_KEYS, model_id
        assert isinstance(entry["source"], str) and entry["source"].strip(), model_id
        assert isinstance(entry["config"], dict) and entry["config"], model_id
        weight = entry["weight_bytes"]
        assert weight is None or (type(weight) is int and weight > 0), model_id
        if weight is not None:
            assert isinstance(entry["weight_source"], str) and entry["weight_source"].strip()
        else:
            assert entry["weight_source"] is None, model_id
        if "notes" in entry:
            assert isinstance(entry["notes"], str) and entry["notes"].strip(), model_id


def test_every_config_has_layers_and_heads(catalog: dict[str, Any]) -> None:
    for entry in catalog["models"]:
        text = _text(entry)
        assert type(text.get("num_hidden_layers")) is int, entry["id"]
        if entry["id"] in HEADS_FROM_CLASS_DEFAULT:
            assert "num_attention_heads" not in text, f"{entry['id']}: drop it from the allowlist"
            assert "default" in entry["notes"]
        else:
            assert type(text.get("num_attention_heads")) is int, entry["id"]


def test_dropped_keys_are_documented(by_id: dict[str, dict[str, Any]]) -> None:
    for model_id, paths in DROPPED.items():
        entry = by_id[model_id]
        for dotted in paths:
            assert dotted in entry["notes"], (model_id, dotted)
            *parents, last = dotted.split(".")
            node = entry["config"]
            for key in parents:
                node = node[key]
            assert last not in node, (model_id, dotted)


# --- independent check: the published copies in tests/data/public/configs ---------------


@pytest.mark.parametrize("folder", _public_dirs(), ids=lambda p: p.name)
def test_matches_public_config(folder: Path, by_id: dict[str, dict[str, Any]]) -> None:
    model_id = folder.name.replace("--", "/", 1)
    assert model_id in by_id, f"{model_id} is in tests/data/public/configs but not in the catalog"
    expected = _load(folder / "config.json")
    for dotted in DROPPED.get(model_id, []):
        _drop(expected, dotted)
    assert by_id[model_id]["config"] == expected
    # Same key order as the published file, too.
    assert json.dumps(by_id[model_id]["config"]) == json.dumps(expected)


def test_fp8_repos_match_their_bf16_siblings(by_id: dict[str, dict[str, Any]]) -> None:
    for fp8, bf16 in [
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B"),
        ("Qwen/Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B"),
    ]:
        config = dict(by_id[fp8]["config"])
        quant = config.pop("quantization_config")
        assert config == by_id[bf16]["config"]
        assert quant["quant_method"] == "fp8"
        assert quant["fmt"] == "e4m3"
        assert quant["weight_block_size"] == [128, 128]


# --- hand-written spot checks, from the model cards and config files read -----------------------

SPOT: list[tuple[str, dict[str, Any]]] = [
    (
        "meta-llama/Llama-3.1-8B-Instruct",
        {
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
            "max_position_embeddings": 131072,
            "vocab_size": 128256,
        },
    ),
    (
        "meta-llama/Llama-3.1-70B-Instruct",
        {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8},
    ),
    (
        "meta-llama/Llama-3.1-405B",
        {"num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8},
    ),
    (
        "meta-llama/Llama-3.2-1B-Instruct",
        {"num_hidden_layers": 16, "num_key_value_heads": 8, "head_dim": 64},
    ),
    (
        "meta-llama/Llama-3.2-3B-Instruct",
        {"num_hidden_layers": 28, "num_attention_heads": 24, "head_dim": 128},
    ),
    ("meta-llama/Llama-2-7b-hf", {"num_hidden_layers": 32, "num_key_value_heads": 32}),
    (
        "deepseek-ai/DeepSeek-V3",
        {
            "num_hidden_layers": 61,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
            "first_k_dense_replace": 3,
            "n_routed_experts": 256,
            "num_nextn_predict_layers": 1,
        },
    ),
    (
        "moonshotai/Kimi-K2-Instruct",
        {"num_hidden_layers": 61, "kv_lora_rank": 512, "n_routed_experts": 384},
    ),
    (
        "mistralai/Mistral-7B-Instruct-v0.3",
        {"num_key_value_heads": 8, "vocab_size": 32768, "sliding_window": None},
    ),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", {"num_local_experts": 8, "num_experts_per_tok": 2}),
    ("mistralai/Mixtral-8x22B-v0.1", {"num_hidden_layers": 56, "num_attention_heads": 48}),
    ("Qwen/Qwen2.5-7B-Instruct", {"num_hidden_layers": 28, "num_key_value_heads": 4}),
    ("Qwen/Qwen3-8B", {"num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 128}),
    (
        "Qwen/Qwen3-30B-A3B",
        {"num_hidden_layers": 48, "num_key_value_heads": 4, "num_experts": 128},
    ),
    (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        {"num_hidden_layers": 48, "full_attention_interval": 4, "num_key_value_heads": 2},
    ),
    (
        "google/gemma-2-9b-it",
        {"num_hidden_layers": 42, "head_dim": 256, "sliding_window": 4096},
    ),
    (
        "google/gemma-3-27b-it",
        {"num_hidden_layers": 62, "num_key_value_heads": 16, "sliding_window": 1024},
    ),
    ("microsoft/phi-4", {"num_hidden_layers": 40, "num_key_value_heads": 10}),
    (
        "openai/gpt-oss-120b",
        {"num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128},
    ),
    (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        {"num_hidden_layers": 52, "num_key_value_heads": 2, "mamba_num_heads": 64},
    ),
]


@pytest.mark.parametrize(("model_id", "expected"), SPOT, ids=[m for m, _ in SPOT])
def test_spot_values(
    model_id: str, expected: dict[str, Any], by_id: dict[str, dict[str, Any]]
) -> None:
    text = _text(by_id[model_id])
    for key, value in expected.items():
        assert text.get(key, "<absent>") == value, (model_id, key)


def test_llama_31_rope_scaling(by_id: dict[str, dict[str, Any]]) -> None:
    rope = by_id["meta-llama/Llama-3.1-8B-Instruct"]["config"]["rope_scaling"]
    assert rope["rope_type"] == "llama3"
    assert rope["factor"] == 8.0
    assert rope["original_max_position_embeddings"] == 8192


def test_gpt_oss_alternates_sliding_and_full(by_id: dict[str, dict[str, Any]]) -> None:
    for model_id, layers in [("openai/gpt-oss-20b", 24), ("openai/gpt-oss-120b", 36)]:
        types = by_id[model_id]["config"]["layer_types"]
        assert len(types) == layers
        assert types[0::2] == ["sliding_attention"] * (layers // 2)
        assert types[1::2] == ["full_attention"] * (layers // 2)


def test_hybrid_patterns_cover_every_layer(by_id: dict[str, dict[str, Any]]) -> None:
    nano = by_id["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"]["config"]
    pattern = nano["hybrid_override_pattern"]
    assert len(pattern) == nano["num_hidden_layers"]
    assert pattern.count("*") == 6
    mimo = by_id["XiaomiMiMo/MiMo-V2-Flash"]["config"]
    assert len(mimo["hybrid_layer_pattern"]) == mimo["num_hidden_layers"] == 48
    assert mimo["hybrid_layer_pattern"].count(0) == 9
