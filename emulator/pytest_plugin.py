"""pytest plugin (``pytest11`` entry point ``together_emulator``): the emulator in your own test suite.

The ``together_emulator`` fixture is an :class:`emulator.testing.Tenant` of a session-wide emulator: a fresh
tenant per test, with its own manual (or auto) clock; the marker ``together_emulator(...)`` configures it.
Loaded by every pytest run, so it only registers options, marker and fixtures until a test asks for one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from emulator.testing import EmulatorServer, Tenant

SETTINGS = frozenset({"seed", "clock", "start", "speed", "profile", "overrides", "faults", "scenario", "api_key",
                      "name", "stall_after"})
CLOCKS = ("manual", "auto", "system")
STALL_AFTER = 2.5
MARKER = ("together_emulator(**settings): settings of the together_emulator fixture's tenant: seed, clock "
          "('manual', 'auto' or 'system'), start, speed, profile ('instant' or 'realistic'), overrides, faults "
          "(rules, or a shipped fault file's name such as 'nan-storm'), scenario, api_key, stall_after")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("together_emulator", "Together RL emulator (the together_emulator fixture)")
    group.addoption("--together-emulator-mode", choices=("thread", "subprocess"), default=None,
                    help="run the session's emulator in a thread of pytest (default) or in a subprocess")
    group.addoption("--together-emulator-clock", choices=CLOCKS, default=None,
                    help="every test's own clock: manual (default: moves only when the test moves it), auto "
                         "(jumps to what the test's client waits for) or system")
    group.addoption("--together-emulator-arg", action="append", default=[],
                    help="a server option for that emulator (repeatable), e.g. --together-emulator-arg=--validate-responses")
    group.addoption("--together-emulator-url", default=None,
                    help="use an emulator already running at this URL instead of starting one")
    group.addoption("--together-emulator-admin-token", default=None,
                    help="the admin token of that emulator, if it has one [env TOGETHER_EMULATOR_ADMIN_TOKEN]")
    parser.addini("together_emulator_mode", "thread (default) or subprocess", default="thread")
    parser.addini("together_emulator_clock", "every test's own clock: manual (default), auto or system",
                  default="manual")
    parser.addini("together_emulator_args", "server options for the session's emulator", type="args", default=[])
    parser.addini("together_emulator_url", "an emulator already running (instead of starting one)", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.fixture(scope="session")
def together_emulator_server(pytestconfig: pytest.Config) -> Iterator[EmulatorServer]:
    """The session's emulator (:class:`emulator.testing.EmulatorServer`), started on first use."""
    from emulator.testing import EmulatorServer

    opt = pytestconfig.option
    url = opt.together_emulator_url or pytestconfig.getini("together_emulator_url") or None
    mode = opt.together_emulator_mode or pytestconfig.getini("together_emulator_mode") or "thread"
    args = [*pytestconfig.getini("together_emulator_args"), *opt.together_emulator_arg]
    admin_token = opt.together_emulator_admin_token or os.environ.get("TOGETHER_EMULATOR_ADMIN_TOKEN") or None
    with EmulatorServer(mode, args, url=url, admin_token=admin_token) as server:
        yield server


@pytest.fixture
def together_emulator(together_emulator_server: EmulatorServer, request: pytest.FixtureRequest) -> Iterator[Tenant]:
    """A fresh tenant of the session's emulator for this test (:class:`emulator.testing.Tenant`), with
    ``TOGETHER_BASE_URL`` and ``TOGETHER_API_KEY`` set for the test; forgotten afterwards."""
    settings: dict[str, Any] = {}
    marker = request.node.get_closest_marker("together_emulator")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.together_emulator takes keywords only, e.g. (seed=7)")
        settings.update(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:
        if not isinstance(param, dict):
            raise pytest.UsageError("an indirect parameter of together_emulator must be a dict of its settings")
        settings.update(param)
    unknown = set(settings) - SETTINGS
    if unknown:
        raise pytest.UsageError(f"together_emulator: unknown settings {sorted(unknown)}; known: {sorted(SETTINGS)}")
    settings.setdefault("name", request.node.nodeid)
    config = request.config
    settings.setdefault("clock", config.option.together_emulator_clock or config.getini("together_emulator_clock")
                        or "manual")
    stall_after = settings.pop("stall_after", STALL_AFTER)
    tenant = together_emulator_server.tenant(**settings)
    from emulator.testing import StallGuard

    try:
        with tenant.environ():
            if settings["clock"] == "manual" and stall_after is not None:
                with StallGuard(tenant, after=float(stall_after)):
                    yield tenant
            else:
                yield tenant
    finally:
        tenant.close()
