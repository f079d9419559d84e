"""Hand-written scenarios of the seed flows: list sessions with every filter and pagination, list resources
and checkpoints with every filter, create a session, stop a resource with and without ``force``.

Each scenario works against any implementation (``real_safe``) but creates resources
(``creates_resources``). Lists may hold objects of earlier tests or other users of the same token,
so every assertion is about the objects the scenario made, or holds for every item listed.
"""

from __future__ import annotations

from functools import partial

import pytest

from contract_tests import lifecycle as lc
from contract_tests.client import Api, record, verify, walk
from contract_tests.lifecycle import R, S

pytestmark = [pytest.mark.real_safe, pytest.mark.creates_resources]


def test_list_sessions_with_every_filter_and_pagination(api: Api) -> None:
    r1 = api.ready_resource()
    r2 = api.ready_resource()
    s1 = api.running_session(r1["id"])
    s2 = api.running_session(r1["id"])
    s3 = api.running_session(r2["id"])
    api.stop_session(s2["id"]).ok()
    s2 = api.get_session(s2["id"]).ok()
    mine = {s1["id"], s2["id"], s3["id"]}

    # status: one value, then several (comma-separated, explode=false)
    running = api.list_sessions(status=S + "RUNNING", limit=100).ok()["data"]
    record("listSessions", "list_filters", lambda: lc.check_filter("listSessions", "status", {S + "RUNNING"}, running))
    ids = {s["id"] for s in running}
    verify("listSessions", "list_filters", {s1["id"], s3["id"]} <= ids and s2["id"] not in ids,
           f"list filter ignored: status=RUNNING must list the running sessions {s1['id']}, {s3['id']} and not the "
           f"stopped {s2['id']} ({s2['status']}); got {sorted(ids & mine)}")
    ended = {S + "STOPPING", S + "STOPPED"}
    stopped = api.list_sessions(status=",".join(sorted(ended)), limit=100).ok()["data"]
    record("listSessions", "list_filters", lambda: lc.check_filter("listSessions", "status", ended, stopped))
    verify("listSessions", "list_filters", s2["id"] in {s["id"] for s in stopped},
           f"list filter: status={','.join(sorted(ended))} does not list the stopped session {s2['id']}")

    # model_resources_id
    of_r1 = api.list_sessions(model_resources_id=r1["id"], limit=100).ok()["data"]
    record("listSessions", "list_filters",
           lambda: lc.check_filter("listSessions", "model_resources_id", {r1["id"]}, of_r1))
    verify("listSessions", "list_filters", {s["id"] for s in of_r1} == {s1["id"], s2["id"]},
           f"list filter: model_resources_id={r1['id']} must list exactly its sessions {s1['id']}, {s2['id']}; got "
           f"{sorted(s['id'] for s in of_r1)}")

    # created_by: "me" and the caller's own user id
    for who in ("me", s1["created_by"]):
        by = api.list_sessions(created_by=who, limit=100).ok()["data"]
        record("listSessions", "list_filters", partial(lc.check_filter, "listSessions", "created_by",
                                                       {s1["created_by"]}, by))
        verify("listSessions", "list_filters", mine <= {s["id"] for s in by},
               f"list filter: created_by={who} misses sessions the caller created")

    # combined filters
    both = api.list_sessions(model_resources_id=r1["id"], status=S + "RUNNING").ok()["data"]
    verify("listSessions", "list_filters", [s["id"] for s in both] == [s1["id"]],
           f"list filters: model_resources_id={r1['id']} and status=RUNNING must list only {s1['id']}; got "
           f"{[s['id'] for s in both]}")

    # pagination, unfiltered and filtered, one and two items per page
    for limit in (1, 2):
        pages, _ = walk(api, api.list_sessions, "listSessions", limit)
        record("listSessions", "pagination_exactly_once", partial(lc.check_walk_once, "listSessions", pages, mine))
    pages, items = walk(api, api.list_sessions, "listSessions", 1, model_resources_id=r1["id"])
    record("listSessions", "pagination_exactly_once",
           lambda: lc.check_walk_once("listSessions?model_resources_id", pages, [s1["id"], s2["id"]]))
    record("listSessions", "list_filters", lambda: lc.check_filter("listSessions", "model_resources_id",
                                                                   {r1["id"]}, items))

    # limits outside 1-100 and an unknown status are refused with ErrorData
    for bad in ({"limit": 0}, {"limit": 101}, {"status": "TRAINING_SESSION_STATUS_BOGUS"}):
        api.expect(api.list_sessions(**bad), (400, 422), f"an invalid list parameter {bad} is refused",
                   "invalid_input_refused")


