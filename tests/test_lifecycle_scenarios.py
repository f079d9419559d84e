"""Lifecycles on the manual clock with the realistic profile: no sleeps, time moves by advancing."""

from __future__ import annotations

from starlette.testclient import TestClient

from emulator.domain.timing import PROFILES
from tests.helpers import (
    RL,
    advance,
    assert_error,
    ce_sample,
    create_resource,
    create_session,
    get_resource,
    get_session,
    submit,
)

T = PROFILES["realistic"]


def _ready(client: TestClient, **body: object) -> dict:
    r = create_resource(client, **body)
    advance(client, T.queue_slot_seconds + T.resource_creating_seconds)
    r = get_resource(client, r["id"])
    assert r["status"] == "MODEL_RESOURCES_STATUS_READY"
    return r


def _running(client: TestClient, rid: str) -> dict:
    s = create_session(client, rid)
    advance(client, T.session_creating_seconds)
    s = get_session(client, s["id"])
    assert s["status"] == "TRAINING_SESSION_STATUS_RUNNING"
    return s


def test_queue_position_counts_down_then_creating_then_ready(realistic_client: TestClient) -> None:
    c = realistic_client
    ids = [create_resource(c)["id"] for _ in range(3)]
    assert [get_resource(c, i)["status_details"]["queue_position"] for i in ids] == [1, 2, 3]
    advance(c, T.queue_slot_seconds)
    first = get_resource(c, ids[0])
    assert first["status"] == "MODEL_RESOURCES_STATUS_CREATING" and first["status_details"] == {}
    assert [get_resource(c, i)["status_details"]["queue_position"] for i in ids[1:]] == [1, 2]
    advance(c, T.resource_creating_seconds)
    assert get_resource(c, ids[0])["status"] == "MODEL_RESOURCES_STATUS_READY"
    advance(c, 2 * T.queue_slot_seconds + T.resource_creating_seconds)
    assert all(get_resource(c, i)["status"] == "MODEL_RESOURCES_STATUS_READY" for i in ids)


def test_transition_times_are_virtual_times(realistic_client: TestClient) -> None:
    c = realistic_client
    r = create_resource(c)
    advance(c, 1_000)
    got = get_resource(c, r["id"])
    # updated_at is when READY happened, not when it was read.
    from emulator.clock import parse_rfc3339

    assert parse_rfc3339(got["updated_at"]) - parse_rfc3339(got["created_at"]) == \
        T.queue_slot_seconds + T.resource_creating_seconds


def test_resource_expires_and_sessions_become_expired(realistic_client: TestClient) -> None:
    c = realistic_client
    r = _ready(c, inactive_timeout=600)
    s = _running(c, r["id"])
    advance(c, 599 - T.session_creating_seconds + T.session_creating_seconds - 1)
    assert get_resource(c, r["id"])["status"] == "MODEL_RESOURCES_STATUS_READY"
    advance(c, 2)
    assert get_resource(c, r["id"])["status"] in ("MODEL_RESOURCES_STATUS_STOPPING", "MODEL_RESOURCES_STATUS_STOPPED")
    assert get_session(c, s["id"])["status"] == "TRAINING_SESSION_STATUS_EXPIRED"
    advance(c, T.resource_stopping_seconds)
    assert get_resource(c, r["id"])["status"] == "MODEL_RESOURCES_STATUS_STOPPED"
    assert_error(c.post(f"{RL}/model-resources/{r['id']}/stop"), 400)


def test_extend_expiry_keeps_resource_alive(realistic_client: TestClient) -> None:
    c = realistic_client
    r = _ready(c, inactive_timeout=300)
    ext = c.post(f"{RL}/model-resources/{r['id']}/extend-expiry", json={"seconds": 3600}).json()
    assert ext["expires_at"] > r["expires_at"]
    advance(c, 3000)
    assert get_resource(c, r["id"])["status"] == "MODEL_RESOURCES_STATUS_READY"
    advance(c, 700)
    assert get_resource(c, r["id"])["status"] != "MODEL_RESOURCES_STATUS_READY"


def test_activity_pushes_expiry_and_running_operation_blocks_it(realistic_client: TestClient) -> None:
    c = realistic_client
    r = _ready(c, inactive_timeout=300)
    s = _running(c, r["id"])
    advance(c, 250)
    before = get_resource(c, r["id"])["expires_at"]
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [3, 4])]}
    submit(c, s["id"], "forward-backward", body)
    after = get_resource(c, r["id"])["expires_at"]
    assert after > before


