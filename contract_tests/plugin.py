"""The pytest side of the suite: options, markers, the target, skips and the report.

Loaded by ``contract_tests/conftest.py``, so ``pytest contract_tests --base-url URL --token T`` and
``python -m contract_tests ...`` behave the same.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contract_tests import spec
from contract_tests.report import RESULTS
from contract_tests.target import LAUNCH_SECOND_TOKEN, LAUNCH_TOKEN, EmulatorProcess, Target, TargetError

MARKERS = {
    "real_safe": "runs against any implementation of the contract; needs no emulator control plane",
    "emulator_only": "needs the emulator control plane (/_emulator/*); skipped against other targets",
    "creates_resources": "creates (billable) model resources, sessions, operations or jobs; skipped against a "
                         "target without a control plane unless --allow-create-resources is given",
}
DEFAULT_MAX_EXAMPLES = 10


@dataclass
class Settings:
    base_url: str | None = None
    token: str | None = None
    second_token: str | None = None
    admin_token: str | None = None
    max_examples: int = DEFAULT_MAX_EXAMPLES
    stateful_examples: int | None = None
    seed: int | None = None
    report: Path | None = None
    emulator_args: list[str] = field(default_factory=list)
    allow_create: bool | None = None
    op_timeout: float = 600.0
    shrink: bool = False
    coverage: bool = True


SETTINGS = Settings()
_TARGET: Target | None = None
_TARGET_ERROR: Exception | None = None
_EMULATOR: EmulatorProcess | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("contract", "RL API contract suite")
    group.addoption("--base-url", default=os.environ.get("CONTRACT_BASE_URL"),
                    help="base URL of the implementation under test; omitted: start the emulator on a free port")
    group.addoption("--token", default=os.environ.get("CONTRACT_TOKEN"),
                    help="API token (Authorization: Bearer TOKEN) of the main tenant")
    group.addoption("--second-token", default=os.environ.get("CONTRACT_SECOND_TOKEN"),
                    help="token of another tenant (project) for the isolation checks; generated against "
                         "emulators that accept any token")
    group.addoption("--admin-token", default=os.environ.get("CONTRACT_ADMIN_TOKEN"),
                    help="X-Emulator-Admin-Token for an emulator bound to a non-loopback address")
    group.addoption("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES,
                    help=f"generated cases per operation (default {DEFAULT_MAX_EXAMPLES})")
    group.addoption("--stateful-examples", type=int, default=None,
                    help="state machine scenarios (default: twice --max-examples)")
    group.addoption("--seed", type=int, default=None, help="seed for data generation (reproducible runs)")
    group.addoption("--report", default=None, help="directory for junit.xml, summary.json and summary.md")
    group.addoption("--emulator-arg", action="append", default=[],
                    help="extra argument for the emulator the suite starts itself (repeatable), e.g. "
                         "--emulator-arg=--defect=step_decreases or --emulator-arg='--profile realistic'")
    group.addoption("--allow-create-resources", action="store_true", default=None,
                    help="run tests that create billable resources even against a target without a control plane")
    group.addoption("--no-create-resources", dest="allow_create_resources", action="store_false",
                    help="skip tests that create resources, whatever the target")
    group.addoption("--op-timeout", type=float, default=600.0,
                    help="seconds an operation or status change may take (virtual seconds when the clock can be "
                         "advanced)")
    group.addoption("--shrink", action="store_true", default=False,
                    help="let Hypothesis shrink failing examples (slower, smaller reproductions)")
    group.addoption("--no-coverage-phase", action="store_true", default=False,
                    help="skip Schemathesis' deterministic coverage phase (boundary and missing-value cases)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    opt = config.option
    SETTINGS.base_url = opt.base_url.rstrip("/") if opt.base_url else None
    SETTINGS.token = opt.token
    SETTINGS.second_token = opt.second_token
    SETTINGS.admin_token = opt.admin_token
    SETTINGS.max_examples = max(1, opt.max_examples)
    SETTINGS.stateful_examples = opt.stateful_examples
    SETTINGS.seed = opt.seed
    SETTINGS.report = Path(opt.report) if opt.report else None
    SETTINGS.emulator_args = [part for arg in opt.emulator_arg for part in shlex.split(arg)]
    SETTINGS.allow_create = opt.allow_create_resources
    SETTINGS.op_timeout = opt.op_timeout
    SETTINGS.shrink = opt.shrink
    SETTINGS.coverage = not opt.no_coverage_phase
    if SETTINGS.report is not None and not getattr(opt, "xmlpath", None):
        SETTINGS.report.mkdir(parents=True, exist_ok=True)
        opt.xmlpath = str(SETTINGS.report / "junit.xml")


def get_target() -> Target:
    """The target, created (and the emulator started) on first use; probed once."""
    global _TARGET, _TARGET_ERROR
    if _TARGET is not None:
        return _TARGET
    if _TARGET_ERROR is not None:  # do not start (or probe) a broken target once per test
        raise _TARGET_ERROR
    try:
        _TARGET = _make_target()
    except Exception as exc:
        _TARGET_ERROR = exc
        raise
    return _TARGET


def _make_target() -> Target:
    global _EMULATOR
    if SETTINGS.base_url:
        if not SETTINGS.token:
            raise pytest.UsageError("--token is required with --base-url")
        target = Target(SETTINGS.base_url, SETTINGS.token, second_token=SETTINGS.second_token,
                        admin_token=SETTINGS.admin_token)
    else:
        token = SETTINGS.token or LAUNCH_TOKEN
        second = SETTINGS.second_token or LAUNCH_SECOND_TOKEN
        tokens = {token: {"user": "user_contract_a", "project": "proj_contract_a"},
                  second: {"user": "user_contract_b", "project": "proj_contract_b"}}
        _EMULATOR = EmulatorProcess(SETTINGS.emulator_args, tokens=tokens)
        url = _EMULATOR.start()
        target = Target(url, token, second_token=second, admin_token=SETTINGS.admin_token, launched=True)
    target.op_timeout = SETTINGS.op_timeout
    target.probe(SETTINGS.allow_create)
    if target.open_tokens:
        RESULTS.note("The target accepts any bearer token (the emulator's default: each token is its own "
                     "tenant), so `ignored_auth` (which also sends an invalid token) is replaced by "
                     "`auth_required` (no token must be a 401).")
    if not target.control_plane:
        RESULTS.note("The target has no /_emulator control plane: emulator_only tests are skipped and waits "
                     "use wall-clock time.")
    if not target.allow_create:
        RESULTS.note("Tests that create resources are skipped (pass --allow-create-resources to run them).")
    return target


def stop_emulator() -> None:
    global _EMULATOR
    if _EMULATOR is not None:
        _EMULATOR.stop()
        _EMULATOR = None


@pytest.fixture(scope="session")
def target() -> Target:
    return get_target()


@pytest.fixture
def api(target: Target) -> Any:
    """A client of the main tenant; its observer checks every object it reads across the test."""
    from contract_tests.client import Api

    client = Api(target)
    yield client
    client.raise_pending()


@pytest.fixture
def second_api(target: Target, api: Any) -> Any:
    """A client of another tenant (project); the test is skipped when the target gives us none."""
    from contract_tests.client import Api

    if not target.second_token:
        pytest.skip("no second tenant: pass --second-token")
    client = Api(target, token=target.second_token)
    yield client
    client.raise_pending()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    labels = spec.label_to_operation_id()
    for item in items:
        label = getattr(item, "operation_label", None)
        if label:
            _name_after_operation(item, label)
            op_id = labels.get(label)
            if op_id in spec.CREATING_OPERATIONS:
                item.add_marker(pytest.mark.creates_resources)
        names = {m.name for m in item.iter_markers()}
        if "real_safe" not in names and "emulator_only" not in names:
            raise pytest.UsageError(f"{item.nodeid} is marked neither real_safe nor emulator_only")


def _name_after_operation(item: pytest.Item, label: str) -> None:
    """Give each generated item a distinct node id (``test_stateless[GET /v1/...]``).

    pytest 9 builds a Function's id from ``originalname`` plus its callspec, and Schemathesis passes
    the bare test name there, so all 37 items would share one id in JUnit and ``--lf``.
    """
    node_id = getattr(item, "_id", None)
    if node_id is None or getattr(node_id, "params", None) is not None or not hasattr(node_id, "with_params"):
        return
    try:
        item._id = node_id.with_params(label)  # type: ignore[attr-defined]
    except ValueError:
        pass


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = {m.name for m in item.iter_markers()}
    if not names & set(MARKERS):
        return
    try:
        target = get_target()
    except (TargetError, pytest.UsageError) as exc:
        pytest.exit(f"contract suite: cannot use the target: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    if "emulator_only" in names and not target.control_plane:
        pytest.skip("emulator_only: the target has no /_emulator control plane")
    if "creates_resources" in names and not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target "
                    "(pass --allow-create-resources)")


_STARTS: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _STARTS[nodeid] = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome: str = report.outcome
        if report.when == "setup" and outcome == "failed":
            outcome = "error"
        message = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
        elif report.failed:
            message = report.longreprtext[-2000:]
        markers = sorted(k for k in report.keywords if k in MARKERS)
        RESULTS.add_test(report.nodeid, outcome, time.monotonic() - _STARTS.get(report.nodeid, time.monotonic()),
                         markers, message)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    try:
        if SETTINGS.report is not None:
            target = _TARGET.describe() if _TARGET is not None else {"base_url": SETTINGS.base_url}
            json_path, md_path = RESULTS.write(SETTINGS.report, target, list(spec.operations()))
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"contract report: {md_path} ({json_path.name}, junit.xml)")
    finally:
        stop_emulator()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    failing = [(op, check, cell) for op, row in RESULTS.cells.items() for check, cell in row.items() if cell.failed]
    if not failing:
        return
    terminalreporter.section("contract violations (operation / check)")
    for op, check, cell in failing:
        first = cell.messages[0].splitlines()[0] if cell.messages else ""
        terminalreporter.write_line(f"{op} / {check}: {cell.failed} failed - {first[:300]}")
