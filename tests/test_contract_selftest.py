"""The contract suite can fail: every seeded emulator defect must be caught, the healthy emulator must pass.

Runs ``python -m contract_tests`` in subprocesses (in parallel), each starting its own emulator: once per
``--defect`` of ``emulator/tools/defects.py`` (TEST-ONLY defects), restricted with ``-k`` to the tests that judge
the broken behaviour, and once healthy. A defect run must exit non-zero and its output must name the broken
behaviour; every test a defect run executed must pass against the healthy emulator, so a defect run cannot pass
its check by failing for an unrelated reason that the healthy emulator shares. Under ``make test`` the healthy
run is make test's own contract run (every test, on a fresh emulator; ``--shared-contract-run``), not a second.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulator.tools.defects import DEFECTS

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--max-examples", "3", "--no-coverage-phase", "--seed", "7"]

# defect -> (-k expression selecting the tests that judge it, phrases the output must contain)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "unknown_id_200": ("unknown_ids_are_404", ("unknown_id_404", "answered 200, expected 404")),
    "ignore_list_filter": ("list_sessions_with_every_filter", ("list filter ignored",)),
    "pagination_repeats": ("cursors_walk or list_sessions_with_every_filter", ("pagination repeats an item",)),
    "status_backwards": ("statuses_follow or operation_completes",
                         ("status went backwards", "MODEL_RESOURCES_STATUS_READY -> MODEL_RESOURCES_STATUS_CREATING",
                          "terminal status TRAINING_OPERATION_STATUS_COMPLETED")),
    "step_decreases": ("step_never_decreases", ("step decreased",)),
    "stop_ignores_force": ("stop_resource_with_and_without_force", ("stop with force=true",)),
    "error_not_envelope": ("error_bodies or stateless", ("error body is not ErrorData",)),
    "missing_required_field": ("create_session or state_machine", ('"policy_state" is a required property',)),
    "ignore_idempotency": ("idempotency", ("Idempotency-Key replay created a new operation",)),
    "shaping_updated_at_frozen": ("shaping_phases_on_the_realistic_profile", ("updated_at did not move",)),
    "dppo_params_dropped": ("dppo_params_take_effect", ("the dppo_params are ignored",)),
    "preprocess_error_key": ("preprocess_reports_each_documented_dataset_format",
                             ("gives no reason under validation_report.error",)),
    "payload_download_before_upload": ("payload_not_uploaded", ("answered 200, expected 400",)),
    "failed_operation_without_error": ("batch_and_length_limits", ("is FAILED without an error",)),
}


@dataclass
class Run:
    args: list[str]
    code: int
    output: str
    report: Path

    def outcomes(self) -> dict[str, str]:
        """node id -> outcome of every test the run reported (its summary.json)."""
        summary = self.report / "summary.json"
        assert summary.is_file(), f"{' '.join(self.args)} wrote no {summary}:\n{self.output[-4000:]}"
        return {t["nodeid"]: t["outcome"] for t in json.loads(summary.read_text())["tests"]["items"]}


def run_suite(tmp: Path, name: str, extra: list[str]) -> Run:
    args = [sys.executable, "-m", "contract_tests", "--report", str(tmp / name), *FAST, *extra]
    # (the suite honours TOGETHER_BASE_URL / TOGETHER_API_KEY: a developer's own must not redirect the self-test)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "CONTRACT_"))}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(args, check=False, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    return Run(args, proc.returncode, proc.stdout + proc.stderr, tmp / name)


def shared_run(shared: str, timeout: float = 900) -> Run:
    """make test's contract run, once it has ended: waited for on a pidfd (an event, not a poll of the file).
    Its exit status is make test's to report; its summary.json says whether it conformed."""
    pid, report = shared.split(" ", 1)
    try:
        fd = os.pidfd_open(int(pid))
    except ProcessLookupError:  # ended and reaped already
        pass
    else:
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            assert ready, f"make test's contract run (process {pid}) did not end within {timeout:.0f} s"
        finally:
            os.close(fd)
    path = Path(report)
    log = path.parent / "contract.log"
    output = log.read_text() if log.is_file() else f"(no {log})"
    summary = path / "summary.json"
    conforms = summary.is_file() and json.loads(summary.read_text())["conforms"]
    return Run(["make test's", "python -m contract_tests", "--report", report], 0 if conforms else 1, output, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("contract-selftest")
    # "PID REPORT_DIR" of the contract run make test starts alongside the tests (Makefile): a whole run against a
    # fresh, healthy emulator, which is then this module's healthy run (a second one cost ~7-10 CPU-s: RELIABILITY.md).
    # (waited for on a pidfd: Linux; elsewhere the module runs its own)
    shared = pytestconfig.getoption("shared_contract_run") if hasattr(os, "pidfd_open") else None
    # Without make test's run alongside, the healthy run executes exactly the tests the defect runs select, with
    # their settings: what a defect run fails, the healthy emulator passes.
    jobs = {} if shared else {"healthy": ["-k", " or ".join(f"({chosen})" for chosen, _ in CASES.values())]}
    for defect, (chosen, _) in CASES.items():
        jobs[defect] = [f"--emulator-arg=--defect={defect}", "-k", chosen]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_suite, tmp, name, extra) for name, extra in jobs.items()}
        runs = {name: f.result() for name, f in futures.items()}
    if shared:
        runs["healthy"] = shared_run(shared)
    return runs


