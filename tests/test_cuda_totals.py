"""CUDA's total per card, as public logs print it: the table against the logs it quotes,
and what ``fakplan kv --card-sku`` and a shape's ``card.sku`` do with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from fakplan.cards import card_sku, sku_for_device
from fakplan.cli import main
from fakplan.cuda_totals import CUDA_TOTALS, cuda_total
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from fakplan.units import parse_bytes, printed_interval
from tests.engines.vllm.test_engine_sized_pool import _llama
from tests.support.paths import PUBLIC

TOTALS = PUBLIC / "cuda_totals"
PROFILER = PUBLIC / "profiler"
LLAMA_8B = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
# the two forms of vLLM's total in its logs: the 0.19 worker snapshot and the memory summary
TOTAL_FORMS = (
    r"total_memory=(\d+\.\d+)GiB",
    r"Free memory on device \([\d.]+/(\d+\.\d+) GiB\)",
    r"Free memory on device cuda:\d+ \([\d.]+/(\d+\.\d+) GiB\)",  # the device named
    r"has a total capaci?ty of (\d+\.\d+) GiB",  # torch's OOM, 2.1 on ("capacty" in 2.1)
    r"\(GPU \d+; (\d+\.\d+) GiB total capacity;",  # torch's OOM before 2.1
)


def _printed_total(line: str) -> str:
    for form in TOTAL_FORMS:
        found = re.search(form, line)
        if found:
            return f"{found[1]} GiB"
    raise AssertionError(f"no CUDA total in {line!r}")


def test_every_print_is_a_line_of_a_kept_log_and_reads_its_figure() -> None:
    logs = {p.name: p.read_text(encoding="utf-8") for p in TOTALS.glob("*.log")}
    sources = (TOTALS / "SOURCES.md").read_text(encoding="utf-8")
    for total in CUDA_TOTALS:
        assert card_sku(total.sku) is not None, total.sku
        for p in total.prints:
            holding = [name for name, text in logs.items() if p.line in text]
            assert holding, (total.sku, p.line)
            assert all(name in sources for name in holding)
            assert _printed_total(p.line) == p.printed


def test_the_h100_print_comes_from_a_boot_that_names_the_sxm_card() -> None:
    """The boot loads a fused-MoE config for its device: NVML's name, underscored."""
    text = (TOTALS / "h100-sxm-80gb.log").read_text(encoding="utf-8")
    (device,) = set(re.findall(r"device_name=([A-Za-z0-9_]+)\.json", text))
    card = sku_for_device(device.replace("_", " "))
    assert card is not None and card.sku == "H100-SXM-80GB"
    assert cuda_total("h100-sxm-80gb") is not None  # any case, as card.sku reads


