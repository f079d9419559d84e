"""Time that serves tests (issue 40): what is pending, the next transition, bounded runs, the auto clock, scheduled
actions, and the stall a test would hang on.

Each test has its own tenant (the key ``K``) on a manual clock with the realistic profile, so every transition
has a duration to skip over: the GPU queue 45 s, CREATING 180 s, a session's start 20 s, an optim-step 2 s.
Responses are validated against ``admin.yaml`` and ``openapi.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import BASE, RL, assert_error, submit

K = "clock-key"
OTHER = "other-key"
T0 = "2026-01-01T00:00:00.000Z"
SCOPED = {"X-Emulator-Tenant": K}
R, S, OP = "MODEL_RESOURCES_STATUS_", "TRAINING_SESSION_STATUS_", "TRAINING_OPERATION_STATUS_"


def new_client(**config: Any) -> TestClient:
    return make_client(Runtime(Config(**{"clock": "manual", "profile": "realistic", "validate_responses": True,
                                         **config})), token=K)


@pytest.fixture
def c() -> Iterator[TestClient]:
    with new_client() as client:
        yield client


def auto(client: TestClient, token: str = K) -> None:
    assert client.post("/_emulator/clock", json={"mode": "auto"}, headers={"X-Emulator-Tenant": token}).json()[
        "mode"] == "auto"


def resource(client: TestClient, **body: Any) -> dict[str, Any]:
    resp = client.post(f"{RL}/model-resources", json={"base_model": BASE, **body})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def get(client: TestClient, path: str) -> dict[str, Any]:
    resp = client.get(f"{RL}/{path}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def pending(client: TestClient) -> list[dict[str, Any]]:
    resp = client.get("/_emulator/clock/pending", headers=SCOPED)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["data"])


def nxt(client: TestClient) -> dict[str, Any]:
    resp = client.post("/_emulator/clock/advance", json={"to": "next"}, headers=SCOPED)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def run(client: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    resp = client.post("/_emulator/clock/run", json=body, headers=SCOPED)
    assert resp.status_code == status, resp.text
    return dict(resp.json())


def schedule(client: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    resp = client.post("/_emulator/clock/actions", json=body, headers=SCOPED)
    assert resp.status_code == status, resp.text
    return dict(resp.json())


def steps(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(at, kind, to) of pending entries or crossed transitions, statuses shortened."""
    return [(e["at"][11:19], e["kind"], e["to"].rsplit("_", 1)[-1]) for e in entries]


# --- pending --------------------------------------------------------------------------------------------------

def test_pending_lists_every_kind_of_scheduled_transition_in_time_order(c: TestClient) -> None:
    r = resource(c, inactive_timeout=300)
    assert steps(pending(c)) == [("00:00:45", "model_resources", "CREATING")]
    first = pending(c)[0]
    assert first == {"at": "2026-01-01T00:00:45.000Z", "in_seconds": 45.0, "kind": "model_resources", "id": r["id"],
                     "event": "resource.dequeue", "from": R + "PENDING", "to": R + "CREATING",
                     "detail": "leaves the GPU queue"}
    s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
    nxt(c)
    assert steps(pending(c)) == [("00:03:45", "model_resources", "READY")]
    nxt(c)
    # READY: the session starts in 20 s; the resource expires when idle for 300 s, and its session with it.
    assert steps(pending(c)) == [("00:04:05", "training_session", "RUNNING"),
                                 ("00:08:45", "model_resources", "STOPPING"),
                                 ("00:08:45", "training_session", "EXPIRED")]
    nxt(c)
    assert get(c, f"training-sessions/{s['id']}")["status"] == S + "RUNNING"
    op = submit(c, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-4}}).json()
    upload = c.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()
    shown = pending(c)   # (settled first: the operation started when submitted, and runs 2 s)
    # No expiry while an operation runs: its end is activity, which pushes the expiry later.
    assert steps(shown) == [("00:04:07", "operation", "COMPLETED"), ("01:04:05", "payload", "expired")]
    assert shown[0]["id"] == op["id"] and shown[0]["detail"] == "optim-step"
    # The unused upload URL expires an hour after it was handed out.
    assert (shown[-1]["id"], shown[-1]["to"]) == (upload["payload_id"], "upload_url_expired")
    nxt(c)
    assert steps(pending(c))[:2] == [("00:09:07", "model_resources", "STOPPING"),
                                     ("00:09:07", "training_session", "EXPIRED")]


