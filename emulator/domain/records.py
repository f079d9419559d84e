"""The stored objects. Plain slotted classes: small (memory per idle session matters), and
exported/imported as JSON through :func:`to_dict` / :func:`from_dict` (the state and fixture format).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


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


@dataclass(slots=True)
class Checkpoint:
    id: str
    session_id: str
    type: str
    base_model: str
    step: int
    created_at: float
    lora_rank: int | None = None
    registration: dict[str, Any] | None = None
    model_state: dict[str, Any] | None = None   # the compute model at save time
    created_by: str = ""


@dataclass(slots=True)
class Payload:
    id: str
    session_id: str
    upload_token: str
    data: bytes | None = None
    created_at: float = 0.0


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


RECORD_TYPES = {cls.__name__: cls for cls in (ModelResource, Session, Operation, Checkpoint, Payload, ShapingJob)}


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
