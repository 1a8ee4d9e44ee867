"""Weight-only integer checkpoints (GPTQ, compressed-tensors W4A16) on one vLLM rank.

The kernel vLLM 0.19.0 picks depends on the card (Machete on compute capability 9.0,
Marlin elsewhere) and each keeps tensors of its own after the load. The printed figure is
the RedHat/Neural Magic w4a16 Llama-3.1-8B on an H100 (tests/data/public/corpus
vllm-418, llm-d-planner's run): "Model loading took 5.38 GiB".

Hand derivations below use Llama-3.1-8B's layers (K inputs x N outputs on the rank):
q/k/v 4,096 x 6,144, o 4,096 x 4,096, gate/up 4,096 x 28,672, down 14,336 x 4,096; the
embedding and lm_head 128,256 x 4,096 in fp16; 65 norms of 4,096; a rotary cache of
131,072 x 128 in fp16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines.packed_weights import PackedStorage
from fakplan.engines.weights import vllm_rank_weights, weights_refusal
from fakplan.units import GIB
from tests.support.paths import PUBLIC

LINEARS = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]  # (K, N) per layer
REST = 2 * 128_256 * 4096 * 2 + 65 * 4096 * 2 + 131_072 * 128 * 2
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": True}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def _config(scheme: dict[str, Any], base: str = "meta-llama--Llama-3.1-8B-Instruct") -> Any:
    config = json.loads((PUBLIC / "configs" / base / "config.json").read_text())
    return {**config, "quantization_config": scheme}


def _bytes(scheme: dict[str, Any], **kw: Any) -> int:
    found = vllm_rank_weights(_config(scheme), "llama", served="fp16", **kw)
    assert found is not None
    return found.bytes


def _checkpoint(tmp_path: Path) -> str:
    """A folder holding the w4a16 checkpoint's config (GPTQ over Llama-3.1-8B's)."""
    folder = tmp_path / "w4a16"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config(GPTQ)))
    return str(folder)


def _kv_args(tmp_path: Path) -> list[str]:
    return ["kv", _checkpoint(tmp_path), "--engine-version", "0.19.0", "--dtype", "float16",
            "--gpu-memory-utilization", "0.95", "--card-total", "79.19 GiB",
            "--max-model-len", "8192", "--json"]  # fmt: skip


def _kv_weights(args: list[str]) -> int:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    found: int = json.loads(result.output)["floor"]["weights_bytes"]
    return found


def test_gptq_act_order_on_machete_by_hand() -> None:
    """Machete keeps every tensor GPTQ creates: the packed weight (4 bits), g_idx (int32
    per input), the fp16 scales and int32 qzeros per group of 128 inputs, and the act-order
    permutation (int32 per input)."""
    layer = sum(
        k * n // 2 + k * 4 + k // 128 * n * 2 + k // 128 * n // 2 + k * 4 for k, n in LINEARS
    )
    assert _bytes(GPTQ, capability="9.0", sms=132) == 32 * layer + REST


def test_gptq_without_act_order_on_marlin_by_hand() -> None:
    """Marlin empties the zeros and g_idx and adds a workspace of one int32 per SM (108 on
    an A100) per layer."""
    scheme = {**GPTQ, "desc_act": False}
    layer = sum(k * n // 2 + k // 128 * n * 2 + 108 * 4 for k, n in LINEARS)
    assert _bytes(scheme, capability="8.0", sms=108) == 32 * layer + REST


@pytest.mark.parametrize("act_order", [True, False])
def test_the_h100_boot_lands_in_its_printed_rounding(act_order: bool) -> None:
    """The checkpoint's desc_act is not at hand: either value, held as Machete holds it
    and counted in the allocator's blocks, prints as 5.38 GiB."""
    scheme = {**GPTQ, "desc_act": act_order}
    found = _bytes(scheme, capability="9.0", sms=132, cuda_blocks=True)
    assert 5.375 * GIB <= found < 5.385 * GIB


def test_marlin_would_have_printed_less() -> None:
    """The card decides: on Marlin the same checkpoint keeps ~26 MiB less (zeros, g_idx),
    outside the H100's printed 5.38."""
    found = _bytes(GPTQ, capability="8.0", sms=108, cuda_blocks=True)
    assert found < 5.375 * GIB


