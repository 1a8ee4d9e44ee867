"""Where the tests' files are: the repository, its shapes, the test data, the goldens."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
SHAPES = ROOT / "shapes"
GOLDEN = TESTS / "golden"
DATA = TESTS / "data"
PUBLIC = DATA / "public"
# under CI a real engine that cannot be installed or booted fails the run instead of skipping
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
