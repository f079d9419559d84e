"""The pytest side of the suite: options, markers, the target, skips, the run's output and the report.

Registered by ``contract_tests/conftest.py`` (``pytest contract_tests ...``, ``python -m contract_tests``),
by ``-p contract_tests.plugin``, or by :mod:`contract_tests.entry` for ``pytest --pyargs contract_tests``.

What a CI job sees: a banner (target, seed, spec version, markers in force), progress on long waits, short
tracebacks, setup errors with one cause collapsed under the first, a curl command for a failing request,
and an honest verdict: a run in which no test was executed, the target could not be used, collection
failed or that was interrupted does not conform, says why (``summary.md``, ``summary.json``, an error
test case in ``junit.xml``) and exits non-zero.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contract_tests import spec
from contract_tests import target as target_module
from contract_tests.environment import ENVIRONMENT as ENVIRONMENT  # re-exported: the variables it reads
from contract_tests.report import RESULTS
from contract_tests.target import (
    EXPORT_NOTE,
    LAUNCH_SECOND_TOKEN,
    LAUNCH_TOKEN,
    EmulatorProcess,
    Target,
    TargetError,
)

MARKERS = {
    "real_safe": "runs against any implementation of the contract; needs no emulator control plane",
    "emulator_only": "needs the emulator control plane (/_emulator/*); skipped against other targets",
    "creates_resources": "creates (billable) model resources, sessions, operations or jobs; skipped against a "
                         "target without a control plane unless --allow-create-resources is given",
}
DEFAULT_MAX_EXAMPLES = 10
PACKAGE_DIR = Path(__file__).resolve().parent
@dataclass
class Settings:
    base_url: str | None = None
    token: str | None = None
    second_token: str | None = None
    admin_token: str | None = None
    max_examples: int = DEFAULT_MAX_EXAMPLES
    stateful_examples: int | None = None
    seed: int | None = None
    seed_given: bool = False
    report: Path | None = None
    emulator_args: list[str] = field(default_factory=list)
    allow_create: bool | None = None
    op_timeout: float = 600.0
    shrink: bool = False
    coverage: bool = True
    keep_state: bool = False
    realistic_base_url: str | None = None


SETTINGS = Settings()
_TARGET: Target | None = None
_TARGET_ERROR: Exception | None = None
_EMULATOR: EmulatorProcess | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("contract", "RL API contract suite")
    group.addoption("--base-url", default=os.environ.get("CONTRACT_BASE_URL"),
                    help="base URL of the implementation under test [env CONTRACT_BASE_URL, then TOGETHER_BASE_URL]; "
                         "none: start the emulator on a free port")
    group.addoption("--token", default=os.environ.get("CONTRACT_TOKEN"),
                    help="API token (Authorization: Bearer TOKEN) of the main tenant [env CONTRACT_TOKEN, then "
                         "TOGETHER_API_KEY with a base URL]")
    group.addoption("--second-token", default=os.environ.get("CONTRACT_SECOND_TOKEN"),
                    help="token of another tenant (project) for the isolation checks; generated against "
                         "emulators that accept any token [env CONTRACT_SECOND_TOKEN]")
    group.addoption("--admin-token", default=os.environ.get("CONTRACT_ADMIN_TOKEN"),
                    help="X-Emulator-Admin-Token for an emulator bound to a non-loopback address "
                         "[env CONTRACT_ADMIN_TOKEN]")
    group.addoption("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES,
                    help=f"generated cases per operation (default {DEFAULT_MAX_EXAMPLES})")
    group.addoption("--stateful-examples", type=int, default=None,
                    help="state machine scenarios (default: twice --max-examples)")
    group.addoption("--seed", type=int, default=_env_int("CONTRACT_SEED"),
                    help="seed for data generation [env CONTRACT_SEED]; none: a random one, printed in the banner "
                         "and the report so that the run can be repeated")
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
    group.addoption("--keep-state", action="store_true", default=False,
                    help="against an emulator, keep what the suite made in its tenants (by default it resets them "
                         "at the end, which also removes their own clocks)")
    group.addoption("--realistic-base-url", default=os.environ.get("CONTRACT_REALISTIC_BASE_URL"),
                    help="an emulator on the realistic timing profile with a manual clock, for the realistic "
                         "lifecycle checks (default: the suite starts one when it starts the main emulator itself)")


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    try:
        return int(raw) if raw else None
    except ValueError:
        raise pytest.UsageError(f"{name}={raw!r} is not an integer") from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    opt = config.option
    base_url = opt.base_url or os.environ.get("TOGETHER_BASE_URL") or None
    SETTINGS.base_url = base_url.rstrip("/") if base_url else None
    # The SDK's key is used only with a base URL: it must never go to an emulator the suite starts itself.
    SETTINGS.token = opt.token or (os.environ.get("TOGETHER_API_KEY") if SETTINGS.base_url else None)
    SETTINGS.second_token = opt.second_token
    SETTINGS.admin_token = opt.admin_token
    SETTINGS.max_examples = max(1, opt.max_examples)
    SETTINGS.stateful_examples = opt.stateful_examples
    SETTINGS.seed_given = opt.seed is not None
    SETTINGS.seed = opt.seed if opt.seed is not None else secrets.randbelow(2**31)
    SETTINGS.report = Path(opt.report) if opt.report else None
    SETTINGS.emulator_args = [part for arg in opt.emulator_arg for part in shlex.split(arg)]
    SETTINGS.allow_create = opt.allow_create_resources
    SETTINGS.op_timeout = opt.op_timeout
    SETTINGS.shrink = opt.shrink
    SETTINGS.coverage = not opt.no_coverage_phase
    SETTINGS.keep_state = opt.keep_state
    SETTINGS.realistic_base_url = opt.realistic_base_url
    if SETTINGS.report is not None and not getattr(opt, "xmlpath", None):
        SETTINGS.report.mkdir(parents=True, exist_ok=True)
        opt.xmlpath = str(SETTINGS.report / "junit.xml")
    if getattr(opt, "tbstyle", "auto") == "auto":
        opt.tbstyle = "short"  # one defect must not print thousands of lines; --tb=long still works
    # The suite's dependencies (jsonschema, through Schemathesis) warn about their own deprecations.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning")
    RESULTS.seed = SETTINGS.seed
    RESULTS.run = run_description(config)
    target_module.PROGRESS[:] = [lambda message: _terminal_line(config, message)]


def spec_version() -> str:
    """The contract's ``info.version`` and a digest of the file, so two reports name the same contract."""
    path = spec.spec_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return f"{spec.raw_spec().get('info', {}).get('version', '?')} (sha256 {digest})"


