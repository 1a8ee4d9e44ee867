"""`pip install .` (not editable) must ship the templates inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from .conftest import ROOT


def test_wheel_ships_templates(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("fakplan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "fakplan/templates/custom/env.j2" in names
    assert "fakplan/templates/_header.j2" in names
    assert any(n.endswith("entry_points.txt") for n in names)
