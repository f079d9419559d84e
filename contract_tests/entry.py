"""``pytest11`` entry point ``together_rl_contract``: ``pytest --pyargs contract_tests --base-url URL`` works.

pytest reads a package's ``conftest.py`` only once it collects the package, after it has parsed the
command line, so the suite's options (``--base-url``, ``--token``...) would be unknown. This hook runs
before the command line is parsed and, only when the command line names the ``contract_tests`` package,
loads the suite's plugin (:mod:`contract_tests.plugin`). Any other pytest run is untouched: this module
imports nothing, adds no option (``--base-url`` is a common name: pytest-base-url has one too).
``pytest -p contract_tests.plugin ...`` loads it explicitly.
"""

from __future__ import annotations

from typing import Any

PACKAGE = "contract_tests"


def names_the_suite(args: list[str]) -> bool:
    """Whether the arguments select the suite as a package (``--pyargs contract_tests[.module][::test]``)."""
    if "--pyargs" not in args:
        return False
    return any(a == PACKAGE or a.startswith((PACKAGE + ".", PACKAGE + "::")) for a in args)


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    if names_the_suite(args):
        early_config.pluginmanager.import_plugin("contract_tests.plugin")
