"""The stored objects, their statuses and the lifecycles that move them, each defined once.

Records are plain slotted classes: small (memory per idle session matters), exported and imported as JSON
through :func:`to_dict` / :func:`from_dict` (the state and fixture format). Statuses are ``StrEnum``s whose
values are the API's strings; records keep the plain string. Next to each status enum stands its
lifecycle (docs/api-surface.md C.1-C.3 and A.7): the only documented edges, the terminal statuses, and
:func:`check_edge`, which every status change goes through, so an illegal transition is a bug that fails
loudly (the property tests look for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any


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


class ActionStatus(StrEnum):
    """A scheduled action of the control plane (``/_emulator/clock/actions``): it waits for its time, then it
    is done, or failed (its target was gone or could not take it), unless it was cancelled first."""

    SCHEDULED = "scheduled"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


R, S, Op, Q, A = ResourceStatus, SessionStatus, OperationStatus, ShapingStatus, ActionStatus

TRANSITIONS: Mapping[type[StrEnum], Mapping[StrEnum, frozenset[StrEnum]]] = MappingProxyType({
    # (keyed by members: a member hashes and compares as its value, so stored strings look them up)
    ResourceStatus: MappingProxyType({
        R.PENDING: frozenset({R.CREATING, R.STOPPING, R.ERROR}),
        R.CREATING: frozenset({R.READY, R.STOPPING, R.ERROR}),
        R.READY: frozenset({R.STOPPING, R.ERROR}),
        R.STOPPING: frozenset({R.STOPPED}),
        R.STOPPED: frozenset(),
        R.ERROR: frozenset(),
    }),
    SessionStatus: MappingProxyType({
        S.CREATING: frozenset({S.RUNNING, S.STOPPING, S.EXPIRED, S.ERROR}),
        S.RUNNING: frozenset({S.STOPPING, S.EXPIRED, S.ERROR}),
        S.STOPPING: frozenset({S.STOPPED}),
        S.STOPPED: frozenset(),
        S.EXPIRED: frozenset(),
        S.ERROR: frozenset(),
    }),
    OperationStatus: MappingProxyType({
        Op.PENDING: frozenset({Op.RUNNING, Op.FAILED}),
        Op.RUNNING: frozenset({Op.COMPLETED, Op.FAILED}),
        Op.COMPLETED: frozenset(),
        Op.FAILED: frozenset(),
    }),
    ShapingStatus: MappingProxyType({
        Q.PENDING: frozenset({Q.QUEUED, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.QUEUED: frozenset({Q.RUNNING, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.RUNNING: frozenset({Q.COMPLETED, Q.CANCEL_REQUESTED, Q.ERROR, Q.USER_ERROR}),
        Q.CANCEL_REQUESTED: frozenset({Q.CANCELLED}),
        Q.COMPLETED: frozenset(),
        Q.CANCELLED: frozenset(),
        Q.ERROR: frozenset(),
        Q.USER_ERROR: frozenset(),
    }),
    ActionStatus: MappingProxyType({
        A.SCHEDULED: frozenset({A.DONE, A.FAILED, A.CANCELLED}),
        A.DONE: frozenset(),
        A.FAILED: frozenset(),
        A.CANCELLED: frozenset(),
    }),
})

# The statuses no edge leaves: derived from the table, so the two can never disagree.
TERMINAL: Mapping[type[StrEnum], frozenset[StrEnum]] = MappingProxyType(
    {enum: frozenset(status for status, edges in table.items() if not edges) for enum, table in TRANSITIONS.items()})

# Sessions that still hold a slot on their resource (a STOPPING session keeps its LoRA slot).
ACTIVE_SESSION = frozenset({S.CREATING, S.RUNNING, S.STOPPING})


class IllegalTransition(RuntimeError):
    pass


def check_edge(old: str, new: StrEnum) -> None:
    """``old`` is a record's status as stored (a plain string): a ``StrEnum`` member hashes and compares as
    its value, so the table answers for it without building the member (an ``Enum`` call costs a microsecond,
    and every status change makes one)."""
    allowed = TRANSITIONS[type(new)].get(old)  # type: ignore[call-overload]
    if allowed is None or new not in allowed:
        raise IllegalTransition(f"{old} -> {new} is not a documented edge")


def is_terminal(status: str, enum: type[StrEnum]) -> bool:
    return not TRANSITIONS[enum][status]  # type: ignore[index]


class OperationKind(StrEnum):
    """The asynchronous operations a training session runs; the value is the path segment of its endpoints."""

    FORWARD_BACKWARD = "forward-backward"
    CUSTOM_FORWARD_BACKWARD = "custom-forward-backward"
    OPTIM_STEP = "optim-step"
    WEIGHTS_SYNC = "weights-sync"
    SAMPLE = "sample"
    INFERENCE_CHECKPOINT = "inference-checkpoint"
    TRAINING_CHECKPOINT = "training-checkpoint"


class CheckpointType(StrEnum):
    TRAINING = "CHECKPOINT_TYPE_TRAINING"
    INFERENCE = "CHECKPOINT_TYPE_INFERENCE"


def error_detail(code: str, message: str, at: float) -> dict[str, Any]:
    """What failed and when: the one shape of every stored error (a resource's, a session's, an operation's).
    The renderer shows the fields its schema has (an operation's error has no time)."""
    return {"code": code, "message": message, "occurred_at": at}


@dataclass(slots=True)
class ModelResource:
    id: str
    created_by: str
    base_model: str
    lora_enabled: bool
    gpu_type: str
    num_generator_replicas: int
    optimizer_config: dict[str, Any]
    inactive_timeout: int
    status: str
    created_at: float
    updated_at: float
    base_weights_ref: str | None = None
    queue_exit_at: float | None = None      # when it leaves the GPU queue (PENDING only)
    queue_extra: int = 0                    # phantom resources ahead (fault "waits at position P")
    last_activity: float | None = None
    expires_at: float | None = None
    expiry_armed: bool = False              # an expiry event is in the timeline
    error: dict[str, Any] | None = None
    inflight_ops: int = 0
    session_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Session:
    id: str
    model_resources_id: str
    created_by: str
    base_model: str
    status: str
    created_at: float
    updated_at: float
    lora_config: dict[str, Any] | None = None
    display_name: str | None = None
    metadata: dict[str, Any] | None = None
    resume_from_checkpoint_id: str | None = None
    load_optimizer: bool | None = None
    error: dict[str, Any] | None = None
    step: int = 0
    trainer_step: int = 0
    target_weights_version: int = 0
    applied_weights_version: int = 0
    pending_publish: bool = False
    inference_checkpoint_ids: list[str] | None = None
    training_checkpoint_ids: list[str] | None = None
    queue: list[str] | None = None          # op ids submitted and not yet finished, in order
    busy_until: float | None = None         # when the running operation finishes
    routed_experts: dict[str, int] | None = None  # routed-experts key -> positions covered, oldest first
    evicted_operations: int = 0             # finished operations forgotten past the retention limit


@dataclass(slots=True)
class Operation:
    id: str
    session_id: str
    kind: str
    status: str
    created_at: float
    updated_at: float
    body: dict[str, Any]
    body_hash: str
    idempotency_key: str
    output: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    fault_code: str | None = None           # fault effect: end FAILED with this code
    payload_id: str | None = None           # the uploaded payload its body came from
    output_released: bool = False           # its (large) output was released to bound memory


@dataclass(slots=True)
class Checkpoint:
    id: str
    session_id: str
    type: str
    base_model: str
    step: int
    created_at: float
    lora_rank: int | None = None
    lora_config: dict[str, Any] | None = None   # the session's whole LoRA config (a resume inherits it)
    registration: dict[str, Any] | None = None
    model_state: dict[str, Any] | None = None   # the compute model at save time
    created_by: str = ""


@dataclass(slots=True)
class Payload:
    id: str
    session_id: str
    blob: str | None = None         # the uploaded bytes (emulator.store.blobs), None until uploaded and once released
    created_at: float = 0.0
    released_by: str | None = None  # the operation whose end released ``blob``
    size: int = 0                   # of the uploaded bytes

    @property
    def data(self) -> bytes | None:
        """The uploaded bytes, read from disk (each time: read them once per use)."""
        blob = self.blob
        return None if blob is None else blob.read()  # type: ignore[attr-defined]

    @data.setter
    def data(self, value: None) -> None:
        if value is not None:
            raise TypeError("a payload's bytes are stored as a blob (emulator.store.blobs): set payload.blob")
        self.blob = None


@dataclass(slots=True)
class ShapingJob:
    id: str
    user_id: str
    status: str
    created_at: float
    updated_at: float
    params: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] | None = None
    phase: int = 0


class ActionKind(StrEnum):
    """What a scheduled action does when its time comes (``emulator.domain.actions``)."""

    ADD_FAULT = "add_fault"
    REMOVE_FAULT = "remove_fault"
    STOP_RESOURCE = "stop_resource"
    EXPIRE_SESSION = "expire_session"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"


@dataclass(slots=True)
class ScheduledAction:
    """An action of the control plane that waits in the tenant's timeline for its virtual time (not an object
    of the real API: how a test schedules what happens to it). ``params`` are the action's own (a fault rule,
    a target id, an outage's length); ``result`` says what it did, or why it failed."""

    id: str
    action: str
    at: float
    params: dict[str, Any]
    status: str
    created_at: float
    updated_at: float
    result: str | None = None


FILE_STATUSES = ("PENDING", "QUEUED", "RUNNING", "COMPLETED", "FAILED", "INVALID_FORMAT")


@dataclass(slots=True)
class File:
    """A file of the Files API (``client.files``): created by ``POST /v1/files``, its bytes uploaded to a
    presigned URL, then validated by ``POST /v1/files/{id}/preprocess``."""

    id: str
    filename: str
    purpose: str
    file_type: str
    created_at: float
    created_by: str = ""
    checksum: str | None = None
    size: int = 0                           # answered as ``bytes``
    blob: str | None = None                 # the uploaded bytes (emulator.store.blobs); None until uploaded
    processing_status: str = "PENDING"
    validation_report: dict[str, Any] | None = None


def to_dict(record: Any) -> dict[str, Any]:
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, bytes):
            value = {"__bytes__": value.decode("latin-1")}
        out[f.name] = value
    return out


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    values = {}
    for f in fields(cls):
        if f.name in data:
            value = data[f.name]
            if isinstance(value, dict) and set(value) == {"__bytes__"}:
                value = value["__bytes__"].encode("latin-1")
            values[f.name] = value
    return cls(**values)