def test_pending_shows_shaping_phases_files_and_actions(c: TestClient) -> None:
    c.post("/_emulator/profile", json={"profile": "instant"}, headers=SCOPED)
    from tests.test_files import _shaping_model

    model_id = _shaping_model(c)
    c.post("/_emulator/profile", json={"profile": "realistic"}, headers=SCOPED)
    job = c.post("/v1/shaping/prepare-for-fp4-inference", json={"inputs": {"model_object_id": model_id}}).json()
    started = c.post("/v1/files", files={"purpose": (None, "calibration"), "file_name": (None, "d.jsonl")},
                     follow_redirects=False)
    assert started.status_code == 302
    action = schedule(c, {"action": "capacity_unavailable", "seconds": 600, "delay": 30})
    kinds = {e["kind"]: e for e in pending(c)}
    assert kinds["shaping_job"]["id"] == job["id"] and kinds["shaping_job"]["to"] == "queued"
    assert kinds["shaping_job"]["in_seconds"] == 300 and kinds["shaping_job"]["detail"] == "phase 1 of 4"
    assert kinds["file"]["id"] == started.headers["x-together-file-id"] and kinds["file"]["in_seconds"] == 3600
    assert kinds["action"] == {"at": action["at"], "in_seconds": 30.0, "kind": "action", "id": action["id"],
                               "event": "action.run", "from": "scheduled", "to": "done",
                               "detail": "capacity_unavailable for 600 s"}


def test_pending_unscoped_lists_the_global_clocks_tenants_with_their_project(c: TestClient) -> None:
    resource(c)
    c.post(f"{RL}/model-resources", json={"base_model": BASE}, headers={"Authorization": f"Bearer {OTHER}"})
    c.post("/_emulator/clock/advance", json={"seconds": 1}, headers={"X-Emulator-Tenant": OTHER})  # its own clock
    shown = c.get("/_emulator/clock/pending").json()
    assert shown["scope"] == "global" and len(shown["data"]) == 1 and shown["data"][0]["project"].startswith("proj_")
    assert "waiting" not in shown


# --- the next transition, and runs ----------------------------------------------------------------------------

def test_advance_to_next_answers_the_transitions_crossed_and_stays_when_nothing_is_pending(c: TestClient) -> None:
    r = resource(c)
    moved = nxt(c)
    assert moved["now"] == "2026-01-01T00:00:45.000Z" and moved["scope"] == "tenant"
    assert [(e["id"], e["from"], e["to"], e["at"]) for e in moved["crossed"]] == [
        (r["id"], R + "PENDING", R + "CREATING", "2026-01-01T00:00:45.000Z")]
    c.post(f"{RL}/model-resources/{r['id']}/stop")
    assert steps(nxt(c)["crossed"]) == [("00:01:15", "model_resources", "STOPPED")]
    idle = nxt(c)
    assert idle["crossed"] == [] and idle["now"] == "2026-01-01T00:01:15.000Z"


def test_advance_takes_seconds_or_next(c: TestClient) -> None:
    assert_error(c.post("/_emulator/clock/advance", json={}, headers=SCOPED), 400)
    assert "one of seconds" in assert_error(
        c.post("/_emulator/clock/advance", json={"seconds": 1, "to": "next"}, headers=SCOPED), 400)["message"]
    assert_error(c.post("/_emulator/clock/advance", json={"to": "later"}, headers=SCOPED), 400)


