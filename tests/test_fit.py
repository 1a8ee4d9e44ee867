"""`fakplan fit` (issue 29): the frontier of (window, sessions), every point proven.

Each point is checked here apart from the search that found it: its emitted shape file is
gated by `fakplan gate` and planned by `fakplan plan`, and the step past it is shown to
fail by the plan's own figures (no split of the limit holds one more session).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakplan.cli import main
from fakplan.fit import MIB, Fitter, Layout, ladder
from fakplan.plan import compile_plan
from fakplan.shape import load_shape, load_shape_text
from tests.support.paths import ROOT, SHAPES
from tests.support.tinymodels import write_tiny_llama

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
ON_24_GIB = ["--engine", "vllm", "--engine-version", "0.19.0", "--card", "24 GiB", "--sms", "128"]


def _fit(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["fit", *args, "--json"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


def _layout(
    document: dict[str, Any], dtype: str, quantization: str | None = None
) -> dict[str, Any]:
    return next(
        lay
        for lay in document["layouts"]
        if lay["kv_cache_dtype"] == dtype and lay["quantization"] == quantization
    )


def _at(layout: dict[str, Any], window: int) -> dict[str, Any] | None:
    return next((p for p in layout["frontier"] if p["max_model_len"] == window), None)


def _gated_clean(folder: Path) -> None:
    result = CliRunner().invoke(main, ["gate", str(folder)])
    assert result.exit_code == 0, result.output
    assert " 0 fail" in result.output


# ------------------------------------------------------------- the quoted cases


def test_what_fits_an_8b_model_on_a_24_gib_card(tmp_path: Path) -> None:
    """9fcf43b: Llama-3.1-8B on a 24 GiB card (sms 128), vLLM 0.19.0, 4 x 32k: the fixes
    printed were impossible ("take 10,471 MiB out of budget.weights or budget.kv"), and what
    fits had to be found by hand: 3 x 32k with fp8 KV, or 4 x 32k with fp8 weights."""
    code, document = _fit(
        LLAMA_8B, *ON_24_GIB, "--quantization", "none", "--quantization", "fp8",
        "--sessions", "4", "--emit", str(tmp_path / "fitted"),
    )  # fmt: skip
    assert code == 0
    bf16, fp8 = _layout(document, "auto"), _layout(document, "fp8")
    assert _at(bf16, 32768)["max_num_seqs"] == 1  # type: ignore[index]
    at_32k = _at(fp8, 32768)
    assert at_32k is not None and at_32k["max_num_seqs"] == 3
    # the weights get what they need per rank: 15,317 MiB (the weights gate's own figure)
    assert at_32k["weights_budget_bytes"] == 15317 * MIB
    assert at_32k["beyond"] == {
        "field": "serving.max_num_seqs", "value": 4, "gate": "pool-contract",
        "summary": at_32k["beyond"]["summary"],
    }  # fmt: skip
    fp8_weights = _at(_layout(document, "fp8", "fp8"), 32768)
    assert fp8_weights is not None and fp8_weights["max_num_seqs"] >= 4
    # with bf16 KV, 4 sessions reach 12,560 tokens: 4 x 12,560 x 128 KiB = 6,280 MiB of pool.
    # (13,056 before the ceiling took the top of the activation range at 4 slots: the
    # forward's 2 x 2 x 2,048 x 4,096 + 2,048 x 3 x 14,336 x 2 B + cuBLAS = 243,269,632 B
    # over the sampler model's 59,631,616 B, 175.1 MiB, so 176 MiB of pool in 16-token blocks;
    # 12,704 before that top took the margin a first PP stage printed beyond the estimate,
    # scaled to 2,048 x 4,096: 78,517,371 B, nine 16-token blocks of the four sessions)
    assert (13056 - 12704) * 4 * 128 * 1024 >= 243_269_632 - 59_631_616
    margin = (round(1.105 * (1 << 30)) - 872_415_232) // 4
    assert (12704 - 12560) * 4 * 128 * 1024 <= margin < (12704 - 12560 + 16) * 4 * 128 * 1024
    assert bf16["at_sessions"]["max_model_len"] == 12560
    assert bf16["at_sessions"]["beyond"]["value"] == 12560 + 16  # one 16-token block more
    _gated_clean(tmp_path / "fitted")
    assert len(document["emitted"]) == len(list((tmp_path / "fitted").glob("*.yaml")))


def test_the_scaffolds_example_at_16k_fits_without_going_in_circles(tmp_path: Path) -> None:
    """9fcf43b: the example at max_model_len 16384 was told to grow budget.kv, then to take
    1,024 MiB out again. Under its stated 22 GiB ceiling and 16 GiB weights budget the pool
    gets 6 GiB: 3 sessions of 16,384 tokens at 2 GiB each, and a 4th fails pool-contract."""
    code, document = _fit(str(SHAPES / "example.yaml"), "--window", "16384",
                          "--emit", str(tmp_path / "fitted"))  # fmt: skip
    assert code == 0
    point = _at(_layout(document, "auto"), 16384)
    assert point is not None
    assert point["weights_budget_bytes"] == 16 << 30  # the shape's own budget is kept
    assert point["kv_budget_bytes"] == 6 << 30  # 22 GiB ceiling - 16 GiB
    assert point["max_num_seqs"] == 3  # 6 GiB // (16,384 x 131,072 B)
    assert point["beyond"]["gate"] == "pool-contract"
    _gated_clean(tmp_path / "fitted")


def test_a_70b_model_on_one_22_gib_card_names_tp_8() -> None:
    """9fcf43b: the first fix offered was to lower max_num_seqs, which cannot help, and
    "shard wider" gave no number. 141 GB of bf16 weights need TP 8 on 22 GiB cards (TP 4
    leaves 33,643 MiB a rank)."""
    code, document = _fit("meta-llama/Llama-3.1-70B-Instruct", "--engine", "vllm",
                          "--engine-version", "0.19.0", "--card", "22 GiB", "--sms", "128",
                          "--window", "8192", "--kv-dtype", "auto")  # fmt: skip
    assert code == 1  # nothing fits on one card
    (wider,) = document["wider"]
    assert wider["tensor"] == 8 and wider["cards"] == 8
    assert [t["tensor"] for t in wider["tried"]] == [2, 4]
    assert all(t["gate"] == "pair-ceiling" for t in wider["tried"])


# ------------------------------------------------------------- tight points


def _fitter(data: dict[str, Any], folder: Path) -> Fitter:
    path = folder / "fit.yaml"
    probe = dict(data, budget={"weights": "1 MiB", "kv": "1 MiB"})
    loaded = load_shape_text(yaml.safe_dump(probe), path)
    return Fitter(data, path, loaded.lines, loaded.budget)


def _proven(fitter: Fitter, layout: Layout, window: int, folder: Path) -> None:
    """The point found at ``window`` passes every gate as a file, and no split of the
    limit the pair must meet holds one more session (the plan's own figures)."""
    found = fitter.most_sessions(layout, window)
    if not hasattr(found, "outcome"):
        return  # nothing fits at this window: the failing gate is reported instead
    point = found.outcome  # type: ignore[union-attr]
    shape = folder / f"p{window}.yaml"
    shape.write_text(yaml.safe_dump(dict(point.data, name=f"p{window}")))
    plan = compile_plan(load_shape(shape))
    assert not [g.id for g in plan.gates if g.status == "fail"], plan.gates
    assert (plan.max_num_seqs, plan.max_model_len) == (point.sessions, window)
    # one more session, written as a file and planned afresh (not the search's own cache):
    # no split of the limit holds it, by the plan's own figures
    past_data = fitter.outcome(layout, window, point.sessions + 1).data
    past_shape = folder / f"p{window}-more.yaml"
    past_shape.write_text(yaml.safe_dump(dict(past_data, name=f"p{window}-more")))
    past = compile_plan(load_shape(past_shape))
    failing = [g.id for g in past.gates if g.status == "fail"]
    assert found.beyond.gate in failing, (found.beyond, failing)  # type: ignore[union-attr]
    if found.beyond.gate == "pool-contract":  # type: ignore[union-attr]
        numbers = {g.id: g.numbers for g in past.gates}
        pair = numbers["pair-ceiling"]
        limit = (
            pair["ceiling_bytes"] if pair["ceiling_bytes"] is not None else pair["card_bound_bytes"]
        )
        need = (
            numbers["weights-fit"].get("weights_per_rank_bytes")
            if "weights-fit" in numbers
            else None
        )
        assert isinstance(limit, int)
        if isinstance(need, int) and past.engine_sizing is None:
            assert past.contract_bytes + need > limit  # the weights' own need, not the budget


CATALOG = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-8B",
           "mistralai/Mistral-7B-Instruct-v0.3"]  # fmt: skip


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    model=st.sampled_from(CATALOG),
    engine=st.sampled_from(["vllm", "sglang"]),
    card_gib=st.integers(min_value=16, max_value=96),
    ceiling_gib=st.one_of(st.none(), st.integers(min_value=1, max_value=16)),
    fp8=st.booleans(),
    window=st.sampled_from([1024, 4096, 32768]),
)
# found by this test: the pair split in whole MiB lost the 299th session, which the split
# to the byte holds (contract 38,272 MiB + weights 16,060,522,496 B under the 53 GiB
# card's bound of 56,191,717,484 B)
@example(
    model="meta-llama/Llama-3.1-8B-Instruct", engine="sglang", card_gib=53, ceiling_gib=None,
    fp8=False, window=1024,
)  # fmt: skip
def test_every_point_gates_clean_and_one_more_session_fails(
    tmp_path: Path, model: str, engine: str, card_gib: int, ceiling_gib: int | None,
    fp8: bool, window: int,
) -> None:  # fmt: skip
    data: dict[str, Any] = {
        "name": "fuzzed",
        "engine": engine,
        "model": model,
        "card": {"total": f"{card_gib} GiB"},
        "serving": {"max_num_seqs": 1, "max_model_len": 1024},
    }
    if ceiling_gib is not None:
        data["ceiling"] = f"{card_gib - ceiling_gib} GiB"
    dtype = ("fp8" if engine == "vllm" else "fp8_e4m3") if fp8 else "auto"
    _proven(_fitter(data, tmp_path), Layout(dtype), window, tmp_path)


