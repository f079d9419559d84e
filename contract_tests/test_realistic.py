"""Lifecycles on a timing profile with real durations (emulator only: driven by the manual clock).

The instant profile settles everything on the next read, so the states in between are never seen. Here
a tenant on the ``realistic`` profile with a manual clock (:func:`contract_tests.flows.realistic_api`) is
stepped through virtual minutes, reading everything after each step, and the documented lifecycles are
held to what they say (docs/api-surface.md C.1-C.3):

- a PENDING resource shows ``queue_position`` (older resources still waiting, plus one): the positions of
  resources created one after another increase, count down as the ones ahead leave, and are gone once the
  resource leaves PENDING; resources leave the queue in order, go CREATING, then READY;
- a session created while its resource is PENDING or CREATING stays CREATING until the resource is READY,
  then becomes RUNNING; it is never RUNNING on a resource that is not READY; ``extend-expiry`` is refused
  until the resource is READY;
- the operations of a session run one at a time, in submission order, each PENDING, RUNNING, COMPLETED;
- a resource never stops for inactivity while an operation runs (its ``inactive_timeout`` shorter than the
  operation), and stops with its sessions EXPIRED once idle for that long;
- stopping a session ends its waiting operations FAILED (``SESSION_NOT_ACTIVE``), and its idle resource still
  stops for inactivity;
- a READY resource stopped while another waits in the queue leaves the waiting one in its place;
- a STOPPING session still holds its slot (a full-weight resource's one session: a new one is a 429, and a
  stop without force is refused) until it is STOPPED; a STOPPING resource refuses a second stop, new
  sessions and extend-expiry;
- every status change is stamped when it happened: its ``updated_at`` lies between the clock readings of
  the two reads that saw the change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from functools import partial
from typing import Any

import pytest

from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.client import KIND_OPERATION_IDS, RL, Api, verify
from contract_tests.lifecycle import OP, R, S
from contract_tests.target import Target

pytestmark = [pytest.mark.emulator_only, pytest.mark.creates_resources]

# The OperationErrorCode of an operation its session can no longer run [inferred from the name: the docs list the
# codes without their causes].
SESSION_NOT_ACTIVE = "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"


@pytest.fixture(scope="module")
def realistic(target: Target) -> Iterator[Target]:
    yield target
    flows.forget_tenants()


class Watch:
    """Reads objects after each clock step, keeps what each looked like, and checks change stamps."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.last: dict[str, dict[str, Any]] = {}
        self.at = flows.clock_now(api.target)

    def read(self, fetchers: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        before = self.at
        now = {name: fetch() for name, fetch in fetchers.items()}
        self.at = flows.clock_now(self.api.target)
        for name, obj in now.items():
            old = self.last.get(name)
            if old is not None and old.get("status") != obj.get("status") and "updated_at" in obj:
                stamp = lc.parse_time(obj["updated_at"], f"{name} updated_at")
                verify("getModelResources" if name.startswith("resource") else "getSession", "stamped_when_it_happened",
                       before < stamp <= self.at,
                       f"{name} {obj.get('id')} moved {old.get('status')} -> {obj.get('status')} between clock "
                       f"readings {before.isoformat()} and {self.at.isoformat()}, but its updated_at says "
                       f"{obj['updated_at']}")
            self.last[name] = obj
        return now

    def step(self, seconds: float, fetchers: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        self.api.target.advance(seconds)
        return self.read(fetchers)


def _status_is(status: str, obj: dict[str, Any]) -> bool:
    return bool(obj["status"] == status)


def _position(r: dict[str, Any]) -> int | None:
    return (r.get("status_details") or {}).get("queue_position")


def test_queue_positions_count_down_and_resources_start_in_order(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    made = [api.create_resource() for _ in range(3)]
    positions = [_position(r) for r in made]
    numbers = [p for p in positions if isinstance(p, int)]
    verify("createModelResources", "queue_position", all(r["status"] == R + "PENDING" for r in made)
           and len(numbers) == 3 and numbers == sorted(set(numbers)),
           f"three resources created one after another wait PENDING at increasing queue positions; they show "
           f"{[(r['status'], _position(r)) for r in made]}")
    watch = Watch(api)
    fetch = {f"resource {i}": flows.read(api.get_resource, r["id"]) for i, r in enumerate(made)}
    seen: dict[str, list[str]] = {name: [R + "PENDING"] for name in fetch}
    last_pos = {f"resource {i}": p for i, p in enumerate(positions)}
    for _ in range(400):
        now = watch.step(15, fetch)
        for name, obj in now.items():
            if obj["status"] != seen[name][-1]:
                seen[name].append(obj["status"])
            pos, last = _position(obj), last_pos[name]
            if obj["status"] == R + "PENDING" and pos is not None and last is not None:
                verify("getModelResources", "queue_position", pos <= last,
                       f"{name} {obj['id']}: queue_position went up from {last} to {pos}")
            last_pos[name] = pos if obj["status"] == R + "PENDING" else None
        order = [now[f"resource {i}"]["status"] != R + "PENDING" for i in range(3)]
        verify("getModelResources", "queue_order", order == sorted(order, reverse=True),
               f"resources left the GPU queue out of order: {[now[f'resource {i}']['status'] for i in range(3)]}")
        waiting = [now[f"resource {i}"] for i in range(3) if now[f"resource {i}"]["status"] == R + "PENDING"]
        if waiting and len(waiting) < 3:
            verify("getModelResources", "queue_position", _position(waiting[0]) == positions[0],
                   f"once the resources ahead left the queue, the first one waiting is at position {positions[0]}, not "
                   f"{_position(waiting[0])} (positions must count down)")
        if all(obj["status"] in (R + "READY", R + "ERROR") for obj in now.values()):
            break
    for name, statuses in seen.items():
        verify("getModelResources", "realistic_lifecycle", statuses == [R + "PENDING", R + "CREATING", R + "READY"],
               f"{name} went {statuses}; a resource taking minutes to start is seen PENDING, CREATING, READY")
    for r in made:
        api.stop_resource(r["id"])


def test_sessions_wait_for_their_resource(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    r = api.create_resource()
    early = api.create_session(r["id"]).ok()
    watch = Watch(api)
    res = lambda: api.get_resource(r["id"]).ok()  # noqa: E731
    now = watch.read({"resource": res})
    api.expect(api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                        json={"seconds": 600}), (400,), "extend-expiry before the resource is READY", "extend_expiry_refused")
    while now["resource"]["status"] == R + "PENDING":
        now = watch.step(15, {"resource": res})
    verify("getModelResources", "realistic_lifecycle", now["resource"]["status"] == R + "CREATING",
           f"a resource leaving the queue goes CREATING, not {now['resource']['status']}")
    late = api.create_session(r["id"]).ok()
    fetch = {"resource": res, "session early": lambda: api.get_session(early["id"]).ok(),
             "session late": lambda: api.get_session(late["id"]).ok()}
    ready_at: datetime | None = None
    for _ in range(200):
        now = watch.step(15, fetch)
        for name in ("session early", "session late"):
            verify("getSession", "session_waits_for_resource", now[name]["status"] != S + "RUNNING"
                   or now["resource"]["status"] == R + "READY",
                   f"{name} is RUNNING on a resource that is {now['resource']['status']}")
        if now["resource"]["status"] == R + "READY" and ready_at is None:
            ready_at = watch.at
        if all(now[n]["status"] == S + "RUNNING" for n in ("session early", "session late")):
            break
        verify("getSession", "session_waits_for_resource", ready_at is None
               or (watch.at - ready_at).total_seconds() <= 600,
               f"sessions created while their resource started are still {now['session early']['status']} / "
               f"{now['session late']['status']} 10 minutes after it became READY")
    for name in ("session early", "session late"):
        verify("getSession", "session_waits_for_resource", now[name]["status"] == S + "RUNNING",
               f"{name}, created while its resource started, ended {now[name]['status']}, not RUNNING")
    api.stop_resource(r["id"], force=True)


def test_operations_run_one_at_a_time_in_order(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    kinds = ["forward-backward", "optim-step", "training-checkpoint", "sample"]
    bodies = [flows.training_body(), {"adam_params": {"learning_rate": 0.01}}, None,
              {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "sampling_params": {"max_tokens": 3}}]
    ops = [api.submit(sid, k, b).ok() for k, b in zip(kinds, bodies)]
    verify("createForwardBackward", "initial_status", all(o["status"] in (OP + "PENDING", OP + "RUNNING") for o in ops),
           f"operations submitted together start PENDING (or RUNNING): {[o['status'] for o in ops]}")
    statuses: list[list[str]] = [[o["status"]] for o in ops]
    final: list[dict[str, Any]] = ops
    for _ in range(200):
        api.target.advance(2)
        final = [api.get_op(sid, k, o["id"]).ok() for k, o in zip(kinds, ops)]
        now = [o["status"] for o in final]
        for i, s in enumerate(now):
            if s != statuses[i][-1]:
                statuses[i].append(s)
        verify(KIND_OPERATION_IDS["optim-step"][1], "operations_in_order", now.count(OP + "RUNNING") <= 1,
               f"the operations of one session run one at a time; these run together: {list(zip(kinds, now))}")
        done = [s in lc.OPERATION_DONE for s in now]
        verify(KIND_OPERATION_IDS["optim-step"][1], "operations_in_order", done == sorted(done, reverse=True),
               f"operations finish in submission order: {list(zip(kinds, now))}")
        if all(done):
            break
    verify(KIND_OPERATION_IDS["training-checkpoint"][1], "operations_in_order",
           all(s[-1] == OP + "COMPLETED" for s in statuses) and OP + "RUNNING" in statuses[2],
           f"each operation is seen through to COMPLETED (the 30-second checkpoint also RUNNING): {statuses}")
    step = lc.as_int64(final[1]["output"]["step"], "optim-step output.step")
    verify(KIND_OPERATION_IDS["training-checkpoint"][1], "operations_in_order",
           lc.as_int64(final[2]["output"]["checkpoint"]["step"], "checkpoint step") == step,
           f"a checkpoint submitted after an optim-step saves its step {step}, not "
           f"{final[2]['output']['checkpoint']['step']}")
    api.stop_resource(r["id"], force=True)


def test_no_expiry_while_an_operation_runs(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    r = api.ready_resource(inactive_timeout=300)
    sid = api.running_session(r["id"])["id"]
    # 10 completions of up to 1,600 tokens: the realistic profile gives it more than 300 s.
    long = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}], "num_samples": 10,
            "sampling_params": {"max_tokens": 1600, "seed": 1}}
    op = api.submit(sid, "sample", long).ok()
    running = 0.0
    while True:
        api.target.advance(60)
        now = api.get_op(sid, "sample", op["id"]).ok()
        if now["status"] in lc.OPERATION_DONE:
            break
        running += 60
        res = api.get_resource(r["id"]).ok()
        verify("getModelResources", "no_expiry_while_running", res["status"] == R + "READY",
               f"a resource with inactive_timeout 300 went {res['status']} while an operation ran ({running:.0f} s)")
        verify("getModelResources", "no_expiry_while_running", running <= 3600, "the long sample never finished")
    verify("getSample", "no_expiry_while_running", now["status"] == OP + "COMPLETED" and running >= 300,
           f"the long sample ended {now['status']} ({now.get('error')}) after about {running:.0f} s of running; it "
           "takes longer than the resource's 300 s inactive_timeout and must complete")
    gone = api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] in lc.TERMINAL["model resource"],
                    f"idle resource {r['id']}", "getModelResources", bound=1200, step=60)
    verify("getModelResources", "expiry", gone["status"] == R + "STOPPED",
           f"an idle resource ends STOPPED, not {gone['status']}")
    verify("getSession", "expiry", api.get_session(sid).ok()["status"] == S + "EXPIRED",
           "the session of a resource stopped for inactivity is not EXPIRED")