def _kv_json(*args: str) -> Any:
    """fakplan kv --json of Llama-3.1-8B on vLLM 0.19.0 at an 8,192-token window."""
    result = CliRunner().invoke(
        main,
        ["kv", str(LLAMA_8B), "--engine-version", "0.19.0", "--max-model-len", "8192", *args,
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _kv(*args: str) -> Any:
    return _kv_json("--gpu-memory-utilization", "0.95", "--max-num-seqs", "1024", *args)


def test_kv_card_sku_sizes_the_pool_over_the_printed_total() -> None:
    """--card-sku H100-SXM-80GB is --card-total "79.19 GiB", and the pool prof-001 (the same
    card, model and release) printed is inside the interval it gives."""
    by_sku = _kv("--card-sku", "H100-SXM-80GB")
    by_total = _kv("--card-total", "79.19 GiB", "--card-sms", "132", "--card-capability", "9.0")
    assert by_sku["sizing"]["pool_range"] == by_total["sizing"]["pool_range"]
    low, _, high = printed_interval("79.19 GiB")
    assert by_sku["sizing"]["card_total_range"] == [low, high]
    assert "llm-d-planner" in by_sku["sizing"]["card_total_derivation"]
    log = (PROFILER / "prof-001.log").read_text(encoding="utf-8")
    (printed,) = re.findall(r"Available KV cache memory: ([\d.]+ GiB)", log)
    p_low, _, p_high = printed_interval(printed)
    pool_low, pool_high = by_sku["sizing"]["pool_range"]
    assert pool_low <= p_high and p_low <= pool_high


def test_kv_card_sku_without_a_printed_total_asks_for_one() -> None:
    result = CliRunner().invoke(
        main,
        ["kv", str(LLAMA_8B), "--gpu-memory-utilization", "0.9", "--card-sku", "H100-PCIE-80GB"],
    )
    assert result.exit_code == 2
    assert "--card-total" in result.output and "H100-SXM-80GB" in result.output


def test_a_shape_naming_only_its_card_takes_the_printed_total(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_llama(tmp_path, card="{sku: H100-SXM-80GB}")))
    assert plan.card_total_bytes == parse_bytes("79.19 GiB")
    assert "card.sku H100-SXM-80GB" in plan.derivations["card_total_bytes"]
    assert plan.engine_sizing is not None
    assert "llm-d-planner" in plan.engine_sizing.total_derivation
    stated = tmp_path / "stated"
    stated.mkdir()
    same = compile_plan(load_shape(_llama(stated, card="{sku: H100-SXM-80GB, total: 79.19 GiB}")))
    assert same.tokens_backed == plan.tokens_backed


def test_the_schema_takes_a_card_named_only_by_a_sku_with_a_plain_total(tmp_path: Path) -> None:
    """An editor must not flag what the loader reads: card: {sku: H100-SXM-80GB}."""
    document = json.loads(CliRunner().invoke(main, ["schema"]).output)
    validator = jsonschema.Draft202012Validator(document)
    path = _llama(tmp_path, card="{sku: H100-SXM-80GB}")
    assert not list(validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))


def test_a_shape_whose_card_has_no_plain_print_must_state_its_total(tmp_path: Path) -> None:
    """An RTX 4090's prints differ (23.64 to 23.68 GiB, 23.99 under WSL2), as an A100
    80GB's do (79.15 to 79.35 GiB); an H100 PCIe's has none: one line each."""
    for sku, said in (
        ("RTX-4090", "23.68 GiB: https://github.com/zai-org/CogVideo/issues/36"),
        ("A100-SXM4-80GB", "79.25 GiB: https://github.com/vllm-project/vllm/issues/20581"),
        ("H100-PCIE-80GB", "no public log fakplan holds prints an H100-PCIE-80GB's"),
        ("H200-SXM-141GB", "139.81 GiB: https://github.com/sungwon-chae/arxiv_confi"),
    ):
        path = _llama(tmp_path, card=f"{{sku: {sku}}}")
        result = CliRunner().invoke(main, ["plan", str(path)])
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"{path}:5: card: card.total is required") and said in line


