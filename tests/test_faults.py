"""Fault rules: every effect, triggers, the per-request header, and how the SDK meets them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.testing import serve_in_thread
from tests.conftest import make_client
from tests.helpers import (
    RL,
    assert_error,
    ce_sample,
    create_resource,
    create_session,
    get_resource,
    get_session,
    ready_resource,
    run_op,
    running_session,
)


def add(client: TestClient, *rules: dict) -> None:
    resp = client.post("/_emulator/faults", json=list(rules))
    assert resp.status_code == 200, resp.text


def test_status_effect_answers_error_data_with_retry_after(client: TestClient) -> None:
    add(client, {"name": "outage", "match": {"operation_id": "listModelResources"}, "trigger": {"first_n": 2},
                 "effect": {"status": 503, "code": "overloaded", "message": "try later", "retry_after": 3}})
    for _ in range(2):
        resp = client.get(f"{RL}/model-resources")
        err = assert_error(resp, 503)
        assert err == {"message": "try later", "type": "server_error", "param": None, "code": "overloaded"}
        assert resp.headers["retry-after"] == "3"
    assert client.get(f"{RL}/model-resources").status_code == 200
    listed = client.get("/_emulator/faults").json()["data"]
    assert listed[0]["name"] == "outage" and listed[0]["matched"] == 3 and listed[0]["fired"] == 2


def test_fired_counts_the_requests_a_rule_acted_on_not_those_it_matched(client: TestClient) -> None:
    add(client, {"name": "once", "match": {"method": "GET"}, "trigger": {"first_n": 1}, "effect": {"status": 503}},
        {"name": "second", "match": {"method": "GET"}, "trigger": {"nth": [2, 4]}, "effect": {"status": 500}})
    codes = [client.get(f"{RL}/supported-models").status_code for _ in range(5)]
    # "second" only sees what "once" let through: its 2nd and 4th are the 3rd and 5th requests.
    assert codes == [503, 200, 500, 200, 500]
    listed = {r["name"]: (r["matched"], r["fired"]) for r in client.get("/_emulator/faults").json()["data"]}
    assert listed == {"once": (5, 1), "second": (4, 2)}
    # A request naming a rule gets its effect whatever the trigger: that is a firing too.
    assert client.get(f"{RL}/supported-models", headers={"X-Emulator-Fault": "once"}).status_code == 503
    assert client.get("/_emulator/faults").json()["data"][0]["fired"] == 2


def test_nth_trigger_and_path_glob(client: TestClient) -> None:
    add(client, {"match": {"method": "GET", "path": "/v1/rl/supported-*"}, "trigger": {"nth": [2]},
                 "effect": {"status": 500}})
    codes = [client.get(f"{RL}/supported-models").status_code for _ in range(3)]
    assert codes == [200, 500, 200]


def test_probability_is_seeded(client: TestClient) -> None:
    def pattern(seed: int) -> list[int]:
        with make_client(Runtime(Config(clock="manual", seed=seed))) as c:
            add(c, {"match": {"operation_id": "getSupportedModels"}, "trigger": {"probability": 0.5},
                    "effect": {"status": 502}})
            return [c.get(f"{RL}/supported-models").status_code for _ in range(20)]

    first = pattern(3)
    assert first == pattern(3)
    assert 502 in first and 200 in first


def test_operation_fails_effect(client: TestClient) -> None:
    s = running_session(client)
    add(client, {"match": {"operation_id": "createForwardBackward"}, "trigger": {"first_n": 1},
                 "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}})
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [3])]}
    failed = run_op(client, s["id"], "forward-backward", body)
    assert failed["status"] == "TRAINING_OPERATION_STATUS_FAILED"
    assert failed["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
    assert run_op(client, s["id"], "forward-backward", body)["status"] == "TRAINING_OPERATION_STATUS_COMPLETED"


def test_resource_error_effect_takes_sessions_down(client: TestClient) -> None:
    r = ready_resource(client)
    s = running_session(client, r["id"])
    add(client, {"name": "boom", "match": {}, "trigger": {"first_n": 0},
                 "effect": {"resource_error": "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE"}})
    client.get(f"{RL}/model-resources/{r['id']}", headers={"X-Emulator-Fault": "boom"})
    got = get_resource(client, r["id"])
    assert got["status"] == "MODEL_RESOURCES_STATUS_ERROR"
    assert got["error"]["code"] == "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE"
    sess = get_session(client, s["id"])
    assert sess["status"] == "TRAINING_SESSION_STATUS_ERROR"
    assert sess["error"]["code"] == "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE"


def test_session_error_effect(client: TestClient) -> None:
    r = ready_resource(client)
    add(client, {"match": {"operation_id": "createSession"}, "trigger": {"first_n": 1},
                 "effect": {"session_error": "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"}})
    s = create_session(client, r["id"])
    assert get_session(client, s["id"])["error"]["code"] == "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"


def test_queue_position_effect(realistic_client: TestClient) -> None:
    add(realistic_client, {"match": {"operation_id": "createModelResources"},
                           "effect": {"queue_position": 3}})
    r = create_resource(realistic_client)
    assert r["status_details"]["queue_position"] == 3
    realistic_client.post("/_emulator/clock/advance", json={"seconds": 45 * 1})
    assert get_resource(realistic_client, r["id"])["status_details"]["queue_position"] == 2


def test_unknown_fault_header_and_bad_rules_are_400(client: TestClient) -> None:
    add(client, {"name": "x", "effect": {"status": 500}, "trigger": {"first_n": 0}})
    assert_error(client.get(f"{RL}/supported-models", headers={"X-Emulator-Fault": "nope"}), 400)
    assert_error(client.post("/_emulator/faults", json={"effect": {"status": 200}}), 400)
    assert_error(client.post("/_emulator/faults", json={"effect": {}, "trigger": {"first_n": 1}}), 400)
    assert client.delete("/_emulator/faults").json() == {"data": [], "persisted": False}


def test_a_rule_whose_name_has_a_slash_is_removed_by_its_encoded_name(client: TestClient) -> None:
    add(client, {"name": "sessions/429", "effect": {"status": 429}, "trigger": {"first_n": 0}},
        {"name": "plain", "effect": {"status": 500}, "trigger": {"first_n": 0}})
    resp = client.delete("/_emulator/faults/sessions%2F429")
    assert resp.status_code == 200, resp.text
    assert [r["name"] for r in resp.json()["data"]] == ["plain"]
    err = assert_error(client.delete("/_emulator/faults/sessions%2F429"), 404)
    assert "'sessions/429'" in err["message"]
    assert_error(client.delete("/_emulator/faults/sessions/429"), 404)  # two segments: no such endpoint
    err = assert_error(client.get("/v1%2Frl/supported-models"), 404)  # one segment "v1/rl": no such endpoint
    assert err["code"] == "unknown_endpoint" and "/v1%2Frl/supported-models" in err["message"], err
    assert [r["name"] for r in client.delete("/_emulator/faults/plain").json()["data"]] == []


# --- through the SDK ----------------------------------------------------------------------------

@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Runtime]]:
    with serve_in_thread(Config()) as (url, runtime):
        monkeypatch.setenv("TOGETHER_BASE_URL", url)
        monkeypatch.setenv("TOGETHER_API_KEY", f"fault-key-{os.getpid()}")
        yield url, runtime


def test_sdk_retries_429_and_honours_retry_after(sdk: tuple[str, Runtime]) -> None:
    from together import Together

    sdk[1].faults.load({"match": {"operation_id": "getSupportedModels"}, "trigger": {"first_n": 2},
                        "effect": {"status": 429, "retry_after": 1}})
    start = time.monotonic()
    models = Together(max_retries=2).post_training.supported_models.get()
    assert models.data and time.monotonic() - start >= 1.5  # two waits of Retry-After: 1 s


def test_sdk_gives_up_after_its_retries_on_503(sdk: tuple[str, Runtime]) -> None:
    from together import InternalServerError, Together

    sdk[1].faults.load({"match": {"operation_id": "getSupportedModels"}, "effect": {"status": 503, "retry_after": 1}})
    with pytest.raises(InternalServerError):
        Together(max_retries=1).post_training.supported_models.get()
    assert sdk[1].faults.describe()[0]["matched"] == 2


def test_sdk_operation_failure_raises(sdk: tuple[str, Runtime]) -> None:
    from together.post_training import LossConfig, ModelResourcesClient, Sample
    from together.post_training._operations import OperationFailedError

    sdk[1].faults.load({"match": {"operation_id": "createForwardBackward"},
                        "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}})
    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=0.1, ready_timeout=30)
    session = resources.create_session(interval=0.1, timeout=30)
    sample = Sample(**ce_sample([1, 2, 3], [4, 5]))
    with pytest.raises(OperationFailedError, match="NON_FINITE_LOSS"):
        session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    session.stop()
    resources.stop()


def test_readme_bad_day_rules_load() -> None:
    """The example fault file of docs/faults-and-scenarios.md is valid (docs that work as written);
    tests/test_fixtures.py holds it equal to fixtures/faults/bad-day.yaml, which `--faults bad-day` loads."""
    import yaml

    from emulator.faults import FaultSet
    from tests.doc_blocks import block

    shown = block("faults-and-scenarios.md", "Rehearse a bad day", 0)
    assert shown.lang == "yaml"
    rules = FaultSet().load(yaml.safe_load(shown.body))
    assert [r["name"] for r in rules] == ["gpu-queue", "overloaded", "nan-loss", "flaky", "provisioning-failed"]


def test_fault_header_without_any_rule_is_400(client: TestClient) -> None:
    err = assert_error(client.get(f"{RL}/supported-models", headers={"X-Emulator-Fault": "missing"}), 400)
    assert err["param"] == "X-Emulator-Fault"


def test_fault_effects_reach_the_domain_as_domain_events(realistic_runtime: Runtime) -> None:
    """Issue 38, item 6: the domain is told what happens to which object, never the request (its operationId,
    path parameters or rendered answer); emulator.api.faults says which objects a request names."""
    import inspect

    from emulator.api import faults as api_faults
    from emulator.domain import fault_effects as fx

    assert list(inspect.signature(fx.apply).parameters) == ["tenant", "ctx", "named", "events"]
    runtime = realistic_runtime
    with make_client(runtime) as client:
        r = create_resource(client)  # PENDING: the realistic profile takes a while
    project = runtime.tenancy.project_for_token("test-token")
    assert project is not None
    with runtime.unit_of_work(project, write=True) as (tenant, ctx):
        position = fx.apply(tenant, ctx, fx.Named(resource_id=r["id"]), [fx.QueuedAt(4)])
        assert position == 4 and tenant.resources.peek(r["id"]).queue_extra == 3
        fx.apply(tenant, ctx, fx.Named(resource_id=r["id"]), [fx.ResourceFails("MODEL_RESOURCES_ERROR_CODE_"
                                                                               "PROVISIONING_FAILED", "gone")])
        assert tenant.resources.peek(r["id"]).status == "MODEL_RESOURCES_STATUS_ERROR"
    named = api_faults.named("createSession", {}, {"model_resources_id": "r1"}, {"id": "s1"})
    assert named == fx.Named(operation_id="s1", session_id="s1", resource_id="r1")
    assert api_faults.events({"operation_fails": "X", "queue_position": 2, "message": "m", "session_error": "Y"}) == [
        fx.OperationFails("X"), fx.QueuedAt(2), fx.SessionFails("Y", "m")]


# --- a reset restarts the counters it scopes; a fixture loaded again replaces its rules (issue 42, item 4) ----

ONCE = {"name": "once", "match": {"operation_id": "listModelResources"}, "trigger": {"first_n": 1},
        "effect": {"status": 503}}


def test_a_reset_restarts_every_rule_s_counters(client: TestClient) -> None:
    add(client, ONCE, {"name": "third", "match": {"operation_id": "listModelResources"}, "trigger": {"nth": [3]},
                       "effect": {"status": 500}})
    codes = [client.get(f"{RL}/model-resources").status_code for _ in range(4)]
    assert codes == [503, 200, 200, 500]  # ("third" counts what "once" let through)
    answer = client.post("/_emulator/reset").json()
    assert answer["fault_counters_restarted"] == ["once", "third"], answer
    listed = {r["name"]: (r["matched"], r["fired"]) for r in client.get("/_emulator/faults").json()["data"]}
    assert listed == {"once": (0, 0), "third": (0, 0)}
    assert [client.get(f"{RL}/model-resources").status_code for _ in range(4)] == codes  # plays again


def test_a_tenant_reset_restarts_that_tenant_s_rules_only(client: TestClient) -> None:
    add(client, {**ONCE, "name": "everyone", "trigger": {"nth": [99]}})  # (first: it sees every request)
    for key in ("alice-key", "bob-key"):
        resp = client.post("/_emulator/faults", json=ONCE, headers={"X-Emulator-Tenant": key})
        assert resp.status_code == 200, resp.text
    for key in ("alice-key", "bob-key"):
        assert client.get(f"{RL}/model-resources", headers={"Authorization": f"Bearer {key}"}).status_code == 503
    answer = client.post("/_emulator/reset", headers={"X-Emulator-Tenant": "alice-key"}).json()
    assert answer["fault_counters_restarted"] == ["once"], answer
    codes = {key: client.get(f"{RL}/model-resources", headers={"Authorization": f"Bearer {key}"}).status_code
             for key in ("alice-key", "bob-key")}
    assert codes == {"alice-key": 503, "bob-key": 200}
    everyone = [r for r in client.get("/_emulator/faults").json()["data"] if r["name"] == "everyone"]
    assert everyone[0]["matched"] == 4  # a rule of every tenant counts on through one tenant's reset


def test_a_fixture_loaded_again_replaces_its_own_rules_and_says_so(client: TestClient) -> None:
    first = client.post("/_emulator/faults", json={"fixture": "bad-day"})
    assert first.status_code == 200 and first.json()["replaced"] == [], first.text
    names = [r["name"] for r in first.json()["data"]]
    add(client, ONCE)
    assert client.get(f"{RL}/model-resources").status_code == 503  # "once" fires; bad-day's "flaky" counts
    again = client.post("/_emulator/faults", json={"fixture": "bad-day"})
    assert again.status_code == 200, again.text
    assert again.json()["replaced"] == names
    assert again.json()["message"] == (f"fixture 'bad-day' was loaded already: its rules {', '.join(names)} were "
                                       "replaced, their counters restarted")
    listed = client.get("/_emulator/faults").json()["data"]
    assert sorted(r["name"] for r in listed) == sorted([*names, "once"])
    assert all(r["matched"] == 0 for r in listed if r["name"] != "once")
    assert [r for r in listed if r["name"] == "once"][0]["fired"] == 1  # another rule keeps its counters
    # Rules given one by one still keep their names unique.
    dup = client.post("/_emulator/faults", json=ONCE)
    assert dup.status_code == 400 and "a fault rule named 'once' already exists" in dup.text
