from __future__ import annotations

from collections.abc import Iterator

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


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(DESELECTED, []).extend(item.nodeid for item in items)


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
