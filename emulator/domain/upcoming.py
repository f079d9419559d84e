"""What the timeline will do: each pending transition previewed from its record, and what a polled object waits on.

Emulates nothing of the real API: this is ``/_emulator/clock/pending`` and what moves a manual or auto clock to
"the next thing" (``advance {"to": "next"}``, ``run``, a poll on the auto clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from emulator.domain.shaping import PHASES
from emulator.store import Tenant, TimelineEvent
from emulator.store.presigned import TTL_SECONDS
from emulator.store.records import (
    ActionStatus,
    ModelResource,
    Operation,
    OperationStatus,
    ResourceStatus,
    ScheduledAction,
    Session,
    SessionStatus,
    ShapingJob,
    ShapingStatus,
    is_terminal,
)

R, S, Op, Q = ResourceStatus, SessionStatus, OperationStatus, ShapingStatus
E = TimelineEvent
# The tables whose records have a status, with its enum, and their kind as the event log names it.
STATUSES: Mapping[str, type[StrEnum]] = MappingProxyType({
    "resources": ResourceStatus, "sessions": SessionStatus, "operations": OperationStatus,
    "shaping_jobs": ShapingStatus, "actions": ActionStatus})
KINDS: Mapping[str, str] = MappingProxyType({
    "resources": "model_resources", "sessions": "training_session", "operations": "operation",
    "shaping_jobs": "shaping_job", "actions": "action", "payloads": "payload", "files": "file"})
URL_EXPIRED = "upload_url_expired"
DERIVED_SEQ = 1 << 62   # derived entries sort after the timeline's own at the same instant


@dataclass(frozen=True, slots=True)
class Upcoming:
    """One pending transition: ``kind``/``id`` reach ``new`` (from ``old``) at ``at`` through ``event``."""

    at: float
    seq: int
    kind: str
    id: str
    event: str
    old: str | None
    new: str
    detail: str | None = None

    def describe(self) -> str:
        """E.g. ``operation 3f...: TRAINING_OPERATION_STATUS_RUNNING -> ..._COMPLETED`` (for messages)."""
        return f"{self.kind} {self.id}: {self.old or '-'} -> {self.new}"


Preview = Callable[[Tenant, Any, float, int], Iterator[Upcoming]]


def _dequeue(tenant: Tenant, r: ModelResource, at: float, seq: int) -> Iterator[Upcoming]:
    if r.status != R.PENDING or at < (r.queue_exit_at or 0):
        return  # stale: stopped or failed while queued, or the exit was pushed later (a newer entry holds it)
    if r.queue_extra > 0:
        yield Upcoming(at, seq, "model_resources", r.id, E.RESOURCE_DEQUEUE, r.status, r.status,
                       f"one of the {r.queue_extra} placed ahead of it by a fault rule leaves the GPU queue")
    else:
        yield Upcoming(at, seq, "model_resources", r.id, E.RESOURCE_DEQUEUE, r.status, R.CREATING,
                       "leaves the GPU queue")


def _ready(tenant: Tenant, r: ModelResource, at: float, seq: int) -> Iterator[Upcoming]:
    if r.status == R.CREATING:
        yield Upcoming(at, seq, "model_resources", r.id, E.RESOURCE_READY, r.status, R.READY)


def _expire(tenant: Tenant, r: ModelResource, at: float, seq: int) -> Iterator[Upcoming]:
    if r.status != R.READY or r.expires_at is None or tenant.inflight.get(r.id, 0) > 0:
        return  # (an operation in flight: its end is activity, which pushes the expiry later)
    when = max(at, r.expires_at)  # an entry before expires_at re-arms at it
    yield Upcoming(when, seq, "model_resources", r.id, E.RESOURCE_EXPIRE, r.status, R.STOPPING,
                   f"idle for its inactive_timeout of {r.inactive_timeout} s")
    for sid in tenant.sessions_of.get(r.id, ()):
        s = tenant.sessions.peek(sid)
        if s.status in (S.CREATING, S.RUNNING):
            yield Upcoming(when, seq, "training_session", s.id, E.RESOURCE_EXPIRE, s.status, S.EXPIRED,
                           f"its model resource {r.id} expires")


def _stopped(tenant: Tenant, r: ModelResource, at: float, seq: int) -> Iterator[Upcoming]:
    if r.status == R.STOPPING:
        yield Upcoming(at, seq, "model_resources", r.id, E.RESOURCE_STOPPED, r.status, R.STOPPED)


def _session_running(tenant: Tenant, s: Session, at: float, seq: int) -> Iterator[Upcoming]:
    if s.status == S.CREATING and tenant.resources.peek(s.model_resources_id).status == R.READY:
        yield Upcoming(at, seq, "training_session", s.id, E.SESSION_RUNNING, s.status, S.RUNNING)


def _session_stopped(tenant: Tenant, s: Session, at: float, seq: int) -> Iterator[Upcoming]:
    if s.status == S.STOPPING:
        yield Upcoming(at, seq, "training_session", s.id, E.SESSION_STOPPED, s.status, S.STOPPED)


def _op_start(tenant: Tenant, op: Operation, at: float, seq: int) -> Iterator[Upcoming]:
    if op.status == Op.PENDING:
        yield Upcoming(at, seq, "operation", op.id, E.OPERATION_START, op.status, Op.RUNNING, op.kind)


def _op_complete(tenant: Tenant, op: Operation, at: float, seq: int) -> Iterator[Upcoming]:
    if op.status == Op.RUNNING:
        if op.fault_code:
            yield Upcoming(at, seq, "operation", op.id, E.OPERATION_COMPLETE, op.status, Op.FAILED,
                           f"{op.kind}: {op.fault_code} (a fault rule's effect)")
        else:
            yield Upcoming(at, seq, "operation", op.id, E.OPERATION_COMPLETE, op.status, Op.COMPLETED, op.kind)


def _shaping_phase(tenant: Tenant, job: ShapingJob, at: float, seq: int) -> Iterator[Upcoming]:
    if job.status == Q.CANCEL_REQUESTED or is_terminal(job.status, ShapingStatus) or job.phase >= len(PHASES):
        return
    yield Upcoming(at, seq, "shaping_job", job.id, E.SHAPING_PHASE, job.status, PHASES[job.phase][0],
                   f"phase {job.phase + 1} of {len(PHASES)}")


def _shaping_cancelled(tenant: Tenant, job: ShapingJob, at: float, seq: int) -> Iterator[Upcoming]:
    if job.status == Q.CANCEL_REQUESTED:
        yield Upcoming(at, seq, "shaping_job", job.id, E.SHAPING_CANCELLED, job.status, Q.CANCELLED)


def _action(tenant: Tenant, action: ScheduledAction, at: float, seq: int) -> Iterator[Upcoming]:
    if action.status == ActionStatus.SCHEDULED:
        yield Upcoming(at, seq, "action", action.id, E.ACTION_RUN, action.status, ActionStatus.DONE,
                       summary(action))


# What each timeline event will do to its record (next to engine.TIMELINE_HANDLERS, which does it).
PREVIEWS: Mapping[str, Preview] = MappingProxyType({
    E.RESOURCE_DEQUEUE: _dequeue, E.RESOURCE_READY: _ready, E.RESOURCE_EXPIRE: _expire,
    E.RESOURCE_STOPPED: _stopped, E.SESSION_RUNNING: _session_running, E.SESSION_STOPPED: _session_stopped,
    E.OPERATION_START: _op_start, E.OPERATION_COMPLETE: _op_complete, E.SHAPING_PHASE: _shaping_phase,
    E.SHAPING_CANCELLED: _shaping_cancelled, E.ACTION_RUN: _action,
})
_TABLE_OF = MappingProxyType({event.value: event.table for event in TimelineEvent})


def summary(action: ScheduledAction) -> str:
    p: Mapping[str, Any] = action.params  # (the action's own, checked when it was scheduled)
    if action.action == "add_fault":
        return f"add_fault {p['rule'].get('name')!r}"
    if action.action == "remove_fault":
        return f"remove_fault {p['name']!r}"
    if action.action == "capacity_unavailable":
        return f"capacity_unavailable for {p['seconds']:g} s" + (f" ({p['gpu_type']})" if p.get("gpu_type") else "")
    return f"{action.action} {p.get('id')}"


def pending(tenant: Tenant, now: float) -> list[Upcoming]:
    """Every transition still to come, in the order it will happen (time, then scheduling order). The
    tenant should be settled to ``now`` first: what is due has then happened."""
    out: list[Upcoming] = []
    for at, seq, event, obj_id in tenant.timeline.heap:
        record = tenant.table(_TABLE_OF[event]).read(obj_id)
        if record is not None:
            out.extend(PREVIEWS[event](tenant, record, at, seq))
    for p in tenant.payloads.values():
        if p.blob is None and p.released_by is None and p.created_at + TTL_SECONDS > now:
            out.append(Upcoming(p.created_at + TTL_SECONDS, DERIVED_SEQ, "payload", p.id, "payload.upload_url",
                                None, URL_EXPIRED, f"its upload URL was never used (session {p.session_id})"))
    for f in tenant.files.values():
        if f.blob is None and f.created_at + TTL_SECONDS > now:
            out.append(Upcoming(f.created_at + TTL_SECONDS, DERIVED_SEQ, "file", f.id, "file.upload_url", None,
                                URL_EXPIRED, f"its upload URL was never used ({f.filename})"))
    out.sort(key=lambda u: (u.at, u.seq))
    return out


# --- what a polled object waits on --------------------------------------------------------------------

# Statuses an object rests in: a client polling it is not waiting for the clock (a READY resource's expiry
# is pending too, but nobody polls a resource to see it expire).
_RESTING: Mapping[str, frozenset[str]] = MappingProxyType({
    "resources": frozenset({R.READY, R.STOPPED, R.ERROR}),
    "sessions": frozenset({S.RUNNING, S.STOPPED, S.EXPIRED, S.ERROR}),
    "operations": frozenset({Op.COMPLETED, Op.FAILED}),
    "shaping_jobs": frozenset(s for s in ShapingStatus if is_terminal(s, ShapingStatus)),
})


def waits_on(tenant: Tenant, table: str, record: Any) -> frozenset[str] | None:
    """The ids whose transitions move ``record`` on (its own, and those it follows: a CREATING session its
    resource, a queued operation those ahead of it), or None when it rests."""
    resting = _RESTING.get(table)
    if resting is None or record.status in resting:
        return None
    if table == "sessions" and record.status == S.CREATING:
        return frozenset({record.id, record.model_resources_id})
    if table == "operations":
        s = tenant.sessions.peek(record.session_id)
        queue = tenant.queues.get(s.id) or []
        ahead = queue[:queue.index(record.id)] if record.id in queue else []
        return frozenset({record.id, *ahead})
    return frozenset({record.id})


def next_for(tenant: Tenant, now: float, ids: frozenset[str]) -> Upcoming | None:
    """The first pending transition of any of ``ids`` (what a waiting object waits for next)."""
    return next((u for u in pending(tenant, now) if u.id in ids), None)


# --- conditions (``run``'s until) ------------------------------------------------------------------------

def find(tenant: Tenant, obj_id: str) -> tuple[str, Any] | None:
    """(table, record) of the object with that id among those that have a status."""
    for table in STATUSES:
        record = tenant.table(table).read(obj_id)
        if record is not None:
            return table, record
    return None


def status_named(table: str, status: str) -> str:
    """The status ``status`` names for a record of ``table``: the API's value, or its last part (``READY``,
    ``COMPLETED``, any case); ValueError listing them when it is none."""
    enum = STATUSES[table]
    for member in enum:
        if status == member.value or status.upper() == member.value.rsplit("_STATUS_", 1)[-1].upper():
            return member.value
    raise ValueError(f"{status!r} is not a status of a {KINDS[table]} ({', '.join(m.value for m in enum)})")


def holds(table: str, record: Any, status: str | None) -> bool:
    """Whether ``record`` is in ``status`` (None: in a final status)."""
    if status is None:
        return is_terminal(record.status, STATUSES[table])
    return bool(record.status == status)


def final(table: str, record: Any) -> bool:
    return is_terminal(record.status, STATUSES[table])