def run_description(config: pytest.Config) -> dict[str, Any]:
    opt = config.option
    selection = []
    if getattr(opt, "markexpr", ""):
        selection.append(f"-m {opt.markexpr!r}")
    if getattr(opt, "keyword", ""):
        selection.append(f"-k {opt.keyword!r}")
    creates = {None: "decided by the target (on with a control plane)", True: "allowed",
               False: "skipped"}[SETTINGS.allow_create]
    return {
        "target": SETTINGS.base_url or "a fresh emulator started by the suite",
        "seed": SETTINGS.seed,
        "seed_given": SETTINGS.seed_given,
        "spec": spec_version(),
        "selection": " ".join(selection) or "all tests",
        "creates_resources": creates,
        "max_examples": SETTINGS.max_examples,
    }


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = RESULTS.run
    seed = f"{run['seed']}" + ("" if run["seed_given"] else f" (random; repeat the run with --seed {run['seed']})")
    return [
        f"contract suite: target {run['target']}",
        f"contract suite: seed {seed}; spec {run['spec']}",
        f"contract suite: selection {run['selection']}; creates_resources {run['creates_resources']}; "
        f"{run['max_examples']} examples per operation",
    ]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The banner in a quiet run too (pytest shows report headers only when it shows its own header)."""
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and (config.option.verbose < 0 or config.option.no_header):
        for line in pytest_report_header(config):
            reporter.write_line(line)


def _terminal_line(config: pytest.Config, message: str) -> None:
    """A line on the terminal even while pytest captures the test's output."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"\n[contract] {message}")
    else:
        reporter.write_line(f"[contract] {message}")


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
            raise pytest.UsageError("--token is required with --base-url (or CONTRACT_TOKEN / TOGETHER_API_KEY)")
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
    elif target.tenant_clocks:
        RESULTS.note("The suite's tenants have virtual clocks of their own on this emulator: its waits moved "
                     "no other tenant's time.")
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


