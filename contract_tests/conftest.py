"""pytest entry point of the contract suite: ``pytest contract_tests --base-url URL --token TOKEN``.

The hooks and fixtures live in :mod:`contract_tests.plugin`, registered here unless it already is
(``pytest -p contract_tests.plugin``, or ``pytest --pyargs contract_tests`` through
:mod:`contract_tests.entry`): a plugin registered twice would add ``--base-url`` twice.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.import_plugin("contract_tests.plugin")  # no-op when it is registered already
