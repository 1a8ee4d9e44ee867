"""fakplan verify: ledger predictions closed against real boot logs, verdicts kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.ceiling import ceiling_from_ledger
from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.units import GIB, MIB
from tests.support import ranklogs
from tests.support.paths import DATA, PUBLIC, SHAPES
from tests.support.tinymodels import write_tiny_llama

LEDGERS = PUBLIC / "ledgers"
DATA = DATA / "ledgers"


def write_shape(path: Path, **overrides: object) -> Path:
    shape: dict[str, object] = {
        "name": "s",
        "engine": "vllm",
        "engine_version": "0.24.0",
        "model": str(PUBLIC / "configs" / "nvidia--Qwen3.6-35B-A3B-NVFP4"),
        "card": {"total": "31.5 GiB", "count": 1},
        "budget": {"weights": "20 GiB", "kv": "5.98 GiB"},
        "serving": {
            "max_num_seqs": 1,
            "max_model_len": 131072,
            "kv_cache_dtype": "fp8",
            "max_num_batched_tokens": 8192,
            "prefix_caching": True,  # the log's non-default args state it
        },
    }
    shape.update(overrides)
    path.write_text(json.dumps(shape))
    return path


def test_vllm_018_kv_tokens_held_exactly(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "s.yaml")
    out = tmp_path / "out"
    result = runner.invoke(
        main,
        ["verify", str(shape), "--ledger", str(LEDGERS / "vllm-018.log"), "-o", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.output)["verdicts"]
    kv = verdicts["kv-tokens"]
    assert kv["status"] == "held"
    assert kv["observed"] == 567_978  # "GPU KV cache size: 567,978 tokens", line 2
    assert kv["source"].startswith(f"{LEDGERS / 'vllm-018.log'}:2:")
    # the printed "5.98 GiB" is any pool from 5.975 to 5.985 GiB; the arithmetic gives
    # a range of counts for it, and the printed 567,978 is in it
    assert "at the printed pool 5.98 GiB (any of 6,415,607,399..6,426,344,816 B)" in kv["note"]
    assert kv["note"].endswith("567,978 tokens: the printed count")
    # 567,978 // 131,072 = 4 whole sessions; the plan predicted the same from its own arithmetic
    assert verdicts["sessions-at-window"] == {
        **verdicts["sessions-at-window"],
        "status": "held",
        "observed": 4,
    }
    assert verdicts["weights"]["status"] == "unverifiable"  # this excerpt has no weights line
    record = json.loads((out / "s" / "plan.json").read_text())
    kv_record = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    assert kv_record["verdicts"][0]["status"] == "held"
    env = (out / "s" / "s.env").read_text()
    assert "verdict: held, observed 567978" in env


def test_wrong_pool_kills_the_prediction(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "s.yaml", budget={"weights": "20 GiB", "kv": "5 GiB"})
    result = runner.invoke(
        main,
        [
            "verify",
            str(shape),
            "--ledger",
            str(LEDGERS / "vllm-018.log"),
            "-o",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1
    assert "killed" in result.output


def test_boot_failure_kills_every_ledger_prediction(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(
        tmp_path / "s.yaml",
        engine_version="0.10.1",
        model="Qwen/Qwen3-Coder-480B-A35B-Instruct",
        card={"total": "96 GiB", "count": 1},
        budget={"weights": "30 GiB", "kv": "48.66 GiB"},
        serving={"max_num_seqs": 1, "max_model_len": 262144, "kv_cache_dtype": "auto"},
    )
    result = runner.invoke(
        main,
        [
            "verify",
            str(shape),
            "--ledger",
            str(LEDGERS / "vllm-012.log"),
            "-o",
            str(tmp_path / "o"),
            "--json",
        ],
    )
    assert result.exit_code == 1
    verdicts = json.loads(result.output)["verdicts"]
    assert {v["status"] for v in verdicts.values()} == {"killed"}
    assert "boot failed" in verdicts["kv-tokens"]["observed"]


def test_boot_failure_report_states_the_error_once(runner: CliRunner, tmp_path: Path) -> None:
    shape = write_shape(
        tmp_path / "s.yaml",
        engine_version="0.10.1",
        model="Qwen/Qwen3-Coder-480B-A35B-Instruct",
        card={"total": "96 GiB", "count": 1},
        budget={"weights": "30 GiB", "kv": "48.66 GiB"},
        serving={"max_num_seqs": 1, "max_model_len": 262144, "kv_cache_dtype": "auto"},
    )
    log = LEDGERS / "vllm-012.log"
    result = _verify(runner, shape, log, tmp_path / "o", COLUMNS="400")
    assert result.exit_code == 1
    # vllm-012.log line 1: the engine's "To serve at least one request ..." refusal
    assert result.output.count("To serve at least one request") == 1
    assert f"boot failed, {log}:1: To serve at least one request" in result.output
    assert result.output.count("the engine refused the shape at boot") == 3


def test_table_ceiling_is_seed_002s_formula() -> None:
    ledger = parse_ledger(DATA / "table-seed002.log")
    reading = ceiling_from_ledger(ledger)
    # settled 2.01 GiB free, floor 209.19 MiB, pair 25 GiB + 5 GiB (seed 002 §1)
    settled, floor, pair = round(2.01 * GIB), round(209.19 * MIB), 30 * GIB
    assert reading.bytes == settled - floor + pair
    assert reading.lines


def test_ceiling_unknown_names_what_is_missing() -> None:
    ledger = parse_ledger(DATA / "llama-cpp-python-0.3.36.log")
    reading = ceiling_from_ledger(ledger)
    assert reading.bytes is None
    assert "does not state" in reading.derivation


def test_shape_ceiling_from_a_ledger_file(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "boot.log").write_text((DATA / "table-seed002.log").read_text())
    text = (SHAPES / "frank-archon.yaml").read_text()
    text = text.replace("ceiling: 29120 MiB", "ceiling: {ledger: boot.log}")
    (tmp_path / "s.yaml").write_text(text)
    result = runner.invoke(main, ["plan", str(tmp_path / "s.yaml"), "--json"])
    data = json.loads(result.output)
    expected = round(2.01 * GIB) - round(209.19 * MIB) + 30 * GIB
    assert data["ceiling_bytes"] == expected
    assert "boot.log line" in data["derivations"]["ceiling_bytes"]


def test_verdicts_accumulate_and_retire(runner: CliRunner, tmp_path: Path) -> None:
    """A second source appends; a changed shape retires the old prediction with its verdicts."""
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    shape = tmp_path / "t.yaml"

    def write(window: int) -> None:
        shape.write_text(
            json.dumps(
                {
                    "name": "tiny",
                    "engine": "llamacpp",
                    "model": str(model),
                    "card": {"total": "1 GiB"},
                    "budget": {"weights": "1 MiB", "kv": "0.25 MiB"},
                    "serving": {
                        "max_num_seqs": 1,
                        "max_model_len": window,
                        "kv_cache_dtype": "f16",
                    },
                    "launch": {"binary": "llama-cpp-python"},
                }
            )
        )

    write(1024)
    out = tmp_path / "out"
    log = DATA / "llama-cpp-python-0.3.36.log"
    again = tmp_path / "second-boot.log"  # a second boot's log: the same figures, a new source
    again.write_text(log.read_text())
    for source in (log, again):
        assert (
            runner.invoke(
                main, ["verify", str(shape), "--ledger", str(source), "-o", str(out)]
            ).exit_code
            == 0
        )
    record = json.loads((out / "tiny" / "plan.json").read_text())
    kv = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    assert [v["status"] for v in kv["verdicts"]] == ["held", "held"]
    # re-compiling the unchanged shape keeps them
    runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert len(next(p for p in record["predictions"] if p["id"] == "kv-tokens")["verdicts"]) == 2
    # a new window is a new prediction (-c 512, 512 KV tokens): the old one retires
    write(512)
    runner.invoke(main, ["compile", str(shape), "-o", str(out)])
    record = json.loads((out / "tiny" / "plan.json").read_text())
    assert next(p for p in record["predictions"] if p["id"] == "kv-tokens")["verdicts"] == []
    retired = [p for p in record["retired_predictions"] if p["id"] == "kv-tokens"]
    assert len(retired) == 1 and len(retired[0]["verdicts"]) == 2
    assert "Earlier predictions of this endpoint" in (out / "tiny" / "tiny.env").read_text()


def test_gate_with_a_ledger_uses_its_ceiling(runner: CliRunner, in_root: Path) -> None:
    # seed 002 table: 2.01 GiB (2,058.24 MiB) - 209.19 MiB + 30,720 MiB = 32,569.05 MiB:
    # the fp8 before-shape's pair (29,614 MiB) fits under it, though not under 29,120 MiB
    result = runner.invoke(
        main, ["gate", "shapes/frank-archon-fp8.yaml", "--ledger", str(DATA / "table-seed002.log")]
    )
    assert "ok" in result.output
    line = next(x for x in result.output.splitlines() if "pair ≤ ceiling" in x)
    assert line.startswith("ok ") and "29,614 MiB ≤ 32,569 MiB" in line
    bad = runner.invoke(
        main, ["gate", "shapes/frank-archon.yaml", "--ledger", str(DATA / "nope.log")]
    )
    assert bad.exit_code == 2


# ------------------------------------------------------------------ the report

# A custom engine's arithmetic is the contract's, so its kv-tokens range is derived here by
# hand: 600 MiB of 1 KiB pages of one token = 614,400 tokens, held within 0.5 %:
# floor(614,400 x 0.995) = 611,328 .. ceil(614,400 x 1.005) = 617,472.
CUSTOM = {
    "name": "c",
    "engine": "custom",
    "model": "custom-model",
    "card": {"total": "24 GiB", "count": 1},
    "budget": {"weights": "16 GiB", "kv": "600 MiB"},
    "serving": {"max_num_seqs": 1, "max_model_len": 131072, "kv_cache_dtype": "bf16"},
    "contract": {
        "page_tokens": 1,
        "per_token": [{"name": "kv", "per_page": "1 KiB"}],
        "dtypes": ["bf16"],
    },
}
VLLM_018_LINE_2 = (LEDGERS / "vllm-018.log").read_text().splitlines()[1]


def _custom(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(CUSTOM))
    return path


def _verify(runner: CliRunner, shape: Path, log: Path, out: Path, *extra: str, **env: str) -> Any:
    return runner.invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(out), *extra], env=env
    )


def test_killed_kv_tokens_states_how_far_it_missed(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: a killed kv-tokens verdict said nothing of the distance to its range."""
    out = tmp_path / "out"
    result = _verify(runner, _custom(tmp_path), LEDGERS / "vllm-018.log", out, "--json")
    assert result.exit_code == 1, result.output
    kv = json.loads(result.output)["verdicts"]["kv-tokens"]
    assert kv["status"] == "killed"
    # 567,978 printed on line 2; 567,978 - 611,328 = -43,350; -43,350 / 611,328 = -7.09 %
    assert kv["note"] == "observed 567,978 tokens, 43,350 below the low bound 611,328 (−7.1 %)"
    assert kv["miss"]["against"] == "low"
    assert (kv["miss"]["bound"], kv["miss"]["by"]) == (611_328, -43_350)
    assert kv["miss"]["pct"] == pytest.approx(-43_350 / 611_328 * 100)
    # a held verdict has no miss
    assert json.loads(result.output)["verdicts"]["sessions-at-window"]["miss"] is None
    record = json.loads((out / "c" / "plan.json").read_text())
    recorded = next(p for p in record["predictions"] if p["id"] == "kv-tokens")["verdicts"]
    assert recorded[0]["note"] == kv["note"]
    assert "43,350 below the low bound 611,328 (−7.1 %)" in (out / "c" / "c.env").read_text()


