"""vLLM 0.20-0.26 size their pool with the CUDA-graph estimate subtracted, by the runner
each release gives the model: the estimate's form against the fit set's own prints, its
measured range against boots the fit did not see, and a pool derived by hand."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import yaml

from fakplan.engines import parse_ledger
from fakplan.engines.vllm.floor import (
    GRAPH_ESTIMATE_MEASURED,
    GRAPH_FIRST_CAPTURE_TOP_WITHOUT_MLA,
    GRAPH_FIT_LEAST_HIDDEN,
    GRAPH_PER_LAYER_TOP,
    NON_TORCH_MEASURED,
    Unknown,
    VllmFloor,
    capture_sizes,
    graph_estimate,
    vllm_floor,
)
from fakplan.engines.vllm.runner import ModelTraits, default_runner
from fakplan.units import GIB, printed_interval
from tests.support.graph_corpus import (
    COUNTS,
    GRAPHS,
    PER_MODE,
    PROFILER,
    TOTAL,
    check_rows,
    fit_modes,
    graph_table,
    printed_counts,
)
from tests.support.paths import PUBLIC, ROOT

MIB = 1 << 20
FIT = sorted(PROFILER.glob("prof-0*.log"))
# the top of a TP 1 graph estimate for a model without MLA, by hand: the largest first capture
# such a fit boot printed (phi-4, 328 MiB) + each graph at the most a layer cost in its mode
# (PIECEWISE 8 MiB over 32 layers, prof-026; FULL 6 MiB over 28, prof-024, rounded up)
PW_LAYER, FULL_LAYER = 8 * MIB // 32, -(-6 * MIB // 28)


def _top(layers: int, piecewise: int, full: int) -> int:
    return 328 * MIB + (piecewise - 1) * layers * PW_LAYER + (full - 1) * layers * FULL_LAYER


def _config(name: str) -> dict[str, Any]:
    return json.loads((PUBLIC / "configs" / name / "config.json").read_text())


@pytest.mark.parametrize("log", [p for p in FIT if fit_modes(p)], ids=lambda p: p.stem)
def test_the_estimate_is_the_largest_first_capture_and_each_modes_graphs(log: Any) -> None:
    """vLLM's own total against its own per-mode lines: max(first) + sum((n - 1) x per)."""
    modes = fit_modes(log)
    total = max(first for first, _, _ in modes.values()) + sum(
        (n - 1) * per for _, n, per in modes.values()
    )
    printed = TOTAL.search(log.read_text(encoding="utf-8"))
    assert printed is not None
    assert abs(total / 1024 - float(printed[1])) <= 0.005


def test_the_default_capture_sizes_are_the_graphs_the_boots_profile() -> None:
    # the fit set: vllm serve's defaults on an H100, 1,024 sequences and 8,192 tokens
    assert printed_counts((PROFILER / "prof-001.log").read_text()) == (51, 51)
    assert capture_sizes(1024, 8192) == (51, 51)
    # graphs-001 (256 x 2,048, the defaults) and graphs-002 (2 seqs) print their counts;
    # graphs-007's and -008's quotes do not, so they take the derived ones (checked by these)
    texts = {r.case["id"]: (GRAPHS / r.case["log"]).read_text() for r in check_rows()}
    derived = [
        (r.derived, printed_counts(texts[r.case["id"]]))
        for r in check_rows()
        if r.derived is not None and COUNTS.search(texts[r.case["id"]])
    ]
    assert len(derived) == 2
    assert [r.counts == r.derived for r in check_rows() if r.case["id"] >= "graphs-007"] == [
        True,
        True,
    ]
    assert all(ours == printed for ours, printed in derived)
    # by hand: 1, 2, 4, 8..248 by 8 (31), 256 -> 35 sizes; FULL up to 128: 3 + 16 = 19
    assert capture_sizes(128, 8192) == (35, 19)


def test_the_measured_costs_are_the_fit_sets_prints() -> None:
    """GRAPH_ESTIMATE_MEASURED, transcribed by hand, against the fit boots' own DEBUG lines:
    per TP (PP 1), the min-max of the largest first capture and of each mode's per-graph."""
    found: dict[str, list[tuple[float, float, float]]] = {}
    for log in FIT:
        text = log.read_text(encoding="utf-8")
        modes = fit_modes(log)
        if not modes or "pipeline_parallel_size=1" not in text:
            continue
        tp = text.split("tensor_parallel_size=")[1].split(",")[0]
        first = max(first for first, _, _ in modes.values())
        found.setdefault(f"tp{tp}", []).append((first, modes["FULL"][2], modes["PIECEWISE"][2]))
    spans = {
        key: tuple(f(v[i] for v in rows) for i in range(3) for f in (min, max))
        for key, rows in found.items()
    }
    assert spans == {key: tuple(map(float, v)) for key, v in GRAPH_ESTIMATE_MEASURED.items()}


