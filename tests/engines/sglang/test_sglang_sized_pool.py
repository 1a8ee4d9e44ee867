"""A shape that lets SGLang size its own pool (serving.mem_fraction_static, issue 17).

SGLang's rule is checked against every public boot that prints the memory free before and
after its weights (tests/data/public/sizing/sglang-boots.yaml): the tokens it printed lie
within what the rule gives for the printed figures' rounding. The shape's prediction is
closed by `fakplan verify` against PR 4760's boot (tests/data/public/corpus/sglang-201.log),
held and killed, and once with its measured terms refitted on the other boot alone.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.engines.sglang.sizing import profiled_tokens
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from fakplan.units import printed_interval
from fakplan.verify import ledger_verdicts
from tests.support.paths import PUBLIC, SHAPES
from tests.support.sglang_boots import HALF, boots, rule_span

GIB = 1 << 30
SIZING = PUBLIC / "sizing"

BOOTS = boots()
PR_4760 = PUBLIC / "corpus" / "sglang-201.log"
LLAMA_8B = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"


@pytest.mark.parametrize("boot", BOOTS, ids=[b["id"] for b in BOOTS])
def test_the_rule_gives_the_tokens_each_public_boot_printed(boot: dict[str, Any]) -> None:
    """rest = after - before x (1 - fraction), over the printed figures' rounding."""
    low, high = rule_span(boot)
    assert low <= boot["tokens"] <= high
    # the rounding, not a loose rule, is the slack: 0.005 GiB on each figure
    f, cell = boot["fraction"], boot["cell"]
    assert high - low <= math.ceil(2 * HALF * (2 - f) * (1 << 30) / cell) + 2


def test_a_wrong_fraction_misses_a_public_boot() -> None:
    """The rule can fail: the docs boot at 0.85 instead of its 0.88 is 2.36 GiB short."""
    boot = next(b for b in BOOTS if b["id"] == "sglang-docs-send-request")
    assert profiled_tokens(78.81, 63.72, 0.85, 131072) < boot["tokens"] * 0.96


def _shape(folder: Path, fraction: float = 0.88, extra: str = "", tp: int = 1) -> Path:
    path = folder / "sglang-sized.yaml"
    path.write_text(
        f"""name: sglang-sized
engine: sglang
engine_version: "0.4.6.post5"
model: {json.dumps(str(LLAMA_8B))}
card: {{total: 79.19 GiB, count: {tp}}}
parallel: {{tensor: {tp}}}
serving:
  max_num_seqs: 256
  max_model_len: 8192
  mem_fraction_static: {fraction}
{extra}""",
        encoding="utf-8",
    )
    return path


def _verdicts(shape: Path) -> dict[str, Any]:
    plan = compile_plan(load_shape(shape))
    return ledger_verdicts(plan, parse_ledger(PR_4760, "sglang"))


def test_the_launch_passes_the_fraction_and_no_token_cap(tmp_path: Path) -> None:
    plan = compile_plan(load_shape(_shape(tmp_path)))
    (role,) = plan.launch.roles
    argv = list(role.argv)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.88"
    assert "--max-total-tokens" not in argv
    assert plan.launch.env["MEM_FRACTION_STATIC"] == "0.88"
    assert "MAX_TOTAL_TOKENS" not in plan.launch.env
    assert int(plan.launch.env["KV_POOL_PREDICTED"]) == plan.kv_budget_bytes
    assert {p.id for p in plan.predictions} >= {"kv-pool", "kv-tokens", "weights", "memory-in-use"}


