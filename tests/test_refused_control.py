"""Refused means not applied, on the control plane too (issue 39, items 6 and 7; issue 38, item 5).

Every control-plane change is a unit of work: it takes the runtime's lock, checks that the state file takes
writes, applies the change, journals it, and when the disk refuses the line it restores what it changed (the
clocks, the profiles, the tenants, the event log, the fault rules and their counters) and answers 503. A
refused vendor write leaves no event behind and uses up no fault trigger. And what the control plane answers
200 for survives a restart, or the answer says it will not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.full_disk import FullDisk
from tests.helpers import RL, create_resource, ready_resource, running_session

TENANT = {"X-Emulator-Tenant": "test-token"}
READY = "MODEL_RESOURCES_STATUS_READY"


def _runtime(path: Path, **config: Any) -> tuple[Runtime, FullDisk]:
    runtime = Runtime(Config(clock="manual", state_file=str(path), **config))
    disk = FullDisk()
    assert runtime.persistence is not None
    runtime.persistence.file.io = disk
    return runtime, disk


def _refused(resp: Any) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "storage_unavailable", resp.text


def _control_state(client: TestClient) -> dict[str, Any]:
    """What the control plane shows of the clocks, profiles, events and fault rules."""
    return {"clock": client.get("/_emulator/clock").json(),
            "tenant_clock": client.get("/_emulator/clock", headers=TENANT).json(),
            "profile": client.get("/_emulator/profile").json(),
            "tenant_profile": client.get("/_emulator/profile", headers=TENANT).json(),
            "events": client.get("/_emulator/events").json()["data"],
            "faults": client.get("/_emulator/faults").json()["data"],
            "state": client.get("/_emulator/state").json()}


# --- item 7: the reproductions -------------------------------------------------------------------

def test_a_refused_clock_advance_expires_nothing_now_or_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime, disk = _runtime(path)
    with make_client(runtime) as client:
        r = ready_resource(client)  # inactive_timeout: 3600 s
        before = _control_state(client)
        disk.full = True
        _refused(client.post("/_emulator/clock/advance", json={"seconds": 7200}))
        disk.full = False
        assert _control_state(client) == before  # the clock did not move
        create_resource(client)  # the next write journals no expiry
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"] == READY
    restored, _ = _runtime(path)
    with make_client(restored) as client:
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"] == READY


def test_refused_profile_and_clock_mode_changes_are_not_live(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        ready_resource(client)
        before = _control_state(client)
        disk.full = True
        refused = [
            client.post("/_emulator/profile", json={"profile": "realistic"}),
            client.post("/_emulator/profile", json={"profile": "realistic"}, headers=TENANT),
            client.post("/_emulator/clock", json={"mode": "system", "speed": 2}),
            client.post("/_emulator/clock", json={"mode": "auto"}, headers=TENANT),
            client.post("/_emulator/clock", json={"now": "2027-01-01T00:00:00Z"}),
            client.post("/_emulator/clock/advance", json={"seconds": 60}, headers=TENANT),
            client.post("/_emulator/seed", json={"seed": 9}),
            client.post("/_emulator/clock/actions", headers=TENANT, json={
                "action": "add_fault", "delay": 60, "rule": {"name": "later", "effect": {"status": 503}}}),
        ]
        disk.full = False
        for resp in refused:
            _refused(resp)
        assert _control_state(client) == before


def test_a_refused_tenant_reset_keeps_the_tenant_s_own_clock(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        client.post("/_emulator/clock/advance", json={"seconds": 7200}, headers=TENANT).raise_for_status()
        r = ready_resource(client)
        before = _control_state(client)
        disk.full = True
        _refused(client.post("/_emulator/reset", json={}, headers=TENANT))
        _refused(client.post("/_emulator/reset", json={}))
        disk.full = False
        assert _control_state(client) == before
        s = running_session(client, r["id"])  # a new session is not older than its resource
        assert s["created_at"] >= r["created_at"]


def test_a_refused_vendor_write_logs_no_event_and_uses_up_no_fault_trigger(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        ready_resource(client)
        client.post("/_emulator/faults", json={"name": "queued", "match": {"operation_id": "createModelResources"},
                                                "trigger": {"first_n": 1},
                                                "effect": {"queue_position": 3}}).raise_for_status()
        before = _control_state(client)
        disk.full = True
        _refused(client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}))
        disk.full = False
        assert _control_state(client) == before
        created = create_resource(client)
        assert created["status_details"]["queue_position"] == 3, created  # the trigger is still there


def test_a_refused_move_to_the_next_transition_and_run_leave_everything_as_it_was(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl", profile="realistic")
    with make_client(runtime) as client:
        r = create_resource(client)
        before = _control_state(client)
        pending = client.get("/_emulator/clock/pending").json()["data"]
        disk.full = True
        _refused(client.post("/_emulator/clock/advance", json={"to": "next"}))
        _refused(client.post("/_emulator/clock/run", json={"until": {"id": r["id"], "status": "READY"}}))
        _refused(client.post("/_emulator/clock/run", json={}, headers=TENANT))
        disk.full = False
        assert _control_state(client) == before
        assert client.get("/_emulator/clock/pending").json()["data"] == pending


def test_a_refused_import_changes_nothing(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        r = ready_resource(client)
        doc = client.get("/_emulator/state").json()
        doc["clock"]["now"] = "2027-01-01T00:00:00Z"
        doc["clock"]["tenants"] = {"proj_other": {"now": "2028-01-01T00:00:00Z", "mode": "manual", "speed": 1.0}}
        doc["tenants"] = {}
        before = _control_state(client)
        disk.full = True
        _refused(client.put("/_emulator/state", json=doc))
        disk.full = False
        assert _control_state(client) == before
        assert client.get(f"{RL}/model-resources/{r['id']}").status_code == 200


# --- item 6: what the control plane answers 200 for survives a restart, or the answer says it will not -----

def test_the_global_profile_and_clock_settings_survive_a_restart(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.jsonl"
    runtime, _ = _runtime(path)
    with make_client(runtime) as client:
        client.post("/_emulator/profile", json={"profile": "realistic", "overrides": {"optim_step_seconds": 2.5}}
                    ).raise_for_status()
        client.post("/_emulator/clock", json={"mode": "auto", "speed": 3}).raise_for_status()
        client.post("/_emulator/profile", json={"profile": "instant"}, headers=TENANT).raise_for_status()
        client.post("/_emulator/clock/advance", json={"seconds": 90}, headers=TENANT).raise_for_status()
        answered = {k: v for k, v in _control_state(client).items() if k != "events"}
    with caplog.at_level("WARNING", logger="emulator"):
        restored, _ = _runtime(path)  # the command line says manual and instant
    with make_client(restored) as client:
        assert {k: v for k, v in _control_state(client).items() if k != "events"} == answered
    assert "keeps what the control plane set" in caplog.text and "'realistic'" in caplog.text


def test_a_restart_without_control_plane_changes_follows_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime, _ = _runtime(path)
    with make_client(runtime) as client:
        ready_resource(client)
    restored = Runtime(Config(clock="manual", profile="realistic", state_file=str(path)))
    with make_client(restored) as client:
        assert client.get("/_emulator/profile").json()["profile"] == "realistic"


def test_fault_rule_answers_say_that_a_restart_will_not_keep_them(tmp_path: Path) -> None:
    runtime, _ = _runtime(tmp_path / "state.jsonl")
    rule = {"name": "down", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}}
    with make_client(runtime) as client:
        for resp in (client.post("/_emulator/faults", json=rule), client.delete("/_emulator/faults/down"),
                     client.delete("/_emulator/faults")):
            assert resp.status_code == 200 and resp.json()["persisted"] is False, resp.text
            assert "not kept in the state file" in resp.headers["x-emulator-warning"]


# --- issue 38, item 5: the control plane changes state only through the runtime's units of work ------------

MUTATES = re.compile(r"runtime\.(clocks|clock|faults|store)\.(set_\w+|advance|drop_\w+|forget|restore|configure|load"
                     r"|clear|remove|reset|put|open)\(|clock_changed\(")


def test_the_control_plane_handlers_change_nothing_past_a_unit_of_work() -> None:
    source = (Path(__file__).resolve().parent.parent / "emulator" / "api" / "admin.py").read_text()
    offenders = [line.strip() for line in source.splitlines() if MUTATES.search(line)]
    assert offenders == []
    assert MUTATES.search("req.runtime.clocks.set_profile(project, name)")  # (the rule sees what it looks for)


def test_a_control_unit_holds_the_runtime_lock_and_journals_one_line(tmp_path: Path) -> None:
    runtime, _ = _runtime(tmp_path / "state.jsonl")
    assert runtime.persistence is not None
    seq = runtime.persistence.file.seq
    with make_client(runtime) as client:
        # A reset with a seed, a clock and a profile: one change, one line.
        client.post("/_emulator/reset", json={"seed": 7, "clock": {"now": "2027-01-01T00:00:00Z"},
                                              "profile": {"profile": "realistic"}}, headers=TENANT).raise_for_status()
        assert runtime.persistence.file.seq == seq + 1
        # A bad clock in the body refuses the whole reset: nothing changed, nothing written.
        create_resource(client)
        before = (client.get(f"{RL}/model-resources").json(), runtime.persistence.file.seq)
        bad = client.post("/_emulator/reset", json={"clock": {"mode": "sundial"}}, headers=TENANT)
        assert bad.status_code == 400, bad.text
        assert (client.get(f"{RL}/model-resources").json(), runtime.persistence.file.seq) == before
    with runtime.control():
        assert runtime.lock._is_owned()  # type: ignore[attr-defined]


def test_random_calls_on_a_refusing_disk_keep_nothing_refused_and_lose_nothing_acknowledged(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench.refusals in small (RELIABILITY.md has the full run's figures): control-plane and vendor calls of
    two tenants, a third of them refused by the disk; what a 503 left behind, and what a restart lost."""
    from bench import refusals

    assert refusals.main(["--runs", "3", "--steps", "40", "--seed", "1"]) == 0
    got = json.loads(capsys.readouterr().out.split("BENCH_JSON ", 1)[1])
    assert got["refused"] > 20 and got["acknowledged"] > 40, got
    assert (got["refused_kept"], got["runs_restart_differs"]) == (0, 0), got


