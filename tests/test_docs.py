"""The manual: a README that is a README, and a docs site that builds without a warning."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.paths import ROOT


def test_the_readme_is_short_and_points_at_the_manual() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for page in ("fit.md", "shapes.md", "commands.md", "json.md", "architecture.md"):
        assert f"(docs/{page})" in readme, page


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [p for item in node for p in pages(item)]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        return []

    listed = set(pages(config["nav"]))
    written = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert listed == written


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """mkdocs build --strict: a broken link, a missing anchor or a page outside the
    navigation fails it (mkdocs.yml's validation)."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    assert mkdocs.exists() or shutil.which("mkdocs"), "mkdocs is a test extra"
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "fit" / "index.html").exists()
