"""Each probe ran (``probed`` is conftest.Probed), and each live prediction of the shape held (or could not be told apart from noise)."""

from __future__ import annotations

from typing import Any

import pytest

from fakplan.probes import DEFAULT_PROBES


@pytest.mark.parametrize("probe", DEFAULT_PROBES)
def test_probe_ran(probed: Any, probe: str) -> None:
    outcome = probed.run.probes[probe]
    assert outcome.status == "ok", f"{probe}: {outcome.error}"


@pytest.mark.parametrize("closed_by", ["probe boundary", "probe decode", "probe prefill"])
def test_predictions_held(probed: Any, closed_by: str) -> None:
    closed = [p for p in probed.plan.predictions if p.closed_by == closed_by]
    if not closed:
        pytest.skip(f"the shape makes no prediction closed by {closed_by}")
    for prediction in closed:
        verdict = probed.verdicts.get(prediction.id)
        assert verdict is not None, f"{prediction.id}: no verdict ({closed_by} did not run)"
        assert verdict.status != "killed", f"{prediction.id}: killed: {verdict.note}"
        if verdict.status != "held":
            pytest.xfail(f"{prediction.id}: {verdict.status}: {verdict.note}")


@pytest.mark.parametrize("prediction_id", ["kv-tokens", "sessions-at-window"])
def test_the_stated_kv_pool_held(probed: Any, prediction_id: str) -> None:
    """Where the engine states its KV pool live (vLLM's /metrics), the ledger's predictions hold."""
    verdict = probed.verdicts.get(prediction_id)
    if verdict is None:
        pytest.skip(f"the endpoint states no KV pool live: {prediction_id} is the boot log's")
    assert verdict.status != "killed", f"{prediction_id}: killed: {verdict.note}"