def test_stopping_holds_the_slot(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    model = flows.model(api, realistic.base_model)
    r = api.ready_resource(lora_enabled=model.full is None)
    s = api.running_session(r["id"])
    if model.full is not None:  # one full-weight session; a LoRA resource would need its cap of sessions
        stopping = api.stop_session(s["id"]).ok()
        if stopping["status"] == S + "STOPPING":
            api.expect(api.create_session(r["id"]), (429,), "a STOPPING session still holds the resource's one slot",
                       "stopping_holds_slot")
            api.expect(api.stop_resource(r["id"]), (400, 409), "a STOPPING session keeps a stop without force refused",
                       "stopping_holds_slot")
        api.wait(lambda: api.get_session(s["id"]).ok(), lambda o: o["status"] == S + "STOPPED",
                 f"session {s['id']} after stop", "getSession", bound=600, step=2)
        api.expect(api.create_session(r["id"]), (200,), "a STOPPED session frees the slot", "stopping_holds_slot")
    stopped = api.stop_resource(r["id"], force=True).ok()
    if stopped["status"] == R + "STOPPING":
        api.expect(api.stop_resource(r["id"], force=True), (400,), "stopping a STOPPING resource again",
                   "stop_idempotent")
        api.expect(api.create_session(r["id"]), (400, 404, 409), "a session on a STOPPING resource",
                   "no_sessions_on_stopped_resource")
        api.expect(api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                            json={"seconds": 600}), (400,), "extend-expiry of a STOPPING resource",
                   "extend_expiry_refused")
    verify("stopModelResources", "realistic_lifecycle", stopped["status"] == R + "STOPPING",
           f"a resource that takes time to stop answers STOPPING, not {stopped['status']}")
    api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] == R + "STOPPED",
             f"resource {r['id']} after stop", "getModelResources", bound=600, step=5)


