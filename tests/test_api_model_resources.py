"""Model resources through the app (in-process, manual clock, response validation on)."""

from __future__ import annotations

from starlette.testclient import TestClient

from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import (
    RL,
    assert_error,
    create_resource,
    create_session,
    get_resource,
    get_session,
    ready_resource,
    running_session,
)


def test_create_model_resources_answers_pending_then_ready(client: TestClient) -> None:
    r = create_resource(client, compute_config={"num_generator_replicas": 1})
    assert r["status"] == "MODEL_RESOURCES_STATUS_PENDING"
    assert r["status_details"] == {"queue_position": 1}
    assert r["inactive_timeout"] == 3600 and r["lora_enabled"] is True
    assert r["compute_config"] == {"num_generator_replicas": 1, "gpu_type": "B200-SXM"}
    got = get_resource(client, r["id"])
    assert got["status"] == "MODEL_RESOURCES_STATUS_READY"
    assert got["status_details"] == {}
    assert got["expires_at"] > got["created_at"]
    assert got["updated_at"] >= got["created_at"]


def test_create_model_resources_rejects_unknown_base_model(client: TestClient) -> None:
    err = assert_error(client.post(f"{RL}/model-resources", json={"base_model": "nope/model"}), 400)
    assert err["param"] == "base_model"


def test_create_model_resources_rejects_out_of_range_timeout(client: TestClient) -> None:
    assert_error(client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B",
                                                             "inactive_timeout": 10}), 400)


def test_get_model_resources_unknown_id_is_404(client: TestClient) -> None:
    assert_error(client.get(f"{RL}/model-resources/00000000-0000-4000-8000-000000000000"), 404)


def test_list_model_resources_pages_newest_first_without_gaps(client: TestClient) -> None:
    ids = [create_resource(client)["id"] for _ in range(7)]
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": 3, **({"after": after} if after else {})}
        page = client.get(f"{RL}/model-resources", params=params).json()
        seen += [r["id"] for r in page["data"]]
        if not page["meta"]["has_more"]:
            assert page["meta"]["next_cursor"] == ""
            break
        after = page["meta"]["next_cursor"]
    assert seen == list(reversed(ids))


def test_list_model_resources_filters_several_statuses(client: TestClient) -> None:
    ready = ready_resource(client)["id"]
    stopped = ready_resource(client)["id"]
    client.post(f"{RL}/model-resources/{stopped}/stop")
    pending = create_resource(client)["id"]  # not read yet, but the list settles it to READY
    resp = client.get(f"{RL}/model-resources", params={"status": "MODEL_RESOURCES_STATUS_STOPPED,"
                                                                 "MODEL_RESOURCES_STATUS_STOPPING"})
    assert [r["id"] for r in resp.json()["data"]] == [stopped]
    resp = client.get(f"{RL}/model-resources", params={"status": "MODEL_RESOURCES_STATUS_READY"})
    assert {r["id"] for r in resp.json()["data"]} == {ready, pending}


def test_list_model_resources_rejects_bad_limit_and_status(client: TestClient) -> None:
    assert_error(client.get(f"{RL}/model-resources", params={"limit": 0}), 400)
    assert_error(client.get(f"{RL}/model-resources", params={"limit": 101}), 400)
    assert_error(client.get(f"{RL}/model-resources", params={"status": "BOGUS"}), 400)


def test_list_model_resources_created_by_me(runtime: Runtime) -> None:
    tokens = {"tokens": {"alice-key": {"user": "alice", "project": "team"},
                         "bob-key": {"user": "bob", "project": "team"}}}
    import json
    import tempfile

    from emulator.config import Config

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(tokens, f)
    shared = Runtime(Config(clock="manual", validate_responses=True, tokens_file=f.name))
    with make_client(shared, "alice-key") as alice, make_client(shared, "bob-key") as bob:
        a = create_resource(alice)["id"]
        b = create_resource(bob)["id"]
        mine = alice.get(f"{RL}/model-resources", params={"created_by": "me"}).json()["data"]
        assert [r["id"] for r in mine] == [a]
        everyone = alice.get(f"{RL}/model-resources").json()["data"]
        assert {r["id"] for r in everyone} == {a, b}
        assert_error(make_client(shared, "stranger").get(f"{RL}/model-resources"), 401)