def test_tp2_act_order_sends_row_parallel_layers_to_marlin() -> None:
    """Machete cannot reorder a split input (machete.py can_implement), so o and down go
    to Marlin at TP 2, with scales of the whole input repeated on every rank
    (marlin_repeat_scales_on_all_ranks)."""
    storage = PackedStorage(4, 128, True, "gptq", "9.0", tp=2, sms=132)
    # down on a rank: 7,168 inputs x 4,096 outputs, 14,336 / 128 = 112 scale rows
    assert storage.kernel(4096, 7168, split_input=True) == "Marlin"
    assert storage.allocations(7168 * 4096, 4096, True, 2) == [
        7168 * 4096 // 2,
        7168 * 4,
        112 * 4096 * 2,
        7168 * 4,
        132 * 4,
    ]
    assert storage.kernel(14336, 4096, split_input=False) == "Machete"
    found = vllm_rank_weights(_config(GPTQ), "llama", tp=2, served="fp16", capability="9.0")
    assert found is not None and "64 on Machete, 64 on Marlin" in found.derivation


def test_compressed_tensors_w4a16_keeps_its_shape_pair() -> None:
    """CompressedTensorsWNA16: weight_packed, weight_scale and the int64 weight_shape pair;
    no zeros (symmetric) and no g_idx without act order by group."""
    scheme = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                            "group_size": 128, "symmetric": True},
                "input_activations": None,
            }
        },
        "ignore": ["lm_head"],
    }  # fmt: skip
    layer = sum(k * n // 2 + k // 128 * n * 2 + 16 for k, n in LINEARS)
    assert _bytes(scheme, capability="9.0") == 32 * layer + REST


@pytest.mark.parametrize(
    ("scheme", "kw", "said"),
    [
        (GPTQ, {}, "card.capability"),
        ({**GPTQ, "sym": False}, {"capability": "9.0"}, "asymmetric"),
        ({**GPTQ, "bits": 3}, {"capability": "9.0"}, "3 bits"),
        ({**GPTQ, "modules_in_block_to_quantize": [["self_attn.q_proj"]]}, {"capability": "9.0"},
         "only some modules"),
        ({k: v for k, v in GPTQ.items() if k != "sym"}, {"capability": "9.0"}, "without sym"),
        ({**GPTQ, "bits": "4"}, {"capability": "9.0"}, "not a number"),
        (GPTQ, {"capability": "7.0"}, "below 7.5"),
        ({**GPTQ, "bits": 8, "group_size": -1, "desc_act": False}, {"capability": "8.6"},
         "AllSpark"),
    ],
)  # fmt: skip
def test_what_is_not_read_says_why(scheme: dict[str, Any], kw: dict[str, Any], said: str) -> None:
    config = _config(scheme)
    assert vllm_rank_weights(config, "llama", served="fp16", **kw) is None
    assert said in weights_refusal(config, "llama", None, 1, 1, kw.get("capability"))


def test_a_gptq_mixture_of_experts_by_hand() -> None:
    """Qwen3-30B-A3B in GPTQ int4 (groups of 128, no act order) on an H100, bf16: its
    attention on Machete (q/k/v 2,048 x 5,120, o 4,096 x 2,048: weight, g_idx, scales,
    qzeros), its 128 experts on Marlin's MoE kernel (GPTQMarlinMoEMethod, every card):
    w13 128 x 2,048 x 1,536 and w2 128 x 768 x 2,048 at 4 bits, their bf16 scales per
    128 inputs, and qzeros per 128 inputs of one element per 8 outputs created in the model
    dtype (gptq_marlin.py create_weights: dtype=params_dtype), g_idx emptied; the router 2,048 x 128, q/k norms and two
    norms in bf16; embedding and lm_head 151,936 x 2,048; the final norm; the rotary cache
    40,960 x 128."""
    attention = sum(
        k * n // 2 + k * 4 + k // 128 * n * 2 + k // 128 * n // 2
        for k, n in ((2048, 5120), (4096, 2048))
    )
    experts = 0
    for k, n in ((2048, 1536), (768, 2048)):  # inputs, outputs per expert
        experts += 128 * (k * n // 2 + k // 128 * n * 2 + k // 128 * n // 8 * 2)
    plain = (2048 * 128 + 2 * 128 + 2 * 2048) * 2
    rest = 2 * 151_936 * 2048 * 2 + 2048 * 2 + 40_960 * 128 * 2
    scheme = {**GPTQ, "desc_act": False}
    config = _config(scheme, "Qwen--Qwen3-30B-A3B")
    found = vllm_rank_weights(config, "qwen3_moe", capability="9.0")
    assert found is not None
    assert found.bytes == 48 * (attention + experts + plain) + rest
    assert "96 on Machete, 96 on Marlin MoE" in found.derivation


def test_moe_marlin_takes_the_experts_on_any_card_it_runs_on() -> None:
    """On an A100 the attention goes to Marlin too (emptied g_idx and zeros, workspaces);
    the experts' bytes do not change with the card."""
    config = _config({**GPTQ, "desc_act": False}, "Qwen--Qwen3-30B-A3B")
    found = vllm_rank_weights(config, "qwen3_moe", capability="8.0", sms=108)
    assert found is not None and "96 on Marlin, 96 on Marlin MoE" in found.derivation


def test_an_awq_mixture_of_experts_on_an_rtx_4090_by_hand() -> None:
    """AWQ (awq_marlin): the attention on Marlin (SM 8.9: packed zeros kept, a workspace of
    128 SMs x 4 B each), the experts on Marlin's MoE kernel (scales and packed zeros per
    128 inputs, 4 workspace words per SM a layer); scales in the model dtype, 2 B."""
    attention = sum(
        k * n // 2 + k // 128 * n * 2 + k // 128 * n // 2 + 128 * 4
        for k, n in ((2048, 5120), (4096, 2048))
    )
    experts = 4 * 128 * 4
    for k, n in ((2048, 1536), (768, 2048)):
        experts += 128 * (k * n // 2 + k // 128 * n * 2 + k // 128 * n // 2)
    plain = (2048 * 128 + 2 * 128 + 2 * 2048) * 2
    rest = 2 * 151_936 * 2048 * 2 + 2048 * 2 + 40_960 * 128 * 2
    config = _config(AWQ, "Qwen--Qwen3-30B-A3B")
    found = vllm_rank_weights(config, "qwen3_moe", capability="8.9", sms=128)
    assert found is not None
    assert found.bytes == 48 * (attention + experts + plain) + rest


def test_a_compressed_tensors_mixture_of_experts_is_refused() -> None:
    scheme = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                      "weights": {"num_bits": 4, "type": "int",
                                                  "strategy": "group", "group_size": 128,
                                                  "symmetric": True}}},
        "ignore": ["lm_head"],
    }  # fmt: skip
    config = _config(scheme, "Qwen--Qwen3-30B-A3B")
    assert vllm_rank_weights(config, "qwen3_moe", capability="9.0") is None
    said = weights_refusal(config, "qwen3_moe", None, 1, 1, "9.0")
    assert "GPTQ's and AWQ's mixtures of experts" in said