def test_create_session(api: Api) -> None:
    r = api.ready_resource()
    reply = api.create_session(r["id"], display_name="contract-suite", metadata={"wandb": {"project": "contract"}})
    s = reply.ok()
    verify("createSession", "create_echo", s["model_resources_id"] == r["id"],
           f"createSession: model_resources_id is {s['model_resources_id']}, not {r['id']}")
    verify("createSession", "create_echo", s["base_model"] == r["base_model"],
           f"createSession: base_model {s['base_model']} differs from the resource's {r['base_model']}")
    verify("createSession", "create_echo", s.get("display_name") == "contract-suite",
           f"createSession: display_name not kept: {s.get('display_name')!r}")
    verify("createSession", "initial_status", s["status"] in (S + "CREATING", S + "RUNNING"),
           f"a new session starts CREATING (or already RUNNING), not {s['status']}")
    verify("createSession", "initial_step", lc.as_int64(s["step"], "step") == 0,
           f"a new session (not resumed) starts at step 0, not {s['step']}")
    got = api.wait(lambda: api.get_session(s["id"]).ok(), lambda o: o["status"] != S + "CREATING",
                   f"session {s['id']}", "getSession", bound=3600)
    verify("getSession", "read_back", got["id"] == s["id"] and got["status"] == S + "RUNNING",
           f"session {s['id']} on a READY resource should become RUNNING, read {got['status']}")
    listed = api.list_sessions(model_resources_id=r["id"]).ok()["data"]
    verify("listSessions", "created_object_listed", s["id"] in {x["id"] for x in listed},
           f"created session {s['id']} is missing from its resource's session list")
    # an unknown resource is a 404, a missing body field a 400
    api.expect(api.create_session("00000000-0000-4000-8000-00000000dead"), (404,),
               "createSession on an unknown model resource", "unknown_id_404")
    api.expect(api.call("createSession", "POST", "/v1/rl/training-sessions", json={}), (400, 422),
               "createSession without model_resources_id", "invalid_input_refused")


def test_stop_resource_with_and_without_force(api: Api) -> None:
    r = api.ready_resource()
    s = api.running_session(r["id"])

    # Without force, active sessions block the stop and nothing changes.
    for force in (None, False):
        refused = api.stop_resource(r["id"], force=force)
        api.expect(refused, (400, 409), "stop without force while a session is active is refused",
                   "stop_without_force_refused")
    after = api.get_resource(r["id"]).ok()
    verify("stopModelResources", "stop_without_force_refused", after["status"] == R + "READY",
           f"a refused stop changed the resource: it reads {after['status']}")
    verify("stopModelResources", "stop_without_force_refused",
           api.get_session(s["id"]).ok()["status"] == S + "RUNNING",
           "a refused stop changed the attached session")

    # With force, the resource and every attached session stop.
    forced = api.stop_resource(r["id"], force=True)
    api.expect(forced, (200,), "stop with force=true stops a resource that has active sessions",
               "stop_with_force")
    verify("stopModelResources", "stop_with_force", forced.body["status"] in lc.RESOURCE_STOPPED_OR_STOPPING,
           f"force stop answered status {forced.body['status']}, expected STOPPING or STOPPED")
    sess = api.wait(lambda: api.get_session(s["id"]).ok(), lambda o: o["status"] in lc.SESSION_INACTIVE,
                    f"session {s['id']} after a forced resource stop", "getSession", bound=3600)
    verify("stopModelResources", "stop_with_force", sess["status"] in lc.SESSION_AFTER_STOP,
           f"force stop did not stop the attached session: it reads {sess['status']}")
    done = api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] in lc.TERMINAL["model resource"],
                    f"resource {r['id']} after stop", "getModelResources", bound=3600)
    verify("stopModelResources", "stop_with_force", done["status"] == R + "STOPPED",
           f"a stopped resource ends STOPPED, not {done['status']}")

    # Stopping again is a documented 400 and changes nothing (stop is idempotent in effect).
    again = api.stop_resource(r["id"], force=True)
    api.expect(again, (400,), "stopping an already stopped resource is a 400", "stop_idempotent")
    verify("stopModelResources", "stop_idempotent", api.get_resource(r["id"]).ok()["status"] == R + "STOPPED",
           "a second stop changed the stopped resource")


def test_stop_resource_without_sessions(api: Api) -> None:
    r = api.ready_resource()
    stopped = api.stop_resource(r["id"])
    api.expect(stopped, (200,), "a resource without sessions stops without force", "stop_without_sessions")
    verify("stopModelResources", "stop_without_sessions", stopped.body["status"] in lc.RESOURCE_STOPPED_OR_STOPPING,
           f"stop answered status {stopped.body['status']}, expected STOPPING or STOPPED")
    api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] == R + "STOPPED",
             f"resource {r['id']} after stop", "getModelResources", bound=3600)
    # A stopped resource takes no new sessions.
    api.expect(api.create_session(r["id"]), (400, 404, 409), "a stopped resource refuses new sessions",
               "no_sessions_on_stopped_resource")