def test_stop_model_resources_with_active_sessions_needs_force(client: TestClient) -> None:
    r = ready_resource(client)
    s = running_session(client, r["id"])
    err = assert_error(client.post(f"{RL}/model-resources/{r['id']}/stop"), 400)
    assert s["id"] in err["message"]
    assert get_resource(client, r["id"])["status"] == "MODEL_RESOURCES_STATUS_READY"
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_RUNNING"
    stopped = client.post(f"{RL}/model-resources/{r['id']}/stop", params={"force": "true"}).json()
    assert stopped["status"] == "MODEL_RESOURCES_STATUS_STOPPING"
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_STOPPED"
    assert get_resource(client, r["id"])["status"] == "MODEL_RESOURCES_STATUS_STOPPED"


def test_stop_model_resources_twice_is_400(client: TestClient) -> None:
    r = ready_resource(client)
    assert client.post(f"{RL}/model-resources/{r['id']}/stop").status_code == 200
    assert_error(client.post(f"{RL}/model-resources/{r['id']}/stop"), 400)


def test_stop_model_resources_after_sessions_stopped(client: TestClient) -> None:
    r = ready_resource(client)
    s = running_session(client, r["id"])
    assert client.post(f"{RL}/training-sessions/{s['id']}/stop").json()["status"] == "TRAINING_SESSION_STATUS_STOPPING"
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_STOPPED"
    assert client.post(f"{RL}/model-resources/{r['id']}/stop").status_code == 200


def test_extend_model_resources_expiry_only_moves_later(client: TestClient) -> None:
    r = ready_resource(client)
    before = r["expires_at"]
    same = client.post(f"{RL}/model-resources/{r['id']}/extend-expiry", json={"seconds": 60}).json()
    assert same["expires_at"] == before
    later = client.post(f"{RL}/model-resources/{r['id']}/extend-expiry", json={"seconds": 7200}).json()
    assert later["expires_at"] > before
    assert_error(client.post(f"{RL}/model-resources/{r['id']}/extend-expiry", json={"seconds": 10}), 400)


def test_extend_model_resources_expiry_refused_unless_ready(client: TestClient) -> None:
    r = ready_resource(client)
    client.post(f"{RL}/model-resources/{r['id']}/stop")
    assert_error(client.post(f"{RL}/model-resources/{r['id']}/extend-expiry", json={"seconds": 600}), 400)


def test_estimate_model_resources_cost(client: TestClient) -> None:
    resp = client.post(f"{RL}/model-resources/estimate-cost", json={"base_model": "Qwen/Qwen3.8-27B"})
    body = resp.json()
    assert resp.status_code == 200 and body["currency"] == "USD" and body["price_per_hour"] > 0
    full = client.post(f"{RL}/model-resources/estimate-cost",
                       json={"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": False}).json()
    assert full["price_per_hour"] > body["price_per_hour"]


def test_other_tenant_cannot_see_resources(runtime: Runtime, client: TestClient) -> None:
    r = create_resource(client)
    with make_client(runtime, "someone-else") as other:
        assert_error(other.get(f"{RL}/model-resources/{r['id']}"), 404)
        assert other.get(f"{RL}/model-resources").json()["data"] == []
        assert_error(other.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}), 404)


def test_session_cap_answers_429(client: TestClient) -> None:
    r = ready_resource(client)
    for _ in range(5):
        create_session(client, r["id"])
    resp = client.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]})
    err = assert_error(resp, 429)
    assert "capacity" in err["message"]
    full = ready_resource(client, lora_enabled=False)
    create_session(client, full["id"])
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": full["id"]}), 429)