def test_run_until_a_status_crosses_every_transition_at_its_own_time(c: TestClient) -> None:
    r = resource(c)
    s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
    ran = run(c, {"until": {"id": s["id"], "status": "RUNNING"}})
    assert steps(ran["crossed"]) == [("00:00:45", "model_resources", "CREATING"),
                                     ("00:03:45", "model_resources", "READY"),
                                     ("00:04:05", "training_session", "RUNNING")]
    assert ran["now"] == "2026-01-01T00:04:05.000Z"
    op = submit(c, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-4}}).json()
    done = run(c, {"until": {"id": op["id"], "terminal": True}})
    # (It started when submitted: what is due when a call begins has happened before it, not on its way.)
    assert steps(done["crossed"]) == [("00:04:07", "operation", "COMPLETED")]
    assert get(c, f"training-sessions/{s['id']}/operations/optim-step/{op['id']}")["output"]["step"] == "1"
    assert run(c, {"until": {"id": op["id"], "terminal": True}})["crossed"] == []  # holds already: nothing moves


def test_run_that_cannot_hold_in_time_is_400_naming_the_next_transition(c: TestClient) -> None:
    r = resource(c)
    error = assert_error(c.post("/_emulator/clock/run", json={"until": {"id": r["id"], "status": "READY"},
                                                               "max_seconds": 100}, headers=SCOPED), 400)
    assert error["code"] == "condition_not_met" and error["param"] == "until"
    # The queue (45 s) was within the limit and happened; READY (at 225 s) was not.
    assert f"the next pending transition is model_resources {r['id']}: {R}CREATING -> {R}READY at " \
           "2026-01-01T00:03:45.000Z, 180 s later" in error["message"]
    assert "clock stopped at 2026-01-01T00:00:45.000Z after crossing 1 transition(s)" in error["message"]
    assert get(c, f"model-resources/{r['id']}")["status"] == R + "CREATING"


def test_run_refuses_what_can_never_hold(c: TestClient) -> None:
    r = resource(c)
    c.post(f"{RL}/model-resources/{r['id']}/stop")
    final = assert_error(c.post("/_emulator/clock/run", json={"until": {"id": r["id"], "status": "READY"}},
                                headers=SCOPED), 400)
    assert f"reached {R}STOPPED, a final status: it will never be {R}READY" in final["message"]
    bad = assert_error(c.post("/_emulator/clock/run", json={"until": {"id": r["id"], "status": "DONE"}},
                              headers=SCOPED), 400)
    assert bad["param"] == "until.status" and R + "READY" in bad["message"]
    unknown = assert_error(c.post("/_emulator/clock/run", json={"until": {"id": "nope", "terminal": True}},
                                  headers=SCOPED), 404)
    assert unknown["param"] == "until.id"
    assert_error(c.post("/_emulator/clock/run", json={"until": {"id": r["id"]}}, headers=SCOPED), 400)


def test_run_without_a_condition_drains_what_is_pending_within_max_seconds(c: TestClient) -> None:
    r = resource(c, inactive_timeout=300)
    ran = run(c, {"max_seconds": 3600})
    assert steps(ran["crossed"]) == [("00:00:45", "model_resources", "CREATING"),
                                     ("00:03:45", "model_resources", "READY"),
                                     ("00:08:45", "model_resources", "STOPPING"),
                                     ("00:09:15", "model_resources", "STOPPED")]
    assert ran["crossed"][2]["reason"] == "inactive_timeout"
    assert pending(c) == [] and get(c, f"model-resources/{r['id']}")["status"] == R + "STOPPED"


# --- the auto clock -------------------------------------------------------------------------------------------

def test_auto_clock_jumps_to_what_a_poll_waits_for_and_keeps_realistic_timestamps(c: TestClient) -> None:
    auto(c)
    r = resource(c)
    got = get(c, f"model-resources/{r['id']}")
    assert got["status"] == R + "READY"
    assert (got["created_at"], got["updated_at"]) == (T0, "2026-01-01T00:03:45.000Z")
    s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
    assert get(c, f"training-sessions/{s['id']}")["status"] == S + "RUNNING"
    ops = [submit(c, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-4}}).json() for _ in range(3)]
    last = get(c, f"training-sessions/{s['id']}/operations/optim-step/{ops[-1]['id']}")
    assert last["status"] == OP + "COMPLETED" and last["output"]["step"] == "3"
    # Each optim-step takes 2 s of virtual time, one after another, from when the session started.
    assert c.get("/_emulator/clock", headers=SCOPED).json()["now"] == "2026-01-01T00:04:11.000Z"
    # A READY resource rests: reading it does not skip to its expiry.
    assert get(c, f"model-resources/{r['id']}")["status"] == R + "READY"
    assert c.get("/_emulator/clock", headers=SCOPED).json()["now"] == "2026-01-01T00:04:11.000Z"


