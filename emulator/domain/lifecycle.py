"""Lifecycles as data: statuses and the only edges the real API documents.

Emulates api-surface.md C.1-C.3 and the shaping job statuses of A.7. Every status change in the
emulator goes through :func:`check_edge`, so an illegal transition is a bug that fails loudly
(and the property tests look for it).
"""

from __future__ import annotations

from enum import StrEnum


class ResourceStatus(StrEnum):
    PENDING = "MODEL_RESOURCES_STATUS_PENDING"
    CREATING = "MODEL_RESOURCES_STATUS_CREATING"
    READY = "MODEL_RESOURCES_STATUS_READY"
    STOPPING = "MODEL_RESOURCES_STATUS_STOPPING"
    STOPPED = "MODEL_RESOURCES_STATUS_STOPPED"
    ERROR = "MODEL_RESOURCES_STATUS_ERROR"


class SessionStatus(StrEnum):
    CREATING = "TRAINING_SESSION_STATUS_CREATING"
    RUNNING = "TRAINING_SESSION_STATUS_RUNNING"
    STOPPING = "TRAINING_SESSION_STATUS_STOPPING"
    STOPPED = "TRAINING_SESSION_STATUS_STOPPED"
    EXPIRED = "TRAINING_SESSION_STATUS_EXPIRED"
    ERROR = "TRAINING_SESSION_STATUS_ERROR"


class OperationStatus(StrEnum):
    PENDING = "TRAINING_OPERATION_STATUS_PENDING"
    RUNNING = "TRAINING_OPERATION_STATUS_RUNNING"
    COMPLETED = "TRAINING_OPERATION_STATUS_COMPLETED"
    FAILED = "TRAINING_OPERATION_STATUS_FAILED"


class ShapingStatus(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    ERROR = "error"
    USER_ERROR = "user_error"


R, S, Op, Q = ResourceStatus, SessionStatus, OperationStatus, ShapingStatus

TRANSITIONS: dict[type[StrEnum], dict[StrEnum, frozenset[StrEnum]]] = {
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


def check_edge(old: StrEnum, new: StrEnum) -> None:
    table = TRANSITIONS[type(old)]
    if new not in table[old]:
        raise IllegalTransition(f"{old} -> {new} is not a documented edge")

