"""Tenant-scoped time and control (issue 24): a tenant's own clock, profile, seed, faults, events and state.

Every control-plane call can name a tenant by its API key (``X-Emulator-Tenant``, or ``?tenant=``); then it
touches that tenant only, so parallel users of one emulator never move each other's time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error

A, B = "tenant-a-key", "tenant-b-key"
START = "2026-01-01T00:00:00.000Z"


def scoped(token: str) -> dict[str, str]:
    return {"X-Emulator-Tenant": token}


def as_(client: TestClient, token: str) -> dict[str, str]:  # noqa: ARG001 - reads as "as tenant X"
    return {"Authorization": f"Bearer {token}"}


def resource(client: TestClient, token: str) -> dict[str, Any]:
    resp = client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}, headers=as_(client, token))
    assert resp.status_code == 200, resp.text
    return resp.json()


def status(client: TestClient, token: str, rid: str) -> str:
    resp = client.get(f"{RL}/model-resources/{rid}", headers=as_(client, token))
    assert resp.status_code == 200, resp.text
    return resp.json()["status"].rsplit("_", 1)[-1]


@pytest.fixture
def realistic() -> TestClient:
    with make_client(Runtime(Config(clock="manual", profile="realistic", validate_responses=True))) as c:
        yield c


def test_advance_clock_for_a_tenant_moves_only_that_tenant(realistic: TestClient) -> None:
    ra, rb = resource(realistic, A), resource(realistic, B)
    moved = realistic.post("/_emulator/clock/advance", json={"seconds": 600}, headers=scoped(A))
    assert moved.status_code == 200, moved.text
    assert moved.json()["scope"] == "tenant" and moved.json()["now"] == "2026-01-01T00:10:00.000Z"
    assert status(realistic, A, ra["id"]) == "READY"
    assert status(realistic, B, rb["id"]) == "PENDING"          # B follows the global clock, which stood still
    assert realistic.get("/_emulator/clock").json() == {"now": START, "mode": "manual", "speed": 1.0,
                                                       "scope": "global"}
    assert realistic.get("/_emulator/clock", headers=scoped(B)).json()["scope"] == "global"
    # The global clock moves every tenant without a clock of its own, and no tenant that has one.
    realistic.post("/_emulator/clock/advance", json={"seconds": 300})
    assert status(realistic, B, rb["id"]) == "READY"
    assert realistic.get("/_emulator/clock", params={"tenant": A}).json()["now"] == "2026-01-01T00:10:00.000Z"


def test_tenant_clock_may_run_on_its_own_mode_and_speed(client: TestClient) -> None:
    got = client.post("/_emulator/clock", json={"mode": "system", "speed": 1000}, headers=scoped(A)).json()
    assert got["mode"] == "system" and got["speed"] == 1000 and got["scope"] == "tenant"
    assert client.get("/_emulator/clock").json()["mode"] == "manual"


def test_tenant_time_never_goes_back_behind_its_records(client: TestClient) -> None:
    client.post("/_emulator/clock", json={"now": "2026-06-01T00:00:00Z"}, headers=scoped(A))
    resource(client, A)
    error = assert_error(client.post("/_emulator/clock", json={"now": START}, headers=scoped(A)), 400)
    assert "backwards" in error["message"] and "reset the tenant" in error["message"]
    # Following the global clock (still at START) would move it back too.
    assert "backwards" in assert_error(client.delete("/_emulator/clock", headers=scoped(A)), 400)["message"]
    # Once the tenant holds nothing, its time may start anywhere: a fresh tenant per test.
    assert client.post("/_emulator/reset", headers=scoped(A)).status_code == 200
    assert client.post("/_emulator/clock", json={"mode": "manual", "now": START}, headers=scoped(A)).json()["now"] == START
    assert client.delete("/_emulator/clock", headers=scoped(A)).json()["scope"] == "global"


def test_reset_of_a_tenant_sets_up_the_fresh_tenant_in_one_call(realistic: TestClient) -> None:
    body = {"seed": 5, "clock": {"mode": "manual", "now": "2027-01-01T00:00:00Z"}, "profile": {"profile": "instant"}}
    assert realistic.post("/_emulator/reset", json=body, headers=scoped(A)).json() == {"reset": _project(A), "seed": 5,
                                                                                     "fault_counters_restarted": []}
    first = resource(realistic, A)
    assert first["created_at"].startswith("2027-01-01") and status(realistic, A, first["id"]) == "READY"
    assert realistic.get("/_emulator/profile", headers=scoped(A)).json()["scope"] == "tenant"
    assert realistic.get("/_emulator/profile").json()["profile"] == "realistic"
    # The same seed gives the same ids; another seed others; the global seed is untouched.
    realistic.post("/_emulator/reset", json={"seed": 5}, headers=scoped(A))
    assert resource(realistic, A)["id"] == first["id"]
    realistic.post("/_emulator/seed", json={"seed": 6}, headers=scoped(A))
    assert resource(realistic, A)["id"] != first["id"]
    # A plain reset forgets the tenant's own clock, profile and seed: back to the global ones.
    realistic.post("/_emulator/reset", headers=scoped(A))
    assert realistic.get("/_emulator/clock", headers=scoped(A)).json()["scope"] == "global"
    assert realistic.get("/_emulator/profile", headers=scoped(A)).json()["scope"] == "global"


def _project(token: str) -> str:
    runtime = Runtime(Config())
    project = runtime.tenancy.project_for_token(token)
    assert project is not None
    return project


def test_tenant_seed_leaves_other_tenants_and_the_global_seed_alone() -> None:
    runtime = Runtime(Config(clock="manual", seed=1))
    with make_client(runtime) as c:
        c.post("/_emulator/reset", json={"tenant": A, "seed": 9})  # the body's older form of the scope
        assert runtime.store.seed == 1 and runtime.store.seed_for(_project(A)) == 9
        assert runtime.store.seed_for(_project(B)) == 1


def test_tenant_profile_applies_to_that_tenant_only(realistic: TestClient) -> None:
    got = realistic.post("/_emulator/profile", json={"profile": "instant"}, headers=scoped(A))
    assert got.status_code == 200 and got.json()["scope"] == "tenant", got.text
    ra, rb = resource(realistic, A), resource(realistic, B)
    assert status(realistic, A, ra["id"]) == "READY" and status(realistic, B, rb["id"]) == "PENDING"
    overrides = {"profile": "realistic", "overrides": {"resource_creating_seconds": 1}}
    assert realistic.post("/_emulator/profile", json=overrides, headers=scoped(B)).json()["timing"][
        "resource_creating_seconds"] == 1
    bad = assert_error(realistic.post("/_emulator/profile", json={"profile": "realistic", "overrides": {"nope": 1}},
                                      headers=scoped(B)), 400)
    assert "nope" in bad["message"]
    assert realistic.delete("/_emulator/profile", headers=scoped(A)).json()["scope"] == "global"


def test_fault_rules_scoped_to_a_tenant_never_touch_another(client: TestClient) -> None:
    rule = {"name": "down", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}}
    for token in (A, B):  # the same name for two tenants
        assert client.post("/_emulator/faults", json=rule, headers=scoped(token)).status_code == 200
    assert client.post("/_emulator/faults", json=rule, headers=scoped(A)).status_code == 400  # twice for one
    other = {**rule, "name": "x", "match": {"tenant": B}}
    assert "another tenant" in assert_error(client.post("/_emulator/faults", json=other, headers=scoped(A)),
                                            400)["message"]
    assert client.get(f"{RL}/model-resources", headers=as_(client, A)).status_code == 503
    assert client.get(f"{RL}/model-resources", headers=as_(client, "third-key")).status_code == 200
    listed = client.get("/_emulator/faults", headers=scoped(A)).json()["data"]
    assert [(r["name"], r["match"]["tenant"], r["matched"]) for r in listed] == [("down", A, 1)]
    assert client.delete("/_emulator/faults", headers=scoped(A)).status_code == 200
    assert client.get(f"{RL}/model-resources", headers=as_(client, A)).status_code == 200
    assert client.get(f"{RL}/model-resources", headers=as_(client, B)).status_code == 503
    assert client.delete("/_emulator/faults/down", headers=scoped(A)).status_code == 404
    assert client.delete("/_emulator/faults/down", headers=scoped(B)).json() == {"data": [], "persisted": False}


def test_forced_fault_header_never_fires_another_tenants_rule(client: TestClient) -> None:
    client.post("/_emulator/faults", json={"name": "mine", "trigger": {"first_n": 0},
                                           "effect": {"status": 418}}, headers=scoped(A))
    assert client.get(f"{RL}/model-resources", headers={**as_(client, A), "X-Emulator-Fault": "mine"}).status_code == 418
    refused = client.get(f"{RL}/model-resources", headers={**as_(client, B), "X-Emulator-Fault": "mine"})
    assert refused.status_code == 400


def test_events_scoped_by_header(client: TestClient) -> None:
    resource(client, A)
    resource(client, B)
    events = client.get("/_emulator/events", headers=scoped(A)).json()["data"]
    assert events and {e["project"] for e in events} == {_project(A)}


def test_tenant_state_document_moves_a_tenant_to_another(client: TestClient) -> None:
    client.post("/_emulator/clock", json={"now": "2026-03-01T00:00:00Z"}, headers=scoped(A))
    r = resource(client, A)
    doc = client.get("/_emulator/state", headers=scoped(A)).json()
    assert list(doc["tenants"]) == [_project(A)] and doc["clock"]["now"] == "2026-03-01T00:00:00.000Z"
    assert "presigned" not in doc
    put = client.put("/_emulator/state", json=doc, headers=scoped(B))
    assert put.status_code == 200, put.text
    assert status(client, B, r["id"]) == "READY"
    assert client.get("/_emulator/clock", headers=scoped(B)).json()["now"] == "2026-03-01T00:00:00.000Z"
    assert client.get(f"{RL}/model-resources", headers=as_(client, A)).json()["data"]  # A is unchanged
    whole = client.get("/_emulator/state").json()
    refused = assert_error(client.put("/_emulator/state", json=whole, headers=scoped(B)), 400)
    assert "one tenant" in refused["message"]


def test_whole_state_export_carries_every_tenants_clock_profile_and_seed(tmp_path: Path) -> None:
    state_file = tmp_path / "state.jsonl"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    with make_client(runtime) as c:
        c.post("/_emulator/reset", json={"seed": 3, "clock": {"now": "2026-02-01T00:00:00Z"},
                                         "profile": {"profile": "realistic"}}, headers=scoped(A))
        rid = resource(c, A)["id"]
        doc = c.get("/_emulator/state").json()
    own = doc["clock"]["tenants"][_project(A)]
    assert own["now"] == "2026-02-01T00:00:00.000Z" and own["profile"]["name"] == "realistic"
    assert doc["tenants"][_project(A)]["seed"] == 3
    for restored in (Runtime(Config(clock="manual", state_file=str(state_file))),  # a restart
                     _imported(doc)):                                              # PUT /_emulator/state
        with make_client(restored) as c:
            assert c.get("/_emulator/clock", headers=scoped(A)).json()["now"] == "2026-02-01T00:00:00.000Z"
            assert c.get("/_emulator/profile", headers=scoped(A)).json()["profile"] == "realistic"
            assert status(c, A, rid) == "PENDING"
            assert restored.store.seed_for(_project(A)) == 3


def _imported(doc: dict[str, Any]) -> Runtime:
    runtime = Runtime(Config(clock="manual"))
    runtime.import_state(json.loads(json.dumps(doc)))
    return runtime


def test_scenario_loaded_into_a_tenant_keeps_time_and_faults_in_that_tenant(client: TestClient) -> None:
    loaded = client.post("/_emulator/scenarios/capacity-errors", headers=scoped(A))
    assert loaded.status_code == 200 and loaded.json()["token"] == A, loaded.text
    assert client.get(f"{RL}/model-resources", headers=as_(client, A)).json()["data"]
    assert {r["match"]["tenant"] for r in client.get("/_emulator/faults").json()["data"]} == {A}
    timed = client.post("/_emulator/scenarios/two-sessions-step-40", headers=scoped(B))
    assert timed.status_code == 200, timed.text
    assert client.get("/_emulator/clock").json()["now"] == START  # the scenario's steps moved B's clock only


def test_tenant_scope_by_query_equals_the_header_and_unknown_tokens_are_400(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": {A: {"user": "u1", "project": "p1"}}}))
    with make_client(Runtime(Config(clock="manual", tokens_file=str(tokens))), token=A) as c:
        assert c.post("/_emulator/clock/advance?tenant=" + A, json={"seconds": 5}).json()["scope"] == "tenant"
        assert c.get("/_emulator/clock", headers=scoped(A)).json()["now"] == "2026-01-01T00:00:05.000Z"
        error = assert_error(c.get("/_emulator/clock", headers=scoped("who")), 400)
        assert error["param"] == "X-Emulator-Tenant"
        assert assert_error(c.delete("/_emulator/clock"), 400)["param"] == "tenant"


def test_root_points_to_the_docs_and_the_dashboard(client: TestClient) -> None:
    index = client.get("/").json()
    assert index["docs"] == "/docs/" and index["dashboard"] == "/_emulator/ui"
    assert index["control_plane_docs"] == "/docs/admin/"
    # A browser is sent on to the dashboard (an admin token in the address goes along).
    page = client.get("/?admin_token=t", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/_emulator/ui?admin_token=t"
    assert client.post("/").status_code == 405


def test_control_plane_spec_is_browsable_under_docs(client: TestClient) -> None:
    page = client.get("/docs/admin/")
    assert page.status_code == 200 and "/docs/admin/openapi.json" in page.text
    admin = client.get("/docs/admin/openapi.json").json()
    assert admin["info"]["title"].startswith("Together RL emulator control plane")
    assert admin["servers"][0]["url"].endswith("/_emulator")
    assert "/docs/admin/openapi.json" in client.get("/docs/").text  # the API's page offers it too


def test_access_log_never_prints_the_admin_token_or_keys_in_a_query(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = Runtime(Config(clock="manual", access_log=True, admin_token="admin-secret-123"))
    with make_client(runtime, token="admin-secret-123") as c:
        assert c.get("/_emulator/ui/api/tenants?admin_token=admin-secret-123").status_code == 200
        assert c.get("/_emulator/events", params={"tenant": "api-key-secret-456", "since": 0},
                     headers={"X-Emulator-Admin-Token": "admin-secret-123"}).status_code == 200
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("GET ")]
    assert len(lines) == 2, err
    assert "admin_token=***" in lines[0] and "tenant=***" in lines[1] and "since=0" in lines[1]
    assert "admin-secret-123" not in err and "api-key-secret-456" not in err
