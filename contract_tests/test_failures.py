"""Failures as the API shows them (emulator only: the failures are injected through ``/_emulator/faults``).

A failure on the real service cannot be ordered; the emulator's fault rules make one happen, and the checks
hold what a client then reads to the documented shapes (docs/api-surface.md A.1.7, A.2.6, A.3, C.1-C.3, D.1):

- an operation that fails ends FAILED with ``error.code`` (an ``OperationErrorCode``) and a message, and no
  output; the session goes on: the next operation completes;
- a session that fails reads ERROR with ``error {code, message, occurred_at}``; what is submitted to it does
  not complete;
- a resource that fails (while it waits in the queue, or once READY) reads ERROR with ``error {code,
  message, occurred_at}`` and no ``expires_at``; its sessions stop being RUNNING; a stop is a 400
  ("stop on an already stopped or errored resource"), extend-expiry and new sessions are refused;
- a resource held in the GPU queue shows its ``queue_position`` and the position counts down to its start;
- a failure fired on a session or resource that has ended changes nothing; a resource failing while a session stops (on
  the realistic profile, where a stop takes seconds) leaves the session to end.

Each rule is added under a name of its own and fires only on the requests that name it
(``X-Emulator-Fault``), so nothing else in the run is touched; it is removed at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.client import RL, Api, verify
from contract_tests.lifecycle import OP, R, S
from contract_tests.target import Target, TargetError

pytestmark = [pytest.mark.emulator_only, pytest.mark.creates_resources]

NEVER = "/never/matches/*"  # the rules fire only when a request names them


def _faults(target: Target) -> Iterator[Any]:
    """``fault(effect) -> headers``: a named rule with that effect, fired by the headers it returns."""
    names: list[str] = []

    def add(effect: dict[str, Any]) -> dict[str, str]:
        name = f"contract-{uuid.uuid4().hex[:12]}"
        resp = target.http.post(f"{target.base_url}/_emulator/faults", headers=target.admin_headers(), timeout=30,
                                json={"name": name, "match": {"path": NEVER}, "effect": effect})
        if resp.status_code != 200:
            raise TargetError(f"POST /_emulator/faults answered {resp.status_code}: {resp.text[:300]}")
        names.append(name)
        return {"X-Emulator-Fault": name}

    yield add
    for name in names:
        target.http.delete(f"{target.base_url}/_emulator/faults/{name}", headers=target.admin_headers(), timeout=30)


@pytest.fixture
def fault(target: Target) -> Iterator[Any]:
    yield from _faults(target)


@pytest.fixture
def realistic_fault(target: Target) -> Iterator[tuple[Api, Any]]:
    """A client of a realistic-profile tenant (:func:`contract_tests.flows.realistic_api`) and a ``fault`` there."""
    api = flows.realistic_api(target)
    for add in _faults(api.target):
        yield api, add
    flows.forget_tenants()


def _error_detail(kind: str, obj: dict[str, Any], code: str) -> None:
    err = obj.get("error")
    verify("getModelResources" if kind == "model resource" else "getSession", "error_detail",
           isinstance(err, dict) and err.get("code") == code and isinstance(err.get("message"), str)
           and bool(err.get("message")) and lc.parse_time(err.get("occurred_at"), f"{kind} error.occurred_at")
           >= lc.parse_time(obj["created_at"], "created_at"),
           f"a {kind} in ERROR carries error {{code, message, occurred_at}} with the code of its failure ({code}); "
           f"it shows {err!r}")


def test_a_failed_operation_carries_its_error_and_the_session_goes_on(api: Api, fault: Any) -> None:
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    code = "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR"
    reply = api.call("createForwardBackward", "POST", f"{RL}/training-sessions/{sid}/operations/forward-backward",
                     json=flows.training_body(), headers={"Idempotency-Key": uuid.uuid4().hex,
                                                           **fault({"operation_fails": code})})
    op = reply.ok()
    done = api.wait(lambda: api.get_op(sid, "forward-backward", op["id"]).ok(),
                    lambda o: o["status"] in lc.OPERATION_DONE, f"operation {op['id']}", "getForwardBackward")
    verify("getForwardBackward", "failed_operation", done["status"] == OP + "FAILED"
           and (done.get("error") or {}).get("code") == code and bool((done.get("error") or {}).get("message"))
           and "output" not in done,
           f"an operation that failed with {code} reads {done['status']} error={done.get('error')} "
           f"output={'output' in done}; FAILED carries its error and no output")
    flows.op_ok(api, sid, "forward-backward", flows.training_body())
    verify("getSession", "failed_operation", api.get_session(sid).ok()["status"] == S + "RUNNING",
           "a failed operation took its session down")
    api.stop_resource(r["id"], force=True)


def test_a_failed_session_reads_error(api: Api, fault: Any) -> None:
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    code = "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"
    # The session fails as an operation is submitted: the submit answers as usual, the operation does not complete.
    op = api.call("createForwardBackward", "POST", f"{RL}/training-sessions/{sid}/operations/forward-backward",
                  json=flows.training_body(), headers={"Idempotency-Key": uuid.uuid4().hex,
                                                        **fault({"session_error": code})}).ok()
    s = api.get_session(sid).ok()
    verify("getSession", "failed_session", s["status"] == S + "ERROR", f"a failed session reads {s['status']}")
    _error_detail("training session", s, code)
    done = api.wait(lambda: api.get_op(sid, "forward-backward", op["id"]).ok(),
                    lambda o: o["status"] in lc.OPERATION_DONE, f"operation {op['id']}", "getForwardBackward")
    verify("getForwardBackward", "failed_session", done["status"] == OP + "FAILED" and bool(done.get("error")),
           f"an operation of a session that failed under it ended {done['status']} ({done.get('error')})")
    flows.op_refused(api, sid, "forward-backward", flows.training_body(), "an operation on a session in ERROR",
                     "failed_session")
    verify("getModelResources", "failed_session", api.get_resource(r["id"]).ok()["status"] == R + "READY",
           "a failed session took its resource down")
    api.stop_resource(r["id"], force=True)


def test_a_failed_resource_reads_error_and_refuses_what_needs_it(api: Api, fault: Any) -> None:
    code = "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED"
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    api.call("getModelResources", "GET", f"{RL}/model-resources/{r['id']}", headers=fault({"resource_error": code}))
    failed = api.get_resource(r["id"]).ok()
    verify("getModelResources", "failed_resource", failed["status"] == R + "ERROR" and "expires_at" not in failed,
           f"a failed READY resource reads {failed['status']} (expires_at {failed.get('expires_at')!r})")
    _error_detail("model resource", failed, code)
    s = api.get_session(sid).ok()
    verify("getSession", "failed_resource", s["status"] in lc.SESSION_INACTIVE,
           f"the session of a failed resource still reads {s['status']}")
    if s["status"] == S + "ERROR":
        _error_detail("training session", s, s["error"]["code"] if isinstance(s.get("error"), dict) else "?")
    api.expect(api.stop_resource(r["id"], force=True), (400,), "stopping a resource in ERROR", "stop_idempotent")
    api.expect(api.create_session(r["id"]), (400, 404, 409), "a session on a resource in ERROR",
               "no_sessions_on_stopped_resource")
    api.expect(api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                        json={"seconds": 600}), (400,), "extend-expiry of a resource in ERROR", "extend_expiry_refused")
    # Failing while it waits for GPUs: the create answers as usual, the next read shows the failure.
    code = "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT"
    created = api.call("createModelResources", "POST", f"{RL}/model-resources",
                       json={"base_model": api.target.base_model}, headers=fault({"resource_error": code})).ok()
    waited = api.get_resource(created["id"]).ok()
    verify("getModelResources", "failed_resource", waited["status"] == R + "ERROR",
           f"a resource that failed in the queue reads {waited['status']}")
    _error_detail("model resource", waited, code)


def test_a_held_resource_counts_down_its_queue_position(api: Api, fault: Any) -> None:
    created = api.call("createModelResources", "POST", f"{RL}/model-resources",
                       json={"base_model": api.target.base_model}, headers=fault({"queue_position": 3})).ok()
    api.observer.see("model resource", created, "createModelResources")
    first = api.get_resource(created["id"]).ok()
    verify("getModelResources", "queue_position", first["status"] == R + "PENDING"
           and (first.get("status_details") or {}).get("queue_position") == 3,
           f"a resource held at queue position 3 reads {first['status']} {first.get('status_details')}")
    positions: list[Any] = [3]
    for _ in range(60):
        api.target.advance(1)
        now = api.get_resource(created["id"]).ok()  # the observer: a position only while PENDING
        if now["status"] != R + "PENDING":
            break
        positions.append((now.get("status_details") or {}).get("queue_position"))
    verify("getModelResources", "queue_position", positions == sorted(positions, reverse=True) and positions[-1] == 1,
           f"a held resource's queue position must count down to 1 before it starts: {positions}")
    done = api.wait(lambda: api.get_resource(created["id"]).ok(), lambda o: o["status"] != R + "CREATING",
                    f"resource {created['id']}", "getModelResources", bound=3600)
    verify("getModelResources", "queue_position", done["status"] == R + "READY",
           f"a held resource ended {done['status']}, not READY")
    api.stop_resource(created["id"])
    first = api.call("createModelResources", "POST", f"{RL}/model-resources", json={"base_model": api.target.base_model},
                     headers=fault({"queue_position": 1})).ok()
    verify("createModelResources", "queue_position", (first.get("status_details") or {}).get("queue_position")
           in (None, 1), f"a resource at the head of the queue shows position {first.get('status_details')}, not 1")
    api.stop_resource(first["id"])


def test_a_failure_after_the_end_changes_nothing(api: Api, fault: Any) -> None:
    """Terminal states never revert: a session that expired or was stopped, and a stopped resource, stay as they
    ended when a failure fires on them later."""
    r = api.ready_resource(inactive_timeout=300)
    expired = api.running_session(r["id"])["id"]
    api.target.advance(400)
    api.wait(flows.read(api.get_session, expired), lambda o: o["status"] in lc.SESSION_INACTIVE,
             f"session {expired} of an idle resource", "getSession", bound=900, step=60)
    r2 = api.ready_resource()
    stopped = api.running_session(r2["id"])["id"]
    api.stop_session(stopped).ok()
    api.wait(flows.read(api.get_session, stopped), lambda o: o["status"] in lc.SESSION_INACTIVE,
             f"session {stopped} after stop", "getSession", bound=900)
    code = "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"
    for sid in (expired, stopped):
        before = api.get_session(sid).ok()["status"]
        api.call("getSession", "GET", f"{RL}/training-sessions/{sid}", headers=fault({"session_error": code})).ok()
        after = api.get_session(sid).ok()  # the observer: a terminal status never changes
        verify("getSession", "terminal_never_reverts", after["status"] == before,
               f"a failure fired on a session that had ended {before} made it {after['status']}")
    api.stop_resource(r2["id"], force=True)
    done = api.wait(flows.read(api.get_resource, r2["id"]), lambda o: o["status"] in lc.TERMINAL["model resource"],
                    f"resource {r2['id']} after stop", "getModelResources", bound=900)
    code = "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED"
    api.call("getModelResources", "GET", f"{RL}/model-resources/{r2['id']}", headers=fault({"resource_error": code}))
    after_r = api.get_resource(r2["id"]).ok()
    verify("getModelResources", "terminal_never_reverts", after_r["status"] == done["status"],
           f"a failure fired on a resource that had ended {done['status']} made it {after_r['status']}")


def test_a_resource_failing_while_a_session_stops(realistic_fault: tuple[Api, Any]) -> None:
    """On the realistic profile a stop takes seconds: a resource that fails meanwhile reads ERROR, and the
    stopping session still ends (no status goes back, nothing answers 500)."""
    api, fault = realistic_fault
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    stopping = api.stop_session(sid).ok()
    code = "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE"
    api.call("getModelResources", "GET", f"{RL}/model-resources/{r['id']}", headers=fault({"resource_error": code})).ok()
    failed = api.get_resource(r["id"]).ok()
    verify("getModelResources", "failed_resource", failed["status"] == R + "ERROR",
           f"a resource that failed while its session was {stopping['status']} reads {failed['status']}")
    _error_detail("model resource", failed, code)
    done = api.wait(flows.read(api.get_session, sid), lambda o: o["status"] in lc.SESSION_INACTIVE,
                    f"session {sid} stopping on a failed resource", "getSession", bound=600, step=5)
    verify("getSession", "failed_resource", done["status"] in lc.SESSION_INACTIVE,
           f"a session stopping when its resource failed ended {done['status']}")
