"""Lifecycles as data: the only status edges the real API documents (the statuses are in the records).

Emulates docs/api-surface.md C.1-C.3 and the shaping job statuses of A.7. Every status change in the
emulator goes through :func:`check_edge`, so an illegal transition is a bug that fails loudly
(and the property tests look for it).
"""

from __future__ import annotations

from enum import StrEnum

from emulator.store.records import OperationStatus, ResourceStatus, SessionStatus, ShapingStatus

__all__ = ["ACTIVE_SESSION", "TERMINAL", "TRANSITIONS", "IllegalTransition", "OperationStatus", "ResourceStatus",
           "SessionStatus", "ShapingStatus", "check_edge"]


R, S, Op, Q = ResourceStatus, SessionStatus, OperationStatus, ShapingStatus

TRANSITIONS: dict[type[StrEnum], dict[str, frozenset[StrEnum]]] = {  # (keyed by members: str subclasses)
    ResourceStatus: {
        R.PENDING: frozenset({R.CREATING, R.STOPPING, R.ERROR}),
        R.CREATING: frozenset({R.READY, R.STOPPING, R.ERROR}),
        R.READY: frozenset({R.STOPPING, R.ERROR}),
        R.STOPPING: frozenset({R.STOPPED}),
        R.STOPPED: frozenset(),
        R.ERROR: frozenset(),
    },
    SessionStatus: {
        S.CREATING: frozenset({S.RUNNING, S.STOPPING, S.EXPIRED, S.ERROR}),
        S.RUNNING: frozenset({S.STOPPING, S.EXPIRED, S.ERROR}),
        S.STOPPING: frozenset({S.STOPPED}),
        S.STOPPED: frozenset(),
        S.EXPIRED: frozenset(),
        S.ERROR: frozenset(),
    },
    OperationStatus: {
        Op.PENDING: frozenset({Op.RUNNING, Op.FAILED}),
        Op.RUNNING: frozenset({Op.COMPLETED, Op.FAILED}),
        Op.COMPLETED: frozenset(),
        Op.FAILED: frozenset(),
    },
    ShapingStatus: {
        Q.PENDING: frozenset({Q.QUEUED, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.QUEUED: frozenset({Q.RUNNING, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.RUNNING: frozenset({Q.COMPLETED, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.CANCEL_REQUESTED: frozenset({Q.CANCELLED}),
        Q.COMPLETED: frozenset(),
        Q.CANCELLED: frozenset(),
        Q.ERROR: frozenset(),
        Q.USER_ERROR: frozenset(),
    },
}

TERMINAL = {
    ResourceStatus: frozenset({R.STOPPED, R.ERROR}),
    SessionStatus: frozenset({S.STOPPED, S.EXPIRED, S.ERROR}),
    OperationStatus: frozenset({Op.COMPLETED, Op.FAILED}),
    ShapingStatus: frozenset({Q.COMPLETED, Q.CANCELLED, Q.ERROR, Q.USER_ERROR}),
}

# Sessions that still hold a slot on their resource (a STOPPING session keeps its LoRA slot).
ACTIVE_SESSION = frozenset({S.CREATING, S.RUNNING, S.STOPPING})


class IllegalTransition(RuntimeError):
    pass


def check_edge(old: str, new: StrEnum) -> None:
    """``old`` is a record's status as stored (a plain string): a ``StrEnum`` member hashes and compares as
    its value, so the table answers for it without building the member (an ``Enum`` call costs a microsecond,
    and every status change makes one)."""
    allowed = TRANSITIONS[type(new)].get(old)
    if allowed is None or new not in allowed:
        raise IllegalTransition(f"{old} -> {new} is not a documented edge")

