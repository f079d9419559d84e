"""Stops, expiries and failures that cascade from a model resource to its sessions to their operations.

One module owns the cascade, so the resource, session and operation modules never import each other
in a circle: a stopping resource stops its active sessions, a stopping, expiring or failing session
fails its unfinished operations with ``SESSION_NOT_ACTIVE``.
"""

from __future__ import annotations

from emulator.domain import gpu_queue
from emulator.domain.common import error_detail, release_inputs, transition
from emulator.domain.context import Ctx
from emulator.domain.lifecycle import ACTIVE_SESSION, OperationStatus, ResourceStatus, SessionStatus
from emulator.store import TenantState
from emulator.store.records import ModelResource, Session

SESSION_NOT_ACTIVE = "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
RESOURCE_UNAVAILABLE = "TRAINING_SESSION_ERROR_CODE_RESOURCE_UNAVAILABLE"
S = SessionStatus
R = ResourceStatus


def active_sessions(state: TenantState, r: ModelResource) -> list[Session]:
    """Sessions that still hold a slot on ``r`` (a STOPPING session keeps its slot)."""
    return [state.sessions[sid] for sid in r.session_ids if state.sessions[sid].status in ACTIVE_SESSION]


def fail_operations(state: TenantState, s: Session, at: float) -> None:
    """The session stops: every unfinished operation ends FAILED with SESSION_NOT_ACTIVE."""
    if not s.queue:
        return
    r = state.resources[s.model_resources_id]
    for op_id in s.queue:
        op = state.operations[op_id]
        op.error = {"code": SESSION_NOT_ACTIVE, "message": f"training session {s.id} stopped before the "
                    "operation finished"}
        transition(state, op, OperationStatus.FAILED, at)
        release_inputs(state, op)
        r.inflight_ops -= 1
    s.queue = None
    s.busy_until = None


def stop_session(state: TenantState, ctx: Ctx, s: Session, at: float) -> None:
    if s.status not in (S.CREATING, S.RUNNING):
        return
    fail_operations(state, s, at)
    transition(state, s, S.STOPPING, at)
    state.schedule(at + ctx.timing.session_stopping_seconds, "session.stopped", s.id)


def expire_session(state: TenantState, s: Session, at: float) -> None:
    fail_operations(state, s, at)
    transition(state, s, S.EXPIRED, at)


def fail_session(state: TenantState, s: Session, code: str, message: str, at: float) -> None:
    fail_operations(state, s, at)
    s.error = error_detail(code, message, at)
    transition(state, s, S.ERROR, at)


def stop_resource(state: TenantState, ctx: Ctx, r: ModelResource, at: float) -> None:
    """A stop (forced when sessions are active): the sessions stop, the resource goes STOPPING."""
    for s in active_sessions(state, r):
        stop_session(state, ctx, s, at)
    _stopping(state, ctx, r, at)


def expire_resource(state: TenantState, ctx: Ctx, r: ModelResource, at: float) -> None:
    """Inactivity expiry: the active sessions become EXPIRED, the resource goes STOPPING."""
    for s in active_sessions(state, r):
        if s.status != S.STOPPING:
            expire_session(state, s, at)
    _stopping(state, ctx, r, at)
    state.log(at, "model_resources", r.id, None, r.status, reason="inactive_timeout")


def fail_resource(state: TenantState, r: ModelResource, code: str, message: str, at: float) -> None:
    """The resource goes to ERROR with ``code``; its active sessions follow with RESOURCE_UNAVAILABLE."""
    if r.status in (R.STOPPED, R.ERROR, R.STOPPING):
        return
    for s in active_sessions(state, r):
        if s.status != S.STOPPING:
            fail_session(state, s, RESOURCE_UNAVAILABLE, f"model resource {r.id} failed: {message}", at)
    r.error = error_detail(code, message, at)
    r.expires_at = None
    gpu_queue.leave(state, r)
    transition(state, r, R.ERROR, at)


def _stopping(state: TenantState, ctx: Ctx, r: ModelResource, at: float) -> None:
    transition(state, r, R.STOPPING, at)
    r.expires_at = None
    gpu_queue.leave(state, r)
    state.schedule(at + ctx.timing.resource_stopping_seconds, "resource.stopped", r.id)