def test_stopping_while_starting(realistic: Target) -> None:
    """A resource can be stopped while it waits or loads, and a session while it is created; the resources
    behind a stopped one move up the queue."""
    api = flows.realistic_api(realistic)
    first, second = api.create_resource(), api.create_resource()
    session = api.create_session(second["id"]).ok()
    stopped = api.stop_resource(first["id"]).ok()
    verify("stopModelResources", "realistic_lifecycle", stopped["status"] in lc.RESOURCE_STOPPED_OR_STOPPING,
           f"stopping a PENDING resource answered {stopped['status']}")
    behind = api.get_resource(second["id"]).ok()
    verify("getModelResources", "queue_position", behind["status"] != R + "PENDING"
           or _position(behind) == _position(first),
           f"the resource behind a stopped one must move up to position {_position(first)}, it shows "
           f"{_position(behind)}")
    api.expect(api.stop_session(session["id"]), (200,), "stopping a session while it is CREATING", "stop_session")
    api.wait(lambda: api.get_session(session["id"]).ok(), lambda o: o["status"] in lc.SESSION_INACTIVE,
             f"session {session['id']} stopped while CREATING", "getSession", bound=600, step=5)
    r = api.wait(lambda: api.get_resource(second["id"]).ok(), lambda o: o["status"] != R + "PENDING",
                 f"resource {second['id']}", "getModelResources", bound=3600, step=15)
    verify("getModelResources", "realistic_lifecycle", r["status"] == R + "CREATING",
           f"a resource leaving the queue goes CREATING, not {r['status']}")
    verify("getSession", "terminal_never_reverts", api.get_session(session["id"]).ok()["status"] == S + "STOPPED",
           "a session stopped while CREATING did not stay STOPPED once its resource started")
    api.expect(api.stop_resource(second["id"]), (200,), "stopping a CREATING resource without sessions",
               "stop_without_sessions")
    for rid in (first["id"], second["id"]):
        api.wait(flows.read(api.get_resource, rid), lambda o: o["status"] == R + "STOPPED",
                 f"resource {rid} after stop", "getModelResources", bound=600, step=15)


