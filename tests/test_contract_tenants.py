"""Two contract runs in parallel against one emulator, each on its own tenant (issue 24, "Done when").

The suite gives each of its tenants a virtual clock of its own and moves only those, so two CI jobs
sharing one emulator pass side by side and never move each other's time, the global clock, or the time
of a bystander tenant; at the end each run resets its tenants (``--keep-state`` keeps them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.testing import EmulatorServer

START = "2026-01-01T00:00:00.000Z"
# Tests that make time pass: waits for READY / RUNNING / finished operations under the realistic profile
# (each advances the clock in steps), and the expiry test (explicit advances of 200 and 400 s).
SELECT = "idle_resource_expires or step_never_decreases or created_objects_are_listed or stop_session_is_idempotent"

pytestmark = pytest.mark.slow


def test_two_runs_in_parallel_pass_without_moving_each_others_clock(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "CONTRACT_", "PYTEST_"))}
    with EmulatorServer("subprocess", ["--clock", "manual", "--profile", "realistic"]) as server:
        bystander = server.tenant(api_key="bystander", start="2026-01-01T00:00:00Z")
        runs = {}
        for token, extra in (("run-a", ["--keep-state"]), ("run-b", [])):
            cmd = [sys.executable, "-m", "contract_tests", "--base-url", server.url, "--token", token,
                   "--report", str(tmp_path / token), "--max-examples", "2", "--no-coverage-phase", "--seed", "5",
                   "-k", SELECT, *extra]
            runs[token] = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
        outputs = {token: proc.communicate(timeout=600)[0] for token, proc in runs.items()}
        for token, proc in runs.items():
            assert proc.returncode == 0, f"{token}:\n{outputs[token][-4000:]}"
            assert " passed" in outputs[token] and "failed" not in outputs[token]

        def clock(tenant: str | None) -> dict[str, str]:
            return server._call("adminGetClock", "GET", "/_emulator/clock", tenant=tenant)

        assert clock(None) == {"now": START, "mode": "manual", "speed": 1.0, "scope": "global"}
        assert clock(bystander.api_key)["now"] == START and clock(bystander.api_key)["scope"] == "tenant"
        kept = clock("run-a")  # --keep-state: its own clock is still there, moved by its waits alone
        assert kept["scope"] == "tenant" and kept["now"] > "2026-01-01T00:10:00.000Z", kept
        assert clock("run-b")["scope"] == "global"  # reset at the end: its clock went with its state
        kept_state = server._call("adminExportState", "GET", "/_emulator/state", tenant="run-a")
        assert kept_state["tenants"], "run-a kept what it made (--keep-state)"
        emptied = server._call("adminExportState", "GET", "/_emulator/state", tenant="run-b")
        assert emptied["tenants"] == {}, "run-b reset its tenant at the end"
