"""`pip install .` (not editable) must ship the templates and data inside the wheel."""

from __future__ import annotations

from tests.support.wheel import BuiltWheel


def test_wheel_ships_templates_and_data(built_wheel: BuiltWheel) -> None:
    assert "fakplan/templates/custom/env.j2" in built_wheel.names
    assert "fakplan/templates/_header.j2" in built_wheel.names
    assert "fakplan/templates/vllm/serve.sh.j2" in built_wheel.names
    assert "fakplan/data/catalog.json" in built_wheel.names
    assert "[console_scripts]\nfakplan = fakplan.cli:main" in built_wheel.entry_points
