"""Actions the control plane schedules for a virtual instant (``/_emulator/clock/actions``), and what each does.

Emulates nothing of the real API: a test makes something happen to its tenant at a chosen virtual time, in
order with every other transition (a resource force-stopped, a session expiring, a GPU-queue outage, a
fault rule starting or stopping).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from emulator.bounds import later
from emulator.clock import rfc3339
from emulator.domain import cascade
from emulator.domain.catalog import GPU_TYPE
from emulator.domain.context import Ctx
from emulator.errors import FailedPrecondition, Invalid, NotFound
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    ActionKind,
    ActionStatus,
    ResourceStatus,
    ScheduledAction,
    SessionStatus,
    check_edge,
)

K = ActionKind
A = ActionStatus
# The parameters each action takes (required, optional); a fault rule is checked by the runtime's fault set.
PARAMS: Mapping[ActionKind, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    K.ADD_FAULT: (("rule",), ()),
    K.REMOVE_FAULT: (("name",), ()),
    K.STOP_RESOURCE: (("id",), ()),
    K.EXPIRE_SESSION: (("id",), ()),
    K.CAPACITY_UNAVAILABLE: (("seconds",), ("gpu_type",)),
})
MAX_OUTAGE_SECONDS = 30 * 86400.0


def check(tenant: Tenant, kind: Any, params: dict[str, Any]) -> ActionKind:
    """The action's kind; :class:`Invalid` for an unknown one or a missing, unknown or bad parameter,
    :class:`NotFound` for a target the tenant does not hold."""
    try:
        action = ActionKind(kind)
    except ValueError:
        raise Invalid(f"action must be one of {', '.join(k.value for k in ActionKind)}, not {str(kind)[:60]!r}",
                      param="action") from None
    required, optional = PARAMS[action]
    for name in required:
        if params.get(name) is None:
            raise Invalid(f"{action.value} needs {name!r}", param=name)
    unknown = set(params) - set(required) - set(optional)
    if unknown:
        raise Invalid(f"{action.value} takes {', '.join(required + optional)}, not {', '.join(sorted(unknown))}",
                      param=sorted(unknown)[0])
    if action is K.STOP_RESOURCE and str(params["id"]) not in tenant.resources:
        raise NotFound(f"model resource {str(params['id'])[:80]!r} not found", param="id")
    if action is K.EXPIRE_SESSION and str(params["id"]) not in tenant.sessions:
        raise NotFound(f"training session {str(params['id'])[:80]!r} not found", param="id")
    if action is K.REMOVE_FAULT and not isinstance(params["name"], str):
        raise Invalid("name: the name of a fault rule", param="name")
    if action is K.CAPACITY_UNAVAILABLE and not isinstance(params.get("gpu_type", ""), str):
        raise Invalid("gpu_type: a GPU type (default: every one)", param="gpu_type")
    if action is K.CAPACITY_UNAVAILABLE:
        seconds = params["seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_OUTAGE_SECONDS:
            raise Invalid(f"seconds: the outage's length, more than 0 and at most {MAX_OUTAGE_SECONDS:g}",
                          param="seconds")
    return action


def schedule(tenant: Tenant, ctx: Ctx, action: ActionKind, at: float, params: dict[str, Any]) -> ScheduledAction:
    """A checked action (:func:`check`) waits in the timeline for ``at`` (not before now)."""
    if at < ctx.now:
        raise Invalid(f"at: {at - ctx.now:.3f} s is in the past of this tenant's clock; an action happens now or "
                      "later", param="at")
    record = ScheduledAction(id=tenant.ids.token("act_", 16), action=action.value, at=at, params=dict(params),
                             status=A.SCHEDULED.value, created_at=ctx.now, updated_at=ctx.now)
    tenant.actions.add(record)
    tenant.log(ctx.now, "action", record.id, None, record.status, action=record.action, due=rfc3339(at))
    tenant.timeline.schedule(at, TimelineEvent.ACTION_RUN, record.id)
    return record


def get(tenant: Tenant, action_id: str) -> ScheduledAction:
    record = tenant.actions.get(action_id)
    if record is None:
        raise NotFound(f"no scheduled action {action_id[:80]!r}", param="id")
    return record


def cancel(tenant: Tenant, ctx: Ctx, action_id: str) -> ScheduledAction:
    """The action will not happen (its timeline entry stays, and does nothing when its time comes)."""
    record = get(tenant, action_id)
    if record.status != A.SCHEDULED:
        raise FailedPrecondition(f"action {record.id} is {record.status}; only a scheduled action can be cancelled",
                                 param="id")
    _finish(tenant, record, A.CANCELLED, ctx.now, "cancelled before its time")
    return record


def finish(tenant: Tenant, record: ScheduledAction, ok: bool, result: str, at: float) -> None:
    """How an action the runtime carried out (a fault rule) ended."""
    _finish(tenant, record, A.DONE if ok else A.FAILED, at, result)


def _finish(tenant: Tenant, record: ScheduledAction, status: ActionStatus, at: float, result: str) -> None:
    old = record.status
    check_edge(old, status)
    record.status = status.value
    record.result = result
    record.updated_at = max(at, record.created_at)
    tenant.log(at, "action", record.id, old, record.status, action=record.action, result=result)


# --- the timeline event ----------------------------------------------------------------------------

def on_run(tenant: Tenant, ctx: Ctx, record: ScheduledAction, at: float) -> None:
    if record.status != A.SCHEDULED:
        return  # cancelled
    action = ActionKind(record.action)
    if action in (K.ADD_FAULT, K.REMOVE_FAULT):
        tenant.outbox.append((record, at))  # the runtime's fault rules: carried out (and finished) by the runtime
        return
    ok, result = _RUN[action](tenant, ctx, record.params, at)
    _finish(tenant, record, A.DONE if ok else A.FAILED, at, result)


def _stop_resource(tenant: Tenant, ctx: Ctx, params: Mapping[str, Any], at: float) -> tuple[bool, str]:
    r = tenant.resources.get(params["id"])
    if r is None:
        return False, f"model resource {params['id']} is gone"
    if r.status in (ResourceStatus.STOPPING, ResourceStatus.STOPPED, ResourceStatus.ERROR):
        return False, f"model resource {r.id} was already {r.status}"
    stopped = len(cascade.active_sessions(tenant, r))
    cascade.stop_resource(tenant, ctx, r, at)
    return True, f"model resource {r.id} force-stopped ({stopped} active session(s) stopped with it)"


def _expire_session(tenant: Tenant, ctx: Ctx, params: Mapping[str, Any], at: float) -> tuple[bool, str]:
    s = tenant.sessions.get(params["id"])
    if s is None:
        return False, f"training session {params['id']} is gone"
    if s.status not in (SessionStatus.CREATING, SessionStatus.RUNNING):
        return False, f"training session {s.id} was already {s.status}"
    cascade.expire_session(tenant, s, at)
    return True, f"training session {s.id} expired"


def _capacity_unavailable(tenant: Tenant, ctx: Ctx, params: Mapping[str, Any], at: float) -> tuple[bool, str]:
    """The GPU queue stands still for ``seconds``: every resource waiting in it (of ``gpu_type``, or all) leaves
    that much later, and a resource created meanwhile queues behind them. Resources already past the queue
    keep their GPUs."""
    seconds = float(params["seconds"])
    only = params.get("gpu_type")
    moved = 0
    for gpu_type, waiting in tenant.gpu_queue.items():
        if only is not None and gpu_type != only:
            continue
        for rid in waiting:
            r = tenant.resources[rid]
            if r.queue_exit_at is not None:
                r.queue_exit_at = later(r.queue_exit_at, seconds)
                tenant.timeline.schedule(r.queue_exit_at, TimelineEvent.RESOURCE_DEQUEUE, r.id)
                moved += 1
    for gpu_type in [only] if only is not None else sorted({GPU_TYPE, *tenant.gpu_queue_tail}):
        # A resource created during the outage queues behind it (gpu_queue.enter starts from the tail).
        tenant.gpu_queue_tail[gpu_type] = later(max(tenant.gpu_queue_tail.get(gpu_type, at), at), seconds)
    return True, f"no GPU capacity for {seconds:g} s: {moved} queued resource(s) wait that much longer"


_RUN: Mapping[ActionKind, Callable[[Tenant, Ctx, Mapping[str, Any], float], tuple[bool, str]]] = MappingProxyType({
    K.STOP_RESOURCE: _stop_resource, K.EXPIRE_SESSION: _expire_session, K.CAPACITY_UNAVAILABLE: _capacity_unavailable})