def test_auto_clock_fires_what_is_due_first_in_order(c: TestClient) -> None:
    auto(c)
    a, b = resource(c), resource(c)   # b queues behind a: it leaves at 90 s, READY at 270 s
    action = schedule(c, {"action": "stop_resource", "id": a["id"], "delay": 60})
    assert get(c, f"model-resources/{b['id']}")["status"] == R + "READY"
    events = [e for e in c.get("/_emulator/events", headers=SCOPED).json()["data"] if e["type"] == "transition"
              and e["from"] is not None]
    assert [(e["at"][14:19], e["id"], e["to"].rsplit("_", 1)[-1]) for e in events] == [
        ("00:45", a["id"], "CREATING"),
        ("01:00", a["id"], "STOPPING"), ("01:00", action["id"], "done"),
        ("01:30", b["id"], "CREATING"),
        ("01:30", a["id"], "STOPPED"),
        ("04:30", b["id"], "READY")]


def test_auto_clock_of_a_tenant_moves_that_tenant_only(c: TestClient) -> None:
    auto(c)
    other = {"Authorization": f"Bearer {OTHER}"}
    theirs = c.post(f"{RL}/model-resources", json={"base_model": BASE}, headers=other).json()
    mine = resource(c)
    assert get(c, f"model-resources/{mine['id']}")["status"] == R + "READY"
    assert c.get(f"{RL}/model-resources/{theirs['id']}", headers=other).json()["status"] == R + "PENDING"
    assert c.get("/_emulator/clock").json()["now"] == T0


def test_global_auto_clock_moves_every_tenant_that_follows_it() -> None:
    with new_client(clock="auto") as client:
        other = {"Authorization": f"Bearer {OTHER}"}
        theirs = client.post(f"{RL}/model-resources", json={"base_model": BASE}, headers=other).json()
        mine = resource(client)
        assert get(client, f"model-resources/{mine['id']}")["status"] == R + "READY"
        # The global clock jumped for my poll: 225 s passed for the other tenant too, whose resource (created
        # first, at the head of its own queue) is READY when it next reads it, stamped at its own times.
        assert client.get("/_emulator/clock").json() == {"now": "2026-01-01T00:03:45.000Z", "mode": "auto",
                                                         "speed": 1.0, "scope": "global"}
        seen = client.get(f"{RL}/model-resources/{theirs['id']}", headers=other).json()
        assert (seen["status"], seen["updated_at"]) == (R + "READY", "2026-01-01T00:03:45.000Z")


def test_auto_clock_leaves_a_wait_that_nothing_pending_would_end(c: TestClient) -> None:
    auto(c)
    r = resource(c)
    schedule(c, {"action": "capacity_unavailable", "seconds": 3600})  # now: the queue stands still an hour
    got = get(c, f"model-resources/{r['id']}")
    assert (got["status"], got["updated_at"]) == (R + "READY", "2026-01-01T01:03:45.000Z")


# --- scheduled actions ----------------------------------------------------------------------------------------