def test_the_pool_is_the_fraction_of_the_card_less_its_terms(tmp_path: Path) -> None:
    """By hand: pool = 0.88 x total - 0.88 x in use - (weights + what the load leaves)."""
    plan = compile_plan(load_shape(_shape(tmp_path)))
    sizing = plan.engine_sizing
    assert sizing is not None and sizing.flag == "--mem-fraction-static"
    total = round(79.19 * (1 << 30))
    assert sizing.total_bytes == total and sizing.requested_bytes == int(total * 0.88)
    terms = {t.id: t for t in sizing.terms}
    in_use, weights = terms["memory-in-use"], terms["weights"]
    assert in_use.scaled and not weights.scaled
    # Llama-3.1-8B: 8,030,261,248 parameters x 2 B + the float32 rotary cache
    counted = 8_030_261_248 * 2 + 131_072 * 128 * 4
    assert weights.low_bytes > counted and weights.high_bytes < counted + (1 << 27)
    worst = sizing.requested_bytes - weights.high_bytes - -(-88 * in_use.high_bytes // 100)
    assert abs(sizing.pool_low_bytes - worst) <= 1
    assert plan.kv_budget_bytes == sizing.pool_low_bytes


def _fitted_on_the_docs_boot_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two measured terms refitted without PR 4760's boot: from the docs CI boot
    alone (free 78.81 GiB before the weights, 63.72 after; same model, TP 1, 80 GB card),
    each printed figure +- 0.005 GiB, as sizing.py fits them on both."""
    from fakplan.engines.sglang import sizing

    before, after = 78.81, 63.72
    in_use = (math.floor((79.185 - before - HALF) * GIB), math.ceil((79.195 - before + HALF) * GIB))
    usage = (before - after - 2 * HALF, before - after + 2 * HALF)
    counted = 8_030_261_248 * 2 + 131_072 * 128 * 4  # parameters x 2 B + fp32 rotary cache
    residue = (math.floor(usage[0] * GIB) - counted, math.ceil(usage[1] * GIB) - counted)
    monkeypatch.setitem(sizing.IN_USE_MEASURED, 1, (in_use, "the docs CI boot alone"))
    monkeypatch.setattr(sizing, "LOAD_RESIDUE_MEASURED", (residue, "the docs CI boot alone"))


def test_verify_on_a_boot_the_measured_terms_did_not_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PR 4760's boot, closed by constants fitted on the docs CI boot only. The memory in
    use before the weights, a measured term closed within its measured span, is killed,
    as the prints say it must be: 79.19 - (63.48 + 15.11) = 0.60 GiB there against
    79.19 - 78.81 = 0.38 in the docs boot. The weights (mem usage 15.11 GiB against the
    docs boot's 15.09), the pool and its tokens hold within the plan's 1 % tolerance."""
    _fitted_on_the_docs_boot_alone(monkeypatch)
    verdicts = _verdicts(_shape(tmp_path))
    for id in ("kv-pool", "kv-tokens", "weights"):
        assert verdicts[id].status == "held", (id, verdicts[id])
    assert verdicts["memory-in-use"].status == "killed", verdicts["memory-in-use"]
    assert verdicts["kv-tokens"].observed == 442750


def test_verify_holds_the_prediction_on_the_boot(tmp_path: Path) -> None:
    """In sample (the shipped terms were fitted on this boot and the docs boot)."""
    verdicts = _verdicts(_shape(tmp_path))
    for id in ("kv-pool", "kv-tokens", "weights", "memory-in-use"):
        assert verdicts[id].status == "held", (id, verdicts[id])
    assert verdicts["kv-tokens"].observed == 442750
    # the plan's range holds what SGLang's own float rule gives for the boot's figures
    plan = compile_plan(load_shape(_shape(tmp_path)))
    tokens = next(p for p in plan.predictions if p.id == "kv-tokens")
    assert tokens.low is not None and tokens.high is not None
    assert tokens.low <= profiled_tokens(63.48 + 15.11, 63.48, 0.88, 131_072) <= tokens.high


def test_verify_kills_a_wrong_fraction(tmp_path: Path) -> None:
    """The shape says 0.80, the boot ran 0.88: 8 % of 78.59 GiB = 6.29 GiB more pool.
    The weights and the memory in use do not depend on the fraction: they still hold."""
    verdicts = _verdicts(_shape(tmp_path, fraction=0.80))
    assert verdicts["kv-pool"].status == "killed"
    assert verdicts["kv-tokens"].status == "killed"
    assert verdicts["weights"].status == "held"
    assert verdicts["memory-in-use"].status == "held"


def test_verify_kills_the_wrong_card(tmp_path: Path) -> None:
    """A shape for a 94 GB card (CUDA 93.1 GiB) read against the 80 GB boot: what it
    thought was in use before the weights is 14 GiB off."""
    path = _shape(tmp_path)
    path.write_text(path.read_text().replace("79.19 GiB", "93.1 GiB"), encoding="utf-8")
    verdicts = _verdicts(path)
    assert verdicts["memory-in-use"].status == "killed"
    assert verdicts["kv-pool"].status == "killed"


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ("tp", "mem_fraction_static", "measured at TP 1, 2, 4 and 8 only, not TP 16"),
        ("both", "gpu_memory_utilization", "both size the pool"),
        ("budget", "budget", "states no budget"),
        ("vllm-field", "gpu_memory_utilization", "vllm's --gpu-memory-utilization, not engine"),
        ("too-small", "mem_fraction_static", "Not enough memory"),
    ],
)
def test_bad_sizing_input_is_one_line(tmp_path: Path, edit: str, field: str, words: str) -> None:
    if edit == "tp":
        path = _shape(tmp_path, tp=16)
    elif edit == "both":
        path = _shape(tmp_path, extra="  gpu_memory_utilization: 0.9\n")
    elif edit == "budget":
        path = _shape(tmp_path, extra="budget: {weights: 16 GiB, kv: 40 GiB}\n")
    elif edit == "too-small":
        path = _shape(tmp_path, fraction=0.15)
    else:
        path = _shape(tmp_path)
        path.write_text(
            path.read_text().replace("mem_fraction_static", "gpu_memory_utilization"),
            encoding="utf-8",
        )
    result = CliRunner().invoke(main, ["compile", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert str(path) in lines[0] and field in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_mem_fraction_static_on_vllm_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(
        f"""name: v
engine: vllm
model: {json.dumps(str(LLAMA_8B))}
card: {{total: 79.19 GiB, sms: 132}}
serving: {{max_num_seqs: 8, max_model_len: 8192, mem_fraction_static: 0.9}}
""",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["compile", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "sglang's --mem-fraction-static, not engine vllm's" in result.output
    assert "serving.gpu_memory_utilization" in result.output


def test_a_short_pool_names_the_fraction_that_covers_the_contract(tmp_path: Path) -> None:
    """40 seqs x 8,192 tokens x 128 KiB = 40 GiB: 0.6 leaves ~31 GiB; the gate's fix names
    the fraction that covers the contract, that fraction passes and 0.0002 less fails."""
    import re

    def gate(fraction: float) -> str:
        path = _shape(tmp_path, fraction=fraction)
        path.write_text(path.read_text().replace("256", "40"), encoding="utf-8")
        return CliRunner().invoke(main, ["gate", str(path)]).output

    out = gate(0.6)
    assert "not ok 1 - sglang-sized: pool ≥ contract" in out
    found = re.search(r"set serving\.mem_fraction_static: (\d\.\d{4})", out)  # proven
    assert found, out
    wanted = float(found[1])
    assert "ok 1 - sglang-sized: pool ≥ contract" in gate(wanted).splitlines()[2]
    assert "not ok 1" in gate(round(wanted - 0.0002, 4))


def _kv(*args: str) -> Any:
    return CliRunner().invoke(main, ["kv", str(LLAMA_8B), "--engine", "sglang", *args])


def test_kv_answers_sglangs_sizing_question() -> None:
    """fakplan kv --mem-fraction-static 0.88 --card-total "79.19 GiB": the tokens range
    holds what both public Llama-3.1-8B boots at 0.88 on 80 GB cards printed."""
    result = _kv("--mem-fraction-static", "0.88", "--card-total", "79.19 GiB", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    printed = [b["tokens"] for b in BOOTS if "Llama-3.1-8B" in b["model"]]
    assert len(printed) == 2
    assert all(out["tokens_low"] <= t <= out["tokens_high"] for t in printed)
    low, high = out["sizing"]["pool_range"]
    assert out["pool_interval"] == [low, high]
    floor = out["floor"]
    assert floor["activation_bytes"] is None and floor["cuda_graph_bytes"] is None
    in_use_low, in_use_high = floor["memory_in_use_bytes"]
    weights_low, weights_high = floor["weights_bytes"]
    assert 0 < in_use_low < in_use_high < 1 << 30 and weights_low < weights_high
    # by hand at the card's low end: floor(total x 0.88) - weights - ceil(0.88 x in use)
    total_low = round((79.19 - 0.005) * (1 << 30))
    expected = int(total_low * 0.88) - weights_high - -(-88 * in_use_high // 100)
    assert abs(low - expected) <= 2


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--mem-fraction-static", "0.88"), "give both --mem-fraction-static and --card-total"),
        (
            ("--mem-fraction-static", "0.88", "--gpu-memory-utilization", "0.9",
             "--card-total", "79.19 GiB"),
            "give one of --pool, --gpu-memory-utilization and --mem-fraction-static",
        ),
        (("--mem-fraction-static", "1.5", "--card-total", "79.19 GiB"), "--mem-fraction-static"),
    ],
)  # fmt: skip
def test_kv_bad_sizing_options_are_usage_errors(args: tuple[str, ...], words: str) -> None:
    result = _kv(*args)
    assert result.exit_code == 2 and words in result.output, result.output
    assert "Traceback" not in result.output


def test_kv_sizes_tp_2_with_the_borrowed_range_and_refuses_tp_16() -> None:
    """At TP > 1 the memory in use before the weights is one range borrowed across TPs
    (sizing.IN_USE_TP_ABOVE_ONE); a TP no boot reaches is refused with the reason."""
    from fakplan.engines.sglang.sizing import IN_USE_TP_ABOVE_ONE

    result = _kv(
        "--tp", "2", "--mem-fraction-static", "0.88", "--card-total", "79.19 GiB", "--json"
    )
    assert result.exit_code == 0, result.output
    terms = {t["id"]: t for t in json.loads(result.output)["sizing"]["terms"]}
    in_use = terms["memory-in-use"]
    assert (in_use["low_bytes"], in_use["high_bytes"]) == IN_USE_TP_ABOVE_ONE[0]
    assert "borrowed across TPs" in in_use["derivation"]
    result = _kv(
        "--tp", "16", "--mem-fraction-static", "0.88", "--card-total", "79.19 GiB", "--json"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert "measured at TP 1, 2, 4 and 8 only, not TP 16" in out["sizing"]["unknown"]
    assert out["floor"] is None


def test_the_tp_above_one_range_is_its_boots() -> None:
    """The range refitted from tests/data/public/sizing/sglang-collectives.yaml: its low end
    the least CUDA context any boot there gives (the L4s: their CUDA total,
    fakplan/cuda_totals.py, less the free memory printed, less what their collectives took,
    each print +- 0.005 GiB), its top the most in use at TP 1 plus the most any rank's
    collectives took (+ 0.005)."""
    from fakplan.cuda_totals import cuda_total
    from fakplan.engines.sglang.sizing import IN_USE_MEASURED, IN_USE_TP_ABOVE_ONE

    boots = yaml.safe_load((SIZING / "sglang-collectives.yaml").read_text(encoding="utf-8"))
    lows = []
    for boot in boots:
        begin = re.findall(r"Load weight begin\. avail mem=([\d.]+) GB", "\n".join(boot["lines"]))
        assert [float(b) for b in begin] == (
            [] if boot["free_before_gib"] is None else [boot["free_before_gib"]]
        )
        usage = [float(u) for u in boot["init_usage_gib"]]
        printed = [
            float(x)
            for x in re.findall(
                r"Init torch distributed ends\. mem usage=([\d.]+)", "\n".join(boot["lines"])
            )
        ]
        assert sorted(printed) == sorted(usage)
        if boot["card_total_gib"] is not None:
            sku = cuda_total("L4")
            assert sku is not None and sku.plain == f"{boot['card_total_gib']} GiB"
            in_use = boot["card_total_gib"] - 0.005 - (boot["free_before_gib"] + 0.005)
            lows.append(in_use - (max(usage) + 0.005))
    most = max(float(u) for boot in boots for u in boot["init_usage_gib"])
    (low, high), text = IN_USE_TP_ABOVE_ONE
    assert low == math.floor(min(lows) * GIB)
    assert high == IN_USE_MEASURED[1][0][1] + round((most + 0.005) * GIB)
    assert "sgl-project/sglang#11716" in text


def test_kv_mem_fraction_static_is_sglangs() -> None:
    result = CliRunner().invoke(
        main, ["kv", str(LLAMA_8B), "--mem-fraction-static", "0.88", "--card-total", "79.19 GiB"]
    )
    assert result.exit_code == 2
    assert "--mem-fraction-static sizes SGLang's pool (--engine sglang)" in result.output


@pytest.mark.parametrize(
    ("figure", "prints"),
    [("kv-pool", ("27.02 GiB", "27.02 GiB")), ("weights", ("15.11 GiB",))],
)
def test_a_printed_figure_is_an_interval(
    tmp_path: Path, figure: str, prints: tuple[str, ...]
) -> None:
    """K and V are printed apart (27.02 GB each: any of 54.03..54.05 GiB together), the
    weights as 15.11 GB: a bound inside that interval holds, one byte below it kills."""
    read = [printed_interval(p) for p in prints]
    low, nominal, high = (sum(r[i] for r in read) for i in range(3))
    plan = compile_plan(load_shape(_shape(tmp_path)))
    ledger = parse_ledger(PR_4760, "sglang")

    def status(high: int) -> str:
        predictions = [
            p.model_copy(update={"low": None, "high": high}) if p.id == figure else p
            for p in plan.predictions
        ]
        return ledger_verdicts(plan.model_copy(update={"predictions": predictions}), ledger)[
            figure
        ].status

    assert low < nominal < high
    assert status(nominal - 1) == "held"
    assert status(low) == "held"
    assert status(low - 1) == "killed"


def test_the_measured_residue_is_over_the_same_count_the_plan_makes() -> None:
    """The load residue was measured against 16,127,631,360 B: that must be what the weights
    count gives Llama-3.1-8B-Instruct in SGLang (16-bit parameters, float32 rotary cache)."""
    from fakplan.engines.sglang import sizing as sglang_sizing
    from fakplan.engines.weights import vllm_rank_weights

    config = json.loads(LLAMA_8B.read_text(encoding="utf-8"))
    counted = vllm_rank_weights(config, "llama", rope_bytes=sglang_sizing.ROPE_BYTES)
    assert counted is not None and counted.bytes == sglang_sizing._COUNTED_LLAMA_8B


def _budget_shape(folder: Path, kv: str) -> Path:
    """The sized shape with a budget in place of its fraction."""
    path = _shape(folder, extra=f"budget: {{weights: 15.2 GiB, kv: {kv}}}\n")
    path.write_text(path.read_text().replace("  mem_fraction_static: 0.88\n", ""))
    return path


def test_a_budget_launch_fraction_leaves_the_budgeted_pool(tmp_path: Path) -> None:
    """Budget mode passes --max-total-tokens and a fraction; SGLang keeps 1 - fraction of
    what is free *before* the weights, so the fraction must cover the memory in use then
    too, or SGLang profiles fewer tokens than the cap and uses those. Worst case by hand:
    the most in use measured at TP 1 and the weights filling budget.weights."""
    from fakplan.engines.sglang.sizing import IN_USE_MEASURED

    plan = compile_plan(load_shape(_budget_shape(tmp_path, "50 GiB")))
    (role,) = plan.launch.roles
    argv = list(role.argv)
    fraction = float(argv[argv.index("--mem-fraction-static") + 1])
    cap = int(argv[argv.index("--max-total-tokens") + 1])
    assert cap == 50 * (1 << 30) // 131072  # 50 GiB of 32 x 8 x (128 + 128) x 2 B tokens
    gib = 1 << 30
    (_, in_use), _ = IN_USE_MEASURED[1]
    before = (79.19 * gib - in_use) / gib
    after = before - 15.2
    assert profiled_tokens(before, after, fraction, 131072) >= cap
    # what the pair alone over the card gives (the old launch) falls short of the cap
    assert profiled_tokens(before, after, math.ceil(65.2 / 79.19 * 1000) / 1000, 131072) < cap
    assert "memory in use before the weights" in plan.launch.derivations["--mem-fraction-static"]


@pytest.mark.parametrize(
    ("shape_file", "words"),
    [
        ("qwen3-32b-sglang.yaml", "SGLang has no floor to predict one from"),
        ("qwen2.5-coder-llamacpp.yaml", "ggml's graph allocator"),
    ],
)
def test_a_pair_without_a_ceiling_says_why_none_is_predicted(
    tmp_path: Path, shape_file: str, words: str
) -> None:
    """Before any boot only vLLM's floor is predicted: SGLang's reserve is a heuristic and
    llama.cpp's compute buffers come from its graph allocator; both say so, and the gate
    skips instead of passing."""
    source = SHAPES / shape_file
    text = "\n".join(
        line for line in source.read_text().splitlines() if not line.startswith("ceiling:")
    )
    path = tmp_path / shape_file
    path.write_text(text + "\n")
    plan = compile_plan(load_shape(path))
    assert plan.ceiling_bytes is None and plan.ceiling_basis is None
    assert words in plan.derivations["ceiling_bytes"]
    gate = next(g for g in plan.gates if g.id == "pair-ceiling")
    assert gate.status == "unknown" and words in (gate.detail or gate.summary or "")


def test_a_budget_pair_that_leaves_sglang_nothing_fails_its_gate(tmp_path: Path) -> None:
    """15.2 + 63.6 GiB on 79.19 GiB: after the 0.615 GiB in use before the weights, the
    fraction SGLang would need is (78.8 / 78.575) > 1. Issue 26: this was exit 2 at budget
    while vLLM and llama.cpp passed the same mistake; now every engine fails the pair gate
    with the numbers (exit 1), and serve.sh refuses to start."""
    from fakplan.engines.sglang.sizing import IN_USE_MEASURED

    path = _budget_shape(tmp_path, "63.6 GiB")
    result = CliRunner().invoke(main, ["compile", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "FAILS" in result.output and "pair ≤ ceiling" in result.output
    plan = compile_plan(load_shape(path))
    (pair,) = [g for g in plan.gates if g.id == "pair-ceiling"]
    (_, in_use), _ = IN_USE_MEASURED[1]
    total = load_shape(path).shape.card.total
    # by hand: a fraction below 1 after rounding up at 3 places needs pair <= 0.999 x free
    bound = 999 * (total - in_use) // 1000
    assert pair.status == "fail"
    assert pair.numbers["card_bound_bytes"] == bound
    assert pair.numbers["over_bytes"] == int((15.2 + 63.6) * (1 << 30)) - bound
    compile_plan(load_shape(_budget_shape(tmp_path, "63.1 GiB")))