def test_fit_takes_the_card_total_from_card_sku() -> None:
    """`fakplan fit MODEL --card-sku H100-SXM-80GB`: the card is the printed 79.19 GiB."""
    result = CliRunner().invoke(
        main,
        [
            "fit", str(LLAMA_8B), "--engine", "vllm", "--engine-version", "0.19.0",
            "--card-sku", "H100-SXM-80GB", "--utilization", "0.9", "--window", "8192", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["card_total_bytes"] == parse_bytes("79.19 GiB")
    missing = CliRunner().invoke(main, ["fit", str(LLAMA_8B), "--engine", "vllm"])
    assert missing.exit_code == 2 and "--card-sku" in missing.output


def test_an_a100_takes_vllm_serves_small_batch_defaults() -> None:
    """vLLM's batch defaults skip an A100 whatever its memory ('"a100" not in device_name',
    engine/arg_utils.py, 0.21.0 and 0.27.1): 2,048 tokens and 256 sequences, as on a card
    under 70 GiB. --card-sku A100-SXM4-80GB sizes the pool as if both were stated; an
    A800 or an unnamed card of 80 GiB takes the large ones (8,192 and 1,024)."""
    from fakplan.engines.vllm.floor import serve_defaults

    total = parse_bytes("79.25 GiB")
    assert serve_defaults(total, "NVIDIA A100-SXM4-80GB") == (2048, 256)
    assert serve_defaults(total, "NVIDIA A800 80GB PCIe") == (8192, 1024)
    assert serve_defaults(total, None) == (8192, 1024)
    assert serve_defaults(parse_bytes("23.99 GiB"), None) == (2048, 256)
    # from 0.28 a card of 160 GiB or more takes 16,384 tokens (a B200's 178.36 GiB); from
    # 0.33 a GB10 (compute capability 12.1) takes the small ones (docs/vllm-memory.md §3)
    b200, gb10 = parse_bytes("178.36 GiB"), parse_bytes("121.69 GiB")
    assert serve_defaults(b200, "NVIDIA B200", "0.27.1") == (8192, 1024)
    assert serve_defaults(b200, "NVIDIA B200", "0.28.0") == (16384, 1024)
    assert serve_defaults(gb10, "NVIDIA GB10", "0.32.0", "12.1") == (8192, 1024)
    assert serve_defaults(gb10, "NVIDIA GB10", "0.33.0", "12.1") == (2048, 256)

    def pool(*args: str) -> Any:
        found = _kv_json("--gpu-memory-utilization", "0.9", "--card-sku", "A100-SXM4-80GB", *args)
        return found["sizing"]["pool_range"]

    stated = pool("--max-num-seqs", "256", "--max-num-batched-tokens", "2048")
    assert pool() == stated
    assert pool("--max-num-seqs", "1024", "--max-num-batched-tokens", "8192") != stated


def test_an_h200_and_a_b200_hold_the_totals_and_sms_torch_prints_for_them() -> None:
    """Issue 31's outside check tried H200 boots, which fakplan could not size without
    --card-total. torch's device properties of each card, kept with the OOM prints, are a
    third reading: their total (in MiB, which torch floors) lies inside the span of the
    prints, and their SM count is the card table's."""
    for sku, log, capability in (
        ("H200-SXM-141GB", "h200.log", "9.0"),
        ("B200", "b200.log", "10.0"),
    ):
        text = (TOTALS / log).read_text(encoding="utf-8")
        found = re.search(
            r"major=(\d+), minor=(\d+), total_memory=(\d+)MB, multi_processor_count=(\d+)", text
        )
        assert found is not None, log
        major, minor, mib, sms = (int(g) for g in found.groups())
        total = cuda_total(sku)
        card = card_sku(sku)
        assert total is not None and card is not None
        low, high = total.interval
        assert low <= mib << 20 and (mib + 1) << 20 <= high, (sku, mib, low, high)
        assert card.sms == sms and card.capability == f"{major}.{minor}" == capability


def test_kv_card_sku_sizes_an_h200_pool_over_both_of_its_prints() -> None:
    """The H200's public prints differ by their last digit (139.80, 139.81 GiB): --card-sku
    gives the pool at the least total's low end and at the most total's high end, as the two
    totals stated one at a time do, on a 0.2x release as on 0.19."""
    config = str(PUBLIC / "configs" / "meta-llama--Llama-3.1-70B-Instruct" / "config.json")

    def pool(*args: str) -> list[int]:
        result = CliRunner().invoke(
            main,
            ["kv", config, "--engine-version", "0.25.0", "--tp", "2", "--max-model-len",
             "32768", "--gpu-memory-utilization", "0.9", *args, "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return list(json.loads(result.output)["sizing"]["pool_range"])

    by_sku = pool("--card-sku", "H200-SXM-141GB")
    card = ("--card-sms", "132", "--card-capability", "9.0")
    least = pool("--card-total", "139.80 GiB", *card)
    most = pool("--card-total", "139.81 GiB", *card)
    assert by_sku == [least[0], most[1]]
    assert least[0] < most[0] and least[1] < most[1]


def test_kv_card_sku_a40_sizes_prof_035s_pool() -> None:
    """--card-sku A40 is the 44.43 GiB vLLM 0.26.0 printed on one (with the A40's 84 SMs
    and compute capability 8.6), and the pool prof-035 printed there (Llama-3.1-8B, the V2
    runner, 2,048 batched tokens) lies in the interval it gives."""

    def kv(*args: str) -> Any:
        result = CliRunner().invoke(
            main,
            ["kv", str(LLAMA_8B), "--engine-version", "0.26.0", "--max-model-len", "4096",
             "--max-num-seqs", "256", "--gpu-memory-utilization", "0.9", *args, "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["sizing"]

    by_sku = kv("--card-sku", "A40")
    stated = kv("--card-total", "44.43 GiB", "--card-sms", "84", "--card-capability", "8.6")
    assert by_sku["pool_range"] == stated["pool_range"]
    log = (PROFILER / "prof-035.log").read_text(encoding="utf-8")
    (printed,) = re.findall(r"Available KV cache memory: ([\d.]+ GiB)", log)
    p_low, _, p_high = printed_interval(printed)
    pool_low, pool_high = by_sku["pool_range"]
    assert pool_low <= p_high and p_low <= pool_high


def test_a_cards_prints_on_one_platform() -> None:
    """An RTX 4090 prints 23.64-23.68 GiB on Linux and 23.99 under WSL2; an RTX 3090 24.00
    under Windows: CudaTotal.on keeps the prints made there ("linux": those without a
    setting of their own), or None where none was."""
    rtx_4090 = cuda_total("RTX-4090")
    rtx_3090 = cuda_total("RTX-3090")
    assert rtx_4090 is not None and rtx_3090 is not None
    linux, wsl2 = rtx_4090.on("linux"), rtx_4090.on("WSL2")
    assert linux is not None and wsl2 is not None
    assert linux.interval == (printed_interval("23.64 GiB")[0], printed_interval("23.68 GiB")[2])
    assert wsl2.interval == (printed_interval("23.99 GiB")[0], printed_interval("23.99 GiB")[2])
    assert rtx_4090.on("windows") is None
    windows = rtx_3090.on("windows")
    assert windows is not None and {p.printed for p in windows.prints} == {"24.00 GiB"}
    with pytest.raises(ValueError, match="linux"):
        rtx_4090.on("macos")


def test_kv_card_platform_picks_among_the_skus_prints() -> None:
    """--card-platform linux sizes an RTX 4090's pool over its Linux prints only, inside
    the span every print gives; a platform no print was made on, or the option without
    --card-sku, is one line and exit 2."""
    config = str(PUBLIC / "configs" / "Qwen--Qwen2.5-7B-Instruct" / "config.json")
    args = ["kv", config, "--engine-version", "0.24.0", "--max-model-len", "2048",
            "--gpu-memory-utilization", "0.85", "--card-sku", "RTX-4090"]  # fmt: skip

    def sizing(*more: str) -> Any:
        result = CliRunner().invoke(main, [*args, *more, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["sizing"]

    every, linux = sizing(), sizing("--card-platform", "linux")
    assert linux["card_total_range"] == [
        printed_interval("23.64 GiB")[0],
        printed_interval("23.68 GiB")[2],
    ]
    assert every["pool_range"][0] == linux["pool_range"][0]
    assert linux["pool_range"][1] < every["pool_range"][1]
    for bad in (
        [*args, "--card-platform", "windows"],
        ["kv", config, "--card-platform", "linux"],
    ):
        result = CliRunner().invoke(main, bad)
        assert result.exit_code == 2
        assert len(result.output.strip().splitlines()) == 1, result.output
