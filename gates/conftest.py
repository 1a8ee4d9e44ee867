"""The gate suite needs fakplan's pytest plugin (the ``pytest11`` entry point ``fakplan``)."""

from __future__ import annotations

import pytest

import fakplan.gates.pytest_plugin as plugin


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(plugin):
        raise pytest.UsageError(
            "gates/: fakplan's pytest plugin is not loaded; install fakplan "
            "(pip install .) or run pytest -p fakplan.gates.pytest_plugin"
        )