def _in_suite(item: pytest.Item) -> bool:
    try:
        return Path(str(item.path)).resolve().is_relative_to(PACKAGE_DIR)
    except (OSError, ValueError):
        return False


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
        if _in_suite(item) and "real_safe" not in names and "emulator_only" not in names:
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


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Make the target before the first test that needs it: one that cannot be used is said once, in one
    sentence (the verdict's), and no test runs (pytest.exit in a test's setup would say it again, with
    pytest's internals)."""
    if session.config.option.collectonly or not any(
            {m.name for m in item.iter_markers()} & set(MARKERS) for item in session.items):
        return None
    try:
        get_target()
    except (TargetError, pytest.UsageError) as exc:
        RESULTS.problem(f"the target could not be used: {exc}")
        _RUN.unusable = True
        return True  # (the run loop is done: nothing ran)
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = {m.name for m in item.iter_markers()}
    if not names & set(MARKERS):
        return
    try:
        target = get_target()
    except (TargetError, pytest.UsageError) as exc:
        RESULTS.problem(f"the target could not be used: {exc}")
        pytest.exit(f"contract suite: cannot use the target: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    if "emulator_only" in names and not target.control_plane:
        pytest.skip("emulator_only: the target has no /_emulator control plane")
    if "creates_resources" in names and not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target "
                    "(pass --allow-create-resources)")


# --- the run: collapsed setup errors, curl reproductions, counts ----------------------------------------

# The sections a failing test's report gets: the request whose answer failed a check, or (when the failure
# names none) the last request the test sent.
FAILING_CURL = "the failing request, as curl"
LAST_CURL_TITLE = "the last request the test sent (the failure names no request), as curl"
_STARTS: dict[str, float] = {}
_SCHEMATHESIS_CURL = re.compile(r"^[\s|]*(curl -X .*)$", re.M)
_FILTERED_AUTH = "-H 'Authorization: [Filtered]'"


def runnable_curls(text: str) -> list[str]:
    """Schemathesis' reproductions in a failure (each once), with the Authorization header it hid put back:
    the token the suite gave the emulator it started, else ``$CONTRACT_TOKEN`` and a line saying to export it."""
    found = list(dict.fromkeys(m.group(1).rstrip() for m in _SCHEMATHESIS_CURL.finditer(text)))
    if not found:
        return []
    if _TARGET is not None and _TARGET.launched:
        return [c.replace(_FILTERED_AUTH, "-H " + shlex.quote(f"Authorization: Bearer {_TARGET.token}")) for c in found]
    out = [c.replace(_FILTERED_AUTH, '-H "Authorization: Bearer $CONTRACT_TOKEN"') for c in found]
    if any("$CONTRACT_TOKEN" in c for c in out):
        out.insert(0, EXPORT_NOTE)
    return out
_SETUP_CAUSES: dict[tuple[str, str], str] = {}   # (exception type, message) -> the first test it failed


@dataclass
class _Run:
    collected: int = 0
    deselected: int = 0
    interrupted: str = ""
    unusable: bool = False   # the target could not be used: nothing ran


_RUN = _Run()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        first = (report.longreprtext.strip().splitlines() or ["?"])[-1]
        RESULTS.problem(f"collection error in {report.nodeid or 'the command line'}: {first[:500]}")


def pytest_deselected(items: list[pytest.Item]) -> None:
    _RUN.deselected += len(items)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    _RUN.interrupted = f"{excinfo.typename}: {str(excinfo.value)[:300]}".rstrip(": ")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    from contract_tests.client import LAST_CURL

    _STARTS[nodeid] = time.monotonic()
    LAST_CURL.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.failed:
        return report
    from contract_tests.client import LAST_CURL

    if report.when == "setup" and call.excinfo is not None and _in_suite(item):
        # A fixture shared by many tests (a module's READY resource) fails each of them the same way:
        # the first shows the traceback, the others name it.
        key = (call.excinfo.typename, str(call.excinfo.value)[:500])
        first = _SETUP_CAUSES.setdefault(key, report.nodeid)
        if first != report.nodeid:
            line = (str(call.excinfo.value).strip().splitlines() or [""])[0][:300]
            report.longrepr = f"setup error: the same cause as {first} ({call.excinfo.typename}: {line})"
            return report
    if "curl -X " in report.longreprtext:  # Schemathesis' own reproduction: runnable, with the token's place said
        curls = runnable_curls(report.longreprtext)
        if curls:
            report.sections.append((FAILING_CURL, "\n".join(curls)))
        return report
    from contract_tests.client import curl_of

    failing = curl_of(call.excinfo.value) if call.excinfo is not None else None
    if failing:
        report.sections.append((FAILING_CURL, failing))
    elif LAST_CURL:  # a failure tied to no answer (an assertion of the test's own): say what it is
        report.sections.append((LAST_CURL_TITLE, LAST_CURL[0]))
    return report


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
        curl = next((text for title, text in report.sections if title in (FAILING_CURL, LAST_CURL_TITLE)), None)
        markers = sorted(k for k in report.keywords if k in MARKERS)
        RESULTS.add_test(report.nodeid, outcome, time.monotonic() - _STARTS.get(report.nodeid, time.monotonic()),
                         markers, message, curl=curl)


# --- the verdict -----------------------------------------------------------------------------------------

def _verdict_problems(session: pytest.Session, exitstatus: int) -> None:
    """What makes this run unable to vouch for the target, beyond failed tests."""
    _RUN.collected = session.testscollected
    executed = sum(1 for t in RESULTS.tests if t["outcome"] in ("passed", "failed"))
    skipped = sum(1 for t in RESULTS.tests if t["outcome"] == "skipped")
    errors = sum(1 for t in RESULTS.tests if t["outcome"] == "error")
    if _RUN.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED:
        if not RESULTS.problems:  # (a collection error or an unusable target stops the run too: said already)
            cause = _RUN.interrupted or "stopped before the end"
            RESULTS.problem(f"the run was interrupted ({cause}) after {len(RESULTS.tests)} of "
                            f"{_RUN.collected} collected tests")
    if executed == 0 and not RESULTS.problems:
        RESULTS.problem(f"no test was executed: {_RUN.collected} collected, {_RUN.deselected} deselected, "
                        f"{skipped} skipped" + (f", {errors} failed in setup" if errors else ""))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    try:
        if session.config.option.collectonly:
            return
        _verdict_problems(session, int(exitstatus))
        if _TARGET is not None:
            problems = _TARGET.clean_up(SETTINGS.keep_state)
            for problem in problems:
                RESULTS.note(f"Clean-up: {problem}")
        if SETTINGS.report is not None:
            target = _TARGET.describe() if _TARGET is not None else {"base_url": SETTINGS.base_url}
            json_path, md_path = RESULTS.write(SETTINGS.report, target, list(spec.operations()))
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"contract report: {md_path} ({json_path.name}, junit.xml)")
        if _RUN.unusable:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR  # (as a bad command line: the run never started)
        elif not RESULTS.conforms() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # e.g. every test skipped: nothing was vouched for
    finally:
        stop_emulator()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The verdict's problems as an error test case of junit.xml (written by pytest at session finish), and the
    checks not run as properties of its test suite."""
    xmlpath = getattr(config.option, "xmlpath", None)
    if not xmlpath or config.option.collectonly:
        return
    if RESULTS.not_run:
        add_junit_properties(Path(xmlpath), [("not_run", f"{n['checks']}: {n['reason']} ({n['flag']})")
                                             for n in RESULTS.not_run])
    if RESULTS.problems:
        add_junit_error(Path(xmlpath), "the run does not vouch for the target", "\n".join(RESULTS.problems))


def add_junit_properties(path: Path, properties: list[tuple[str, str]]) -> None:
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return
    props = suite.find("properties")
    if props is None:
        props = ET.Element("properties")
        suite.insert(0, props)
    for name, value in properties:
        ET.SubElement(props, "property", name=name, value=value)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def add_junit_error(path: Path, message: str, details: str) -> None:
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return
    case = ET.SubElement(suite, "testcase", classname="contract_tests", name="verdict", time="0")
    error = ET.SubElement(case, "error", message=message)
    error.text = details
    for attr in ("tests", "errors"):
        suite.set(attr, str(int(suite.get(attr, "0")) + 1))
    tree.write(path, encoding="utf-8", xml_declaration=True)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    failing = [(op, check, cell) for op, row in RESULTS.cells.items() for check, cell in row.items() if cell.failed]
    if failing:
        terminalreporter.section("contract violations (operation / check)")
        for op, check, cell in failing:
            first = cell.messages[0].splitlines()[0] if cell.messages else ""
            terminalreporter.write_line(f"{op} / {check}: {cell.failed} failed - {first[:300]}")
    if config.option.collectonly:
        return
    verdict = "CONFORMS" if RESULTS.conforms() else "DOES NOT CONFORM"
    terminalreporter.section("contract verdict")
    terminalreporter.write_line(f"{verdict} (seed {SETTINGS.seed}; target {RESULTS.run.get('target')})")
    for problem in RESULTS.problems:
        terminalreporter.write_line(f"  - {problem}")
    for entry in RESULTS.not_run:
        terminalreporter.write_line(f"  not run: {entry['checks']}: {entry['reason']}")
