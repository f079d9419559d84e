from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.server import build_server_app

# The slowest modules, slowest first (their wall time in a serial run, RELIABILITY.md). make test runs the
# suite with pytest-xdist's --dist loadfile: a module is one unit of work, run by one worker in order (its
# module fixtures are made once), and units are handed out in collection order; so these start at once and
# the short modules fill in around them.
SLOWEST_FIRST = ("test_stock_schemathesis", "test_install", "test_contract_selftest", "test_examples",
                 "test_pytest_plugin", "test_readme", "test_contract_verdict", "test_journal", "test_contract_tenants",
                 "test_cluster", "test_ui_browser", "test_sdk_tokenizer", "test_mutation_tool", "test_hostile")


# What a marker expression (-m "not alone") left out of this run: tests/test_habits.py compares the whole
# collection with the bare console script's.
DESELECTED = pytest.StashKey[list[str]]()
LEFT_ALONE = pytest.StashKey[list[str]]()  # of them, the tests marked alone


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(DESELECTED, []).extend(item.nodeid for item in items)
        left = items[0].config.stash.setdefault(LEFT_ALONE, [])
        left.extend(item.nodeid for item in items if item.get_closest_marker("alone"))


def pytest_addoption(parser: pytest.Parser) -> None:
    # Both given by make test only (Makefile): options, not environment variables, so that the pytest runs the
    # tests start themselves do not inherit them.
    parser.addoption("--alone-list", metavar="PATH",
                     help="write the node ids of the tests marked alone that this run left out to PATH (make test "
                          "runs them afterwards from it: pytest @PATH)")
    parser.addoption("--shared-contract-run", metavar="'PID REPORT_DIR'",
                     help="a contract run against a fresh emulator going on alongside (make test's): "
                          "tests/test_contract_selftest.py takes it for its healthy run")


def pytest_collection_finish(session: pytest.Session) -> None:
    """make test runs the tests marked alone after the others, by node id: the run that left them out names them,
    so the last run does not collect the whole suite again for three tests (1.8 CPU-s, serial, at the end of
    make test). Each xdist worker writes the same list."""
    target = session.config.getoption("alone_list")
    if not target:
        return
    path = Path(target)
    part = path.with_name(f"{path.name}.{os.getpid()}")
    part.write_text("".join(f"{nodeid}\n" for nodeid in session.config.stash.get(LEFT_ALONE, [])))
    os.replace(part, path)


@pytest.fixture
def deselected(request: pytest.FixtureRequest) -> list[str]:
    """The node ids this run's marker expression left out (read through the conftest pytest loaded: importing
    it again as ``tests.conftest`` would make another key)."""
    return request.config.stash.get(DESELECTED, [])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: in-module order is kept


TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_client(runtime: Runtime, token: str | None = TOKEN) -> TestClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(build_server_app(runtime), base_url="http://127.0.0.1:8765", headers=headers,
                      raise_server_exceptions=True)


@pytest.fixture
def runtime() -> Runtime:
    # Manual clock: time moves only when a test advances it. Responses are validated against the spec.
    return Runtime(Config(clock="manual", validate_responses=True))


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with make_client(runtime) as c:
        yield c


@pytest.fixture
def realistic_runtime() -> Runtime:
    return Runtime(Config(clock="manual", profile="realistic", validate_responses=True))


@pytest.fixture
def realistic_client(realistic_runtime: Runtime) -> Iterator[TestClient]:
    with make_client(realistic_runtime) as c:
        yield c


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    """A live emulator for one module's SDK tests (responses validated against the spec)."""
    from emulator.tools.testing import serve_in_thread

    with serve_in_thread(Config(validate_responses=True)) as (base, _runtime):
        yield base


@pytest.fixture
def sdk_env(sdk_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """The SDK pointed at ``sdk_url`` with the module's ``SDK_KEY`` (its own tenant); returns the URL."""
    monkeypatch.setenv("TOGETHER_BASE_URL", sdk_url)
    monkeypatch.setenv("TOGETHER_API_KEY", getattr(request.module, "SDK_KEY", "sdk-key"))
    return sdk_url