def test_scheduled_stop_and_expiry_fire_in_order_and_show_in_events(c: TestClient) -> None:
    r = resource(c)
    s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
    run(c, {"until": {"id": s["id"], "status": "RUNNING"}})
    expire = schedule(c, {"action": "expire_session", "id": s["id"], "delay": 10})
    stop = schedule(c, {"action": "stop_resource", "id": r["id"], "at": "2026-01-01T00:04:35Z"})
    assert stop["at"] == "2026-01-01T00:04:35.000Z" and stop["status"] == "scheduled" and stop["result"] is None
    op = submit(c, s["id"], "training-checkpoint").json()   # 30 s: still running at +10 s
    crossed = run(c, {"until": {"id": stop["id"], "terminal": True}})["crossed"]
    assert [(e["at"][14:19], e["kind"], e["to"].rsplit("_", 1)[-1]) for e in crossed] == [
        ("04:15", "operation", "FAILED"), ("04:15", "training_session", "EXPIRED"), ("04:15", "action", "done"),
        ("04:35", "model_resources", "STOPPING"), ("04:35", "action", "done")]
    assert crossed[0]["id"] == op["id"]
    listed = {a["id"]: a for a in c.get("/_emulator/clock/actions", headers=SCOPED).json()["data"]}
    assert listed[expire["id"]]["result"] == f"training session {s['id']} expired"
    assert listed[stop["id"]]["result"].startswith(f"model resource {r['id']} force-stopped")
    events = [e for e in c.get("/_emulator/events", headers=SCOPED).json()["data"] if e.get("id") == stop["id"]]
    assert [(e["at"], e["to"]) for e in events] == [("2026-01-01T00:04:05.000Z", "scheduled"),
                                                    ("2026-01-01T00:04:35.000Z", "done")]
    assert events[0]["due"] == "2026-01-01T00:04:35.000Z" and events[1]["action"] == "stop_resource"


def test_an_action_whose_target_cannot_take_it_fails_saying_why(c: TestClient) -> None:
    r = resource(c)
    action = schedule(c, {"action": "stop_resource", "id": r["id"], "delay": 5})
    c.post(f"{RL}/model-resources/{r['id']}/stop")
    crossed = nxt(c)["crossed"]
    assert crossed[-1]["id"] == action["id"] and crossed[-1]["to"] == "failed"
    assert crossed[-1]["result"] == f"model resource {r['id']} was already {R}STOPPING"


def test_capacity_unavailable_holds_the_gpu_queue_for_its_length(c: TestClient) -> None:
    queued = resource(c)                                       # would leave the queue at 45 s
    schedule(c, {"action": "capacity_unavailable", "seconds": 600, "delay": 10})
    c.post("/_emulator/clock/advance", json={"seconds": 20}, headers=SCOPED)
    later = resource(c)                                        # created during the outage
    run(c, {"until": {"id": later["id"], "status": "CREATING"}})
    first, second = get(c, f"model-resources/{queued['id']}"), get(c, f"model-resources/{later['id']}")
    assert first["updated_at"] == "2026-01-01T00:10:45.000Z"   # 45 s + 600 s
    assert second["updated_at"] == "2026-01-01T00:11:30.000Z"  # behind it, one slot later


def test_scheduled_fault_rules_start_and_stop_at_their_time(c: TestClient) -> None:
    rule = {"name": "later-503", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}}
    added = schedule(c, {"action": "add_fault", "rule": rule, "delay": 60})
    assert added["params"]["rule"]["match"] == {"operation_id": "listModelResources", "tenant": K}
    schedule(c, {"action": "remove_fault", "name": "later-503", "delay": 120})
    assert c.get(f"{RL}/model-resources").status_code == 200
    nxt(c)
    assert c.get(f"{RL}/model-resources").status_code == 503
    assert [r["name"] for r in c.get("/_emulator/faults", headers=SCOPED).json()["data"]] == ["later-503"]
    nxt(c)
    assert c.get(f"{RL}/model-resources").status_code == 200
    assert [a["result"] for a in c.get("/_emulator/clock/actions", headers=SCOPED).json()["data"]] == [
        "fault rule 'later-503' added", "fault rule 'later-503' removed"]


def test_a_scheduled_fault_rule_meets_the_first_request_after_its_time_on_a_running_clock(c: TestClient) -> None:
    # 10^6 virtual seconds per real second: the rule is due microseconds after it is scheduled, and no
    # control call settles the tenant in between; the fault-rule step does, before it picks a rule.
    c.post("/_emulator/clock", json={"mode": "system", "speed": 1e6}, headers=SCOPED)
    schedule(c, {"action": "add_fault", "delay": 1,
                 "rule": {"name": "soon", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}}})
    assert c.get(f"{RL}/model-resources").status_code == 503


