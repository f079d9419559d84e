"""The stored objects, their statuses and the lifecycles that move them, each defined once.

Records are small msgspec structs of immutable values, exported and imported as JSON (:func:`to_dict` /
:func:`from_dict`); a field is set only through :meth:`Record.__setattr__`, which notes it for the unit of work
(a change outside one raises). Each status enum has its lifecycle (docs/api-surface.md C.1-C.3, A.7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

import msgspec

from emulator.compute.types import Wire
from emulator.jsontypes import Json, JsonObject


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


class CheckpointType(StrEnum):
    TRAINING = "CHECKPOINT_TYPE_TRAINING"
    INFERENCE = "CHECKPOINT_TYPE_INFERENCE"


# --- how a record changes --------------------------------------------------------------------------------

class Notes(Protocol):
    """Where a unit of work notes the records that change (a journaled tenant's :class:`ChangeLog`)."""

    def note(self, record: Record) -> None: ...


class Unjournaled:
    """The notes of a unit of work that no journal reads: nothing to keep (the class itself is the value)."""

    @staticmethod
    def note(record: Record) -> None:
        return None


class OutsideUnitOfWork(RuntimeError):
    pass


#: The notes of the unit of work the current context is in (``Runtime.unit_of_work`` sets them): a
#: journaled tenant's change log, :class:`Unjournaled`, or None outside any (a change there raises).
CHANGES: ContextVar[Notes | type[Unjournaled] | None] = ContextVar("emulator_record_changes", default=None)


class Record(msgspec.Struct, kw_only=True, gc=False, forbid_unknown_fields=True):
    """A stored object. Built in C (no field is noted as it is built); a field set afterwards is noted."""

    id: str

    def __setattr__(self, name: str, value: Any) -> None:
        _set(self, name, value)
        notes = _notes()
        if notes is not Unjournaled:  # (the common case, no journal: one identity test)
            if notes is None:
                raise OutsideUnitOfWork(f"{type(self).__name__} {self.id}: {name} changed outside a unit of work, "
                                        "where no journal sees it")
            notes.note(self)


_set = msgspec.Struct.__setattr__
_notes = CHANGES.get


class Value(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False, forbid_unknown_fields=True):
    """An immutable value a record holds (replaced whole, never edited)."""


class ErrorDetail(Value, frozen=True):
    """What failed and when: the one shape of every stored error (a resource's, a session's, an operation's).
    The renderer shows the fields its schema has (an operation's error has no time)."""

    code: str
    message: str
    occurred_at: float | None = None


def error_detail(code: str, message: str, at: float) -> ErrorDetail:
    return ErrorDetail(code=code, message=message, occurred_at=at)


class LoraConfig(Value, frozen=True):
    """A session's LoRA adapter (numbers as given: an ``alpha`` of 64 shows as 64)."""

    rank: int
    alpha: int | float
    dropout: int | float
    train_unembed: bool
    seed: int | None = None


class AdamConfig(Value, frozen=True):
    """What the SDK lets a resource's Adam optimizer set: nothing."""


class MuonConfig(Value, frozen=True):
    scaling_strategy: str | None = None


class OptimizerConfig(Value, frozen=True):
    """A resource's optimizer: one of adam or muon."""

    adam: AdamConfig | None = None
    muon: MuonConfig | None = None


class Artifact(Value, frozen=True):
    """An entry of a project's model registry (what a checkpoint or a shaping job registered)."""

    kind: str                       # adapter, model or training
    revision_id: str
    base_model: str
    checkpoint_id: str | None


# --- the records ------------------------------------------------------------------------------------------

class ModelResource(Record, kw_only=True, gc=False):
    created_by: str
    base_model: str
    lora_enabled: bool
    gpu_type: str
    num_generator_replicas: int
    optimizer_config: OptimizerConfig
    inactive_timeout: int
    status: str
    created_at: float
    updated_at: float
    base_weights_ref: str | None = None
    queue_exit_at: float | None = None      # when it leaves the GPU queue (PENDING only)
    queue_extra: int = 0                    # phantom resources ahead (fault "waits at position P")
    last_activity: float | None = None
    expires_at: float | None = None
    error: ErrorDetail | None = None


class Session(Record, kw_only=True, gc=False):
    model_resources_id: str
    created_by: str
    base_model: str
    status: str
    created_at: float
    updated_at: float
    lora_config: LoraConfig | None = None
    display_name: str | None = None
    metadata: JsonObject | None = None
    resume_from_checkpoint_id: str | None = None
    load_optimizer: bool | None = None
    error: ErrorDetail | None = None
    step: int = 0
    trainer_step: int = 0
    target_weights_version: int = 0
    applied_weights_version: int = 0
    pending_publish: bool = False
    inference_checkpoint_ids: tuple[str, ...] | None = None
    training_checkpoint_ids: tuple[str, ...] | None = None
    routed_experts: Mapping[str, int] | None = None  # routed-experts key -> positions covered, oldest first
    evicted_operations: int = 0             # finished operations forgotten past the retention limit


class OperationRequest(Wire, frozen=True, kw_only=True):
    """Base of the operation kinds' request types (each kind's module declares its own): what every body
    may carry, the id of an uploaded payload holding the rest (the SDK offloads bodies over 0.5 MiB)."""

    payload_id: str | None = None


class Malformed(Wire, frozen=True, kw_only=True):
    """A body that cannot be read as its kind's request (an uploaded payload is not schema-checked): kept
    until the operation fails with it, when it runs."""

    raw: JsonObject
    error: str


if TYPE_CHECKING:
    Body: TypeAlias = OperationRequest | Malformed | None
else:
    Body = Any  # (read through its kind, Store.bodies: no one type of the store's)


class Operation(Record, kw_only=True, gc=False):
    session_id: str
    kind: str                               # its kind's name (emulator.domain.kinds)
    status: str
    created_at: float
    updated_at: float
    body: Body                              # None once released (a request read only to run): {} in JSON
    body_hash: str
    idempotency_key: str
    output: JsonObject | None = None
    error: ErrorDetail | None = None
    fault_code: str | None = None           # fault effect: end FAILED with this code
    payload_id: str | None = None           # the uploaded payload its body came from
    output_released: bool = False           # its (large) output was released to bound memory


class Checkpoint(Record, kw_only=True, gc=False):
    session_id: str
    type: str
    base_model: str
    step: int
    created_at: float
    lora_rank: int | None = None
    lora_config: LoraConfig | None = None   # the session's whole LoRA config (a resume inherits it)
    registration: JsonObject | None = None
    model_state: JsonObject | None = None   # the compute model at save time
    created_by: str = ""


class Payload(Record, kw_only=True, gc=False):
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


class ShapingConfiguration(Value, frozen=True):
    base_model_name: str
    base_object_id: str
    base_revision_id: str
    model_name: str
    model_project_id: str
    model_revision_id: str
    user_id: str


class ShapingInputs(Value, frozen=True):
    model_object_id: str | None = None
    model_revision_id: str | None = None
    calibration_file_id: str | None = None


class ShapingParams(Value, frozen=True):
    configuration: ShapingConfiguration
    inputs: ShapingInputs


class ShapingResults(Value, frozen=True):
    model_object_id: str
    model_revision_id: str


class ShapingEvent(Value, frozen=True):
    created_at: str
    level: str
    message: str
    object: str
    type: str
    result: ShapingResults | None = None


class ShapingJob(Record, kw_only=True, gc=False):
    user_id: str
    status: str
    created_at: float
    updated_at: float
    params: ShapingParams
    events: tuple[ShapingEvent, ...] = ()
    results: ShapingResults | None = None
    phase: int = 0


class ActionKind(StrEnum):
    """What a scheduled action does when its time comes (``emulator.domain.actions``)."""

    ADD_FAULT = "add_fault"
    REMOVE_FAULT = "remove_fault"
    STOP_RESOURCE = "stop_resource"
    EXPIRE_SESSION = "expire_session"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"


class ScheduledAction(Record, kw_only=True, gc=False):
    """An action of the control plane that waits in the tenant's timeline for its virtual time (not an object
    of the real API: how a test schedules what happens to it). ``params`` are the action's own (a fault rule,
    a target id, an outage's length); ``result`` says what it did, or why it failed."""

    action: str
    at: float
    params: JsonObject
    status: str
    created_at: float
    updated_at: float
    result: str | None = None


FILE_STATUSES = ("PENDING", "QUEUED", "RUNNING", "COMPLETED", "FAILED", "INVALID_FORMAT")


class ValidationReport(Value, frozen=True):
    """What the Files API's preprocess found of a dataset (the SDK's ``FileResponse.validation_report``)."""

    valid: bool
    dataset_format: str | None = None
    nlines: int | None = None
    dataset_has_tools: bool | None = None
    error_type: str | None = None
    error: str | None = None
    file_id: str | None = None


class File(Record, kw_only=True, gc=False):
    """A file of the Files API (``client.files``): created by ``POST /v1/files``, its bytes uploaded to a
    presigned URL, then validated by ``POST /v1/files/{id}/preprocess``."""

    filename: str
    purpose: str
    file_type: str
    created_at: float
    created_by: str = ""
    checksum: str | None = None
    size: int = 0                           # answered as ``bytes``
    blob: str | None = None                 # the uploaded bytes (emulator.store.blobs); None until uploaded
    processing_status: str = "PENDING"
    validation_report: ValidationReport | None = None


#: How a stored operation body is read back: (kind, status, JSON) -> the kind's request (None: released);
#: ValueError when it cannot be. The registry of kinds provides it (the store knows no kind).
BodyDecoder = Callable[[str, str, Any], "OperationRequest | None"]


def _plain(value: object) -> object:
    if isinstance(value, str):  # a blob's name (emulator.store.blobs.Blob, a str that knows its file)
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a value a record holds")


def to_dict(record: Record) -> dict[str, Json]:
    """A record as JSON builtins (the state document's form)."""
    out: dict[str, Json] = msgspec.to_builtins(record, enc_hook=_plain)
    if type(record) is Operation and record.body is None:
        out["body"] = {}  # a released request reads as an empty object, as state documents always showed it
    return out


def from_dict(cls: type[RecordT], data: Mapping[str, Any], bodies: BodyDecoder | None = None) -> RecordT:
    """A record from its (schema-checked) JSON; ValueError naming what cannot be read."""
    values = dict(data)
    if cls is Operation:
        if bodies is None:
            raise ValueError("operations cannot be read without the kinds of operation")
        try:
            body = bodies(values["kind"], values["status"], values.pop("body", None))
        except ValueError as exc:
            raise ValueError(f"body: {exc}") from exc
        values["body"] = None
    try:
        record = msgspec.convert(values, cls)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    if cls is Operation:
        msgspec.Struct.__setattr__(record, "body", body)  # (not a change: it is being built)
    return record


RecordT = TypeVar("RecordT", bound=Record)
