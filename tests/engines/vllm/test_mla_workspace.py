"""The attention backends' import-time workspaces an MLA model's "Model loading took"
holds beyond its weights (engines/vllm/floor.py ``mla_import_workspaces``)."""

from __future__ import annotations

import json

from fakplan.engines.vllm.floor import (
    MLA_IMPORT_WORKSPACE,
    VllmFloor,
    mla_import_workspaces,
    vllm_floor,
)
from fakplan.geometry import load_geometry
from fakplan.units import GIB, printed_interval
from tests.support.paths import PUBLIC

MIB = 1 << 20


def test_the_workspaces_by_release_and_card() -> None:
    """0.17-0.19 import FlashInfer-MLA (128 MiB) on every card and CUTLASS-MLA (128 MiB)
    on 10.x; 0.33 only CUTLASS-MLA on 10.x; the releases between are an interval."""
    assert MLA_IMPORT_WORKSPACE == 128 * MIB
    assert mla_import_workspaces("0.19.0", "9.0")[:2] == (128 * MIB, 128 * MIB)
    assert mla_import_workspaces("0.17.1", "10.0")[:2] == (256 * MIB, 256 * MIB)
    assert mla_import_workspaces("0.19.0", None)[:2] == (128 * MIB, 256 * MIB)
    assert mla_import_workspaces("0.33.0", "9.0")[:2] == (0, 0)
    assert mla_import_workspaces("0.33.0", "10.0")[:2] == (128 * MIB, 128 * MIB)
    low, high, what = mla_import_workspaces("0.25.0", "9.0")
    assert (low, high) == (0, 128 * MIB) and "not read" in what


def test_deepseek_v2_lite_loads_within_the_printed_rounding() -> None:
    """prof-015: vLLM 0.19.0 on an H100 printed "Model loading took 29.43 GiB" for
    DeepSeek-V2-Lite-Chat at TP 1. Its own debug line shows FlashInfer-MLA imported
    (rejected for its compute capability, not by an ImportError), so the 128 MiB workspace
    was made. The weights' allocator count (29.30 GiB, which vLLM 0.5.0's print matches:
    test_vllm_weights) falls 0.13 GiB short of it; with the workspace it is inside."""
    log = (PUBLIC / "profiler" / "prof-015.log").read_text()
    assert "Model loading took 29.43 GiB" in log
    assert "FLASHINFER_MLA: [compute capability not supported]" in log
    path = PUBLIC / "configs" / "deepseek-ai--DeepSeek-V2-Lite" / "config.json"
    geometry = load_geometry(str(path))
    assert geometry.text_config is not None
    assert json.loads(path.read_text())["kv_lora_rank"] == 512
    floor = vllm_floor(
        dict(geometry.text_config), geometry.architecture, version="0.19.0", tp=1, pp=1,
        card_total=round(79.19 * GIB), utilization=0.9, batched_tokens=8192,
        max_num_seqs=1024, sms=132, capability="9.0",
    )  # fmt: skip
    assert isinstance(floor, VllmFloor)
    low, _, high = printed_interval("29.43 GiB")
    assert low <= floor.weights.bytes < high
    assert not low <= floor.weights.bytes - MLA_IMPORT_WORKSPACE < high
