"""llama.cpp follows the shape's window: -c asks for slots x max_model_len, never more.

llama.cpp sizes its cache by -c, not by a pool. Filling budget.kv with cells would give a
slot more context than max_model_len (past the trained context, too) and back no extra
sessions: every sequence needs a slot. The tiny GGUF (tests/tinymodels.py) has 2 layers
and 2 KV heads of 16: 2 x 2 x (16 + 16) x 2 B = 256 B per f16 cell, trained on 2,048.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.paths import DATA, IN_CI
from tests.support.realserver import boot_serve_sh, free_port, have_llama_cpp
from tests.support.tinymodels import write_tiny_llama

CELL = 256
MIB = 2**20


def _shape(folder: Path, **serving: Any) -> Path:
    model = folder / "tiny.gguf"
    if not model.exists():
        write_tiny_llama(model)
    binary = serving.pop("binary", "llama-server")
    kv = serving.pop("kv", "1 MiB")  # 1 MiB / 256 B = 4,096 cells: 4 windows of 1,024
    port = serving.pop("port", 8000)
    path = folder / "tiny.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "tiny",
                "engine": "llamacpp",
                "model": "tiny.gguf",
                "card": {"total": "1 GiB", "device": "cpu"},
                "budget": {"weights": "1 MiB", "kv": kv},
                "serving": {"max_model_len": 1024, "kv_cache_dtype": "f16", **serving},
                "ceiling": "1 GiB",
                "launch": {"binary": binary, "host": "127.0.0.1", "port": port},
            }
        )
    )
    return path


def _plan(shape: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["plan", str(shape), "--json"])
    assert result.exit_code in (0, 1), result.output
    plan: dict[str, Any] = json.loads(result.output)
    return plan


def _gate(plan: dict[str, Any], gate_id: str) -> dict[str, Any]:
    gate: dict[str, Any] = next(g for g in plan["gates"] if g["id"] == gate_id)
    return gate


def test_one_slot_gets_its_window_and_the_rest_is_unclaimed(tmp_path: Path) -> None:
    """The issue's case: 1 slot, max_model_len 1,024, a budget that fits 4,096 cells."""
    plan = _plan(_shape(tmp_path, max_num_seqs=1, binary="llama-cpp-python"))
    assert plan["tokens_backed"] == 1024  # not 4,096
    assert plan["whole_sessions_at_window"] == 1  # the one slot, not 4
    # 1 MiB - 1,024 cells x 256 B = 786,432 B the cache never takes
    assert plan["kv_unclaimed_bytes"] == MIB - 1024 * CELL == 786_432
    (role,) = plan["launch"]["roles"]
    argv = role["argv"]
    assert argv[argv.index("--n_ctx") + 1] == "1024"
    sessions = next(p for p in plan["predictions"] if p["id"] == "sessions-at-window")
    assert sessions["value"] == 1
    assert _gate(plan, "context")["status"] == "pass"


def test_slots_each_get_one_window(tmp_path: Path) -> None:
    plan = _plan(_shape(tmp_path, max_num_seqs=2))
    (role,) = plan["launch"]["roles"]
    argv = role["argv"]
    # -c 2,048 split over -np 2: 1,024 cells a slot
    assert argv[argv.index("-c") + 1] == "2048" and argv[argv.index("-np") + 1] == "2"
    assert plan["tokens_backed"] == 2048 and plan["whole_sessions_at_window"] == 2
    assert plan["kv_unclaimed_bytes"] == MIB - 2048 * CELL


def test_a_budget_short_of_the_slots_backs_no_full_window(tmp_path: Path) -> None:
    # 384 KiB / 256 B = 1,536 cells; split over 2 slots at a 256-cell step: 768 a slot
    plan = _plan(_shape(tmp_path, max_num_seqs=2, kv="384 KiB"))
    assert plan["tokens_backed"] == 1536
    assert plan["whole_sessions_at_window"] == 0  # neither slot holds 1,024 tokens
    assert plan["kv_unclaimed_bytes"] == 0
    assert _gate(plan, "pool-contract")["status"] == "fail"


def test_a_window_llama_cpp_pads_past_max_model_len_fails_the_context_gate(
    tmp_path: Path,
) -> None:
    plan = _plan(_shape(tmp_path, max_num_seqs=1, max_model_len=1000))
    gate = _gate(plan, "context")
    # llama.cpp pads n_ctx to 256: a 1,000-token window serves 1,024
    assert gate["status"] == "fail"
    assert gate["numbers"]["slot_tokens"] == 1024
    assert "max_model_len: 1024" in gate["fix"]


def test_a_unified_cache_lets_one_slot_past_the_window(tmp_path: Path) -> None:
    plan = _plan(_shape(tmp_path, max_num_seqs=2, kv_unified=True))
    gate = _gate(plan, "context")
    assert gate["status"] == "fail" and gate["numbers"]["slot_tokens"] == 2048
    assert "kv_unified" in gate["fix"]
    assert plan["whole_sessions_at_window"] == 2  # 2,048 cells shared: two full windows


def test_a_window_past_the_trained_context_fails_unless_rope_scaling(tmp_path: Path) -> None:
    plan = _plan(_shape(tmp_path, max_num_seqs=1, max_model_len=4096, kv="2 MiB"))
    assert _gate(plan, "context")["status"] == "fail"
    assert plan["tokens_backed"] == 4096


