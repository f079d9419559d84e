from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.server import build_server_app

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