def test_quantization_gptq_keeps_the_gptq_kernel() -> None:
    """--quantization gptq refuses the conversion to gptq_marlin (override_quantization_method)."""
    config = _config(GPTQ)
    assert vllm_rank_weights(config, "llama", quantization="gptq_marlin", capability="9.0")
    assert vllm_rank_weights(config, "llama", quantization="exllama", capability="9.0") is None


def test_kv_takes_the_card_capability(tmp_path: Path) -> None:
    args = _kv_args(tmp_path)
    unnamed = CliRunner().invoke(main, args)
    assert unnamed.exit_code == 0, unnamed.output
    assert "card.capability" in json.loads(unnamed.output)["sizing"]["unknown"]
    weights = _kv_weights([*args, "--card-capability", "9.0"])
    assert weights == _bytes(GPTQ, capability="9.0", sms=132, cuda_blocks=True)
    bad = CliRunner().invoke(main, [*args, "--card-capability", "nine"])
    assert bad.exit_code == 2 and "major.minor" in bad.output


def test_fit_takes_the_card_capability(tmp_path: Path) -> None:
    args = ["fit", _checkpoint(tmp_path), "--engine", "vllm", "--engine-version", "0.19.0",
            "--card", "79.19 GiB", "--sms", "132", "--utilization", "0.95", "--window", "8192",
            "--kv-dtype", "auto", "--tp", "1", "--json"]  # fmt: skip
    unnamed = CliRunner().invoke(main, args)
    assert unnamed.exit_code != 0 and "card.capability" in unnamed.output
    named = CliRunner().invoke(main, [*args, "--card-capability", "9.0"])
    assert named.exit_code == 0, named.output
    by_sku = CliRunner().invoke(main, [*args, "--card-sku", "H100-SXM-80GB"])
    assert by_sku.exit_code == 0, by_sku.output
    layouts = json.loads(by_sku.output)["layouts"]
    # the table's capability 9.0 plans the same frontier; its bandwidth gives each point a rate
    assert (
        json.loads(named.output)["layouts"][0]["frontier"][0]["max_num_seqs"]
        == layouts[0]["frontier"][0]["max_num_seqs"]
    )
    assert layouts[0]["frontier"][0]["decode_tps_per_session"] is not None