def test_cancelled_action_never_fires(c: TestClient) -> None:
    r = resource(c)
    action = schedule(c, {"action": "stop_resource", "id": r["id"], "delay": 5})
    gone = c.delete(f"/_emulator/clock/actions/{action['id']}", headers=SCOPED)
    assert gone.status_code == 200 and gone.json()["status"] == "cancelled"
    assert [e["kind"] for e in pending(c)] == ["model_resources"]
    run(c, {"until": {"id": r["id"], "status": "READY"}, "max_seconds": 600})
    assert get(c, f"model-resources/{r['id']}")["status"] == R + "READY"
    assert_error(c.delete(f"/_emulator/clock/actions/{action['id']}", headers=SCOPED), 400)
    assert_error(c.delete("/_emulator/clock/actions/act_nope", headers=SCOPED), 404)


def test_scheduling_refuses_bad_actions(c: TestClient) -> None:
    r = resource(c)
    assert_error(c.post("/_emulator/clock/actions", json={"action": "stop_resource", "id": r["id"]}), 400)  # no tenant
    assert_error(c.post("/_emulator/clock/actions", json={"action": "explode"}, headers=SCOPED), 400)
    assert schedule(c, {"action": "stop_resource"}, 400)["error"]["param"] == "id"
    assert schedule(c, {"action": "stop_resource", "id": "nope"}, 404)["error"]["param"] == "id"
    assert schedule(c, {"action": "stop_resource", "id": r["id"], "seconds": 3}, 400)["error"]["param"] == "seconds"
    past = schedule(c, {"action": "stop_resource", "id": r["id"], "at": "2025-12-31T00:00:00Z"}, 400)
    assert "in the past" in past["error"]["message"]
    both = schedule(c, {"action": "stop_resource", "id": r["id"], "at": T0, "delay": 1}, 400)
    assert both["error"]["param"] == "delay"
    assert schedule(c, {"action": "add_fault", "rule": {"effect": {"status": 503}}}, 400)["error"]["param"] == "rule.name"
    assert schedule(c, {"action": "add_fault", "rule": {"name": "x", "effect": {"status": 99}}}, 400)["error"][
        "code"] == "invalid_fault_rule"
    assert schedule(c, {"action": "capacity_unavailable", "seconds": -1}, 400)["error"]["param"] == "seconds"
    assert c.get("/_emulator/clock/actions", headers=SCOPED).json()["data"] == []


def test_an_action_for_now_happens_at_once(c: TestClient) -> None:
    r = resource(c)
    done = schedule(c, {"action": "stop_resource", "id": r["id"]})
    assert done["status"] == "done" and done["at"] == T0
    assert get(c, f"model-resources/{r['id']}")["status"] == R + "STOPPING"


def test_scheduled_actions_travel_with_an_exported_tenant(c: TestClient) -> None:
    rule = {"name": "later", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}}
    schedule(c, {"action": "add_fault", "rule": rule, "delay": 60})
    doc = c.get("/_emulator/state", headers=SCOPED).json()
    assert [a["action"] for a in doc["tenants"][next(iter(doc["tenants"]))]["actions"]] == ["add_fault"]
    into = {"X-Emulator-Tenant": OTHER}
    assert c.put("/_emulator/state", json=doc, headers=into).status_code == 200
    moved = c.post("/_emulator/clock/advance", json={"to": "next"}, headers=into).json()
    assert [e["kind"] for e in moved["crossed"]] == ["action"]
    # The rule is the importing tenant's: it matches OTHER's requests, not K's.
    assert [r["match"]["tenant"] for r in c.get("/_emulator/faults", headers=into).json()["data"]] == [OTHER]
    assert c.get(f"{RL}/model-resources", headers={"Authorization": f"Bearer {OTHER}"}).status_code == 503


def test_scheduled_actions_survive_a_restart_on_the_state_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    with new_client(state_file=path) as first:
        r = resource(first)
        action = schedule(first, {"action": "stop_resource", "id": r["id"], "delay": 100})
    with new_client(state_file=path) as again:
        assert [(e["kind"], e["id"]) for e in pending(again)][:2] == [("model_resources", r["id"]),
                                                                       ("action", action["id"])]
        run(again, {"until": {"id": action["id"], "terminal": True}})
        assert get(again, f"model-resources/{r['id']}")["status"] == R + "STOPPING"
    with new_client(state_file=path) as third:
        listed = third.get("/_emulator/clock/actions", headers=SCOPED).json()["data"]
        assert [a["status"] for a in listed] == ["done"]