def test_what_reads_settled_stays_as_clients_saw_it_across_a_profile_change(tmp_path: Path) -> None:
    """A read settles a transition in memory only (the next write journals it). Settled again under another
    profile, after a refused write or a restart, it came out otherwise: a resource READY at once under the
    instant profile was CREATING for 180 s more. A profile change journals what reads settled first."""
    path = tmp_path / "state.jsonl"
    runtime, disk = _runtime(path)
    with make_client(runtime) as client:
        r = ready_resource(client)  # READY on the read that follows the create (instant profile)
        client.post("/_emulator/profile", json={"profile": "realistic"}, headers=TENANT).raise_for_status()
        disk.full = True
        _refused(client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}))
        disk.full = False
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"] == READY
    restored, _ = _runtime(path)
    with make_client(restored) as client:
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"] == READY


def test_a_tenant_seeded_on_its_own_leaves_the_global_seed_as_it_was_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime, _ = _runtime(path)
    with make_client(runtime) as client:
        client.post("/_emulator/seed", json={"seed": 22}, headers=TENANT).raise_for_status()
        create_resource(client)
        held = client.get("/_emulator/state").json()
    restored, _ = _runtime(path)
    with make_client(restored) as client:
        assert client.get("/_emulator/state").json() == held  # the global seed is 0, the tenant's 22
    assert held["seed"] == 0 and next(iter(held["tenants"].values()))["seed"] == 22


def test_a_scenario_the_disk_refuses_answers_503_and_changes_nothing(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        ready_resource(client)
        before = _control_state(client)
        disk.full = True
        _refused(client.post("/_emulator/scenarios/queued-resource", headers=TENANT))
        disk.full = False
        assert _control_state(client) == before


def test_a_refused_reset_restarts_no_fault_counter(tmp_path: Path) -> None:
    runtime, disk = _runtime(tmp_path / "state.jsonl")
    with make_client(runtime) as client:
        client.post("/_emulator/faults", json={"name": "once", "match": {"operation_id": "listModelResources"},
                                                "trigger": {"first_n": 1}, "effect": {"status": 503}}
                    ).raise_for_status()
        assert client.get(f"{RL}/model-resources").status_code == 503
        before = _control_state(client)
        disk.full = True
        _refused(client.post("/_emulator/reset", json={}))
        _refused(client.post("/_emulator/reset", json={}, headers=TENANT))
        disk.full = False
        assert _control_state(client) == before
        assert client.get(f"{RL}/model-resources").status_code == 200  # its first_n is still used up
        assert client.post("/_emulator/reset", json={}).json()["fault_counters_restarted"] == ["once"]
        assert client.get(f"{RL}/model-resources").status_code == 503
