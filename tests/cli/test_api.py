"""The public API is what fakplan.__all__ lists; changing it is a decision, not an accident."""

from __future__ import annotations

import fakplan


def test_public_api_is_pinned() -> None:
    assert sorted(fakplan.__all__) == [
        "FakplanError",
        "GeometryError",
        "LedgerError",
        "LoadedShape",
        "Plan",
        "ProbeError",
        "Shape",
        "ShapeError",
        "compile_plan",
        "format_bytes",
        "load_shape",
        "parse_bytes",
    ]
    for name in fakplan.__all__:
        assert hasattr(fakplan, name)


def test_engines_in_schema_match_the_registry() -> None:
    from fakplan.engines import ENGINES

    assert set(ENGINES) >= {"custom"}