def test_a_stopped_session_fails_its_waiting_operations(realistic: Target) -> None:
    """Stopping a session ends its unfinished operations (they never complete, nor wait for ever), and the
    resource, idle from then on, still stops for inactivity."""
    api = flows.realistic_api(realistic)
    r = api.ready_resource(inactive_timeout=300)
    sid = api.running_session(r["id"])["id"]
    ops = [api.submit(sid, kind).ok() for kind in ("training-checkpoint", "inference-checkpoint")]
    api.stop_session(sid).ok()
    for kind, op in zip(("training-checkpoint", "inference-checkpoint"), ops):
        done = api.wait(flows.read(partial(api.get_op, sid, kind), op["id"]), lambda o: o["status"] in lc.OPERATION_DONE,
                        f"{kind} operation {op['id']} of a stopped session", KIND_OPERATION_IDS[kind][1], bound=600,
                        step=5)
        verify(KIND_OPERATION_IDS[kind][1], "stop_fails_unfinished", done["status"] == OP + "FAILED"
               and (done.get("error") or {}).get("code") == SESSION_NOT_ACTIVE,
               f"a {kind} still waiting when its session was stopped ended {done['status']} {done.get('error')}, not "
               f"FAILED with {SESSION_NOT_ACTIVE}")
    gone = api.wait(flows.read(api.get_resource, r["id"]), lambda o: o["status"] in lc.TERMINAL["model resource"],
                    f"idle resource {r['id']}", "getModelResources", bound=1200, step=60)
    verify("getModelResources", "expiry", gone["status"] == R + "STOPPED",
           f"a resource left idle after its session stopped ended {gone['status']}, not STOPPED")


def test_stopping_a_ready_resource_while_others_wait(realistic: Target) -> None:
    """A READY resource stopped while a newer one waits in the GPU queue: the waiting one keeps its place, starts,
    and the stopped one stops."""
    api = flows.realistic_api(realistic)
    ready = api.ready_resource()
    waiting = api.create_resource()
    verify("createModelResources", "queue_position", waiting["status"] == R + "PENDING",
           f"a resource created on the realistic profile starts {waiting['status']}, not PENDING")
    api.expect(api.stop_resource(ready["id"]), (200,), "stopping a READY resource while another waits in the queue",
               "stop_without_sessions")
    now = api.get_resource(waiting["id"]).ok()
    verify("getModelResources", "queue_position", now["status"] != R + "PENDING" or _position(now) == _position(waiting),
           f"stopping a READY resource moved the waiting one from position {_position(waiting)} to {_position(now)}")
    for rid, status in ((waiting["id"], R + "READY"), (ready["id"], R + "STOPPED")):
        done = api.wait(flows.read(api.get_resource, rid), partial(_status_is, status),
                        f"resource {rid}", "getModelResources", bound=3600, step=15)
        verify("getModelResources", "realistic_lifecycle", done["status"] == status, f"resource {rid} ended {done['status']}")
    api.stop_resource(waiting["id"])
