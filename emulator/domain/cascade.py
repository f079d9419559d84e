"""Stops, expiries and failures that cascade from a model resource to its sessions to their operations.

One module owns the cascade, so the resource, session and operation modules never import each other
in a circle: a stopping resource stops its active sessions, a stopping, expiring or failing session
fails its unfinished operations with ``SESSION_NOT_ACTIVE``.
"""

from __future__ import annotations

from emulator.bounds import later
from emulator.domain import gpu_queue
from emulator.domain.common import release_inputs, transition
from emulator.domain.context import Ctx
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    ACTIVE_SESSION,
    ModelResource,
    OperationStatus,
    ResourceStatus,
    Session,
    SessionStatus,
    error_detail,
)

SESSION_NOT_ACTIVE = "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
RESOURCE_UNAVAILABLE = "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE"
S = SessionStatus
R = ResourceStatus


def active_sessions(tenant: Tenant, r: ModelResource) -> list[Session]:
    """Sessions that still hold a slot on ``r`` (a STOPPING session keeps its slot)."""
    sessions = tenant.sessions
    return [sessions[sid] for sid in tenant.sessions_of.get(r.id, ()) if sessions[sid].status in ACTIVE_SESSION]


def active_session_count(tenant: Tenant, r: ModelResource) -> int:
    """``len(active_sessions(tenant, r))`` without building the list (every create checks its cap)."""
    peek = tenant.sessions.peek  # (reading only: the rows' own lookup, without Table.__getitem__'s call)
    n = 0
    for sid in tenant.sessions_of.get(r.id, ()):
        if peek(sid).status in ACTIVE_SESSION:
            n += 1
    return n


def fail_operations(tenant: Tenant, s: Session, at: float) -> None:
    """The session stops: every unfinished operation ends FAILED with SESSION_NOT_ACTIVE."""
    queue = tenant.queues.pop(s.id, None)
    if not queue:
        return
    r = tenant.resources[s.model_resources_id]
    for op_id in queue:
        op = tenant.operations[op_id]
        op.error = error_detail(SESSION_NOT_ACTIVE, f"training session {s.id} stopped before the operation "
                                "finished", at)
        transition(tenant, op, OperationStatus.FAILED, at)
        release_inputs(tenant, op)
        tenant.inflight[r.id] -= 1


def stop_session(tenant: Tenant, ctx: Ctx, s: Session, at: float) -> None:
    if s.status not in (S.CREATING, S.RUNNING):
        return
    fail_operations(tenant, s, at)
    transition(tenant, s, S.STOPPING, at)
    tenant.timeline.schedule(later(at, ctx.timing.session_stopping_seconds), TimelineEvent.SESSION_STOPPED, s.id)


def expire_session(tenant: Tenant, s: Session, at: float) -> None:
    fail_operations(tenant, s, at)
    transition(tenant, s, S.EXPIRED, at)


def fail_session(tenant: Tenant, s: Session, code: str, message: str, at: float) -> None:
    fail_operations(tenant, s, at)
    s.error = error_detail(code, message, at)
    transition(tenant, s, S.ERROR, at)


def stop_resource(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    """A stop (forced when sessions are active): the sessions stop, the resource goes STOPPING."""
    for s in active_sessions(tenant, r):
        stop_session(tenant, ctx, s, at)
    _stopping(tenant, ctx, r, at)


def expire_resource(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    """Inactivity expiry: the active sessions become EXPIRED, the resource goes STOPPING."""
    for s in active_sessions(tenant, r):
        if s.status != S.STOPPING:
            expire_session(tenant, s, at)
    _stopping(tenant, ctx, r, at)
    tenant.log(at, "model_resources", r.id, None, r.status, reason="inactive_timeout")


def fail_resource(tenant: Tenant, r: ModelResource, code: str, message: str, at: float) -> None:
    """The resource goes to ERROR with ``code``; its active sessions follow with RESOURCE_UNAVAILABLE."""
    if r.status in (R.STOPPED, R.ERROR, R.STOPPING):
        return
    for s in active_sessions(tenant, r):
        if s.status != S.STOPPING:
            fail_session(tenant, s, RESOURCE_UNAVAILABLE, f"model resource {r.id} failed: {message}", at)
    r.error = error_detail(code, message, at)
    r.expires_at = None
    gpu_queue.leave(tenant, r)
    transition(tenant, r, R.ERROR, at)


def _stopping(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    transition(tenant, r, R.STOPPING, at)
    r.expires_at = None
    gpu_queue.leave(tenant, r)
    tenant.timeline.schedule(later(at, ctx.timing.resource_stopping_seconds), TimelineEvent.RESOURCE_STOPPED, r.id)