def test_report_prints_figures_with_units(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: predicted values printed as `…..17179869184` and `611328..617472`."""
    result = _verify(runner, _custom(tmp_path), LEDGERS / "vllm-018.log", tmp_path / "o")
    assert result.exit_code == 1
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert "611,328..617,472 tokens" in rows["kv-tokens"]
    assert "567,978 tokens" in rows["kv-tokens"]
    assert "≤ 16 GiB" in rows["weights"]  # budget.weights, 17,179,869,184 B
    assert "1 sequences" not in result.output and "4 sequences" in rows["sessions-at-window"]
    assert "17179869184" not in result.output and "….." not in result.output


def test_report_fits_80_columns_and_json_keeps_the_line(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: at 80 columns the source column folded one log line into ~40 rows."""
    shape = _custom(tmp_path)
    log = LEDGERS / "vllm-018.log"
    narrow = _verify(runner, shape, log, tmp_path / "o", COLUMNS="80")
    lines = narrow.output.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), narrow.output
    sources = [line.strip() for line in lines if "vllm-018.log:2: " in line]
    assert len(sources) == 2  # kv-tokens and sessions-at-window, one row each
    for source in sources:  # line number kept, the text cut around the figure it observed
        assert "…" in source and source.endswith("GPU KV cache size: 567,978 tokens")
    wide = _verify(runner, shape, log, tmp_path / "o", "--json", COLUMNS="80")
    assert json.loads(wide.output)["verdicts"]["kv-tokens"]["source"] == (
        f"{log}:2: {VLLM_018_LINE_2}"
    )
    roomy = _verify(runner, shape, log, tmp_path / "o", COLUMNS="400")
    assert f"{log}:2: {VLLM_018_LINE_2}" in roomy.output  # room enough: nothing cut