def test_a_llamacpp_frontier_is_tight_in_slots_and_in_cells(tmp_path: Path) -> None:
    """llama.cpp: the cache is trimmed to the -c the slots ask for, one more slot than
    LLAMA_MAX_SEQ (256) fails the boots gate, and the window steps by the 256-cell pad."""
    write_tiny_llama(tmp_path / "tiny.gguf")
    fitter = _fitter(
        {"name": "tiny", "engine": "llamacpp", "model": "tiny.gguf", "card": {"total": "1 GiB"},
         "serving": {"max_num_seqs": 1, "max_model_len": 1024}},
        tmp_path,
    )  # fmt: skip
    layout = Layout("f16")
    found = fitter.most_sessions(layout, 1024)
    assert found.beyond.value == 257 and found.beyond.gate == "boots"  # type: ignore[union-attr]
    plan = found.plan  # type: ignore[union-attr]
    assert plan.kv_unclaimed_bytes in (0, None)  # the pool is the cache, nothing idle
    assert plan.kv_budget_bytes == 64 * MIB  # 256 x 1,024 cells x 256 B a cell
    longest = fitter.longest_window(layout, 2, 2048)
    assert longest.plan.max_model_len == 2048  # type: ignore[union-attr]
    assert longest.beyond.value == 2048 + 256 and longest.beyond.gate == "context"  # type: ignore[union-attr]