def test_awq_on_machete_keeps_zero_points_as_scales_by_hand() -> None:
    """awq_marlin re-packs qweight and qzeros at the same size; Machete replaces the
    zeros by -scale x zero in the scales' dtype (machete.py transform_w_zp): a second
    fp16 tensor of the scales' shape."""
    layer = sum(k * n // 2 + 2 * (k // 128 * n * 2) for k, n in LINEARS)
    assert _bytes(AWQ, capability="9.0") == 32 * layer + REST


def test_awq_on_marlin_keeps_zero_points_packed_by_hand() -> None:
    """Marlin keeps the zeros packed, 4 bits per output per group (marlin_zero_points),
    and one int32 workspace word per SM (128 on an RTX 4090) per layer."""
    layer = sum(k * n // 2 + k // 128 * n * 2 + k // 128 * n // 2 + 128 * 4 for k, n in LINEARS)
    assert _bytes(AWQ, capability="8.9", sms=128) == 32 * layer + REST


@pytest.mark.parametrize(
    ("scheme", "quantization", "said"),
    [
        ({**AWQ, "zero_point": False}, None, "AWQ kernel"),
        ({**AWQ, "modules_to_not_convert": ["visual"]}, None, "unquantized"),
        (AWQ, "awq", "--quantization awq"),
        (GPTQ, "gptq", "--quantization gptq"),
    ],
)
def test_what_awq_and_gptq_leave_to_their_own_kernels(
    scheme: dict[str, Any], quantization: str | None, said: str
) -> None:
    config = _config(scheme)
    found = vllm_rank_weights(config, "llama", quantization=quantization, capability="9.0")
    assert found is None
    assert said in weights_refusal(config, "llama", quantization, 1, 1, "9.0")


def test_kv_card_sku_fills_sms_and_capability(tmp_path: Path) -> None:
    """--card-sku A100-SXM4-80GB gives the table's 108 SMs and capability 8.0 (Marlin,
    whose workspaces count the SMs): the same weights as naming them; an unknown SKU is
    one line with the near ones."""
    args = _kv_args(tmp_path)
    weights = _kv_weights([*args, "--card-sku", "A100-SXM4-80GB"])
    assert weights == _bytes(GPTQ, capability="8.0", sms=108, cuda_blocks=True)
    bad = CliRunner().invoke(main, [*args, "--card-sku", "H100"])
    assert bad.exit_code == 2 and "H100-SXM-80GB" in bad.output


FP8_BLOCKS = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def test_fp8_blocks_on_an_a100_are_repacked_for_marlin_by_hand() -> None:
    """Below compute capability 8.9 MarlinFP8ScaledMMLinearKernel takes fp8 weights
    (scaled_mm/marlin.py): 1 B a weight as before, the 128 x 128 block scales repeated over
    each block's 128 outputs in the model dtype (one row per 128 inputs: ceil(K/128) x N x
    2 B), an int32 workspace word per SM (108 on an A100) per layer
    (prepare_fp8_layer_for_marlin)."""
    layer = sum(k * n + -(-k // 128) * n * 2 + 108 * 4 for k, n in LINEARS)
    rest = 2 * 128_256 * 4096 * 2 + 65 * 4096 * 2 + 131_072 * 128 * 2  # bf16 here
    found = vllm_rank_weights(_config(FP8_BLOCKS), "llama", capability="8.0", sms=108)
    assert found is not None and found.bytes == 32 * layer + rest
    assert "repacked for Marlin" in found.derivation
    hopper = vllm_rank_weights(_config(FP8_BLOCKS), "llama", capability="9.0", sms=132)
    assert hopper is not None  # float32 block scales there: (N/128) x (K/128) x 4 B
    blocks = sum(-(-n // 128) * -(-k // 128) * 4 for k, n in LINEARS)
    assert hopper.bytes == 32 * (sum(k * n for k, n in LINEARS) + blocks) + rest


def test_online_fp8_on_an_rtx_3090_is_per_channel_in_marlin() -> None:
    """--quantization fp8 on SM 8.6: one scale per output channel in bf16 (the per-tensor
    scale repeated), no workspace counted without the SMs."""
    config = json.loads(
        (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    found = vllm_rank_weights(config, "llama", quantization="fp8", capability="8.6")
    layer = sum(k * n + n * 2 for k, n in LINEARS)
    rest = 2 * 128_256 * 4096 * 2 + 65 * 4096 * 2 + 131_072 * 128 * 2
    assert found is not None and found.bytes == 32 * layer + rest


def test_fp8_without_the_card_says_which_it_assumed() -> None:
    found = vllm_rank_weights(_config(FP8_BLOCKS), "llama")
    assert found is not None and "compute capability 8.9 on" in found.derivation


@pytest.mark.parametrize(("capability", "said"), [("8.0", "Marlin's repack of them"),
                                                  ("7.0", "no kernel")])  # fmt: skip
def test_fp8_where_marlin_is_not_read(capability: str, said: str) -> None:
    config = _config(FP8_BLOCKS, "Qwen--Qwen3-30B-A3B")
    assert vllm_rank_weights(config, "qwen3_moe", capability=capability) is None
    assert said in weights_refusal(config, "qwen3_moe", None, 1, 1, capability)


def test_a_layer_no_read_kernel_takes_is_said_so() -> None:
    """An AWQ layer Marlin cannot take (down's 14,400 inputs are not a multiple of 128)
    stays on AWQ's own kernel (AWQMarlinConfig.get_quant_method), even on an H100; a
    checkpoint without a dtype asks for --dtype rather than blaming a kernel."""
    config = {**_config(AWQ), "intermediate_size": 14_400}
    assert vllm_rank_weights(config, "llama", capability="9.0") is None
    assert "AWQ's own kernel" in weights_refusal(config, "llama", None, 1, 1, "9.0")
    undated = {k: v for k, v in _config(GPTQ).items() if k != "torch_dtype"}
    assert vllm_rank_weights(undated, "llama", capability="9.0") is None
    assert "--dtype" in weights_refusal(undated, "llama", None, 1, 1, "9.0")


@pytest.mark.parametrize(("scheme", "unified"), [(AWQ, "auto_awq"), (GPTQ, "auto_gptq")])
def test_0_26s_unified_methods_hold_a_dense_model_as_the_marlin_ones_did(
    scheme: dict[str, Any], unified: str
) -> None:
    """vLLM 0.26 prints quantization=auto_awq or auto_gptq for an AWQ or GPTQ checkpoint
    (one config each for the method, its _marlin and its auto_ name): the linear methods
    are 0.19's Marlin ones renamed, so a dense model's weights are the same bytes; a
    mixture of experts under them is refused (0.26's experts method is new); the other
    method's name is still not this checkpoint's."""
    method = scheme["quant_method"]
    same = _bytes(scheme, capability="8.6", sms=84, quantization=unified)
    assert same == _bytes(scheme, capability="8.6", sms=84, quantization=f"{method}_marlin")
    assert same == _bytes(scheme, capability="8.6", sms=84)
    moe = _config(scheme, "Qwen--Qwen3-30B-A3B")
    assert vllm_rank_weights(moe, "qwen3_moe", quantization=unified, capability="8.6") is None
    assert "select_wna16_moe_backend" in weights_refusal(moe, "qwen3_moe", unified, 1, 1, "8.6")
    other = "auto_gptq" if unified == "auto_awq" else "auto_awq"
    assert vllm_rank_weights(_config(scheme), "llama", quantization=other) is None


@pytest.mark.parametrize(("case_id", "g_idx"), [("prof-037", False), ("prof-038", True)])
def test_the_0_26_a40_checkpoints_sizes_are_their_rebuilt_schemes(
    case_id: str, g_idx: bool
) -> None:
    """prof-037's (AWQ) and prof-038's (GPTQ) quantization_config are rebuilt. Each log
    prints the checkpoint's size, which the scheme decides: per linear layer K x N / 2 B of
    packed int4 weights, K x N / 256 of packed int32 zero points and K x N / 64 of fp16
    scales (one per 128 inputs), and for GPTQ each layer's g_idx of K int32 (q, k, v, gate
    and up read 4,096 inputs, o 4,096, down 14,336); the fp16 embedding, lm_head and 65
    norms beside them."""
    import re

    import yaml

    case = next(
        c
        for c in yaml.safe_load((PUBLIC / "profiler" / "cases.yaml").read_text())["cases"]
        if c["id"] == case_id
    )
    scheme = case["quantization_config"]
    assert (scheme["bits"], scheme["group_size"]) == (4, 128)
    kn = 32 * sum(k * n for k, n in LINEARS)
    assert kn == 6_979_321_856
    zeros = kn // 256
    stored = kn // 2 + zeros + kn // 64 + 2 * 128_256 * 4096 * 2 + 65 * 4096 * 2
    stored += 32 * (6 * 4096 + 14_336) * 4 if g_idx else 0
    log = (PUBLIC / "profiler" / f"{case_id}.log").read_text(encoding="utf-8")
    (printed,) = re.findall(r"Checkpoint size: ([\d.]+) GiB", log)
    assert round(stored / GIB, 2) == float(printed)
    if not g_idx:  # AWQ without zero points would print 5.31
        assert round((stored - zeros) / GIB, 2) != float(printed)