def test_list_resources_and_checkpoints_with_every_filter(api: Api) -> None:
    """The resource list filters on status (one or several) and created_by; the checkpoint list on session_id,
    type and base_model; every item listed matches, and what the caller made is there."""
    running = api.ready_resource()
    stopped = api.ready_resource()
    api.stop_resource(stopped["id"]).ok()
    for statuses in ([R + "READY"], [R + "STOPPING", R + "STOPPED"]):
        got = api.list_resources(status=",".join(statuses), limit=100).ok()["data"]
        record("listModelResources", "list_filters",
               partial(lc.check_filter, "listModelResources", "status", set(statuses), got))
    ready = {r["id"] for r in api.list_resources(status=R + "READY", limit=100).ok()["data"]}
    verify("listModelResources", "list_filters", running["id"] in ready and stopped["id"] not in ready,
           f"list filter ignored: status=READY must list the READY resource {running['id']} and not the stopped "
           f"{stopped['id']}")
    for who in ("me", running["created_by"]):
        mine = api.list_resources(created_by=who, limit=100).ok()["data"]
        record("listModelResources", "list_filters",
               partial(lc.check_filter, "listModelResources", "created_by", {running["created_by"]}, mine))
        verify("listModelResources", "list_filters", {running["id"], stopped["id"]} <= {r["id"] for r in mine},
               f"list filter: created_by={who} misses resources the caller created")
    both = api.list_resources(created_by="me", status=R + "READY", limit=100).ok()["data"]
    verify("listModelResources", "list_filters", running["id"] in {r["id"] for r in both}
           and all(r["status"] == R + "READY" for r in both),
           "list filters: created_by=me and status=READY together")
    nobody = api.list_resources(created_by="user-that-does-not-exist-0", limit=100).ok()["data"]
    verify("listModelResources", "list_filters", not nobody,
           f"list filter ignored: created_by of an unknown user lists {[r['id'] for r in nobody][:3]}")

    sid = api.running_session(running["id"])["id"]
    made = {kind: api.run_op(sid, kind)["output"]["checkpoint"]["id"]
            for kind in ("training-checkpoint", "inference-checkpoint")}
    for kind, ckpt_type in (("training-checkpoint", "CHECKPOINT_TYPE_TRAINING"),
                            ("inference-checkpoint", "CHECKPOINT_TYPE_INFERENCE")):
        got = api.list_checkpoints(session_id=sid, type=ckpt_type, limit=100).ok()["data"]
        verify("listCheckpoints", "list_filters", [c["id"] for c in got] == [made[kind]],
               f"list filter: session_id={sid}&type={ckpt_type} must list exactly {made[kind]}; got "
               f"{[c['id'] for c in got]}")
        alone = api.list_checkpoints(type=ckpt_type, limit=100).ok()["data"]
        record("listCheckpoints", "list_filters", partial(lc.check_filter, "listCheckpoints", "type", {ckpt_type}, alone))
        verify("listCheckpoints", "list_filters", made[kind] in {c["id"] for c in alone},
               f"list filter: type={ckpt_type} misses checkpoint {made[kind]}")
    of_session = api.list_checkpoints(session_id=sid, limit=100).ok()["data"]
    verify("listCheckpoints", "list_filters", {c["id"] for c in of_session} == set(made.values()),
           f"list filter: session_id={sid} must list its two checkpoints; got {[c['id'] for c in of_session]}")
    by_model = api.list_checkpoints(base_model=running["base_model"], limit=100).ok()["data"]
    record("listCheckpoints", "list_filters",
           partial(lc.check_filter, "listCheckpoints", "base_model", {running["base_model"]}, by_model))
    verify("listCheckpoints", "list_filters", set(made.values()) <= {c["id"] for c in by_model},
           f"list filter: base_model={running['base_model']} misses the session's checkpoints")
    other = next((m for m in ("Qwen/Qwen3.5-4B", "MiniMaxAI/MiniMax-M3", "no/such-model")
                  if m != running["base_model"]), "no/such-model")
    none = api.list_checkpoints(base_model=other, session_id=sid, limit=100).ok()["data"]
    verify("listCheckpoints", "list_filters", not none,
           f"list filter ignored: base_model={other} lists checkpoints of a {running['base_model']} session")
    api.stop_resource(running["id"], force=True)


def test_writes_to_unknown_ids_are_404(api: Api) -> None:
    """Submits, updates and URL requests that name a session, resource or payload that is not there are 404."""
    unknown = "00000000-0000-4000-8000-00000000beef"
    rl = "/v1/rl"
    cases = [
        (api.submit(unknown, "forward-backward", {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": []}),
         "an operation submitted to an unknown session"),
        (api.submit(unknown, "training-checkpoint"), "a checkpoint of an unknown session"),
        (api.call("updateSession", "PATCH", f"{rl}/training-sessions/{unknown}", json={"display_name": "x"}),
         "a PATCH of an unknown session"),
        (api.call("createPayloadUploadUrl", "POST", f"{rl}/training-sessions/{unknown}/payloads/upload-url",
                  empty_body=True), "an upload URL for an unknown session"),
        (api.call("extendModelResourcesExpiry", "POST", f"{rl}/model-resources/{unknown}/extend-expiry",
                  json={"seconds": 600}), "extend-expiry of an unknown resource"),
    ]
    for reply, rule in cases:
        api.expect(reply, (404,), rule, "unknown_id_404")