def test_fit_agrees_with_plan_for_every_emitted_shape(tmp_path: Path) -> None:
    code, document = _fit(str(SHAPES / "example.yaml"), "--kv-dtype", "fp8",
                          "--emit", str(tmp_path / "out"))  # fmt: skip
    assert code == 0
    points = {
        (p["max_model_len"], p["max_num_seqs"]): p for p in _layout(document, "fp8")["frontier"]
    }
    for path in document["emitted"]:
        result = CliRunner().invoke(main, ["plan", path, "--json"])
        plan = json.loads(result.stdout)
        point = points[(plan["max_model_len"], plan["max_num_seqs"])]
        for key in ("weights_budget_bytes", "kv_budget_bytes", "contract_bytes", "pair_bytes",
                    "tokens_backed", "whole_sessions_at_window", "unclaimed_bytes"):  # fmt: skip
            assert plan[key] == point[key], key
        text = Path(path).read_text()
        assert text.startswith("# Written by fakplan fit:") and "fails pool-contract" in text


def test_the_ladder() -> None:
    assert ladder(40960, [12000]) == [1024, 2048, 4096, 8192, 12000, 16384, 32768, 40960]
    assert ladder(2048) == [1024, 2048]


# ------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([LLAMA_8B], "give --engine and --card"),
        ([LLAMA_8B, "--engine", "vllm", "--card", "lots"], "--card"),
        ([LLAMA_8B, "--engine", "vllm", "--card", "24 GiB", "--window", "0"], "--window"),
        ([str(SHAPES / "example.yaml"), "--engine", "vllm"], "the shape states it"),
        (["no/such-model", "--engine", "vllm", "--card", "24 GiB"], "MODEL"),
    ],
)
def test_bad_input_is_one_line(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(main, ["fit", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_emitted_shapes_point_at_the_model_from_where_they_are(tmp_path: Path) -> None:
    """A shape whose model is a path beside it: the emitted files, in another folder, name
    the same file relative to themselves, and gate clean there."""
    (tmp_path / "models").mkdir()
    write_tiny_llama(tmp_path / "models" / "tiny.gguf")
    (tmp_path / "shapes").mkdir()
    shape = tmp_path / "shapes" / "tiny.yaml"
    shape.write_text(
        "name: tiny\nengine: llamacpp\nmodel: ../models/tiny.gguf\ncard: {total: 1 GiB}\n"
        "budget: {weights: 64 MiB, kv: 1 MiB}\nserving: {max_num_seqs: 1, max_model_len: 1024}\n"
    )
    code, document = _fit(str(shape), "--kv-dtype", "f16", "--emit", str(tmp_path / "deep" / "out"))
    assert code == 0 and document["emitted"]
    data = yaml.safe_load(Path(document["emitted"][0]).read_text())
    assert data["model"] == "../../models/tiny.gguf"
    shutil.rmtree(tmp_path / "shapes")  # the emitted shapes stand on their own
    _gated_clean(tmp_path / "deep" / "out")


# ------------------------------------------------------------- proven fixes


def _gate_json(shape: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["gate", str(shape), "--format", "json"])
    (entry,) = json.loads(result.stdout)["shapes"]
    return {g["id"]: g for g in entry["gates"]}


def _every_fix_holds(shape: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Each fix of the shape's first failing gate, applied to a copy with --fix-apply,
    leaves a shape every gate passes; returns the fixes."""
    failing = [g for g in _gate_json(shape).values() if g["status"] == "fail"]
    assert failing
    fixes: list[dict[str, Any]] = failing[0]["fixes"]
    assert fixes and all(g["fixes"] == fixes for g in failing)
    for n, _ in enumerate(fixes, 1):
        copy = tmp_path / f"fix{n}" / shape.name
        copy.parent.mkdir()
        shutil.copytree(shape.parent, copy.parent, dirs_exist_ok=True)
        result = CliRunner().invoke(main, ["gate", str(copy), "--fix-apply", str(n)])
        assert result.exit_code == 0, (n, fixes[n - 1], result.output)
    return fixes


def test_the_examples_fixes_do_not_go_in_circles(tmp_path: Path) -> None:
    """9fcf43b: the example at max_model_len 16384 was told to grow budget.kv by 1,536 MiB;
    applying that failed pair ≤ ceiling, whose fix took 1,024 MiB out again. Now the first
    fix is proven: with it every gate passes at once."""
    shape = tmp_path / "shapes" / "example.yaml"
    shape.parent.mkdir()
    scaffold = ROOT / "templates" / "init" / "shapes" / "example.yaml"
    # 4 x 16k at bf16 is an 8 GiB contract against the scaffold's 5 GiB budget.kv
    shape.write_text(scaffold.read_text().replace("max_model_len: 8192", "max_model_len: 16384"))
    fixes = _every_fix_holds(shape, tmp_path)
    first = {p["path"]: p["value"] for p in fixes[0]["patch"]}
    # the 22 GiB ceiling less the 16 GiB weights budget is 6 GiB of pool: 3 sessions of
    # 2 GiB; keeping all 4 needs 8 GiB, which only fp8 KV (4 GiB) or more cards give
    assert fixes[0]["gives_up"] == ["sessions"]
    assert first == {"serving.max_num_seqs": 3, "budget.kv": "6144 MiB"}
    assert all("budget.kv" in {p["path"] for p in f["patch"]} for f in fixes)


def test_fewer_slots_are_offered_only_where_the_shapes_own_ceiling_holds_them(
    tmp_path: Path,
) -> None:
    """9fcf43b: `lower serving.max_num_seqs to 3` was checked against card.total, not the
    stated ceiling, and with the shape's own weights budget 3 slots were still over it."""
    shape = tmp_path / "s.yaml"
    shape.write_text(
        "name: s\nengine: vllm\nengine_version: 0.19.0\nmodel: meta-llama/Llama-3.1-8B-Instruct\n"
        "card: {total: 24 GiB}\nceiling: 21 GiB\nbudget: {weights: 15.5 GiB, kv: 8 GiB}\n"
        "serving: {max_num_seqs: 4, max_model_len: 16384}\n"
    )
    fixes = _every_fix_holds(shape, tmp_path)
    seqs = [{p["path"]: p["value"] for p in f["patch"]}.get("serving.max_num_seqs") for f in fixes]
    # 21 GiB - 15.5 GiB = 5,632 MiB of pool: 2 sessions of 2 GiB, not 3
    assert 2 in seqs and 3 not in seqs


def test_a_70b_model_on_one_card_is_told_the_tp_it_needs(tmp_path: Path) -> None:
    """9fcf43b: the first fix offered was `lower serving.max_num_seqs`, which cannot help,
    and "shard wider (parallel.tensor)" gave no number."""
    shape = tmp_path / "big.yaml"
    shape.write_text(
        "name: big\nengine: vllm\nengine_version: 0.19.0\nmodel: meta-llama/Llama-3.1-70B-Instruct\n"
        "card: {total: 22 GiB, sms: 128}\nbudget: {weights: 20 GiB, kv: 1 GiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 8192}\n"
    )
    fixes = _every_fix_holds(shape, tmp_path)
    assert [f["gives_up"] for f in fixes] == [["cards"]]
    patch = {p["path"]: p["value"] for p in fixes[0]["patch"]}
    assert patch["parallel.tensor"] == 8 and patch["card.count"] == 8


def test_fix_apply_keeps_the_operators_comments(tmp_path: Path) -> None:
    shape = tmp_path / "s.yaml"
    shape.write_text(
        "# reviewed by the platform team\nname: s\nengine: vllm\nengine_version: 0.19.0\n"
        "model: meta-llama/Llama-3.1-8B-Instruct\ncard:\n  total: 24 GiB  # an L4\n"
        "ceiling: 21 GiB\nbudget:\n  weights: 15.5 GiB\n  kv: 8 GiB   # asked for\n"
        "serving:\n  max_num_seqs: 4\n  max_model_len: 16384\n"
    )
    result = CliRunner().invoke(main, ["gate", str(shape), "--fix-apply", "1"])
    assert result.exit_code == 0, result.output
    text = shape.read_text()
    assert text.startswith("# reviewed by the platform team\n")
    assert "total: 24 GiB  # an L4" in text and "# asked for" in text
    again = CliRunner().invoke(main, ["gate", str(shape), "--fix-apply", "1"])
    assert again.exit_code == 2 and "every gate passes" in again.stderr


def test_plan_compile_and_diff_print_the_proven_fix_and_never_the_impossible_one(
    tmp_path: Path,
) -> None:
    """9fcf43b: `take 10,471 MiB out of budget.weights or budget.kv` was printed for the 8B
    model on a 24 GiB card with sms 128: the weights need 15,317 MiB of their 15,872 MiB
    budget and the KV budget is the contract, so no such split exists. Every surface now
    prints the first proven fix, the one `fakplan gate` gives."""
    shape = tmp_path / "s.yaml"
    shape.write_text(
        "name: s\nengine: vllm\nengine_version: 0.19.0\nmodel: meta-llama/Llama-3.1-8B-Instruct\n"
        "card: {total: 24 GiB, sms: 128}\nbudget: {weights: 15.5 GiB, kv: 16 GiB}\n"
        "serving: {max_num_seqs: 4, max_model_len: 32768}\n"
    )
    first = next(g for g in _gate_json(shape).values() if g["status"] == "fail")["fixes"][0]
    runner = CliRunner()
    planned = json.loads(runner.invoke(main, ["plan", str(shape), "--json"]).stdout)
    fixes = {g["fix"] for g in planned["gates"] if g["status"] == "fail"}
    assert fixes == {first["summary"]}
    compiled = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    old = tmp_path / "old.yaml"
    old.write_text(shape.read_text().replace("max_num_seqs: 4", "max_num_seqs: 1"))
    diffed = runner.invoke(main, ["diff", str(old), str(shape)])
    header = (tmp_path / "out" / "s" / "serve.sh").read_text()
    for text in (diffed.output, header):
        assert "out of budget.weights or budget.kv" not in text
        assert first["summary"] in text
    assert compiled.exit_code == 1


def test_a_gates_own_proposal_is_offered_once_it_holds(tmp_path: Path) -> None:
    """llama.cpp pads each slot to its 256-cell step: a 1,000-token window reaches 1,024,
    which the context gate refuses and proposes `max_model_len: 1024` for. The proposal
    is gated before it is offered, first, as giving up nothing."""
    write_tiny_llama(tmp_path / "tiny.gguf")
    shape = tmp_path / "tiny.yaml"
    shape.write_text(
        "name: tiny\nengine: llamacpp\nmodel: tiny.gguf\ncard: {total: 1 GiB}\n"
        "budget: {weights: 64 MiB, kv: 1 MiB}\nserving: {max_num_seqs: 1, max_model_len: 1000}\n"
    )
    fixes = _every_fix_holds(shape, tmp_path)
    assert fixes[0]["patch"] == [{"path": "serving.max_model_len", "value": 1024}]
    assert fixes[0]["gives_up"] == ["nothing"]


def test_kv_with_slots_and_a_window_states_the_contract() -> None:
    """9fcf43b: `fakplan kv --max-num-seqs 4 --max-model-len 32768` printed only bytes per
    token. The contract is 4 x 32,768 x 131,072 B (32 layers x 8 KV heads x 256 x 2 B)."""
    args = ["kv", LLAMA_8B, "--engine", "vllm", "--max-num-seqs", "4", "--max-model-len", "32768"]
    text = CliRunner().invoke(main, args).output
    assert "contract: 4 seqs x 32,768 tokens x 131,072 B/token = 17,179,869,184 B" in text
    assert "fakplan fit" in text
    document = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert document["contract_bytes"] == 4 * 32768 * 131072
    plain = json.loads(CliRunner().invoke(main, [*args[:4], "--json"]).stdout)
    assert "contract_bytes" not in plain  # no slots stated: no contract to state


def test_a_shape_whose_engine_sizes_its_pool_keeps_its_fraction(tmp_path: Path) -> None:
    """SGLang sizes the pool from --mem-fraction-static: 0.88 of the 79.19 GiB card, less
    the weights, is 442,621 tokens (the bundled shape's predicted pool). At 8,192 tokens
    that is 54 whole sessions: 60 fail pool-contract. The first proven fix is the gate's
    own proposal, the fraction that covers 60 (giving up nothing); then 54 sessions at
    0.88."""
    shape = tmp_path / "sz.yaml"
    shape.write_text(
        (SHAPES / "llama-3.1-8b-sglang-sized.yaml")
        .read_text()
        .replace("max_num_seqs: 48", "max_num_seqs: 60")
    )
    fixes = _every_fix_holds(shape, tmp_path)
    (fraction,) = fixes[0]["patch"]
    assert fraction["path"] == "serving.mem_fraction_static" and 0.88 < fraction["value"] <= 1
    assert fixes[0]["gives_up"] == ["nothing"]
    assert fixes[1]["patch"] == [{"path": "serving.max_num_seqs", "value": 442621 // 8192}]
    code, document = _fit(str(shape), "--kv-dtype", "auto", "--emit", str(tmp_path / "fitted"))
    assert code == 0
    point = _at(_layout(document, "auto"), 8192)
    assert point is not None and point["max_num_seqs"] == 54 and point["tokens_backed"] == 442621
    emitted = yaml.safe_load(Path(document["emitted"][0]).read_text())
    assert emitted["serving"]["mem_fraction_static"] == 0.88 and "budget" not in emitted
    _gated_clean(tmp_path / "fitted")


def test_a_proposal_an_operator_gate_refuses_is_not_offered(tmp_path: Path) -> None:
    """Review of issue 29: a gate's own proposal was gated by the built-in gates only, so
    `max_model_len: 1024` was offered (and written by --fix-apply) though the repository's
    gate refuses windows past 1,000. Every fix offered now passes the operator's gates."""
    (tmp_path / "shapes").mkdir()
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "window.py").write_text(
        "from fakplan.gates.operator import gate\n\n\n"
        "@gate(id='short-windows', title='windows of 1,000 at most', rationale='our SLO')\n"
        "def short(plan):\n"
        "    return plan.max_model_len <= 1000, f'{plan.max_model_len:,}'\n"
    )
    write_tiny_llama(tmp_path / "shapes" / "tiny.gguf")
    shape = tmp_path / "shapes" / "tiny.yaml"
    shape.write_text(
        "name: tiny\nengine: llamacpp\nmodel: tiny.gguf\ncard: {total: 1 GiB}\n"
        "budget: {weights: 64 MiB, kv: 1 MiB}\nserving: {max_num_seqs: 1, max_model_len: 1000}\n"
    )
    fixes = _every_fix_holds(shape, tmp_path)
    windows = [
        p["value"] for f in fixes for p in f["patch"] if p["path"] == "serving.max_model_len"
    ]
    assert 1024 not in windows and windows[0] == 768  # three 256-cell steps


def test_the_longest_window_past_the_trained_context_is_searched(tmp_path: Path) -> None:
    """Review of issue 29: with limits.rope_scaling the window may pass the trained
    context, but the search stopped one page past it (131,088 tokens "past the longest
    window fakplan plans for") while the pool held about a million tokens."""
    fitter = _fitter(
        {"name": "rope", "engine": "vllm", "engine_version": "0.19.0", "model": LLAMA_8B,
         "card": {"total": "80 GiB"}, "ceiling": "76 GiB", "limits": {"rope_scaling": True},
         "launch": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}},
         "serving": {"max_num_seqs": 1, "max_model_len": 1024}},
        tmp_path,
    )  # fmt: skip
    found = fitter.longest_window(Layout("fp8"), 1, 131072)
    point = found.plan  # type: ignore[union-attr]
    # 76 GiB - 15,317 MiB of weights = 62,507 MiB of pool; fp8 KV is 32 layers x 8 KV
    # heads x 256 x 1 B = 64 KiB a token, so 62,507 x 16 = 1,000,112 tokens (whole blocks)
    assert point.max_model_len == 62507 * 16
    assert found.beyond.gate == "pool-contract"  # type: ignore[union-attr]


def test_an_emitted_shape_names_its_draft_model_from_where_it_is(tmp_path: Path) -> None:
    from fakplan.fit import relocated

    (tmp_path / "drafts" / "d").mkdir(parents=True)
    data = {
        "model": LLAMA_8B,
        "launch": {"speculative": {"method": "draft_model", "model": "drafts/d"}},
    }
    out = relocated(data, tmp_path, tmp_path / "fitted")
    assert out["launch"]["speculative"]["model"] == "../drafts/d"
    assert out["model"] == LLAMA_8B  # a catalog id stays as it is


# ------------------------------------------------------------- warnings, fractions, offload


def test_a_warnings_fix_is_proven_and_clears_it(tmp_path: Path) -> None:
    """The example leaves 1,024 MiB between its pair and its 22 GiB ceiling, over the
    512 MiB it warns at; the advice "give the unclaimed bytes to budget.kv" was words. Now
    the fix is a patch that was gated: applied, every gate passes and the warning clears."""
    shape = tmp_path / "example.yaml"
    shutil.copy(SHAPES / "example.yaml", shape)
    warned = _gate_json(shape)["unclaimed"]
    assert warned["status"] == "warn"
    first = warned["fixes"][0]
    assert first["gives_up"] == ["nothing"]
    result = CliRunner().invoke(main, ["gate", str(shape), "--fix-apply", "1"])
    assert result.exit_code == 0, result.output
    after = _gate_json(shape)
    assert after["unclaimed"]["status"] == "pass"
    assert not [g for g in after.values() if g["status"] in ("fail", "warn")]
    planned = {p["path"]: p["value"] for p in first["patch"]}
    loaded = yaml.safe_load(shape.read_text())
    assert loaded["serving"]["max_num_seqs"] == planned.get(
        "serving.max_num_seqs", loaded["serving"]["max_num_seqs"]
    )


def test_each_engine_sized_point_names_the_least_fraction_that_realises_it(
    tmp_path: Path,
) -> None:
    """vLLM sizes the pool from --gpu-memory-utilization: a point's least fraction passes
    as a shape file, and a hundredth less fails the gate the point names."""
    code, document = _fit(LLAMA_8B, *ON_24_GIB, "--utilization", "0.9", "--kv-dtype", "auto")
    assert code == 0
    (layout,) = document["layouts"]
    assert layout["frontier"]
    for point in layout["frontier"]:
        least = point["least_fraction"]
        assert least["field"] == "serving.gpu_memory_utilization" and least["value"] <= 0.9
        for fraction, passes in ((least["value"], True), (least["below"]["value"], False)):
            data = {
                "name": "least",
                "engine": "vllm",
                "engine_version": "0.19.0",
                "model": LLAMA_8B,
                "card": {"total": "24 GiB", "sms": 128},
                "serving": {
                    "max_num_seqs": point["max_num_seqs"],
                    "max_model_len": point["max_model_len"],
                    "gpu_memory_utilization": fraction,
                },
            }
            path = tmp_path / f"least-{point['max_model_len']}-{fraction}.yaml"
            path.write_text(yaml.safe_dump(data))
            failing = [g.id for g in compile_plan(load_shape(path)).gates if g.status == "fail"]
            if passes:
                assert failing == [], (point, failing)
            else:
                assert least["below"]["gate"] in failing, (point, failing)


def test_utilization_is_refused_where_the_engine_does_not_size_its_pool() -> None:
    result = CliRunner().invoke(
        main, ["fit", LLAMA_8B, "--engine", "llamacpp", "--card", "24 GiB", "--utilization", "0.9"]
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "does not size its own pool" in result.stderr


def test_the_cards_given_decide_the_tp_widths_tried() -> None:
    """With --cards 8 fit tries every layout the cards allow: TP 1, 2, 4 and 8 for
    Llama-3.1-70B (64 heads); Qwen2.5-7B's 28 heads take TP 1, 2 and 4, not 8."""
    args = ["--engine", "vllm", "--engine-version", "0.19.0", "--card", "80 GiB",
            "--sms", "132", "--cards", "8", "--kv-dtype", "auto", "--window", "8192"]  # fmt: skip
    _, document = _fit("meta-llama/Llama-3.1-70B-Instruct", *args)
    assert [lay["tensor"] for lay in document["layouts"]] == [1, 2, 4, 8]
    _, document = _fit("Qwen/Qwen2.5-7B-Instruct", *args)
    assert [lay["tensor"] for lay in document["layouts"]] == [1, 2, 4]
    one_card = [a for a in args if a not in ("--cards", "8")]
    _, document = _fit("Qwen/Qwen2.5-7B-Instruct", *one_card)
    assert [lay["tensor"] for lay in document["layouts"]] == [1]


def test_fit_with_a_draft_model_plans_its_weights_and_its_kv() -> None:
    """--speculative-config makes every point a shape with launch.speculative: vLLM keeps a
    draft_model's layers in the target's blocks and loads its weights beside the target's.
    By hand: the weights budget holds (8,030,261,248 + 3,212,749,824 (Llama-3.2-3B, tied
    embeddings)) x 2 B = 22,486,022,144 B; a token costs 32 x 8 x 128 x 2 x 2 B for the
    target and 28 x 8 x 128 x 2 x 2 B for the draft = 245,760 B."""
    args = [
        "fit", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "vllm", "--engine-version",
        "0.19.0", "--card", "24 GiB", "--sms", "128", "--window", "1024", "--json",
    ]  # fmt: skip
    plain = json.loads(CliRunner().invoke(main, args).output)["layouts"][0]["frontier"][0]
    config = (
        '{"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", '
        '"num_speculative_tokens": 3}'
    )
    result = CliRunner().invoke(main, [*args, "--speculative-config", config])
    assert result.exit_code == 0, result.output
    drafted = json.loads(result.output)["layouts"][0]["frontier"][0]
    assert drafted["weights_budget_bytes"] >= 22_486_022_144 > plain["weights_budget_bytes"]
    per_token = 245_760
    assert drafted["tokens_backed"] <= drafted["kv_budget_bytes"] // per_token
    assert drafted["tokens_backed"] > drafted["kv_budget_bytes"] // per_token - 16  # a block
    assert drafted["max_num_seqs"] < plain["max_num_seqs"]


def test_fit_takes_the_draft_from_the_shape_file() -> None:
    result = CliRunner().invoke(
        main, ["fit", str(SHAPES / "example.yaml"), "--speculative-config", "{}"]
    )
    assert result.exit_code == 2 and "launch.speculative and serving.spec_tokens" in result.output
