"""An import is valid exactly when the emulator could have produced it (issue 26, item 8).

Hypothesis mutates an exported state (one value anywhere in a tenant replaced by another of any JSON kind, a
key or list item dropped, or one duplicated) and imports it. A refused import must be a 400 that changed
nothing; an accepted one must then serve every read without a 5xx (responses validated against the spec),
take new objects beside the imported ones, survive the clock moving on, and export a document that imports
again.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, advance, ce_sample, create_resource, submit

S = f"{RL}/training-sessions"
KINDS = ("forward-backward", "custom-forward-backward", "optim-step", "weights-sync", "sample",
         "inference-checkpoint", "training-checkpoint")


def _seed_state(client: TestClient) -> None:
    """A tenant with a little of everything: resources in several states, a session with finished, running
    and queued operations of every kind, checkpoints, a registry entry and a shaping job, a payload."""
    r = create_resource(client, inactive_timeout=600)
    advance(client, 400)
    s = client.post(S, json={"model_resources_id": r["id"], "metadata": {"team": "rl", "tags": {"a": "b"}},
                             "display_name": "fuzz"}).json()
    advance(client, 60)
    sid = s["id"]
    fb = {"samples": [ce_sample([1, 2, 3], [4, 5])], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
    bodies = {"forward-backward": fb, "optim-step": {"adam_params": {"learning_rate": 1e-3}},
              "weights-sync": {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"},
              "sample": {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                         "sampling_params": {"max_tokens": 4}, "num_samples": 2, "prompt_logprobs": True},
              "custom-forward-backward": {"samples": [ce_sample([1, 2, 3], [4, 5])],
                                          "gradients": [{"data": [0.1, -0.1, 0.2, 0.0], "dtype": "D_TYPE_FLOAT32"}]},
              "inference-checkpoint": {}, "training-checkpoint": {}}
    for kind in KINDS:
        assert submit(client, sid, kind, bodies[kind]).status_code == 200
    advance(client, 60)
    for kind in ("forward-backward", "optim-step", "sample"):  # left running and queued
        submit(client, sid, kind, bodies[kind])
    client.post(f"{S}/{sid}/payloads/upload-url").raise_for_status()
    ckpts = client.get(f"{RL}/checkpoints").json()["data"]
    inference = next(c for c in ckpts if c["type"] == "CHECKPOINT_TYPE_INFERENCE")
    registered = next(iter(inference["inference_registration"].values()))
    client.post("/v1/shaping/prepare-for-fp4-inference",
                json={"inputs": {"model_object_id": registered["id"]}}).raise_for_status()
    create_resource(client)  # PENDING in the queue
    stopped = create_resource(client)
    advance(client, 1)
    client.post(f"{RL}/model-resources/{stopped['id']}/stop", params={"force": "true"})


@pytest.fixture(scope="module")
def exported() -> dict[str, Any]:
    runtime = Runtime(Config(clock="manual", profile="realistic", validate_responses=True))
    with make_client(runtime) as client:
        _seed_state(client)
        doc = client.get("/_emulator/state").json()
    assert len(doc["tenants"]) == 1
    return doc


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            yield from _paths(item, (*prefix, i))


JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**64 - 1]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([1e17, -1e300, 253402300800.0]),
)
JSON = st.recursive(JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=6)


def _mutate(doc: dict[str, Any], path: tuple[Any, ...], value: Any, drop: bool, dup: bool = False) -> dict[str, Any]:
    """``doc`` with the value at ``path`` replaced by ``value``, dropped (a key deleted, a list item removed) or
    duplicated (a list item twice in a row, a key's value under a second key)."""
    out = copy.deepcopy(doc)
    if not path:
        return out
    parent: Any = out
    for part in path[:-1]:
        parent = parent[part]
    if dup and isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
    elif dup and isinstance(parent, dict):
        parent[f"{path[-1]}-again"] = copy.deepcopy(parent[path[-1]])
    elif drop and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif drop and isinstance(parent, list):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def _reads(client: TestClient, doc: dict[str, Any]) -> list[tuple[str, int]]:
    """Every read the API and the dashboard offer over the imported objects: (what, status)."""
    seen: list[tuple[str, int]] = []

    def get(path: str, **params: Any) -> Any:
        resp = client.get(path, params=params)
        seen.append((path, resp.status_code))
        return resp

    tenant = next(iter(doc["tenants"].values()), {}) if isinstance(doc.get("tenants"), dict) else {}
    get(f"{RL}/model-resources", limit=2)
    get(f"{RL}/model-resources")
    get(S, limit=2)
    get(S)
    get(f"{RL}/checkpoints")
    get("/v1/shaping")
    for r in tenant.get("resources") or []:
        if isinstance(r, dict) and isinstance(r.get("id"), str):
            get(f"{RL}/model-resources/{r['id']}")
            get(S, model_resources_id=r["id"])
    for s in tenant.get("sessions") or []:
        if isinstance(s, dict) and isinstance(s.get("id"), str):
            get(f"{S}/{s['id']}")
    for op in tenant.get("operations") or []:
        if isinstance(op, dict) and isinstance(op.get("id"), str) and op.get("kind") in KINDS:
            get(f"{S}/{op.get('session_id')}/operations/{op['kind']}/{op['id']}")
    for c in tenant.get("checkpoints") or []:
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            get(f"{RL}/checkpoints/{c['id']}")
            files = get(f"{RL}/checkpoints/{c['id']}/download", variant="CHECKPOINT_VARIANT_MERGED")
            if files.status_code == 200:
                for f in files.json()["data"][:1]:
                    get(f["url"].split("127.0.0.1:8765", 1)[-1])
    for job in tenant.get("shaping_jobs") or []:
        if isinstance(job, dict) and isinstance(job.get("id"), str):
            get(f"/v1/shaping/{job['id']}")
            get(f"/v1/shaping/{job['id']}/events")
    get("/_emulator/ui/api/tenants")
    for project in doc.get("tenants") or {}:
        get(f"/_emulator/ui/api/tenants/{project}")
    get("/_emulator/events")
    return seen


EXAMPLES = int(os.environ.get("IMPORT_FUZZ_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_an_accepted_import_serves_every_read_and_exports_what_imports(exported: dict[str, Any],
                                                                       data: st.DataObject) -> None:
    project = next(iter(exported["tenants"]))
    paths = [("tenants", project, *p) for p in _paths(exported["tenants"][project]) if p]
    path = data.draw(st.sampled_from(paths), label="path")
    how = data.draw(st.sampled_from(["set", "set", "drop", "dup"]), label="how")
    value = data.draw(JSON, label="value") if how == "set" else None
    doc = _mutate(exported, path, value, how == "drop", how == "dup")
    runtime = Runtime(Config(clock="manual", profile="realistic", validate_responses=True))
    with make_client(runtime) as client:
        answered = client.put("/_emulator/state", json=doc)
        if answered.status_code == 400:
            event("refused")
            assert client.get("/_emulator/state").json()["tenants"] == {}  # refused: nothing changed
            return
        assert answered.status_code == 200, answered.text
        event("accepted")
        failures = [(what, status) for what, status in _reads(client, doc) if status >= 500]
        # New objects next to the imported ones (their ids must be new), then the clock moves on.
        made = client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
        failures += [("create a resource", made.status_code)] if made.status_code >= 500 else []
        if made.status_code == 200:
            session = client.post(S, json={"model_resources_id": made.json()["id"]})
            failures += [("create a session", session.status_code)] if session.status_code >= 500 else []
        for seconds in (1, 120, 3600):
            advance(client, seconds)
            failures += [(what, status) for what, status in _reads(client, doc) if status >= 500]
        again = client.get("/_emulator/state")
        assert again.status_code == 200, again.text
        reimported = client.put("/_emulator/state", json=again.json())
        assert reimported.status_code == 200, f"imported with {path} ({how}: {value!r}): {reimported.text}"
    assert failures == [], f"imported with {path} ({how}: {value!r}), then: {failures[:5]}"


def test_the_unmutated_export_imports_and_serves(exported: dict[str, Any]) -> None:
    runtime = Runtime(Config(clock="manual", profile="realistic", validate_responses=True))
    with make_client(runtime) as client:
        assert client.put("/_emulator/state", json=exported).status_code == 200
        reads = _reads(client, exported)
        assert len(reads) > 20 and [r for r in reads if r[1] != 200] == [], reads


@pytest.mark.parametrize("mutation, message", [
    ((("ids_counter",), 2**64 - 1), "ids_counter"),
    ((("resources", 0, "inactive_timeout"), 2**63 - 1), "inactive_timeout"),
    ((("checkpoints", 0, "model_state"), {}), "model_state"),
])
def test_the_issue_s_accepted_then_failing_imports_are_refused(exported: dict[str, Any], mutation: Any,
                                                               message: str) -> None:
    where, value = mutation
    project = next(iter(exported["tenants"]))
    doc = _mutate(exported, ("tenants", project, *where), value, False)
    runtime = Runtime(Config(clock="manual"))
    with make_client(runtime) as client:
        resp = client.put("/_emulator/state", json=doc)
        assert resp.status_code == 400 and message in resp.json()["error"]["message"], resp.text


def test_a_queue_naming_a_finished_operation_and_a_bad_pending_body_are_refused(exported: dict[str, Any]) -> None:
    project = next(iter(exported["tenants"]))
    tenant = exported["tenants"][project]
    finished = next(op for op in tenant["operations"] if op["status"].endswith("COMPLETED"))
    pending = next(op for op in tenant["operations"] if op["status"].endswith("PENDING"))
    # A session's queue is derived from its unfinished operations (never written): a document cannot name one,
    # and an operation behind the running one cannot run too.
    sessions = next(i for i, s in enumerate(tenant["sessions"]) if s["id"] == pending["session_id"])
    bad_queue = _mutate(exported, ("tenants", project, "sessions", sessions, "queue"), [finished["id"]], False)
    position = tenant["operations"].index(pending)
    two_running = _mutate(exported, ("tenants", project, "operations", position, "status"),
                          "TRAINING_OPERATION_STATUS_RUNNING", False)
    bad_body = _mutate(exported, ("tenants", project, "operations", position, "body"), {"samples": "x"}, False)
    sample = next(i for i, op in enumerate(tenant["operations"]) if op["kind"] == "sample" and op.get("output"))
    bad_output = _mutate(exported, ("tenants", project, "operations", sample, "output"), {"results": 5}, False)
    runtime = Runtime(Config(clock="manual"))
    with make_client(runtime) as client:
        for doc, message in ((bad_queue, "queue"), (two_running, "queue"), (bad_body, "body"),
                             (bad_output, "output")):
            resp = client.put("/_emulator/state", json=doc)
            assert resp.status_code == 400 and message in resp.json()["error"]["message"], resp.text


# --- issue 39, items 2 and 3: checked completely before anything changes ---------------------------------

def _journaled(tmp_path: Any) -> Runtime:
    return Runtime(Config(clock="manual", profile="realistic", state_file=str(tmp_path / "state.jsonl")))


@pytest.mark.parametrize("now", ["9999-01-01T00:00:00.001Z", "9999-06-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_an_import_with_a_clock_past_the_end_of_time_changes_nothing_on_disk_or_in_memory(
        exported: dict[str, Any], tmp_path: Any, now: str) -> None:
    runtime = _journaled(tmp_path)
    path = tmp_path / "state.jsonl"
    with make_client(runtime) as client:
        create_resource(client)
        before, held = path.read_bytes(), client.get("/_emulator/state").json()
        doc = copy.deepcopy(exported)
        doc["clock"]["now"] = now
        resp = client.put("/_emulator/state", json=doc)
        assert resp.status_code == 400 and "clock.now" in resp.json()["error"]["message"], resp.text
        assert path.read_bytes() == before
        assert client.get("/_emulator/state").json() == held
        create_resource(client)  # later writes are journaled, and the file loads
    restored = _journaled(tmp_path)
    assert len(restored.export_state()["tenants"]) == 1


def test_starting_from_a_document_with_a_clock_past_the_end_of_time_says_one_sentence(
        exported: dict[str, Any], tmp_path: Any) -> None:
    doc = copy.deepcopy(exported)
    doc["clock"]["now"] = "9999-06-01T00:00:00Z"
    (tmp_path / "state.jsonl").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="clock.now") as caught:
        _journaled(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_document_without_ids_counter_never_lets_an_id_come_back(exported: dict[str, Any]) -> None:
    project = next(iter(exported["tenants"]))
    doc = _mutate(exported, ("tenants", project, "ids_counter"), None, True)
    runtime = Runtime(Config(clock="manual", profile="realistic"))
    with make_client(runtime) as client:
        assert client.put("/_emulator/state", json=doc).status_code == 200
        held = {r["id"] for r in exported["tenants"][project]["resources"]}
        made = create_resource(client)["id"]
        assert made not in held
        s = client.post(S, json={"model_resources_id": made})
        assert s.status_code == 200 and s.json()["id"] not in {x["id"] for x in exported["tenants"][project]["sessions"]}
        again = client.get("/_emulator/state").json()
        assert client.put("/_emulator/state", json=again).status_code == 200


def test_a_resource_s_sessions_are_derived_never_imported(exported: dict[str, Any]) -> None:
    """A resource's sessions are the sessions that name it (rebuilt on load, never written): a document that
    lists them (a duplicated one, say) is refused in this version, and an older one's list is not read."""
    project = next(iter(exported["tenants"]))
    resources = exported["tenants"][project]["resources"]
    sid, rid = next((s["id"], s["model_resources_id"]) for s in exported["tenants"][project]["sessions"])
    i = next(i for i, r in enumerate(resources) if r["id"] == rid)
    doc = _mutate(exported, ("tenants", project, "resources", i, "session_ids"), [sid, sid], False)
    runtime = Runtime(Config(clock="manual", profile="realistic"))
    with make_client(runtime) as client:
        resp = client.put("/_emulator/state", json=doc)
        assert resp.status_code == 400 and "session_ids" in resp.json()["error"]["message"], resp.text
        older = {**doc, "version": 3}  # (version 3 wrote the list: upgrade drops it)
        assert client.put("/_emulator/state", json=older).status_code == 200
        assert client.get("/_emulator/state").json()["tenants"] == exported["tenants"]


@pytest.mark.parametrize("part", ["models", "published"])
def test_a_boolean_among_a_model_s_numbers_is_refused(exported: dict[str, Any], part: str) -> None:
    project = next(iter(exported["tenants"]))
    sid = next(iter(exported["tenants"][project][part]))
    where = ("state", "weights", "rows", 0) if part == "models" else ("weights", "rows", 0)
    doc = _mutate(exported, ("tenants", project, part, sid, *where), False, False)
    runtime = Runtime(Config(clock="manual", profile="realistic"))
    with make_client(runtime) as client:
        resp = client.put("/_emulator/state", json=doc)
        assert resp.status_code == 400 and "rows" in resp.json()["error"]["message"], resp.text