def test_a_long_line_is_cut_on_both_sides_around_its_figure(
    runner: CliRunner, tmp_path: Path
) -> None:
    log = ranklogs.write(tmp_path / "boot.log", ranklogs.sglang_two_ranks())
    shape = write_sglang_shape(tmp_path)
    result = _verify(runner, shape, log, tmp_path / "o", COLUMNS="60")
    source = next(x.strip() for x in result.output.splitlines() if "boot.log:4: " in x)
    # "[2025-03-27 21:33:31 TP1] KV Cache is allocated. #tokens: 834615, K size: ..." is
    # longer than 60 columns: both ends go, "#tokens: 834615" (the observed figure) stays
    assert source.startswith("…/boot.log:4: …") and source.endswith("…")  # the path is long
    assert "834615" in source and len(source) <= 56


def test_verifying_the_same_ledger_again_adds_no_verdict(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: three runs on one log appended three identical verdicts per prediction."""
    shape, out = _custom(tmp_path), tmp_path / "out"
    log = tmp_path / "boot.log"
    log.write_text((LEDGERS / "vllm-018.log").read_text())
    first = _verify(runner, shape, log, out, "--json")
    assert {v["new"] for v in json.loads(first.output)["verdicts"].values()} == {True}
    for _ in range(2):
        again = _verify(runner, shape, log, out, "--json")
        assert {v["new"] for v in json.loads(again.output)["verdicts"].values()} == {False}
    said = _verify(runner, shape, log, out).output
    assert "nothing new: every verdict is already recorded" in said

    def verdicts() -> dict[str, list[Any]]:
        record = json.loads((out / "c" / "plan.json").read_text())
        return {p["id"]: p["verdicts"] for p in record["predictions"] if p["verdicts"]}

    assert {pid: len(v) for pid, v in verdicts().items()} == {
        "kv-tokens": 1,
        "sessions-at-window": 1,
        "weights": 1,
    }
    assert (out / "c" / "c.env").read_text().count("verdict: killed, observed 567978") == 1
    # a new observation at the same path (the engine rebooted with another pool) is new
    log.write_text((LEDGERS / "vllm-009.log").read_text())
    _verify(runner, shape, log, out)
    assert [v["observed"] for v in verdicts()["kv-tokens"]] == [567_978, 158_656]
    # the same figures from another file are another source: new too
    copy = tmp_path / "copy.log"
    copy.write_text(log.read_text())
    mixed = _verify(runner, shape, copy, out, "--json")
    assert {v["new"] for v in json.loads(mixed.output)["verdicts"].values()} == {True}
    assert len(verdicts()["kv-tokens"]) == 3


# ------------------------------------------------------------- multi-rank ledgers


def write_sglang_shape(tmp_path: Path, ceiling: object = None) -> Path:
    """Gemma 3 4B on SGLang, TP 2: budget.weights 8.12 GiB sits between the two ranks'
    8.11 and 8.13 GB, so the weights verdict tells the heaviest rank from the binding one."""
    shape: dict[str, object] = {
        "name": "g",
        "engine": "sglang",
        "model": str(PUBLIC / "configs" / "google--gemma-3-4b-it"),
        "card": {"total": "139.21 GiB", "count": 2},
        "parallel": {"tensor": 2},
        "budget": {"weights": "8.12 GiB", "kv": "54.12 GiB"},
        "serving": {"max_num_seqs": 4, "max_model_len": 131072, "kv_cache_dtype": "auto"},
    }
    if ceiling is not None:
        shape["ceiling"] = ceiling
    path = tmp_path / "g.yaml"
    path.write_text(json.dumps(shape))
    return path


# tests/ranklogs.py: TP1 binds (the pools agree; it has the least free memory), so the
# ceiling is TP1's: settled free 13.21 GB - floor 1 GiB + weights 8.11 GB + K 54.12 GB
# + V 54.12 GB (SGLang's "GB" is GiB).
SGLANG_CEILING = round(13.21 * GIB) - GIB + round(8.11 * GIB) + 2 * round(54.12 * GIB)


def test_shape_ceiling_from_a_multi_rank_sglang_ledger(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: ranks at 8.13 / 8.11 GB of weights made the ceiling unknown."""
    ranklogs.write(tmp_path / "boot.log", ranklogs.sglang_two_ranks())
    shape = write_sglang_shape(tmp_path, {"ledger": "boot.log", "engine_floor": "1 GiB"})
    result = runner.invoke(main, ["plan", str(shape), "--json"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.output)
    assert data["ceiling_bytes"] == SGLANG_CEILING
    derivation = data["derivations"]["ceiling_bytes"]
    assert "the figures of TP1, the binding rank" in derivation
    # 13.34 - 13.21 = 0.13 GB (0.98 % of 13.21); 8.13 - 8.11 = 0.02 GB (0.25 % of 8.11)
    assert "free_after_graphs_bytes 13.21 GB (TP1) to 13.34 GB (TP0), spread 0.13 GB" in derivation
    assert "weights_bytes 8.11 GB (TP1) to 8.13 GB (TP0), spread 0.02 GB (0.25 %)" in derivation


def test_verify_a_multi_rank_sglang_ledger(runner: CliRunner, tmp_path: Path) -> None:
    log = ranklogs.write(tmp_path / "boot.log", ranklogs.sglang_two_ranks())
    shape = write_sglang_shape(tmp_path, {"ledger": "boot.log", "engine_floor": "1 GiB"})
    result = _verify(runner, shape, log, tmp_path / "o", "--json")
    assert result.exit_code == 1, result.output
    verdicts = json.loads(result.output)["verdicts"]
    kv = verdicts["kv-tokens"]
    assert kv["observed"] == 834_615  # both ranks print it; cited from the binding rank's line
    assert kv["source"].startswith(f"{log}:4: [2025-03-27 21:33:31 TP1] KV Cache is allocated")
    # every rank must fit budget.weights: TP0's 8.13 GB is judged, not the binding TP1's 8.11
    weights = verdicts["weights"]
    assert weights["status"] == "killed"
    assert weights["observed"] == round(8.13 * GIB)
    assert weights["source"].startswith(f"{log}:1: [2025-03-27 21:33:30 TP0] Load weight end.")
    # 8.13 - 8.12 GiB = 0.01 GiB = 10.24 MiB; 0.01 / 8.12 = 0.12 %
    assert weights["note"].startswith(
        "observed 8.13 GiB, 10.24 MiB above the high bound 8.12 GiB (+0.12 %)"
    )
    assert (
        "loaded on TP0, the heaviest rank: weights_bytes 8.11 GB (TP1) to 8.13 GB"
        in (weights["note"])
    )
    # unclaimed: the binding rank's ceiling minus the shape's pair, 8.12 + 54.12 GiB
    unclaimed = verdicts["unclaimed"]
    pair = round(8.12 * GIB) + round(54.12 * GIB)
    assert (unclaimed["status"], unclaimed["observed"]) == ("held", SGLANG_CEILING - pair)
    assert "the figures of TP1, the binding rank" in unclaimed["note"]
    # the human report states the binding rank and the spread beside the verdicts
    said = _verify(runner, shape, log, tmp_path / "o", COLUMNS="200").output
    assert "TP1 binds (the ranks' pools agree; the least free memory" in said


def test_vllm_v0_workers_ceiling_is_the_binding_workers(tmp_path: Path) -> None:
    """Regression: a second V0 worker printing 1.81 GiB of non-torch memory (the driver 1.79)
    made the ceiling unknown."""
    ledger = parse_ledger(ranklogs.write(tmp_path / "boot.log", ranklogs.vllm_v0_two_workers()))
    # the worker's KV budget is the smaller (53.27 < 53.29 GiB): it binds
    assert ledger.binding_rank == "pid 486"
    reading = ceiling_from_ledger(ledger)
    # its profile: 71.29 GiB usable - 1.81 GiB non-torch - 1.26 GiB activation peak
    assert reading.bytes == round(71.29 * GIB) - round(1.81 * GIB) - round(1.26 * GIB)
    assert "the figures of pid 486, the binding rank" in reading.derivation
    assert "non_torch_bytes 1.79 GiB (main) to 1.81 GiB (pid 486), spread 0.02 GiB" in (
        reading.derivation
    )


def test_a_miss_below_a_zero_bound_has_no_percentage() -> None:
    """unclaimed ≥ 0 B: 1.5 GiB over the ceiling is 1.5 GiB below 0, a percentage of nothing."""
    from fakplan.predict import Prediction, describe, miss

    unclaimed = Prediction(
        id="unclaimed",
        claim="the pair fits under the ceiling",
        value=GIB,
        low=0,
        high=None,
        unit="B",
        derivation="ceiling - pair",
        closed_by="ledger",
        command="fakplan verify",
    )
    assert describe(unclaimed) == "≥ 0 B"
    over = -3 * GIB // 2
    found = miss(unclaimed, over)
    assert found is not None
    assert (found.against, found.bound, found.by, found.pct) == ("low", 0, over, None)
    assert found.text(over, "B") == "observed −1.50 GiB, 1.50 GiB below the low bound 0 B"
    assert miss(unclaimed, 0) is None  # on the bound: held


def test_verify_refuses_a_ledger_ceiling_above_the_card(
    runner: CliRunner, in_root: Path, tmp_path: Path
) -> None:
    """As plan and gate do: the boot table measures 32,569.05 MiB ((2,058.24 - 209.19) +
    30,720 MiB), more than a 30 GiB card holds, so the log is not this card's."""
    shape = tmp_path / "small-card.yaml"
    shape.write_text(
        (in_root / "shapes" / "frank-archon.yaml")
        .read_text()
        .replace("total: 31.86 GiB", "total: 30 GiB")
    )
    log = str(DATA / "table-seed002.log")
    gated = runner.invoke(main, ["gate", str(shape), "--ledger", log])
    verified = runner.invoke(main, ["verify", str(shape), "--ledger", log, "-o", str(tmp_path)])
    for result in (gated, verified):
        assert result.exit_code == 2, result.output
        assert "is above the card's 30,720 MiB" in result.output
    assert not (tmp_path / "frank-archon" / "plan.json").exists()


def test_a_count_below_the_printed_pool_points_at_another_rank(
    runner: CliRunner, tmp_path: Path
) -> None:
    # the same boot, with rank 0 printing a larger pool than the one the count came from:
    # vLLM keeps the smallest pool over the workers, so the count sits below rank 0's
    text = (LEDGERS / "vllm-018.log").read_text().replace("5.98 GiB", "6.10 GiB")
    assert "6.10 GiB" in text
    log = tmp_path / "boot.log"
    log.write_text(text)
    shape = write_shape(tmp_path / "s.yaml")
    result = runner.invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "o"), "--json"]
    )
    note = json.loads(result.output)["verdicts"]["kv-tokens"]["note"]
    assert "at the printed pool 6.10 GiB" in note
    assert "another rank's pool was smaller" in note
