"""pytest entry point of the contract suite: ``pytest contract_tests --base-url URL --token TOKEN``."""

from contract_tests.plugin import (  # noqa: F401 - pytest collects hooks and fixtures by name
    api,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_runtest_logstart,
    pytest_runtest_setup,
    pytest_sessionfinish,
    pytest_terminal_summary,
    second_api,
    target,
)