@pytest.mark.llama_server
def test_real_boot_of_the_rendered_shape_has_no_context_overflow(tmp_path: Path) -> None:
    """Compile, boot the engine from its serve.sh, verify the ledger: no 'possible training
    context overflow', one slot, sessions = 1 (the boot the issue quoted gave -c 4096)."""
    if not have_llama_cpp():
        if IN_CI:
            pytest.fail("CI must boot the real llama.cpp engine")
        pytest.skip("llama-cpp-python not installed")
    port = free_port()
    shape = _shape(tmp_path, max_num_seqs=1, binary="llama-cpp-python", port=port)
    out = tmp_path / "out"
    compiled = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert compiled.exit_code == 0, compiled.output
    log = tmp_path / "boot.log"
    text = boot_serve_sh(out / "tiny" / "serve.sh", port, log)
    assert "n_ctx_seq (1024)" in text, text[-2000:]
    assert "training context overflow" not in text
    result = CliRunner().invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(out), "--json"]
    )
    verdicts = json.loads(result.output)["verdicts"]
    assert (verdicts["kv-tokens"]["status"], verdicts["kv-tokens"]["observed"]) == ("held", 1024)
    sessions = verdicts["sessions-at-window"]
    assert (sessions["status"], sessions["observed"]) == ("held", 1)  # the one slot
    # "CPU_Mapped model buffer size = 0.41 MiB" fits the 1 MiB budget.weights
    assert verdicts["weights"]["status"] == "held"
    assert result.exit_code == 0, result.output


def test_idle_kv_counts_as_unclaimed_vram(tmp_path: Path) -> None:
    shape = _shape(tmp_path, max_num_seqs=1)
    data = json.loads(shape.read_text())
    data["ceiling"] = "66 MiB"  # the pair is 1 MiB + 1 MiB: 64 MiB unclaimed by the ceiling
    data["limits"] = {"unclaimed_warn_above": "64 MiB"}
    shape.write_text(json.dumps(data))
    gate = _gate(_plan(shape), "unclaimed")
    # 64 MiB beside the pair + 786,432 B of budget.kv the 1,024-cell cache never takes
    assert gate["status"] == "warn"
    assert gate["numbers"]["unclaimed_bytes"] == 64 * MIB
    assert gate["numbers"]["kv_unclaimed_bytes"] == 786_432
    # the proven fix spends the floor on slots: 66 MiB - 1 MiB of weights holds 256 slots
    # (llama.cpp's LLAMA_MAX_SEQ) x 1,024 cells x 256 B = 64 MiB of cache
    assert gate["fixes"][0]["patch"] == [
        {"path": "serving.max_num_seqs", "value": 256},
        {"path": "budget.kv", "value": "64 MiB"},
    ]
    assert gate["fix"] == gate["fixes"][0]["summary"]


def _split_boot(tmp_path: Path) -> Path:
    """The real one-slot boot, edited as the same server prints two split slots of 768 cells
    (-c 1536 -np 2: n_ctx_seq = pad(1536 / 2, 256) = 768; '2/2 seqs' = n_seq_max/n_stream)."""
    text = (DATA / "ledgers" / "llama-cpp-python-0.3.36.log").read_text()
    for old, new in (
        ("n_seq_max             = 1", "n_seq_max             = 2"),
        ("n_ctx                 = 1024", "n_ctx                 = 1536"),
        ("n_ctx_seq             = 1024", "n_ctx_seq             = 768"),
        ("n_ctx_seq (1024) < n_ctx_train", "n_ctx_seq (768) < n_ctx_train"),
        ("KV buffer size =     0.25 MiB", "KV buffer size =     0.38 MiB"),
        (
            "size =    0.25 MiB (  1024 cells,   2 layers,  1/1 seqs), K (f16):    0.12 MiB, "
            "V (f16):    0.12 MiB",
            "size =    0.38 MiB (   768 cells,   2 layers,  2/2 seqs), K (f16):    0.19 MiB, "
            "V (f16):    0.19 MiB",
        ),
    ):
        assert old in text, old
        text = text.replace(old, new)
    log = tmp_path / "split.log"
    log.write_text(text)
    return log


def test_verify_counts_the_slots_that_hold_a_window(tmp_path: Path) -> None:
    """Two slots of 768 cells back 1,536 tokens, but no 1,024-token window: 0 sessions, as
    the plan says — not 1,536 // 1,024 = 1."""
    shape = _shape(tmp_path, max_num_seqs=2, kv="384 KiB")
    result = CliRunner().invoke(
        main,
        [
            "verify",
            str(shape),
            "--ledger",
            str(_split_boot(tmp_path)),
            "-o",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    verdicts = json.loads(result.output)["verdicts"]
    assert (verdicts["kv-tokens"]["status"], verdicts["kv-tokens"]["observed"]) == ("held", 1536)
    sessions = verdicts["sessions-at-window"]
    assert (sessions["status"], sessions["observed"]) == ("held", 0), sessions


def test_the_2024_build_keeps_one_shared_cache(tmp_path: Path) -> None:
    """74d73dc (Nov 2024): one cache of n_ctx = pad(-c, 32) cells without flash attention,
    shared by the slots, each of which gets n_ctx / n_parallel (src/llama.cpp)."""
    shape = _shape(tmp_path, max_num_seqs=2, max_model_len=1000)
    data = json.loads(shape.read_text())
    data["engine_version"] = "b4000"
    shape.write_text(json.dumps(data))
    plan = _plan(shape)
    # -c 2 x 1,000 = 2,000 -> pad(2,000, 32) = 2,016 cells in one cache; 1,008 a slot
    assert plan["tokens_backed"] == 2016
    assert plan["whole_sessions_at_window"] == 2
    gate = _gate(plan, "context")
    assert gate["numbers"]["slot_tokens"] == 1008 and gate["status"] == "fail"