# --- what a stalled client waits on ---------------------------------------------------------------------------

def test_waiting_names_what_a_client_polls_while_the_manual_clock_stands_still(c: TestClient) -> None:
    def waiting() -> Any:
        return c.get("/_emulator/clock/pending", headers=SCOPED).json()["waiting"]

    r = resource(c)
    assert waiting() is None
    for _ in range(3):
        get(c, f"model-resources/{r['id']}")
    shown = waiting()
    assert (shown["kind"], shown["id"], shown["status"], shown["polls"]) == ("model_resources", r["id"],
                                                                            R + "PENDING", 3)
    assert shown["seconds"] >= 0 and shown["next"]["to"] == R + "CREATING" and shown["next"]["in_seconds"] == 45
    c.get(f"{RL}/model-resources")                    # the client does something else: it is not stuck
    assert waiting() is None
    get(c, f"model-resources/{r['id']}")
    nxt(c)                                             # the clock moved: not stuck either
    assert waiting() is None
    run(c, {"until": {"id": r["id"], "status": "READY"}})
    get(c, f"model-resources/{r['id']}")              # READY rests: nobody waits on it
    assert waiting() is None


# --- admin.yaml's examples ------------------------------------------------------------------------------------

def test_every_example_of_the_clock_calls_in_admin_yaml_runs(c: TestClient) -> None:
    spec = yaml.safe_load((Path(__file__).resolve().parent.parent / "emulator" / "specs" / "admin.yaml").read_text())
    ran = []
    for path in ("/clock/advance", "/clock/run", "/clock/actions"):
        examples = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["examples"]
        for name, example in examples.items():
            key = f"example-{path}-{name}"
            tenant, auth = {"X-Emulator-Tenant": key}, {"Authorization": f"Bearer {key}"}
            rid = c.post(f"{RL}/model-resources", json={"base_model": BASE}, headers=auth).json()["id"]
            text = json.dumps(example["value"]).replace("<model_resources_id>", rid)
            if "<operation_id>" in text:
                sid = c.post(f"{RL}/training-sessions", json={"model_resources_id": rid}, headers=auth).json()["id"]
                c.post("/_emulator/clock/run", json={"until": {"id": sid, "status": "RUNNING"}}, headers=tenant)
                op = c.post(f"{RL}/training-sessions/{sid}/operations/optim-step", headers={**auth, "Idempotency-Key": "k"},
                            json={"adam_params": {"learning_rate": 1e-4}}).json()
                text = text.replace("<operation_id>", op["id"])
            resp = c.post(f"/_emulator{path}", json=json.loads(text), headers=tenant)
            assert resp.status_code == 200, (path, name, resp.text)
            ran.append(f"{path}:{name}")
    assert len(ran) == 8, ran


def test_auto_clock_jumps_survive_a_restart_on_the_state_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    with new_client(state_file=path) as first:
        auto(first)
        r = resource(first)
        assert get(first, f"model-resources/{r['id']}")["status"] == R + "READY"   # a read: only the clock moved
    with new_client(state_file=path) as again:
        assert again.get("/_emulator/clock", headers=SCOPED).json() == {
            "now": "2026-01-01T00:03:45.000Z", "mode": "auto", "speed": 1.0, "scope": "tenant"}
        assert get(again, f"model-resources/{r['id']}")["status"] == R + "READY"


def test_a_run_that_would_take_too_many_steps_stops_and_says_so(c: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import emulator.runtime.moves

    monkeypatch.setattr(emulator.runtime.moves, "MAX_STEPS", 2)
    r = resource(c)
    error = assert_error(c.post("/_emulator/clock/run", json={"until": {"id": r["id"], "status": "STOPPED"}},
                                headers=SCOPED), 400)
    assert error["code"] == "too_many_transitions" and "crossing 2 transition(s): run again" in error["message"]
    fresh = resource(c)   # READY takes exactly two steps (out of the queue, then READY): they are enough
    assert steps(run(c, {"until": {"id": fresh["id"], "status": "READY"}})["crossed"])[-1][2] == "READY"