def test_operations_run_in_order_over_virtual_time(realistic_client: TestClient) -> None:
    c = realistic_client
    r = _ready(c)
    s = _running(c, r["id"])
    a = submit(c, s["id"], "optim-step", {}).json()
    b = submit(c, s["id"], "optim-step", {}).json()
    url = f"{RL}/training-sessions/{s['id']}/operations/optim-step/"
    assert c.get(url + a["id"]).json()["status"] == "TRAINING_OPERATION_STATUS_RUNNING"
    assert c.get(url + b["id"]).json()["status"] == "TRAINING_OPERATION_STATUS_PENDING"
    advance(c, T.op_overhead_seconds + T.optim_step_seconds)
    assert c.get(url + a["id"]).json()["output"] == {"step": "1"}
    assert c.get(url + b["id"]).json()["status"] == "TRAINING_OPERATION_STATUS_RUNNING"
    advance(c, T.op_overhead_seconds + T.optim_step_seconds)
    assert c.get(url + b["id"]).json()["output"] == {"step": "2"}


def test_force_stop_stops_sessions_and_fails_queued_operations(realistic_client: TestClient) -> None:
    c = realistic_client
    r = _ready(c)
    s = _running(c, r["id"])
    op = submit(c, s["id"], "optim-step", {}).json()
    stopped = c.post(f"{RL}/model-resources/{r['id']}/stop", params={"force": "true"}).json()
    assert stopped["status"] == "MODEL_RESOURCES_STATUS_STOPPING"
    assert get_session(c, s["id"])["status"] == "TRAINING_SESSION_STATUS_STOPPING"
    failed = c.get(f"{RL}/training-sessions/{s['id']}/operations/optim-step/{op['id']}").json()
    assert failed["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
    advance(c, max(T.resource_stopping_seconds, T.session_stopping_seconds))
    assert get_session(c, s["id"])["status"] == "TRAINING_SESSION_STATUS_STOPPED"
    assert get_resource(c, r["id"])["status"] == "MODEL_RESOURCES_STATUS_STOPPED"


def test_session_waits_for_its_resource(realistic_client: TestClient) -> None:
    c = realistic_client
    r = create_resource(c)
    s = create_session(c, r["id"])
    advance(c, T.queue_slot_seconds + T.resource_creating_seconds)
    assert get_session(c, s["id"])["status"] == "TRAINING_SESSION_STATUS_CREATING"
    advance(c, T.session_creating_seconds)
    assert get_session(c, s["id"])["status"] == "TRAINING_SESSION_STATUS_RUNNING"


def test_weights_sync_background_applies_on_next_sample(client: TestClient) -> None:
    from tests.helpers import run_op, running_session

    s = running_session(client)
    sid = s["id"]
    run_op(client, sid, "optim-step", {})
    out = run_op(client, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"})["output"]
    assert out == {"weights_version": "1"}
    ps = get_session(client, sid)["policy_state"]
    assert ps == {"applied_weights_version": "0", "pending_publish": True, "target_weights_version": "1",
                  "trainer_step": "1"}
    sample = run_op(client, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1]}}]}]})
    assert sample["output"]["results"][0]["policy_segments"] == [{"start_token": 0, "version": 1}]
    assert get_session(client, sid)["policy_state"]["pending_publish"] is False


def test_samples_use_applied_version_without_sync(client: TestClient) -> None:
    from tests.helpers import run_op, running_session

    s = running_session(client)
    run_op(client, s["id"], "optim-step", {})
    sample = run_op(client, s["id"], "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1]}}]}]})
    assert sample["output"]["results"][0]["policy_segments"] == [{"start_token": 0, "version": 0}]


def test_clock_control_plane(client: TestClient) -> None:
    clock = client.get("/_emulator/clock").json()
    assert clock["mode"] == "manual" and clock["now"] == "2026-01-01T00:00:00.000Z"
    assert advance(client, 90)["now"] == "2026-01-01T00:01:30.000Z"
    assert_error(client.post("/_emulator/clock/advance", json={"seconds": -1}), 400)
    assert client.post("/_emulator/clock", json={"speed": 5}).json()["speed"] == 5


def test_events_record_transitions(client: TestClient) -> None:
    r = create_resource(client)
    get_resource(client, r["id"])
    events = client.get("/_emulator/events").json()["data"]
    mine = [(e["from"], e["to"]) for e in events if e.get("id") == r["id"]]
    assert mine == [(None, "MODEL_RESOURCES_STATUS_PENDING"),
                    ("MODEL_RESOURCES_STATUS_PENDING", "MODEL_RESOURCES_STATUS_CREATING"),
                    ("MODEL_RESOURCES_STATUS_CREATING", "MODEL_RESOURCES_STATUS_READY")]
