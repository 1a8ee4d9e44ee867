"""Weight bytes counted from a decoder's config, against published checkpoint totals.

Each expected figure is the ``metadata.total_size`` of the model's own
``model.safetensors.index.json`` on the Hugging Face hub, as quoted in public
documentation and code (found with the workplace's code search), never
fakplan's arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakplan.geometry import load_geometry
from fakplan.geometry.params import counted_weight_bytes
from tests.support.paths import PUBLIC, SHAPES

CONFIGS = PUBLIC / "configs"

PUBLISHED_TOTAL_SIZE = {
    # Llama 3.1 8B: 8,030,261,248 parameters in bf16 (the transformers docs' example index)
    "meta-llama/Llama-3.1-8B-Instruct": 16_060_522_496,
    "meta-llama/Llama-3.1-70B-Instruct": 141_107_412_992,
    "Qwen/Qwen2.5-7B-Instruct": 15_231_233_024,  # 7,615,616,512 parameters (q/k/v biases)
    "Qwen/Qwen3-8B": 16_381_470_720,
    "Qwen/Qwen3-32B": 65_524_246_528,  # 17 shards; q/k norms per layer
    "mistralai/Mistral-7B-Instruct-v0.3": 14_496_047_104,
    # mixtures of experts: experts x gate/up/down + a router per layer
    "Qwen/Qwen3-30B-A3B": 61_064_245_248,  # 16 shards
    "Qwen/Qwen3-235B-A22B": 470_187_269_120,  # 235,093,634,560 parameters
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 93_405_585_408,
}


@pytest.mark.parametrize(("model", "total"), sorted(PUBLISHED_TOTAL_SIZE.items()))
def test_catalog_weight_bytes_match_the_published_index(model: str, total: int) -> None:
    geometry = load_geometry(model)
    assert geometry.weight_bytes == total
    assert geometry.weight_params == total // 2  # every catalog entry here is bf16
    assert geometry.weight_source is not None
    assert geometry.weight_source.startswith("derived from config.json")
    assert geometry.weight_source.endswith(f"= {total:,} B")


def test_llama_2_checkpoints_also_hold_rotary_buffers() -> None:
    """Llama-2-7b-hf's index says 13,476,839,424 B: 8,192 B more than its parameters,
    the 32 layers' ``rotary_emb.inv_freq`` buffers (64 fp32 values each) saved with
    them. fakplan counts parameters, so it is short by exactly those."""
    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-2-7b-hf" / "config.json").read_text()
    )
    derived = counted_weight_bytes(config, "llama")
    assert derived is not None
    assert derived[0] == 13_476_839_424 - 32 * 64 * 4


@pytest.mark.parametrize(
    "change",
    [
        {"quantization_config": {"quant_method": "fp8"}},  # scales and packed types
        {"torch_dtype": "float8_e4m3fn"},
        {"model_type": "deepseek_v3"},  # MLA and shared experts: not counted
    ],
)
def test_what_cannot_be_counted_stays_unknown(change: dict[str, object]) -> None:
    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    config.update(change)
    assert counted_weight_bytes(config, str(config["model_type"])) is None


def test_a_file_that_states_the_bytes_wins(tmp_path: Path) -> None:
    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_060_522_504}, "weight_map": {}})
    )
    geometry = load_geometry(str(tmp_path))
    assert geometry.weight_bytes == 16_060_522_504
    assert geometry.weight_source == "model.safetensors.index.json metadata.total_size"


def test_llama_cpp_weighs_the_gguf_it_loads_not_the_checkpoint(tmp_path: Path) -> None:
    """A llama.cpp shape over a catalog geometry serves a GGUF: its tensor table is the
    weights figure where the file is here (the part the card holds), and unknown (with the reason) where it is not."""
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape
    from tests.support.tinymodels import write_tiny_llama

    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    text = (SHAPES / "qwen2.5-coder-llamacpp.yaml").read_text()
    shape = tmp_path / "coder.yaml"
    shape.write_text(text.replace("models/qwen2.5-coder-32b-instruct-q8_0.gguf", gguf.name))
    gate = next(g for g in compile_plan(load_shape(shape)).gates if g.id == "weights-fit")
    assert gate.status == "pass"
    # the tensor table less token_embd (260 x 64 f32), which llama.cpp keeps in RAM
    token_embd = 4 * 260 * 64
    assert (
        gate.numbers["weights_per_rank_bytes"] == load_geometry(str(gguf)).weight_bytes - token_embd
    )
    shape.write_text(text)  # the GGUF it names is not on this machine
    gate = next(g for g in compile_plan(load_shape(shape)).gates if g.id == "weights-fit")
    assert gate.status == "unknown"
    assert (
        "the engine loads models/qwen2.5-coder-32b-instruct-q8_0.gguf (launch.weights)"
        in gate.detail
    )


def test_qwen3_moe_dense_layers_follow_the_config() -> None:
    """mlp_only_layers and decoder_sparse_step keep some layers dense (Qwen3MoeDecoderLayer)."""
    config = {
        "model_type": "qwen3_moe",
        "torch_dtype": "bfloat16",
        "vocab_size": 10,
        "hidden_size": 4,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 2,
        "intermediate_size": 8,
        "moe_intermediate_size": 3,
        "num_experts": 5,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    }
    # attention 4x4 + 2x4x2 + 4x4 = 48, + q/k norms 2x2 = 52; norms 2x4 = 8 per layer
    # sparse layers: (i+1) % 2 == 0 and not in [3] -> layer 1 only
    # sparse MLP 5 x 3x4x3 + router 4x5 = 200; dense MLP 3x4x8 = 96
    layers = (52 + 8) * 4 + 200 + 3 * 96
    params = 10 * 4 * 2 + 4 + layers
    derived = counted_weight_bytes(config, "qwen3_moe")
    assert derived is not None and derived[0] == 2 * params
    assert "on 1 layers, dense" in derived[1]