def test_every_defect_has_a_case() -> None:
    assert set(CASES) == set(DEFECTS), "each TEST-ONLY defect of emulator/tools/defects.py needs a self-test case"


@pytest.mark.slow
def test_healthy_emulator_conforms(runs: dict[str, Run]) -> None:
    run = runs["healthy"]
    assert run.code == 0, f"the contract suite fails against the healthy emulator:\n{run.output[-6000:]}"
    assert "passed" in run.output and " failed" not in run.output
    # every test a defect run executed (passed, failed or errored) passed against the healthy emulator
    healthy = run.outcomes()
    for defect in CASES:
        executed = {nodeid for nodeid, outcome in runs[defect].outcomes().items()
                    if outcome in ("passed", "failed", "error")}
        assert executed, f"--defect={defect} executed no test:\n{runs[defect].output[-4000:]}"
        unproven = sorted(nodeid for nodeid in executed if healthy.get(nodeid) != "passed")
        assert not unproven, (f"--defect={defect} executed tests that did not pass against the healthy emulator "
                              f"({' '.join(run.args)}): {[(n, healthy.get(n, 'not run')) for n in unproven]}")


@pytest.mark.slow
@pytest.mark.parametrize("defect", sorted(CASES))
def test_defect_is_caught(runs: dict[str, Run], defect: str) -> None:
    run = runs[defect]
    assert run.code != 0, f"--defect={defect} ({DEFECTS[defect]}) was not caught:\n{run.output[-4000:]}"
    assert " failed" in run.output, f"--defect={defect}: no test failed:\n{run.output[-4000:]}"
    missing = [p for p in CASES[defect][1] if p not in run.output]
    assert not missing, (f"--defect={defect} failed the suite, but the output does not name the broken behaviour "
                         f"{missing}:\n{run.output[-4000:]}")


def test_a_generated_failure_shows_the_request_as_a_runnable_curl(runs: dict[str, Run]) -> None:
    """Schemathesis' reproduction, with the credential it hides put back (issue 42, item 6): the token of the
    emulator the suite started, and the request's own fields (`tokens`, `Idempotency-Key`) as they were sent."""
    from contract_tests.target import LAUNCH_TOKEN

    lines = runs["error_not_envelope"].output.splitlines()
    shown = [lines[i + 1] for i, line in enumerate(lines) if "the failing request, as curl" in line]
    assert all(curl.startswith("curl -X ") and "[Filtered]" not in curl for curl in shown), shown
    # Schemathesis' own (the URL last; the suite's lifecycle checks put it first, and some of theirs send a
    # wrong Authorization on purpose: the request that failed, as it was sent).
    generated = [curl for curl in shown if curl.split()[-1].startswith("http")]
    assert generated, shown
    for curl in generated:
        assert f"-H 'Authorization: Bearer {LAUNCH_TOKEN}'" in curl, curl
