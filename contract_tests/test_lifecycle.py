"""Lifecycle checks of our own: what no schema can say about an asynchronous API.

One job per test. Every read goes through :class:`contract_tests.client.Api`, whose observer also
checks, on every object it sees, that statuses only move along documented edges (terminal states
never revert), that ``step`` never decreases and that ``updated_at >= created_at``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from contract_tests import lifecycle as lc
from contract_tests.client import (
    KIND_OPERATION_IDS,
    KINDS,
    OP_BODIES,
    RL,
    Api,
    forward_backward_body,
    record,
    verify,
    walk,
)
from contract_tests.lifecycle import OP, ContractViolation, R, S
from contract_tests.target import Target

UNKNOWN = "00000000-0000-4000-8000-0000c0ffee00"
creates = [pytest.mark.real_safe, pytest.mark.creates_resources]


@pytest.fixture(scope="module")
def shared(target: Target) -> Iterator[dict[str, Any]]:
    """One READY resource with one RUNNING session, shared by the operation tests of this module."""
    if not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target")
    api = Api(target)
    r = api.ready_resource()
    s = api.running_session(r["id"])
    yield {"resource": r, "session": s}
    api.stop_resource(r["id"], force=True)


# --- errors ------------------------------------------------------------------------------------------

NOT_FOUND_READS = [
    ("getModelResources", "GET", f"{RL}/model-resources/{UNKNOWN}", None),
    ("getSession", "GET", f"{RL}/training-sessions/{UNKNOWN}", None),
    ("getForwardBackward", "GET", f"{RL}/training-sessions/{UNKNOWN}/operations/forward-backward/{UNKNOWN}", None),
    ("getCheckpoint", "GET", f"{RL}/checkpoints/{UNKNOWN}", None),
    ("downloadCheckpoint", "GET", f"{RL}/checkpoints/{UNKNOWN}/download", {"variant": "CHECKPOINT_VARIANT_MERGED"}),
    ("getShapingJob", "GET", "/v1/shaping/shp-quant-0000000000000000", None),
    ("listShapingJobEvents", "GET", "/v1/shaping/shp-quant-0000000000000000/events", None),
    ("stopModelResources", "POST", f"{RL}/model-resources/{UNKNOWN}/stop", None),
    ("stopSession", "POST", f"{RL}/training-sessions/{UNKNOWN}/stop", None),
]


@pytest.mark.real_safe
@pytest.mark.parametrize("operation_id,method,path,params", NOT_FOUND_READS, ids=[n[0] for n in NOT_FOUND_READS])
def test_unknown_ids_are_404(api: Api, operation_id: str, method: str, path: str, params: Any) -> None:
    reply = api.call(operation_id, method, path, params=params, empty_body=method == "POST")
    api.expect(reply, (404,), "unknown ids are 404", "unknown_id_404")


@pytest.mark.real_safe
def test_error_bodies_are_error_data(api: Api) -> None:
    """Every refusal carries ErrorData (the client checks the envelope of every non-2xx answer)."""
    cases = [
        (api.call("listModelResources", "GET", f"{RL}/model-resources", auth=False), (401,), "missing auth"),
        (api.call("listModelResources", "GET", f"{RL}/model-resources", auth=False,
                  headers={"Authorization": "Basic Zm9vOmJhcg=="}), (401,), "malformed auth"),
        (api.call("listModelResources", "GET", f"{RL}/model-resources", params={"limit": 0}), (400, 422),
         "limit below 1"),
        (api.call("listCheckpoints", "GET", f"{RL}/checkpoints", params={"type": "CHECKPOINT_TYPE_BOGUS"}),
         (400, 422), "unknown enum value"),
        (api.call("createModelResources", "POST", f"{RL}/model-resources", json={"base_model": "no/such-model"}),
         (400,), "unsupported base_model"),
        (api.call("createModelResources", "POST", f"{RL}/model-resources", json={}), (400, 422),
         "missing required base_model"),
        (api.call("estimateModelResourcesCost", "POST", f"{RL}/model-resources/estimate-cost",
                  json={"base_model": 12}), (400, 422), "wrongly typed base_model"),
    ]
    for reply, statuses, rule in cases:
        api.expect(reply, statuses, rule, "errors_refused")


# --- statuses ----------------------------------------------------------------------------------------

@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_resource_statuses_follow_documented_edges(api: Api) -> None:
    r = api.ready_resource()
    verify("getModelResources", "status_edges", r["status"] == R + "READY",
           f"resource {r['id']} settled in {r['status']}, not READY")
    for _ in range(3):  # READY is stable while the resource is active; the observer checks each read
        api.get_resource(r["id"]).ok()
    api.stop_resource(r["id"]).ok()
    api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] in lc.TERMINAL["model resource"],
             f"resource {r['id']} after stop", "getModelResources", bound=3600)
    for _ in range(2):
        api.get_resource(r["id"]).ok()


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_session_statuses_follow_documented_edges(api: Api) -> None:
    r = api.ready_resource()
    s = api.running_session(r["id"])
    for _ in range(2):
        api.get_session(s["id"]).ok()
    api.stop_session(s["id"]).ok()
    api.wait(lambda: api.get_session(s["id"]).ok(), lambda o: o["status"] in lc.SESSION_INACTIVE,
             f"session {s['id']} after stop", "getSession", bound=3600)
    api.get_session(s["id"]).ok()
    api.stop_resource(r["id"], force=True)


def _prepare(api: Api, sid: str, kind: str) -> None:
    if kind == "optim-step":
        api.run_op(sid, "forward-backward", forward_backward_body())


def _check_output(kind: str, op: dict[str, Any], body: dict[str, Any] | None, where: str) -> None:
    operation_id = KIND_OPERATION_IDS[kind][1]

    def shape() -> None:
        if op["status"] != OP + "COMPLETED":
            raise ContractViolation("completed_output", f"{where}: a valid {kind} ended {op['status']} "
                                    f"({op.get('error')}), not COMPLETED")
        out = op.get("output")
        if not isinstance(out, dict):
            raise ContractViolation("completed_output", f"{where}: a COMPLETED {kind} operation carries no output "
                                    f"object (got {out!r})")
        problem = None
        if kind == "forward-backward" and not isinstance(out.get("loss"), (int, float)):
            problem = "has no numeric loss"
        elif kind == "optim-step":
            lc.as_int64(out.get("step"), f"{where} output.step")
        elif kind == "weights-sync":
            lc.as_int64(out.get("weights_version"), f"{where} output.weights_version")
        elif kind == "sample":
            results = out.get("results")
            wanted = len((body or {}).get("model_inputs") or [])
            if not isinstance(results, list) or len(results) != wanted:
                problem = f"has {len(results) if isinstance(results, list) else results!r} results for {wanted} inputs"
            else:
                n = (body or {}).get("num_samples") or 1
                counts = [len(r.get("sequences") or []) for r in results]
                if any(c != n for c in counts):
                    problem = f"has {counts} sequences per input, expected num_samples={n}"
                # SampledSequence.routed_experts_key: "Absent ... when `return_routed_experts` is disabled."
                elif not (body or {}).get("return_routed_experts") and any(
                        "routed_experts_key" in seq for r in results for seq in r.get("sequences") or []):
                    problem = "carries routed_experts_key although return_routed_experts was not set"
        elif kind in ("inference-checkpoint", "training-checkpoint"):
            ckpt = out.get("checkpoint")
            if not isinstance(ckpt, dict) or not ckpt.get("id"):
                problem = "has no checkpoint with an id"
        if problem:
            raise ContractViolation("completed_output", f"{where}: the output of a COMPLETED {kind} {problem}: "
                                    f"{str(out)[:300]}")

    record(operation_id, "completed_output", shape)


@pytest.mark.real_safe
@pytest.mark.creates_resources
@pytest.mark.parametrize("kind", KINDS)
def test_operation_completes_with_output(api: Api, shared: dict[str, Any], kind: str) -> None:
    sid = shared["session"]["id"]
    _prepare(api, sid, kind)
    body = OP_BODIES[kind]()
    first = api.submit(sid, kind, body).ok()
    verify(KIND_OPERATION_IDS[kind][0], "initial_status", first["status"] in lc.OPERATION_EDGES,
           f"a submit answered status {first['status']!r}")
    op = api.wait(lambda: api.get_op(sid, kind, first["id"]).ok(), lambda o: o["status"] in lc.OPERATION_DONE,
                  f"{kind} operation {first['id']}", KIND_OPERATION_IDS[kind][1])
    _check_output(kind, op, body, f"{kind} operation {op['id']}")
    for _ in range(2):  # terminal states never revert, and the output stays
        again = api.get_op(sid, kind, op["id"]).ok()
        verify(KIND_OPERATION_IDS[kind][1], "terminal_never_reverts", again.get("output") == op.get("output"),
               f"the output of COMPLETED {kind} operation {op['id']} changed or vanished on a later read")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_operation_read_under_another_kind_is_404(api: Api, shared: dict[str, Any]) -> None:
    sid = shared["session"]["id"]
    op = api.submit(sid, "forward-backward", forward_backward_body()).ok()
    api.expect(api.get_op(sid, "optim-step", op["id"]), (404,), "an operation read under another kind",
               "unknown_id_404")
    api.expect(api.get_op(sid, "forward-backward", UNKNOWN), (404,), "an unknown operation id", "unknown_id_404")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_step_never_decreases(api: Api, shared: dict[str, Any]) -> None:
    sid = shared["session"]["id"]
    steps: list[int] = []
    for _ in range(3):
        api.run_op(sid, "forward-backward", forward_backward_body())
        op = api.run_op(sid, "optim-step", OP_BODIES["optim-step"]())
        _check_output("optim-step", op, None, f"optim-step {op['id']}")
        step = lc.as_int64(op["output"]["step"], "optim-step output.step")
        record("getOptimStep", "step_never_decreases",
               partial(lc.check_step_not_decreasing, "optim-step output.step", steps[-1] if steps else None, step))
        steps.append(step)
        session = api.get_session(sid).ok()  # the observer checks the session's own step
        verify("getSession", "step_matches_optim_step", lc.as_int64(session["step"], "step") == step,
               f"session step {session['step']} differs from the last optim-step's output.step {step}")
    verify("getOptimStep", "step_never_decreases", steps[-1] > steps[0],
           f"three optim-steps did not advance the step: {steps}")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_operations_reach_a_terminal_state_within_bound(api: Api, shared: dict[str, Any]) -> None:
    sid = shared["session"]["id"]
    ops = [("forward-backward", api.submit(sid, "forward-backward", forward_backward_body()).ok()),
           ("sample", api.submit(sid, "sample", OP_BODIES["sample"]()).ok())]
    for kind, op in ops:  # several in flight at once; each must finish
        api.wait(partial(lambda k, i: api.get_op(sid, k, i).ok(), kind, op["id"]),
                 lambda o: o["status"] in lc.OPERATION_DONE, f"{kind} operation {op['id']}",
                 KIND_OPERATION_IDS[kind][1], bound=api.target.op_timeout)


# --- idempotency ---------------------------------------------------------------------------------------

@pytest.mark.real_safe
@pytest.mark.creates_resources
@pytest.mark.parametrize("kind", ["forward-backward", "training-checkpoint"])
def test_idempotency_key_replay_returns_the_original(api: Api, shared: dict[str, Any], kind: str) -> None:
    sid = shared["session"]["id"]
    key = f"contract-replay-{uuid.uuid4().hex}"
    body = OP_BODIES[kind]()
    first = api.submit(sid, kind, body, key=key).ok()
    again = api.submit(sid, kind, body, key=key).ok()
    create_id = KIND_OPERATION_IDS[kind][0]
    verify(create_id, "idempotency_replay", again["id"] == first["id"],
           f"Idempotency-Key replay created a new operation: the same key {key} gave {first['id']} and then "
           f"{again['id']}")
    done = api.wait(lambda: api.get_op(sid, kind, first["id"]).ok(), lambda o: o["status"] in lc.OPERATION_DONE,
                    f"{kind} operation {first['id']}", KIND_OPERATION_IDS[kind][1])
    late = api.submit(sid, kind, body, key=key).ok()
    verify(create_id, "idempotency_replay", late["id"] == first["id"] and late["status"] == done["status"],
           f"Idempotency-Key replay after completion returned {late['id']} ({late['status']}), not the original "
           f"{first['id']} ({done['status']})")


# --- stop ----------------------------------------------------------------------------------------------

@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_stop_session_is_idempotent_in_effect(api: Api) -> None:
    r = api.ready_resource()
    s = api.running_session(r["id"])
    first = api.stop_session(s["id"])
    api.expect(first, (200,), "stopping a running session", "stop_session")
    verify("stopSession", "stop_session", first.body["status"] in lc.SESSION_AFTER_STOP,
           f"stop answered status {first.body['status']}")
    second = api.stop_session(s["id"])  # undocumented: a 200 echo or a 400 ErrorData are both fine
    api.expect(second, (200, 400), "stopping a session twice", "stop_idempotent")
    if second.status == 200:
        verify("stopSession", "stop_idempotent", second.body["status"] in lc.SESSION_AFTER_STOP,
               f"a second stop answered status {second.body['status']}")
    final = api.wait(lambda: api.get_session(s["id"]).ok(), lambda o: o["status"] in lc.SESSION_INACTIVE,
                     f"session {s['id']} after two stops", "getSession", bound=3600)
    verify("stopSession", "stop_idempotent", final["status"] in lc.SESSION_AFTER_STOP,
           f"session ended {final['status']} after being stopped")
    # A stopped session frees its slot and the resource keeps running.
    verify("getModelResources", "stop_session_keeps_resource",
           api.get_resource(r["id"]).ok()["status"] == R + "READY",
           "stopping a session changed its model resource's status")
    api.stop_resource(r["id"], force=True)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_full_weight_resource_holds_one_session(api: Api) -> None:
    r = api.ready_resource(lora_enabled=False)
    if r["status"] != R + "READY":
        pytest.skip(f"{api.target.base_model} full-weight resource did not become READY")
    api.running_session(r["id"])
    over = api.create_session(r["id"])
    api.expect(over, (429,), "a full-weight resource holds one session; the next is a 429", "session_cap_429")
    api.stop_resource(r["id"], force=True)


# --- lists ---------------------------------------------------------------------------------------------

@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_created_objects_are_listed_for_their_tenant_only(api: Api, second_api: Api) -> None:
    r = api.ready_resource()
    s = api.running_session(r["id"])
    _, resources = walk(api, api.list_resources, "listModelResources", 100)
    verify("listModelResources", "created_object_listed", r["id"] in {x["id"] for x in resources},
           f"created model resource {r['id']} is missing from the list")
    _, sessions = walk(api, api.list_sessions, "listSessions", 100)
    verify("listSessions", "created_object_listed", s["id"] in {x["id"] for x in sessions},
           f"created session {s['id']} is missing from the list")
    _, theirs = walk(second_api, second_api.list_resources, "listModelResources", 100)
    verify("listModelResources", "tenant_isolation", r["id"] not in {x["id"] for x in theirs},
           f"tenant isolation broken: another tenant lists model resource {r['id']}")
    _, theirs = walk(second_api, second_api.list_sessions, "listSessions", 100)
    verify("listSessions", "tenant_isolation", s["id"] not in {x["id"] for x in theirs},
           f"tenant isolation broken: another tenant lists session {s['id']}")
    second_api.expect(second_api.get_resource(r["id"]), (404,), "another tenant's model resource is a 404",
                      "tenant_isolation")
    second_api.expect(second_api.get_session(s["id"]), (404,), "another tenant's session is a 404",
                      "tenant_isolation")
    second_api.expect(second_api.stop_resource(r["id"], force=True), (404,),
                      "another tenant cannot stop the resource", "tenant_isolation")
    verify("getModelResources", "tenant_isolation", api.get_resource(r["id"]).ok()["status"] == R + "READY",
           "another tenant's stop request changed the resource")
    api.stop_resource(r["id"], force=True)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_cursors_walk_every_item_exactly_once(api: Api, shared: dict[str, Any]) -> None:
    created = [api.create_resource()["id"] for _ in range(3)]
    sid = shared["session"]["id"]
    ckpts = [api.run_op(sid, "training-checkpoint")["output"]["checkpoint"]["id"] for _ in range(2)]
    for limit in (1, 2, 3):
        pages, _ = walk(api, api.list_resources, "listModelResources", limit)
        record("listModelResources", "pagination_exactly_once",
               partial(lc.check_walk_once, "listModelResources", pages, created))
        pages, _ = walk(api, api.list_checkpoints, "listCheckpoints", limit)
        record("listCheckpoints", "pagination_exactly_once",
               partial(lc.check_walk_once, "listCheckpoints", pages, ckpts))
        pages, _ = walk(api, api.list_sessions, "listSessions", limit)
        record("listSessions", "pagination_exactly_once",
               partial(lc.check_walk_once, "listSessions", pages, [sid]))
    for rid in created:
        api.stop_resource(rid, force=True)


# --- checkpoints -----------------------------------------------------------------------------------------

@pytest.mark.real_safe
@pytest.mark.creates_resources
@pytest.mark.parametrize("kind", ["inference-checkpoint", "training-checkpoint"])
def test_checkpoints_are_registered(api: Api, shared: dict[str, Any], kind: str) -> None:
    sid = shared["session"]["id"]
    op = api.run_op(sid, kind)
    _check_output(kind, op, None, f"{kind} operation {op['id']}")
    summary = op["output"]["checkpoint"]
    ckpt = api.call("getCheckpoint", "GET", f"{RL}/checkpoints/{summary['id']}").ok()
    wanted = "CHECKPOINT_TYPE_INFERENCE" if kind == "inference-checkpoint" else "CHECKPOINT_TYPE_TRAINING"
    verify("getCheckpoint", "checkpoint_registered", ckpt["type"] == wanted and ckpt["session_id"] == sid,
           f"checkpoint {summary['id']} reads type {ckpt['type']} of session {ckpt['session_id']}, expected {wanted} "
           f"of {sid}")
    verify("getCheckpoint", "checkpoint_registered", str(ckpt["step"]) == str(summary["step"]),
           f"checkpoint {summary['id']} step {ckpt['step']} differs from the operation's {summary['step']}")
    session = api.get_session(sid).ok()
    field = "inference_checkpoints" if kind == "inference-checkpoint" else "training_checkpoints"
    verify("getSession", "checkpoint_registered", summary["id"] in {c["id"] for c in session[field]},
           f"checkpoint {summary['id']} is missing from the session's {field}")
    listed = api.call("listCheckpoints", "GET", f"{RL}/checkpoints", params={"session_id": sid, "type": wanted,
                                                                             "limit": 100}).ok()["data"]
    verify("listCheckpoints", "checkpoint_registered", summary["id"] in {c["id"] for c in listed},
           f"checkpoint {summary['id']} is missing from listCheckpoints?session_id&type")
    record("listCheckpoints", "list_filters", lambda: lc.check_filter("listCheckpoints", "type", {wanted}, listed))
    if kind == "inference-checkpoint":
        files = api.call("downloadCheckpoint", "GET", f"{RL}/checkpoints/{summary['id']}/download",
                         params={"variant": "CHECKPOINT_VARIANT_MERGED"}).ok()
        verify("downloadCheckpoint", "checkpoint_files", bool(files["data"]),
               f"inference checkpoint {summary['id']} has no MERGED files to download")
    else:
        refused = api.call("downloadCheckpoint", "GET", f"{RL}/checkpoints/{summary['id']}/download",
                           params={"variant": "CHECKPOINT_VARIANT_MERGED"})
        api.expect(refused, (400, 404), "a training checkpoint cannot be downloaded", "checkpoint_files")


# --- timers (need the emulator's clock) ------------------------------------------------------------------

@pytest.mark.emulator_only
@pytest.mark.creates_resources
def test_idle_resource_expires_and_its_sessions_expire(api: Api) -> None:
    r = api.ready_resource(inactive_timeout=300)
    s = api.running_session(r["id"])
    r = api.get_resource(r["id"]).ok()
    verify("getModelResources", "expires_at", bool(r.get("expires_at")), "a READY resource carries no expires_at")
    expires = lc.parse_time(r["expires_at"], "expires_at")
    extended = api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                        json={"seconds": 60}).ok()  # shorter than what is left: expires_at must not move earlier
    verify("extendModelResourcesExpiry", "expires_at_never_earlier",
           lc.parse_time(extended["expires_at"], "expires_at") >= expires,
           f"extend-expiry moved expires_at earlier: {r['expires_at']} -> {extended['expires_at']}")
    api.target.advance(200)
    verify("getModelResources", "expiry", api.get_resource(r["id"]).ok()["status"] == R + "READY",
           "the resource stopped before its inactive_timeout")
    api.target.advance(400)
    gone = api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] in lc.TERMINAL["model resource"],
                    f"idle resource {r['id']}", "getModelResources", bound=600)
    verify("getModelResources", "expiry", gone["status"] == R + "STOPPED",
           f"an idle resource ends STOPPED, not {gone['status']}")
    sess = api.get_session(s["id"]).ok()
    verify("getSession", "expiry", sess["status"] == S + "EXPIRED",
           f"a session of a resource stopped for inactivity reads {sess['status']}, not EXPIRED")
    late = api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                    json={"seconds": 600})
    api.expect(late, (400,), "extend-expiry on a stopped resource is refused", "extend_expiry_refused")
