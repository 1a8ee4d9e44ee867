"""Rates before boot: the card table, the roofline arithmetic and the plan's predictions.

Every expected figure is derived by hand in the test from the inputs it states; the
bands themselves are the fit sets' (fakplan/engines/rate_bands.py) and are checked by
recomputing one point's efficiency from its quoted figure.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fakplan.cards import CARDS, card_sku, near_skus, sku_for_device
from fakplan.cli import main
from fakplan.engines import ENGINES
from fakplan.engines.rate_bands import LLAMACPP_GPU_DECODE, VLLM_CPU_DECODE, VLLM_GPU_DECODE
from fakplan.rates import (
    AllReduce,
    DecodeInputs,
    EfficiencyBand,
    Experts,
    PrefillInputs,
    all_reduce_s,
    decode_point,
    prefill_rate,
    step_bytes,
)
from tests.support.paths import ROOT

BAND = EfficiencyBand(low=0.5, high=0.8, fit=("a",), source="test")


def test_every_card_row_is_sourced_and_dense() -> None:
    for card in CARDS:
        assert card.sources and all(s.startswith("https://") for s in card.sources), card.sku
        assert card.checked in ("verified", "partial"), card.sku
        assert card.bandwidth > 0
        # a dense peak never exceeds the next format's: bf16 <= fp8 <= fp4 where stated
        peaks = [card.tflops[d] for d in ("bf16", "fp8", "fp4") if d in card.tflops]
        assert peaks == sorted(peaks), card.sku


def test_every_bundled_shape_names_a_known_card() -> None:
    """Every bundled shape of an engine fakplan models names its card, and the name
    resolves (the custom engine's shapes get no rates, and may leave it out)."""
    named = 0
    for path in sorted((ROOT / "shapes").glob("*.yaml")):
        shape = yaml.safe_load(path.read_text())
        sku = shape["card"].get("sku")
        if shape["engine"] != "custom" or sku is not None:
            assert sku is not None and card_sku(sku) is not None, path.name
            named += 1
    assert named >= 4


def test_card_lookup_by_sku_and_by_nvml_name() -> None:
    h100 = card_sku("h100-sxm-80gb")
    assert h100 is not None and h100.bandwidth == 3_350 * 10**9 and h100.sms == 132
    assert h100.peak_flops("bf16") == 989e12 and h100.peak_flops("fp4") is None
    assert sku_for_device("NVIDIA H100 80GB HBM3") is h100
    assert sku_for_device("NVIDIA GeForce RTX 4090") is card_sku("RTX-4090")
    assert sku_for_device("Some Other GPU") is None
    assert near_skus("H100")[:2] == ["H100-PCIE-80GB", "H100-SXM-80GB"]


def test_dense_decode_step_is_weights_plus_kv_over_bandwidth() -> None:
    # 16 GB of weights, 100,000 B/token of KV, 4 sessions at 1,000 tokens: 16.4 GB a step
    inputs = DecodeInputs(
        weights_bytes=16_000_000_000,
        experts=None,
        kv_bytes_per_token=100_000,
        kv_bytes_per_seq=0,
        bandwidth=2_000_000_000_000,
        band=BAND,
    )
    point = decode_point(inputs, 4, 1_000)
    assert point.bytes_per_step == (16_400_000_000, 16_400_000_000)
    # slowest: 16.4e9 / (2e12 x 0.5) = 16.4 ms; fastest: 16.4e9 / (2e12 x 0.8) = 10.25 ms
    assert point.per_session == pytest.approx((1 / 0.0164, 1 / 0.01025))
    assert point.aggregate == pytest.approx((4 / 0.0164, 4 / 0.01025))


def test_moe_step_reads_the_routed_experts_only() -> None:
    # 10 GB on the rank, 8 GB of it in 64 experts of 125 MB; top-2
    experts = Experts(count=64, per_token=2, bytes=8_000_000_000)
    inputs = DecodeInputs(
        weights_bytes=10_000_000_000,
        experts=experts,
        kv_bytes_per_token=0,
        kv_bytes_per_seq=0,
        bandwidth=10**12,
        band=BAND,
    )
    # one token: exactly 2 experts either way: 2 GB shared + 2 x 125 MB
    assert step_bytes(inputs, 1, 0) == (2_250_000_000, 2_250_000_000)
    # 64 tokens: at most every expert (8 GB); expected under uniform routing
    # 64 x (1 - (62/64)^64) = 55.3 experts
    few, many = step_bytes(inputs, 64, 0)
    assert many == 10_000_000_000
    assert few == round(2e9 + 64 * (1 - (62 / 64) ** 64) * 125_000_000)


def test_all_reduce_adds_two_per_layer_at_tensor_parallel() -> None:
    measured = AllReduce(latency_s=(5e-6, 10e-6), bytes_per_s=(25e9, 50e9), source="t")
    inputs = DecodeInputs(
        weights_bytes=1,
        experts=None,
        kv_bytes_per_token=0,
        kv_bytes_per_seq=0,
        bandwidth=1,
        band=BAND,
        tensor=2,
        hidden=5_000,
        layers=10,
        all_reduce=measured,
    )
    # message 1 session x 5,000 x 2 B = 10,000 B; 20 all-reduces
    fast = 20 * (5e-6 + 10_000 / 50e9)
    slow = 20 * (10e-6 + 10_000 / 25e9)
    assert all_reduce_s(inputs, 1) == pytest.approx((fast, slow))
    single = DecodeInputs(**{**inputs.__dict__, "tensor": 1})
    assert all_reduce_s(single, 1) == (0.0, 0.0)


def test_prefill_counts_linear_and_causal_attention_flops() -> None:
    inputs = PrefillInputs(
        active_params=1_000_000_000,
        layers=10,
        heads=8,
        head_dim=128,
        peak_flops=100e12,
        peak_dtype="bf16",
        band=BAND,
    )
    tokens = 2_000
    flops = 2 * 1_000_000_000 * tokens + 2 * tokens**2 * 8 * 128 * 10
    slow, fast, counted = prefill_rate(inputs, tokens)
    assert counted == flops
    assert slow == pytest.approx(tokens / (flops / (100e12 * 0.5)))
    assert fast == pytest.approx(tokens / (flops / (100e12 * 0.8)))


def test_a_band_is_its_fit_sets_efficiencies() -> None:
    # vLLM, H100, Llama-3.1-8B at one sequence: TPOT 6.48 ms over 16,060,522,496 B of
    # weights + 1,024 tokens x 131,072 B of KV, against 3,350 GB/s
    first = VLLM_GPU_DECODE[0]
    assert first.efficiency("decode") == pytest.approx(
        (16_060_522_496 + 1_024 * 131_072) / 0.00648 / 3_350e9
    )
    band = ENGINES["vllm"].decode_bands["gpu"]
    shares = [p.efficiency("decode") for p in VLLM_GPU_DECODE]
    assert (band.low, band.high) == (min(shares), max(shares))
    assert band.fit == tuple(p.id for p in VLLM_GPU_DECODE)
    # llama.cpp's RTX 4090 F16 7B: 12.55 GiB x 61.03 t/s / 1,008 GB/s
    assert LLAMACPP_GPU_DECODE[0].efficiency("decode") == pytest.approx(
        12.55 * 2**30 * 61.03 / 1_008e9
    )


def _shape(tmp_path: Path, card: str, extra: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: s
            engine: vllm
            engine_version: 0.19.0
            model: meta-llama/Llama-3.1-8B-Instruct
            card: {card}
            budget: {{weights: 16 GiB, kv: 40 GiB}}
            serving: {{max_num_seqs: 16, max_model_len: 8192}}
            """
        )
        + extra,
        encoding="utf-8",
    )
    return path


def _plan(path: Path, failing_gate: bool = False) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["plan", str(path), "--json"])
    assert result.exit_code == (1 if failing_gate else 0), result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_plan_predicts_decode_from_the_named_card(tmp_path: Path) -> None:
    plan = _plan(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}"))
    rates = plan["rates"]
    assert rates["sku"] == "H100-SXM-80GB" and rates["bandwidth_bytes_per_s"] == 3_350e9
    band = ENGINES["vllm"].decode_bands["gpu"]
    weights = 16_060_522_496  # Llama-3.1-8B bf16, counted from its config
    # one session, the probe's run: fast end weights alone, slow end with 1,024 tokens of KV
    fast = 3_350e9 * band.high / weights
    slow = 3_350e9 * band.low / (weights + 1_024 * 131_072)
    prediction = next(p for p in plan["predictions"] if p["id"] == "decode-tps-one")
    assert (prediction["low"], prediction["high"]) == (round(slow, 2), round(fast, 2))
    assert prediction["closed_by"] == "probe decode"
    # every slot at the full window: 16 x 8,192 tokens of KV beside the weights
    worst = rates["decode"]["worst_case"]
    step = weights + 16 * 8_192 * 131_072
    assert worst["per_session_tps"][0] == pytest.approx(3_350e9 * band.low / step, abs=0.01)
    assert worst["aggregate_tps"][1] == pytest.approx(16 * 3_350e9 * band.high / step, abs=0.01)
    # every slot at once as the decode-load probe runs them: contexts from the window
    # less 528 tokens (512 generated + 16 slack) to the window
    every = next(p for p in plan["predictions"] if p["id"] == "decode-tps")
    slow = 3_350e9 * band.low / (weights + 16 * 8_192 * 131_072)
    fast = 3_350e9 * band.high / (weights + 16 * (8_192 - 528) * 131_072)
    assert (every["low"], every["high"]) == (round(slow, 2), round(fast, 2))
    assert every["closed_by"] == "probe decode-load"
    # vLLM has no prefill band: said, not guessed
    assert rates["prefill"] is None
    assert any("prefill" in reason for reason in rates["not_predicted"])


def test_vllm_on_a_cpu_host_is_predicted_from_its_own_band(tmp_path: Path) -> None:
    """The vLLM CPU band is its bench runs' (tests/bench/rates.py): one run recomputed from
    its quote; a CPU shape stating its bandwidth gets a decode rate from it. SGLang
    borrows only vLLM's GPU band, so its CPU host is said, not predicted."""
    # vllm-f32 on 1 thread: 5.19 t/s over 1,136,802,032 B against 14.55 GB/s
    assert VLLM_CPU_DECODE[0].efficiency("decode") == pytest.approx(5.19 * 1_136_802_032 / 14.55e9)
    band = ENGINES["vllm"].decode_bands["cpu"]
    shares = [p.efficiency("decode") for p in VLLM_CPU_DECODE]
    assert (band.low, band.high) == (min(shares), max(shares))
    plan = _plan(_shape(tmp_path, "{device: cpu, total: 64 GiB, bandwidth: 20 GB/s}"))
    one = next(p for p in plan["predictions"] if p["id"] == "decode-tps-one")
    weights = 16_060_522_496
    fast = 20e9 * band.high / weights
    slow = 20e9 * band.low / (weights + 1_024 * 131_072)
    assert (one["low"], one["high"]) == (round(slow, 2), round(fast, 2))
    assert "cpu" not in ENGINES["sglang"].decode_bands
    assert ENGINES["sglang"].decode_bands["gpu"] == ENGINES["vllm"].decode_bands["gpu"]


def test_a_stated_bandwidth_overrides_and_a_card_without_one_says_why(tmp_path: Path) -> None:
    plan = _plan(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB, bandwidth: 1 TB/s}"))
    assert plan["rates"]["bandwidth_bytes_per_s"] == 10**12
    plan = _plan(_shape(tmp_path, "{total: 80 GiB}"))
    assert plan["rates"]["decode"] is None
    assert "card.sku" in plan["rates"]["not_predicted"][0]
    assert not any(p["id"] == "decode-tps-one" for p in plan["predictions"])


def test_the_table_fills_card_sms(tmp_path: Path) -> None:
    from fakplan.shape import load_shape

    loaded = load_shape(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}"))
    assert loaded.shape.card.sms == 132
    loaded = load_shape(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB, sms: 114}"))
    assert loaded.shape.card.sms == 114  # a stated count wins


def test_the_table_fills_card_capability(tmp_path: Path) -> None:
    """NVIDIA's CUDA table: Hopper 9.0, Ampere A100 8.0 (developer.nvidia.com/cuda-gpus)."""
    from fakplan.shape import load_shape

    loaded = load_shape(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}"))
    assert loaded.shape.card.capability == "9.0"
    loaded = load_shape(_shape(tmp_path, "{total: 80 GiB, sku: A100-SXM4-80GB}"))
    assert loaded.shape.card.capability == "8.0"
    loaded = load_shape(_shape(tmp_path, '{total: 80 GiB, sku: A100-SXM4-80GB, capability: "9.0"}'))
    assert loaded.shape.card.capability == "9.0"  # a stated one wins
    loaded = load_shape(_shape(tmp_path, "{total: 24 GiB, capability: 8.6}"))
    assert loaded.shape.card.capability == "8.6"  # YAML's number, as written


@pytest.mark.parametrize(
    ("card", "message"),
    [
        (
            "{total: 80 GiB, sku: H100}",
            "s.yaml:5: card.sku: 'H100' is not a card fakplan knows (did you mean "
            "H100-PCIE-80GB, H100-SXM-80GB, H100-NVL-94GB?)",
        ),
        ("{total: 80 GiB, bandwidth: 3 TB}", "s.yaml:5: card.bandwidth: expected a byte size"),
        ("{total: 80 GiB, bandwidth: 0 GB/s}", "s.yaml:5: card.bandwidth: a bandwidth is more"),
        ('{total: 80 GiB, capability: "9"}', "s.yaml:5: card.capability:"),
    ],
)
def test_bad_card_fields_are_one_line(tmp_path: Path, card: str, message: str) -> None:
    result = CliRunner().invoke(main, ["plan", str(_shape(tmp_path, card))])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_tensor_parallel_over_pcie_is_not_predicted(tmp_path: Path) -> None:
    path = _shape(tmp_path, "{total: 24 GiB, count: 2, sku: L4}", "parallel: {tensor: 2}\n")
    plan = _plan(path, failing_gate=True)  # 40 GiB of KV is more than an L4 holds
    assert plan["rates"]["decode"] is None
    assert "pcie" in plan["rates"]["not_predicted"][0]
    path = _shape(
        tmp_path, "{total: 80 GiB, count: 2, sku: H100-SXM-80GB}", "parallel: {tensor: 2}\n"
    )
    decode = _plan(path)["rates"]["decode"]
    assert decode["all_reduce"].startswith("https://github.com/sgl-project/sglang/pull/2904")
    # two ranks read half the weights each, and join 64 partial sums a step
    assert decode["weights_bytes_per_step"] == 16_060_522_496 // 2


@pytest.mark.parametrize("doc", ["README.md", "docs/rates.md"])
def test_the_published_scores_are_generated(doc: str) -> None:
    """The comparison table in the docs is rate_points' output, not typed prose."""
    from tests.support.rate_points import BEGIN, END, table

    text = (ROOT / doc).read_text(encoding="utf-8")
    published = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert published.strip() == table().strip()


@pytest.mark.parametrize("doc", ["README.md", "docs/rates.md"])
def test_the_published_bands_are_the_registrys(doc: str) -> None:
    from tests.support.rate_points import BANDS_BEGIN, BANDS_END, bands_table

    text = (ROOT / doc).read_text(encoding="utf-8")
    published = text.split(BANDS_BEGIN, 1)[1].split(BANDS_END, 1)[0]
    assert published.strip() == bands_table().strip()


def test_the_report_draws_a_rate_prediction_to_scale() -> None:
    from fakplan.report import BAR_WIDTH, rate_plot

    plot = rate_plot(100.0, 150.0, [120.0, 200.0])
    assert plot is not None
    top = 200.0 * 1.15  # the largest figure, measured or predicted, with room past it
    assert plot["x"] == round(100 / top * BAR_WIDTH, 1)
    assert plot["width"] == pytest.approx(50 / top * BAR_WIDTH, abs=0.2)
    assert plot["ticks"] == [round(120 / top * BAR_WIDTH, 1), round(200 / top * BAR_WIDTH, 1)]
    assert rate_plot(None, 150.0, []) is None  # an open bound is not drawn


def test_the_report_plots_a_probed_rate(tmp_path: Path) -> None:
    from fakplan.plan import compile_plan
    from fakplan.predict import Verdict
    from fakplan.report import entry, render_report
    from fakplan.shape import load_shape

    plan = compile_plan(load_shape(_shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}")))
    decode = next(p for p in plan.predictions if p.id == "decode-tps-one")
    observed = Verdict(status="killed", observed=120.5, source="fakplan probe decode (test)")
    probed = plan.model_copy(
        update={
            "predictions": tuple(
                p.with_verdict(observed) if p.id == decode.id else p for p in plan.predictions
            )
        }
    )
    html = render_report([entry("s.yaml", probed)])
    row = html.split('data-prediction="decode-tps-one"', 1)[1].split("</tr>", 1)[0]
    assert row.count('class="measured"') == 1 and 'class="predicted"' in row
    assert "measured 120.5 tokens/s (killed)" in row


def test_a_partial_offload_is_not_predicted_from_the_card(tmp_path: Path) -> None:
    """llama.cpp with -ngl below every layer reads the rest from host RAM each step: the
    card's bandwidth does not bound that, so no decode rate is claimed."""
    from tests.support.tinymodels import TinyLlama, write_tiny_llama

    model = write_tiny_llama(tmp_path / "m.gguf", TinyLlama())
    path = tmp_path / "ngl.yaml"
    base = (
        f"name: ngl\nengine: llamacpp\nmodel: {json.dumps(str(model))}\n"
        "card: {total: 1 GiB, sku: RTX-4090}\nbudget: {weights: 64 MiB, kv: 1 MiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 1024, kv_cache_dtype: f16}\n"
    )
    path.write_text(base + "launch: {gpu_layers: 1}\n", encoding="utf-8")
    rates = _plan(path)["rates"]
    assert rates["decode"] is None
    assert "2 of 3 layers stay in host RAM" in rates["not_predicted"][0]
    path.write_text(base, encoding="utf-8")
    assert _plan(path)["rates"]["decode"] is not None


def test_fakplan_cards_lists_the_table() -> None:
    result = CliRunner().invoke(main, ["cards", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "fakplan.cards/1"
    assert [c["sku"] for c in doc["cards"]] == [c.sku for c in CARDS]
    h200 = next(c for c in doc["cards"] if c["sku"] == "H200-SXM-141GB")
    assert h200["bandwidth_bytes_per_s"] == 4_800 * 10**9
    assert h200["dense_from_sparse"] and h200["sources"][0].startswith("https://www.nvidia.com")
    assert h200["capability"] == "9.0"  # Hopper, NVIDIA's CUDA table
    text = CliRunner().invoke(main, ["cards"]).output
    assert "H200-SXM-141GB" in text and "RTX-PRO-6000" in text


def test_fit_gives_the_decode_rate_beside_each_point(tmp_path: Path) -> None:
    shape = _shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}")
    result = CliRunner().invoke(main, ["fit", str(shape), "--json"])
    assert result.exit_code == 0, result.output
    layouts = json.loads(result.output)["layouts"]
    points = [p for layout in layouts for p in layout["frontier"]]
    assert points and all(p["decode_tps_per_session"] is not None for p in points)
    for p in points:
        slow, fast = p["decode_tps_per_session"]
        assert 0 < slow <= fast
        agg_slow, _ = p["decode_tps_aggregate"]
        assert agg_slow == pytest.approx(slow * p["max_num_seqs"], rel=1e-3)


def test_diff_states_what_a_change_costs_in_tokens_per_second(tmp_path: Path) -> None:
    """fp8 KV halves the KV a step reads: at 16 slots of 8,192 tokens the slow end of the
    per-session rate moves from weights + 16 x 8,192 x 131,072 B a step to half the KV."""
    old = _shape(tmp_path, "{total: 80 GiB, sku: H100-SXM-80GB}")
    new = tmp_path / "new.yaml"
    new.write_text(
        old.read_text(encoding="utf-8").replace(
            "max_model_len: 8192}", "max_model_len: 8192, kv_cache_dtype: fp8}"
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["diff", str(old), str(new)])
    band = ENGINES["vllm"].decode_bands["gpu"]
    weights, kv = 16_060_522_496, 16 * 8_192 * 131_072
    before = 3_350e9 * band.low / (weights + kv)
    after = 3_350e9 * band.low / (weights + kv // 2)
    line = next(x for x in result.output.splitlines() if x.strip().startswith("decode per session"))
    assert f"{before:,.2f} -> {after:,.2f} ({after / before:.2f}x)" in line


def test_a_mixture_of_experts_reads_its_routed_experts(tmp_path: Path) -> None:
    """Qwen3-30B-A3B (its published config): 128 experts of 3 x 2,048 x 768 on each of 48
    layers, 8 routed a token; bf16. One session reads the shared weights and 8 experts a
    layer; sixteen sessions read at most min(128, 16 x 8) = all 128."""
    config = ROOT / "tests" / "data" / "public" / "configs" / "Qwen--Qwen3-30B-A3B"
    (tmp_path / "model").symlink_to(config, target_is_directory=True)
    path = tmp_path / "moe.yaml"
    path.write_text(
        "name: moe\nengine: vllm\nengine_version: 0.19.0\nmodel: model\n"
        "card: {total: 80 GiB, sku: H100-SXM-80GB}\nbudget: {weights: 60 GiB, kv: 10 GiB}\n"
        "serving: {max_num_seqs: 16, max_model_len: 4096}\n",
        encoding="utf-8",
    )
    decode = _plan(path)["rates"]["decode"]
    expert_bytes = 128 * 3 * 2_048 * 768 * 48 * 2
    assert decode["experts"] == {"count": 128, "per_token": 8, "bytes": expert_bytes}
    shared = decode["weights_bytes_per_step"] - expert_bytes
    one = decode["one_session"]["bytes_per_step"]
    assert one[0] == shared + 8 * expert_bytes // 128  # no KV at the fast end
    worst = decode["worst_case"]["bytes_per_step"]
    assert worst[1] == decode["weights_bytes_per_step"] + 16 * 4_096 * decode["kv_bytes_per_token"]