def _fit_boots() -> list[tuple[str, str, dict[str, Any], bool]]:
    """Each fit boot at PP 1 that prints its per-mode costs: (id, log text, the text config
    it ran, whether the model has MLA), from tests/data/public/profiler/cases.yaml."""
    from fakplan.engines.weights import MLA_FAMILIES
    from tests.support.floor_corpus import case_config

    cases = yaml.safe_load((PROFILER / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    out = []
    for case in cases:
        log = PROFILER / case["log"]
        text = log.read_text(encoding="utf-8")
        if not fit_modes(log) or "pipeline_parallel_size=1" not in text:
            continue
        architecture, config = case_config(case)
        out.append((case["id"], text, config, architecture in MLA_FAMILIES))
    return out


def test_the_fit_set_lies_inside_its_own_range() -> None:
    """A check of the fit only (the range is the fit set's min-max, the tops per layer the
    most a layer cost): every 0.19.0 boot's printed estimate is inside the range for its TP
    and graph counts, with and without its layers scaling the top."""
    seen = 0
    for case_id, text, config, mla in _fit_boots():
        printed = TOTAL.search(text)
        assert printed is not None
        tp = int(text.split("tensor_parallel_size=")[1].split(",")[0])
        counts = printed_counts(text)
        p_low, _, p_high = printed_interval(f"{printed[1]} GiB")
        layers = int(config["num_hidden_layers"])
        for found in (
            graph_estimate(tp, counts),
            graph_estimate(tp, counts, int(config["hidden_size"]), layers=layers, mla=mla),
        ):
            assert found is not None
            assert found[0] <= p_high and p_low <= found[1], case_id
        seen += 1
    assert seen == 25  # 19 when first fitted, and every 0.19.0 PP 1 boot added since


def test_the_per_layer_tops_are_the_fit_sets() -> None:
    """GRAPH_PER_LAYER_TOP and GRAPH_FIRST_CAPTURE_TOP_WITHOUT_MLA refitted: at TP 1, over the
    fit boots without MLA, the most a graph cost a layer in each mode (rounded up to a byte)
    and the largest first capture; an MLA boot (DeepSeek-V2-Lite) printed more of both."""
    full_most = pw_most = first_most = 0
    mla_first = 0.0
    for _, text, config, mla in _fit_boots():
        if "tensor_parallel_size=1," not in text:
            continue
        modes = {m[1]: (float(m[2]), float(m[4])) for m in PER_MODE.finditer(text)}
        first = max(first for first, _ in modes.values())
        if mla:
            mla_first = max(mla_first, first)
            continue
        layers = int(config["num_hidden_layers"])
        full_most = max(full_most, -(-int(modes["FULL"][1] * MIB) // layers))
        pw_most = max(pw_most, -(-int(modes["PIECEWISE"][1] * MIB) // layers))
        first_most = max(first_most, int(first))
    assert {"tp1": (full_most, pw_most)} == GRAPH_PER_LAYER_TOP
    assert {"tp1": first_most} == GRAPH_FIRST_CAPTURE_TOP_WITHOUT_MLA
    assert mla_first > first_most
    # the tops stand on their own: 80 layers at TP 1 (more than any fit boot's 62) take more
    # than the fit's own per-graph tops (12 and 10 MiB), an MLA model the fit's range
    deep = graph_estimate(1, (51, 51), 8192, layers=80)
    fitted = graph_estimate(1, (51, 51))
    mla = graph_estimate(1, (51, 51), 2048, layers=27, mla=True)
    assert deep is not None and fitted is not None and mla is not None
    assert deep[1] == _top(80, 51, 51) > fitted[1] == mla[1]


def test_the_check_set_is_scored_in_the_docs() -> None:
    rows = check_rows()
    assert [r.case["id"] for r in rows] == [f"graphs-00{i}" for i in range(1, 9)]
    # graphs-003's hybrid printed 0.48 GiB, below the 112 + 50 x 6 + 18 x 6 MiB that the
    # first fit's smallest costs gave 51 PIECEWISE and 19 FULL graphs, which killed the
    # range there. phi-4 (prof-023, added to the fit set later) printed 4 MiB per FULL
    # graph; graphs-006 (below) then took the first capture's low end to 84 MiB, and
    # gemma-2-2b-it (prof-032) printed 4 MiB per PIECEWISE graph, so the smallest is now
    # 84 + 50 x 4 + 18 x 4 MiB = 0.348 GiB and 0.48 holds.
    assert all(r.held for r in rows)  # graphs-007 too, under the rule it prompted (below)
    assert rows[2].low == (84 + 50 * 4 + 18 * 4) * MIB
    docs = (ROOT / "docs" / "vllm-memory.md").read_text(encoding="utf-8")
    assert graph_table() in docs
    assert (GRAPHS / "SOURCES.md").is_file()


def test_a_check_boot_below_the_fit_widened_it_and_is_in_sample() -> None:
    """graphs-006 (vLLM 0.21.0, RTX A5000, Qwen3-8B; LMCache issue 3430) printed 0.52 GiB
    for 51 PIECEWISE and 35 FULL graphs: below what the TP 1 fit's smallest costs give, by
    hand 112 + 50 x 6 + 34 x 4 = 548 MiB, which it killed. With the first capture's low end
    at the smallest any fit boot printed (84 MiB, TP 4), 520 MiB held it; the table says
    it is in sample and leaves it out of the held count. gemma-2-2b-it (prof-032, a fit
    boot added later) printed 4 MiB per PIECEWISE graph, which lowers that end to 84 + 50
    x 4 + 34 x 4 = 420 MiB."""
    row = next(r for r in check_rows() if r.case["id"] == "graphs-006")
    _, _, p_high = printed_interval(f"{row.printed} GiB")
    first_fit_low = (GRAPH_ESTIMATE_MEASURED["tp1"][0] + 50 * 6 + 34 * 4) * MIB
    assert first_fit_low == 548 * MIB and p_high < first_fit_low  # the first fit missed it
    assert row.low == (84 + 50 * 4 + 34 * 4) * MIB and row.held
    assert min(v[0] for v in GRAPH_ESTIMATE_MEASURED.values()) == 84
    assert row.in_sample and "in sample" in graph_table()
    assert "Held 6 of 6 boots the fit did not see; graphs-006, graphs-007" in graph_table()


def test_a_model_narrower_than_the_fit_takes_vllms_per_graph_floor() -> None:
    """graphs-007 (vLLM 0.24.0, an RTX 4090, Qwen2.5-0.5B-Instruct at vllm serve's defaults:
    51 PIECEWISE and 35 FULL graphs as fakplan derives them, the quote having dropped the
    counts) printed an estimate of 0.28 GiB, below the 84 + 50 x 4 + 34 x 4 = 420 MiB the TP 1
    range's least gives: it killed the range. Its hidden size (896) is below every TP 1 fit
    boot's (2,048 and up), so each per-graph cost's low end falls to vLLM's own floor, 1 MiB
    ("Use at least 1 MiB per graph", gpu_model_runner.py, 0.21.0): 84 + 50 + 34 = 168 MiB,
    which holds it. A model at the fit's width keeps the measured low end."""
    row = next(r for r in check_rows() if r.case["id"] == "graphs-007")
    assert row.counts == capture_sizes(256, 2048) == (51, 35)
    p_low, _, p_high = printed_interval(f"{row.printed} GiB")
    assert p_high < (84 + 50 * 4 + 34 * 4) * MIB  # the fit's range killed
    assert row.low == (84 + 50 * 1 + 34 * 1) * MIB <= p_high and p_low <= row.high
    assert row.held and row.in_sample
    assert row.high == _top(24, 51, 35)  # its 24 layers scale the top
    fitted = graph_estimate(1, (51, 35))
    assert fitted is not None and fitted[1] > row.high
    at_width = graph_estimate(1, (51, 35), 2048)
    below = graph_estimate(1, (51, 35), 2047)
    assert at_width is not None and below is not None
    assert at_width[:2] == fitted[:2] and below[0] == (84 + 50 + 34) * MIB
    assert "vLLM's own floor" in below[2] and "own floor" not in at_width[2]


def test_the_least_hidden_size_is_the_fit_sets() -> None:
    """GRAPH_FIT_LEAST_HIDDEN, per TP: the least hidden size among the fit boots that print
    their per-mode costs at PP 1 (their configs in tests/data/public/configs)."""
    least: dict[str, int] = {}
    for _, text, config, _ in _fit_boots():
        key = "tp" + text.split("tensor_parallel_size=")[1].split(",")[0]
        hidden = int(config["hidden_size"])
        least[key] = min(least.get(key, hidden), hidden)
    assert least == GRAPH_FIT_LEAST_HIDDEN


def test_graphs_006s_pool_is_predicted_from_the_total_its_oom_line_prints() -> None:
    """graphs-006 prints no CUDA total of its own, but torch's OOM later in the same
    EngineCore does (23.56 GiB), and its utilization line gives 0.9764, so its pool is
    predicted: requested = ceil(T x 0.9764) over the total's digits, less Qwen3-8B's
    weights, the sampler phase at an RTX A5000's 64 SMs, the H100-measured non-torch range
    and the graph range. The interval holds the printed 6.37 GiB (46,368 tokens: 2,898
    blocks of 36 x 65,536 B), but only because the graph range is wide: with the boot's own
    0.52 GiB estimate in its place the boot left at most 0.86 GiB for the peak and non-torch
    memory, 6 MiB under fakplan's least for them (docs/vllm-memory.md says so)."""
    from tests.support.floor_corpus import row

    found = row("graphs-006")
    floor = found.found
    assert isinstance(floor, VllmFloor), floor
    total = found.printed["total"]
    assert total == round(23.56 * GIB)
    block = 36 * 65_536
    printed_low, printed_high = 2898 * block, 2899 * block - 1  # int(2,898 / 1,024 x 16,384)
    assert floor.pool[0] <= printed_low and printed_high <= floor.pool[1]
    # the sampler phase at 64 SMs: 256 rows x 151,936 x 14 B and the Triton top-k/top-p
    # buffer 64 x 151,936 x 4 B, hidden states 2 x 8,192 x 4,096 + 4 x 256 x 4,096, torch's
    # cuBLAS workspace on 8.6 (4,096 KiB x 2 + 16 KiB x 8); below the forward's least at its
    # MLP, 8,192 x (3 x 12,288 + 4,096) x 2 B, which is the low end
    sampler = 256 * 151_936 * 14 + 64 * 151_936 * 4
    phase = sampler + 2 * 8192 * 4096 + 4 * 256 * 4096 + 4096 * 1024 * 2 + 16 * 1024 * 8
    forward_least = 8192 * (3 * 12_288 + 4096) * 2
    assert phase < forward_least == floor.activation_span[0]
    # the closure with the printed estimate: the most the boot left for peak + non-torch
    _, _, t_high = printed_interval("23.56 GiB")
    requested_high = math.ceil(t_high * 0.97645)  # the utilization's digits' top
    graphs_low = printed_interval("0.52 GiB")[0]
    left = requested_high - floor.weights.bytes - graphs_low - printed_low  # the least weights
    least = floor.activation_span[0] + floor.non_torch[0]
    assert left < 0.86 * GIB < least and least - left < 6 * MIB


def test_graphs_007s_pool_is_predicted_at_the_cards_public_totals() -> None:
    """graphs-007 quotes no CUDA total, but names its card (an RTX 4090) and its launch
    (utilization 0.85, max_model_len 2,048, vllm serve's 256 and 2,048 otherwise): its pool
    is predicted at both ends of the totals public logs print for that card (23.64-23.99
    GiB, each print's digits; fakplan kv --card-sku takes the same), and the interval holds
    the printed 18.08 GiB (1,579,808 tokens of 24 x 512 B). By hand at the low end:
    ceil(T_low x 0.85) less the weights, the activation's top, non-torch's top and the
    graphs' top (84..522 MiB first capture + 50 x 12 + 34 x 10 MiB)."""
    from fakplan.cuda_totals import cuda_total
    from tests.support.floor_corpus import row

    found = row("graphs-007")
    floor = found.found
    assert isinstance(floor, VllmFloor), floor
    assert found.printed["total"] is None and floor.runner == "v1"
    card = cuda_total("RTX-4090")
    assert card is not None
    t_low, t_high = card.interval
    assert printed_interval("23.64 GiB")[0] == t_low and printed_interval("23.99 GiB")[2] == t_high
    pool = found.printed["pool"]
    assert pool is not None
    assert floor.pool[0] <= pool + GIB // 200 and pool - GIB // 200 <= floor.pool[1]
    graphs_top = _top(24, 51, 35)  # the per-layer top of Qwen2.5-0.5B's 24 layers
    assert floor.cuda_graph is not None and floor.cuda_graph[1] == graphs_top
    low = (
        math.ceil(t_low * 0.85)
        - floor.weights.top
        - floor.activation_span[1]
        - NON_TORCH_MEASURED["tp1"][1]
        - graphs_top
    )
    assert floor.pool[0] == low


def test_graphs_008_a_7b_model_on_the_same_card_and_release_is_held_out() -> None:
    """graphs-008 (the same RTX 4090, vLLM 0.24.0 and launch as graphs-007, with
    Qwen2.5-7B-Instruct) was added after both rules above and checks them: its hidden size
    (3,584) is inside the fit's, so its graphs take the measured range (84 + 50 x 4 + 34 x 4
    MiB up), which holds the transcribed 0.53 GiB; its pool is predicted at the 4090's public
    totals and holds the printed 4.45 GiB (83,376 tokens of 28 x 2 x 4 x 128 x 2 B). The
    author's transcription of "Model loading took" (14.29 GiB) lies 39-50 MB above fakplan's
    count for the checkpoint, which 0.19.0 on an H100 printed (14.25, vllm-421): the ledger
    does not read that form, the corpus takes it from cases.yaml's ``transcribed``, and it
    sets the top of the load residue from 0.20, so the predicted weights hold it."""
    from tests.support.floor_corpus import row

    graphs = next(r for r in check_rows() if r.case["id"] == "graphs-008")
    assert graphs.held and not graphs.in_sample
    assert graphs.low == (84 + 50 * 4 + 34 * 4) * MIB
    found = row("graphs-008")
    floor = found.found
    assert isinstance(floor, VllmFloor) and floor.runner == "v1"
    pool = found.printed["pool"]
    assert pool is not None and abs(pool - 83_376 * 28 * 2 * 4 * 128 * 2) < GIB // 200
    assert floor.pool[0] <= pool + GIB // 200 and pool - GIB // 200 <= floor.pool[1]
    text = (GRAPHS / "graphs-008.log").read_text(encoding="utf-8")
    # the ledger reads vLLM's line, not "took:"; the corpus reads the transcription
    assert parse_ledger(GRAPHS / "graphs-008.log", "vllm").weights_bytes is None
    assert found.printed["weights"] == round(14.29 * GIB)
    w_low, _, w_high = printed_interval(text.split("Model loading took: ")[1].split(" memory")[0])
    counted = floor.weights.bytes
    assert counted == row("vllm-421").found.weights.bytes  # type: ignore[union-attr]
    assert w_low - counted > 38_000_000 and w_high - counted < 50_000_000
    # its print's top (the corpus's rounding, printed + GIB // 200) is the residue's top
    assert floor.weights.top == round(14.29 * GIB) + GIB // 200 <= w_high


@pytest.mark.parametrize(
    ("version", "archs", "moe", "hybrid", "quantized", "runner"),
    [
        ("0.21.0", ("LlamaForCausalLM",), False, False, False, "v1"),
        ("0.22.0", ("Qwen3ForCausalLM",), False, False, False, "v2"),
        ("0.22.0", ("LlamaForCausalLM",), False, False, False, "v1"),
        ("0.23.0", ("LlamaForCausalLM",), False, False, False, "v2"),
        ("0.23.0", ("LlamaForCausalLM",), False, False, True, "v1"),
        ("0.24.0", ("LlamaForCausalLM",), False, False, True, "v2"),
        ("0.24.0", ("Qwen2ForCausalLM",), False, False, False, "v1"),
        ("0.25.0", ("Qwen2ForCausalLM",), False, False, False, "v2"),
        ("0.25.0", ("Qwen3MoeForCausalLM",), True, False, False, "v1"),
        ("0.25.0", ("Qwen2MoeForCausalLM",), True, False, False, "v2"),
        ("0.26.0", ("Qwen3NextForCausalLM",), True, True, False, "v1"),
        ("0.28.0", ("DeepseekV4ForCausalLM",), True, True, False, "v2"),
        ("0.29.0", ("Qwen3MoeForCausalLM",), True, True, True, "v2"),
    ],
)
def test_each_release_gives_the_model_its_runner(
    version: str, archs: tuple[str, ...], moe: bool, hybrid: bool, quantized: bool, runner: str
) -> None:
    """config/vllm.py _is_default_v2_model_runner_model as each PyPI wheel has it."""
    choice = default_runner(version, ModelTraits(archs, moe, hybrid, quantized))
    assert choice.runner == runner, choice.why


def _llama(version: str, total: int, utilization: float = 0.92) -> VllmFloor | Unknown:
    return vllm_floor(
        _config("meta-llama--Llama-3.1-8B-Instruct"), "llama", version=version, tp=1, pp=1,
        card_total=total, utilization=utilization, batched_tokens=8192, max_num_seqs=1024,
        sms=132,
    )  # fmt: skip


def test_a_020_pool_subtracts_the_graph_estimate_by_hand() -> None:
    """Llama-3.1-8B on an H100 (CUDA total 79.19 GiB) at 0.20.0's default 0.92."""
    total = 85_030_000_000
    found = _llama("0.20.0", total)
    assert isinstance(found, VllmFloor)
    requested = math.ceil(total * 0.92)
    weights = 16_094_076_928  # "Model loading took 14.99 GiB" (prof-001, test_vllm_floor)
    vocab, hidden = 128_256, 4_096
    activation = 14 * 1024 * vocab + 4 * 132 * vocab + 2 * 8192 * hidden + 4 * 1024 * hidden
    activation += 32 * MIB
    nt_low, nt_high = NON_TORCH_MEASURED["tp1"]
    # 51 PIECEWISE and 51 FULL graphs from the fit's smallest costs (the first capture's low
    # end widened to 84 MiB by graphs-006, PIECEWISE's to 4 by prof-032) up to the per-layer
    # top of 32 layers
    g_low = (84 + 50 * 4 + 50 * 4) * MIB
    g_high = _top(32, 51, 51)
    assert found.cuda_graph == (g_low, g_high)
    spare = 9 * MIB  # the allocator's: up to 1 MiB for each of 9 tensors over 1 MiB
    base = requested - weights - activation
    # from 0.20 the weights take the load residue public boots printed beyond the count: 0 to
    # what graphs-008's 14.29 GiB allows beyond its 15,299,390,464 B counted
    residue = round(14.29 * GIB) + GIB // 200 - 15_299_390_464
    assert found.pool == (base - spare - residue - nt_high - g_high, base - nt_low - g_low)
    # 0.19 computes the same estimate and does not subtract it, and takes no residue
    before = _llama("0.19.0", total)
    assert isinstance(before, VllmFloor) and before.cuda_graph is None
    assert before.pool == (base - spare - nt_high, base - nt_low)


def test_a_dense_llama_on_023_runs_v2_with_no_graph_term() -> None:
    found = _llama("0.23.0", 85_030_000_000)
    assert isinstance(found, VllmFloor)
    assert found.runner == "v2" and found.cuda_graph is None
    # the V2 dummy sampler: 16-bit logits beside the hidden states and the cuBLAS workspace
    sampler = 2 * 1024 * 128_256 + 2 * 8192 * 4096 + 2 * 1024 * 4096 + 32 * MIB
    # below which the forward cannot go: gate_up's output (2 x 14,336), its activation
    # (14,336) and the residual stream (4,096) alive at once for 8,192 tokens, in 16 bits
    low = 8192 * (3 * 14_336 + 4096) * 2
    assert low > sampler
    # the forward's: its estimate (two hidden states and the MLP's gate_up with its
    # activation) + the margin prof-004's first PP stage printed beyond it at the same
    # 8,192 x 4,096 (1.1 GiB, so 1.105): the model's forward, whichever runner calls it
    forward = round(1.105 * (1 << 30))
    assert forward > 2 * 2 * 8192 * 4096 + 8192 * 3 * 14_336 * 2 + 32 * MIB
    # + what the V2 runner's first compile took beyond that in prof-020 (0.27.1, an RTX 4090:
    # 0.255 GiB printed less its 92,804,218 B top, at 2,048 x 896), scaled to 2,048 x 4,096
    # (rounded up), at 4 x the tokens
    compile_margin = 4 * -(-(round(0.255 * (1 << 30)) - 92_804_218) * 4096 // 896)
    assert found.activation_span == (low, forward + compile_margin)


def test_027_on_takes_the_consumed_era_terms() -> None:
    """0.27-0.28: a dense Llama runs the V2 runner, which estimates no graphs; the pool is
    requested - weights - (consumed beyond weights) - transient peak, no graph term."""
    found = _llama("0.27.0", 85_030_000_000)
    assert isinstance(found, VllmFloor) and found.era == "consumed"
    assert found.cuda_graph is None and found.runner == "v2"
    later = _llama("0.29.0", 85_030_000_000)  # the V2 estimate: the V1 range, borrowed
    assert isinstance(later, VllmFloor) and "borrowed" in later.graph_derivation
    assert set(GRAPH_ESTIMATE_MEASURED) == set(NON_TORCH_MEASURED)


def test_the_kv_command_prints_the_graph_term(runner: Any) -> None:
    from fakplan.cli import main

    args = [
        "kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.20.0",
        "--gpu-memory-utilization", "0.92", "--card-total", "79.19 GiB",
        "--max-model-len", "8192", "--json",
    ]  # fmt: skip
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    floor = json.loads(result.output)["floor"]
    assert floor["runner"] == "v1"
    low, high = floor["cuda_graph_bytes"]
    # 51 PIECEWISE and 51 FULL graphs: 84 + 50 x 4 + 50 x 4 MiB up to the per-layer top of
    # a 32-layer model without MLA (the fit's own top, 522 + 50 x 12 + 50 x 10 MiB, is higher)
    assert (low, high) == ((84 + 200 + 200) * MIB, _top(32, 51, 51))
    assert high < (522 + 600 + 500) * MIB and high > GIB


def test_verify_closes_the_graph_estimate_with_the_line_that_prints_it(tmp_path: Any) -> None:
    """The wiring: a 0.20 shape predicts the estimate (51 and 51 graphs at 1,024 sequences:
    484 MiB up to the per-layer top of 32 layers) and the boot's "Estimated CUDA graph memory"
    line closes it. The logs
    are two real 0.2x boots of other models, read for that one line: 0.79 GiB falls inside,
    0.26 GiB below."""
    from fakplan.plan import compile_plan
    from fakplan.predict import CUDA_GRAPHS
    from fakplan.shape import load_shape
    from fakplan.verify import ledger_verdicts
    from tests.engines.vllm.test_engine_sized_pool import _llama as llama_shape

    plan = compile_plan(load_shape(llama_shape(tmp_path, fraction=0.92, version="0.20.0")))
    graphs = next(p for p in plan.predictions if p.id == CUDA_GRAPHS)
    assert (graphs.low, graphs.high) == (484 * MIB, _top(32, 51, 51))
    held = ledger_verdicts(plan, parse_ledger(GRAPHS / "graphs-001.log", "vllm"))
    killed = ledger_verdicts(plan, parse_ledger(GRAPHS / "graphs-002.log", "vllm"))
    assert held[CUDA_GRAPHS].status == "held"
    assert killed[CUDA_GRAPHS].status == "killed"


def _eager(version: str, total: int, *, enforce_eager: bool) -> VllmFloor | Unknown:
    return vllm_floor(
        _config("meta-llama--Llama-3.1-8B-Instruct"), "llama", version=version, tp=1, pp=1,
        card_total=total, utilization=0.92, batched_tokens=8192, max_num_seqs=1024, sms=132,
        enforce_eager=enforce_eager,
    )  # fmt: skip


@pytest.mark.parametrize("version", ["0.20.0", "0.21.0", "0.29.0", "0.33.0"])
def test_enforce_eager_sizes_the_pool_without_a_graph_estimate(version: str) -> None:
    """--enforce-eager sets cudagraph_mode NONE (config/vllm.py, 0.21.0, 0.26.0 and 0.27.1:
    "Enforce eager set, disabling torch.compile and CUDAGraphs"), and the worker estimates
    graphs only where cudagraph_mode is not NONE (gpu_worker.py determine_available_memory,
    the same releases): the eager pool is the graphed one with the estimate given back,
    every other term the same. Llama-3.1-8B runs V1 in 0.20-0.21 (the estimate subtracted)
    and V2 from 0.29 (the borrowed estimate, printed inside the peak from 0.27)."""
    total = 85_030_000_000
    graphed = _eager(version, total, enforce_eager=False)
    eager = _eager(version, total, enforce_eager=True)
    assert isinstance(graphed, VllmFloor) and isinstance(eager, VllmFloor)
    assert eager.cuda_graph is None and eager.graph_in_activation is None
    assert "--enforce-eager" in eager.graph_derivation
    estimate = graphed.cuda_graph or graphed.graph_in_activation
    assert estimate is not None
    g_low, g_high = estimate
    assert eager.pool == (graphed.pool[0] + g_high, graphed.pool[1] + g_low)
    assert eager.weights == graphed.weights and eager.non_torch == graphed.non_torch


def test_enforce_eager_on_a_runner_that_estimates_nothing_changes_nothing() -> None:
    """0.23-0.28 put a dense Llama on the V2 runner, whose estimate is 0 until 0.29
    (profile_cudagraph_memory returns 0: v1/worker/gpu/model_runner.py, 0.26.0)."""
    for version in ("0.23.0", "0.26.0"):
        graphed = _eager(version, 85_030_000_000, enforce_eager=False)
        eager = _eager(version, 85_030_000_000, enforce_eager=True)
        assert isinstance(graphed, VllmFloor) and isinstance(eager, VllmFloor)
        assert graphed.runner == "v2" and eager.pool == graphed.pool


def test_enforce_eager_reaches_the_launch_and_the_kv_command(tmp_path: Any, runner: Any) -> None:
    from fakplan.cli import main
    from fakplan.plan import compile_plan
    from fakplan.predict import CUDA_GRAPHS
    from fakplan.shape import load_shape
    from tests.engines.vllm.test_engine_sized_pool import _llama as llama_shape

    shape = llama_shape(tmp_path, fraction=0.92, version="0.21.0", extra="  enforce_eager: true\n")
    plan = compile_plan(load_shape(shape))
    (role,) = plan.launch.roles
    assert "--enforce-eager" in role.argv
    assert CUDA_GRAPHS not in {p.id for p in plan.predictions}
    args = [
        "kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.21.0",
        "--gpu-memory-utilization", "0.92", "--card-total", "79.19 GiB",
        "--max-model-len", "8192", "--json",
    ]  # fmt: skip
    graphed = json.loads(runner.invoke(main, args).output)
    result = runner.invoke(main, [*args, "--enforce-eager"])
    assert result.exit_code == 0, result.output
    eager = json.loads(result.output)
    assert eager["floor"]["cuda_graph_bytes"] is None
    g_low, g_high = graphed["floor"]["cuda_graph_bytes"]
    low, high = graphed["sizing"]["pool_range"]
    assert eager["sizing"]["pool_range"] == [low + g_high, high + g_low]
    refused = runner.invoke(
        main, ["kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "sglang", "--enforce-eager"]
    )
    assert refused.exit_code == 2 and "--enforce-eager is vLLM's flag" in refused.output


def test_the_runner_variable_overrides_the_releases_rule(tmp_path: Any, runner: Any) -> None:
    """VLLM_USE_V2_MODEL_RUNNER, once set, decides the runner (config/vllm.py
    use_v2_model_runner returns it before any default rule, 0.26.0 and 0.27.1; envs.py reads
    it as bool(int(value))). 0.26 puts a dense Llama on V2, which estimates no graphs; set to
    0 it runs V1, whose estimate is subtracted: the same as 0.21's V1 pool but for the
    release's rules, which differ nowhere else for this model."""
    from fakplan.cli import main
    from fakplan.errors import ShapeError
    from fakplan.plan import compile_plan
    from fakplan.predict import CUDA_GRAPHS
    from fakplan.shape import load_shape
    from tests.engines.vllm.test_engine_sized_pool import _llama as llama_shape

    total = 85_030_000_000
    kw: dict[str, Any] = dict(tp=1, pp=1, card_total=total, utilization=0.92)
    kw.update(batched_tokens=8192, max_num_seqs=1024, sms=132)
    config = _config("meta-llama--Llama-3.1-8B-Instruct")
    default = vllm_floor(config, "llama", version="0.26.0", **kw)
    forced = vllm_floor(config, "llama", version="0.26.0", runner="v1", **kw)
    v1_021 = vllm_floor(config, "llama", version="0.21.0", **kw)
    assert isinstance(default, VllmFloor) and isinstance(forced, VllmFloor)
    assert isinstance(v1_021, VllmFloor)
    assert default.runner == "v2" and default.cuda_graph is None
    assert forced.runner == "v1" and "VLLM_USE_V2_MODEL_RUNNER=0" in forced.runner_rule
    assert forced.cuda_graph == v1_021.cuda_graph and forced.pool == v1_021.pool
    # before 0.20 fakplan reads the V1 runner only
    early = vllm_floor(config, "llama", version="0.19.0", runner="v2", **kw)
    assert isinstance(early, Unknown) and "read from 0.20" in early.reason
    # the shape's launch.env reaches the plan, and the kv command takes the same choice
    env = "launch:\n  env:\n    VLLM_USE_V2_MODEL_RUNNER: '0'\n"
    shape = llama_shape(tmp_path, fraction=0.92, version="0.26.0", extra=env)
    plan = compile_plan(load_shape(shape))
    assert CUDA_GRAPHS in {p.id for p in plan.predictions}
    args = [
        "kv", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.26.0",
        "--gpu-memory-utilization", "0.92", "--card-total", "79.19 GiB",
        "--max-model-len", "8192", "--model-runner", "v1", "--json",
    ]  # fmt: skip
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["floor"]["runner"] == "v1"
    # a value vLLM's int() refuses is refused where the shape says it
    bad = tmp_path / "bad"
    bad.mkdir()
    shape = llama_shape(bad, fraction=0.92, version="0.26.0", extra=env.replace("'0'", "'yes'"))
    with pytest.raises(ShapeError, match=r"launch\.env\.VLLM_USE_V2_MODEL_RUNNER: .*give 0"):
        load_shape(shape)
