"""An honest verdict (issue 24): a contract run that tested nothing never says the target conforms.

Four ways a run can end without testing anything: no test selected (or every one skipped), an unreachable
target, a collection error, an interruption. Each must give "DOES NOT CONFORM" with the reason in
summary.md and summary.json, an error test case in junit.xml, and a non-zero exit. Plus what a CI job reads
of a run: the banner, the seed in the report, short tracebacks, cascaded setup errors collapsed, a curl
command for a failing lifecycle request, the SDK's environment variables honoured.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import EmulatorServer

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--max-examples", "2", "--no-coverage-phase", "--seed", "11"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "CONTRACT_", "PYTEST_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def suite(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contract_tests", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=_env(**env), check=False)


def with_plugin(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """pytest with the suite's plugin on a file of our own (``-p contract_tests.plugin``, as a user may)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "contract_tests.plugin", "-p", "no:cacheprovider",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=_env(), check=False)


def verdict(report: Path) -> tuple[dict[str, Any], str, ET.Element]:
    data = json.loads((report / "summary.json").read_text())
    md = (report / "summary.md").read_text()
    root = ET.parse(report / "junit.xml").getroot()
    return data, md, root


def assert_not_conforming(proc: subprocess.CompletedProcess[str], report: Path, reason: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    data, md, root = verdict(report)
    assert data["conforms"] is False and any(reason in p for p in data["problems"]), data["problems"]
    assert "**Verdict: DOES NOT CONFORM**" in md and reason in md, md[:2000]
    cases = [c for c in root.iter("testcase") if c.get("name") == "verdict"]
    assert len(cases) == 1 and reason in (cases[0].find("error").text or ""), ET.tostring(root)[:2000]
    suite_el = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite_el is not None and int(suite_el.get("errors", "0")) >= 1
    assert "DOES NOT CONFORM" in out and reason in out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# (Only the lifecycle module, through `pytest --pyargs`: collecting the generated tests takes longer.)
LIFECYCLE = ["--pyargs", "contract_tests.test_lifecycle"]


def test_unreachable_target_does_not_conform(tmp_path: Path) -> None:
    port = free_port()
    proc = with_plugin([*LIFECYCLE, "--base-url", f"http://127.0.0.1:{port}", "--token", "t",
                        "--report", str(tmp_path / "r"), "-k", "unknown_ids", *FAST], tmp_path)
    assert_not_conforming(proc, tmp_path / "r", "the target could not be used")
    # Said once, in one sentence: no HTTP library's internals, no pytest.exit line (issue 42, item 6).
    out = proc.stdout + proc.stderr
    said = f"the target could not be used: cannot reach http://127.0.0.1:{port} (Connection refused); check the " \
           "URL and that the server is running"
    assert out.count("cannot reach") == 1 and f"  - {said}\n" in out, out[-3000:]
    for internal in ("HTTPConnectionPool", "urllib3", "NewConnectionError", "_pytest", "Exit:", "Traceback"):
        assert internal not in out, out[-3000:]
    assert proc.returncode == 4  # (pytest's usage error: the run never started)


def test_no_test_selected_does_not_conform(tmp_path: Path) -> None:
    proc = suite(["--report", str(tmp_path / "r"), "-k", "no_such_test", *FAST], tmp_path)
    assert_not_conforming(proc, tmp_path / "r", "no test was executed")


def test_every_test_skipped_does_not_conform(tmp_path: Path) -> None:
    # The emulator the suite starts wants an admin token the suite does not have: no control plane, so the
    # one emulator_only test selected is skipped, and pytest alone would exit 0.
    proc = with_plugin([*LIFECYCLE, "--report", str(tmp_path / "r"), "--emulator-arg=--admin-token=not-given", "-k",
                        "idle_resource_expires", *FAST], tmp_path)
    assert_not_conforming(proc, tmp_path / "r", "no test was executed")
    assert "1 skipped" in json.loads((tmp_path / "r" / "summary.json").read_text())["problems"][0]


def test_collection_error_does_not_conform(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("import no_such_module_anywhere\n\ndef test_x():\n    pass\n")
    proc = with_plugin(["test_broken.py", "--report", str(tmp_path / "r")], tmp_path)
    assert_not_conforming(proc, tmp_path / "r", "collection error in test_broken.py")


INTERRUPTED = '''
import os, time

def test_first():
    pass

def test_waits():
    os.write(int(os.environ["STARTED_FD"]), b"started")  # tells the parent: interrupt now
    time.sleep(120)

def test_never_runs():
    pass
'''
# pytest as `python -m pytest` runs it, but with SIGINT's default action restored first: a parent that ignores
# SIGINT (a CI wrapper started in the background, `cmd &` in a script) hands that to its children, and Python
# then installs no KeyboardInterrupt handler, so Ctrl-C would never reach the run.
PYTEST_WITH_SIGINT = ("import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "sys.exit(pytest.console_main())")


@pytest.mark.parametrize("parent", ["default", "ignores SIGINT"])
def test_interrupted_run_does_not_conform(tmp_path: Path, parent: str) -> None:
    (tmp_path / "test_slow.py").write_text(INTERRUPTED)
    started, tell = os.pipe()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if parent == "ignores SIGINT" else None
    try:
        proc = subprocess.Popen([sys.executable, "-c", PYTEST_WITH_SIGINT, "-p", "contract_tests.plugin", "-p",
                                 "no:cacheprovider", "test_slow.py", "--report", str(tmp_path / "r")], cwd=tmp_path,
                                env=_env(STARTED_FD=str(tell)), pass_fds=(tell,), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        os.close(tell)
    try:
        # The test in the child writes when it has started; an end of file first means the run ended.
        ready, _, _ = select.select([started], [], [], 120)
        assert ready and os.read(started, 16) == b"started", "the run ended before it could be interrupted"
    finally:
        os.close(started)
    proc.send_signal(signal.SIGINT)  # Ctrl-C in a terminal, or a CI job cancelled
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGINT did not end the run") from None
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
    assert_not_conforming(done, tmp_path / "r", "the run was interrupted")
    assert "after 1 of 3 collected tests" in json.loads((tmp_path / "r" / "summary.json").read_text())["problems"][0]


@pytest.fixture(scope="module")
def shared_emulator() -> Any:
    with EmulatorServer("subprocess", ["--clock", "manual"]) as server:
        yield server


def test_failing_lifecycle_test_shows_curl_and_cascades_collapse(tmp_path: Path, shared_emulator: EmulatorServer
                                                                  ) -> None:
    # Every session create answers 429 for this tenant: the module's shared READY resource + RUNNING session
    # fixture fails, and each test that uses it fails the same way.
    token = "verdict-cascade"
    shared_emulator._call("adminAddFaults", "POST", "/_emulator/faults", tenant=token,
                          json={"name": "full", "match": {"operation_id": "createSession"},
                                "effect": {"status": 429, "message": "no capacity today"}})
    proc = suite(["--base-url", shared_emulator.url, "--token", token, "--report", str(tmp_path / "r"), "-k",
                  "operation_completes_with_output", *FAST], tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:]
    first, *others = [line for line in out.splitlines() if "setup error: the same cause as" in line]
    assert len(others) >= 5, out[-4000:]  # seven operation kinds: one traceback, six references to it
    assert "curl -X POST" in out and "/v1/rl/training-sessions" in out and "$CONTRACT_TOKEN" in out
    assert re.search(r"\.py:\d+: in \w+", out) and "    def " not in out  # short tracebacks: no source listing
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "```sh" in md and "curl -X POST" in md


def test_banner_seed_and_the_sdk_environment_variables(tmp_path: Path, shared_emulator: EmulatorServer) -> None:
    # No --base-url, no --token: the SDK's own variables name the target; the banner says what is judged.
    proc = suite(["--report", str(tmp_path / "r"), "-k", "unknown_ids", *FAST], tmp_path,
                 TOGETHER_BASE_URL=shared_emulator.url, TOGETHER_API_KEY="from-the-sdk-env")
    assert proc.returncode == 0, proc.stdout[-3000:]
    banner = proc.stdout.splitlines()[:3]
    assert banner[0] == f"contract suite: target {shared_emulator.url}", banner
    assert banner[1].startswith("contract suite: seed 11; spec 3.1.1-emulator.1 (sha256 "), banner
    assert "selection -k 'unknown_ids'" in banner[2], banner
    data = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert data["target"]["base_url"] == shared_emulator.url and data["seed"] == 11 and data["conforms"] is True
    assert "Seed: `11`" in (tmp_path / "r" / "summary.md").read_text()
    events = shared_emulator._call("adminListEvents", "GET", "/_emulator/events", tenant="from-the-sdk-env")
    assert events["data"] == []  # it was the suite's tenant, and the suite reset it at the end


def test_a_long_wait_reports_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    from contract_tests import client, target

    lines: list[str] = []
    monkeypatch.setattr(target, "PROGRESS", [lines.append])
    monkeypatch.setattr(client, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(client, "PROGRESS_EVERY", 0.0)
    probe = target.Target("http://127.0.0.1:9", "key", control_plane=True)
    monkeypatch.setattr(probe, "advance", lambda seconds: None)
    reads = iter(["PENDING", "CREATING", "READY"])
    got = client.Api(probe).wait(lambda: {"status": next(reads)}, lambda o: o["status"] == "READY",
                                 "model resource r-1", "getModelResources", bound=3600, step=60, goal="be READY")
    assert got == {"status": "READY"}
    assert lines == ["waiting for model resource r-1 to be READY: 0 virtual s of 3600 (status PENDING)",
                     "waiting for model resource r-1 to be READY: 60 virtual s of 3600 (status CREATING)"]


def test_progress_reaches_the_terminal_while_output_is_captured(tmp_path: Path) -> None:
    (tmp_path / "test_p.py").write_text("from contract_tests.target import progress\n\ndef test_p():\n"
                                        "    print('captured')\n    progress('waiting for model resource X: 120 s')\n")
    proc = with_plugin(["-q", "test_p.py"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "[contract] waiting for model resource X: 120 s" in proc.stdout and "captured" not in proc.stdout


def test_realistic_checks_without_an_emulator_to_run_them_are_reported_not_run(tmp_path: Path) -> None:
    """Against a target the suite did not start and whose tenants it cannot put on the realistic profile (here an
    emulator that maps tokens with a tokens file), without --realistic-base-url, the realistic-profile checks are
    skipped: every report says "not run" and names the flag that would run them. With the flag they run."""
    with EmulatorServer("subprocess", ["--tokens-file", "team", "--clock", "manual"]) as team, \
            EmulatorServer("subprocess", ["--profile", "realistic", "--clock", "manual"]) as realistic:
        base = ["--base-url", team.url, "--token", "alice-key", "--second-token", "carol-key", *FAST]
        select = ["-k", "stopping_holds_the_slot or unknown_ids_are_404"]
        proc = suite([*base, "--report", str(tmp_path / "r"), *select], tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]  # what ran conforms; what did not run is said, not failed
        data, md, root = verdict(tmp_path / "r")
        [entry] = data["not_run"]
        assert "realistic-profile checks" in entry["checks"] and entry["flag"] == "--realistic-base-url", entry
        assert "## Not run" in md and "not run:" in md and "`--realistic-base-url`" in md, md[:3000]
        props = [p.get("value", "") for p in root.iter("property") if p.get("name") == "not_run"]
        assert len(props) == 1 and "--realistic-base-url" in props[0], ET.tostring(root)[:2000]
        skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
        assert any("not run:" in (c.find("skipped").get("message") or "") for c in skipped), ET.tostring(root)[:3000]
        assert "not run: the realistic-profile checks" in out
        ran = suite([*base, "--report", str(tmp_path / "r2"), "--realistic-base-url", realistic.url, *select],
                    tmp_path)
        assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
        data, md, _ = verdict(tmp_path / "r2")
        assert data["not_run"] == [] and "## Not run" not in md
        assert any("stopping_holds_the_slot" in t["nodeid"] and t["outcome"] == "passed" for t in data["tests"]["items"])


# --- what a failure says (issue 42, item 6) ----------------------------------------------------------------

FAILS_EARLIER = """
import pytest


@pytest.mark.real_safe
def test_the_failure_is_not_the_last_request(api):
    missing = api.get_resource("no-such-resource")
    api.list_resources(limit=1)          # a later request, which passes
    missing.ok()                         # fails: the GET of the missing resource is the request to show


@pytest.mark.real_safe
def test_a_failure_of_the_test_s_own(api):
    api.list_resources(limit=2)
    assert False, "the test's own assertion"
"""


def curl_section(out: str, title: str) -> list[str]:
    """The lines of a report section ``title`` (pytest: ``--- title ---``) up to the next section or blank."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line and line.startswith("-"))
    section = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith(("-", "=", "_")):
            break
        section.append(line)
    return section


def test_the_curl_is_the_request_that_failed_and_says_to_export_the_token(
        tmp_path: Path, shared_emulator: EmulatorServer) -> None:
    (tmp_path / "test_mine.py").write_text(FAILS_EARLIER)
    proc = with_plugin(["test_mine.py", "--base-url", shared_emulator.url, "--token", "curl-check",
                        "--report", str(tmp_path / "r"), *FAST], tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:]
    failing = curl_section(out, "the failing request, as curl")
    assert failing == [
        "# export CONTRACT_TOKEN=... first: the API token of this run (--token), left out of reports",
        f"curl -X GET {shared_emulator.url}/v1/rl/model-resources/no-such-resource -H 'Accept: application/json' "
        "-H \"Authorization: Bearer $CONTRACT_TOKEN\""], out[-4000:]
    last = curl_section(out, "the last request the test sent (the failure names no request), as curl")
    assert last[1].startswith("curl -X GET ") and "model-resources?limit=2" in last[1], out[-4000:]
    assert "curl-check" not in out  # the token itself is never shown
    # Pasted into a shell with the variable exported, the command is the request that failed.
    run = subprocess.run(["bash", "-c", "\n".join(failing) + " -s -o /dev/null -w '%{http_code}'"],
                         env={**_env(), "CONTRACT_TOKEN": "curl-check"}, capture_output=True, text=True, timeout=60)
    assert run.stdout == "404", run.stdout + run.stderr
    data = json.loads((tmp_path / "r" / "summary.json").read_text())
    curls = {t["nodeid"].rsplit("::", 1)[1]: t.get("curl") for t in data["tests"]["items"]}
    assert curls["test_the_failure_is_not_the_last_request"] == "\n".join(failing)


def test_an_unknown_option_is_this_command_s_usage_error(tmp_path: Path) -> None:
    proc = suite(["--bogus-flag"], tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("usage: together-rl-contract "), proc.stderr
    assert proc.stderr.splitlines()[-1] == "together-rl-contract: error: unrecognized arguments: --bogus-flag"
    for pytest_s in ("pytest.main()", "rootdir", "inifile", "site-packages", "ERROR:"):
        assert pytest_s not in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []  # (no report directory for a run that never started)


def test_help_says_every_variable_in_full(tmp_path: Path) -> None:
    from contract_tests.environment import ENVIRONMENT

    proc = suite(["--help"], tmp_path)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    for name, meaning in ENVIRONMENT.items():  # each on a line of its own, never wrapped mid-sentence
        assert any(line.split() == [name, *meaning.split()] for line in lines), (name, proc.stdout[-1500:])
    assert lines[-1].rstrip().endswith("CONTRACT_TOKEN is set"), lines[-1]


def test_schemathesis_reproductions_get_the_token_s_place_back() -> None:
    from contract_tests import plugin

    text = ("    | Reproduce with:\n    | \n    |     curl -X POST -H 'Idempotency-Key: k1' -H 'Authorization: [Filtered]'"
            " -d '{\"tokens\": [1]}' http://h/v1/rl/x\n    | \n      |     curl -X POST -H 'Idempotency-Key: k1' -H "
            "'Authorization: [Filtered]' -d '{\"tokens\": [1]}' http://h/v1/rl/x\n")
    assert plugin.runnable_curls(text) == [  # (a target the suite did not start: the token is the user's)
        plugin.EXPORT_NOTE,
        "curl -X POST -H 'Idempotency-Key: k1' -H \"Authorization: Bearer $CONTRACT_TOKEN\" -d '{\"tokens\": [1]}' "
        "http://h/v1/rl/x"]
    assert plugin.runnable_curls("no reproduction here") == []
