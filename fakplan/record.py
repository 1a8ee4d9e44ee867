"""The compiled record on disk: ``DIR/<name>/plan.json`` beside the rendered files.

Writes are atomic (a temporary file in the same folder, then ``os.replace``),
so a reader sees the old file or the new one, never half of either. Verdicts
already recorded for a prediction survive a re-compile while the prediction's
value is unchanged: an earlier verdict is never lost.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from fakplan.errors import RecordError
from fakplan.plan import Plan
from fakplan.predict import Prediction


def write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temp, 0o755 if executable else 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def record_path(out_dir: Path, name: str) -> Path:
    return out_dir / name / "plan.json"


def read_record(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path}: no compiled record; run fakplan compile first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable plan record ({exc})") from None
    try:
        data["schema_"] = data.pop("schema")
        return Plan.model_validate(data)
    except Exception as exc:
        raise RecordError(
            f"{path}: not a fakplan plan record ({str(exc).splitlines()[0]})"
        ) from None


def carry_verdicts(new: Plan, old: Plan | None) -> Plan:
    """Keep the verdicts of predictions whose claim has not changed."""
    if old is None:
        return new
    previous = {p.id: p for p in old.predictions}
    kept: list[Prediction] = []
    for prediction in new.predictions:
        before = previous.get(prediction.id)
        same = before is not None and (before.claim, before.low, before.high) == (
            prediction.claim,
            prediction.low,
            prediction.high,
        )
        kept.append(
            prediction.model_copy(update={"verdicts": before.verdicts})
            if same and before is not None
            else prediction
        )
    return new.model_copy(update={"predictions": tuple(kept)})
