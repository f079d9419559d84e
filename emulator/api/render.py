"""Records -> the wire JSON of the spec's response schemas (int64 as strings, RFC 3339 times).

With the operation kinds' renders (each kind's output) and :mod:`emulator.wire` (what several answers show
alike), the only place that knows the wire format: the domain stores numbers, times and ids; this module
writes ``"step": "3"`` and RFC 3339 times as the API shows them.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from emulator.clock import rfc3339
from emulator.domain.kinds import KINDS
from emulator.domain.model_resources import queue_position
from emulator.jsontypes import JsonObject
from emulator.runtime import RenderCache
from emulator.store import Tenant
from emulator.store.records import (
    Checkpoint,
    CheckpointType,
    ErrorDetail,
    File,
    LoraConfig,
    ModelResource,
    Operation,
    OptimizerConfig,
    Session,
    ShapingJob,
)
from emulator.wire import checkpoint_summary


def _error(err: ErrorDetail) -> dict[str, Any]:
    out: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.occurred_at is not None:
        out["occurred_at"] = rfc3339(err.occurred_at)
    return out


def model_resources(tenant: Tenant, r: ModelResource) -> dict[str, Any]:
    details: dict[str, Any] = {}
    position = queue_position(tenant, r)
    if position is not None:
        details["queue_position"] = position
    created = rfc3339(r.created_at)
    out: dict[str, Any] = {
        "id": r.id,
        "base_model": r.base_model,
        "compute_config": {"num_generator_replicas": r.num_generator_replicas, "gpu_type": r.gpu_type},
        "created_at": created,
        "created_by": r.created_by,
        "inactive_timeout": r.inactive_timeout,
        "lora_enabled": r.lora_enabled,
        "optimizer_config": _optimizer(r.optimizer_config),
        "status": r.status,
        "status_details": details,
        "updated_at": created if r.updated_at == r.created_at else rfc3339(r.updated_at),  # a new resource
    }
    if r.base_weights_ref is not None:
        out["base_weights_ref"] = r.base_weights_ref
    if r.error is not None:
        out["error"] = _error(r.error)
    if r.expires_at is not None and r.status == "MODEL_RESOURCES_STATUS_READY":
        out["expires_at"] = rfc3339(r.expires_at)
    return out


def _optimizer(cfg: OptimizerConfig) -> dict[str, Any]:
    if cfg.muon is None:  # (the usual one: adam, which sets nothing)
        return {"adam": {}}
    return {"muon": {} if cfg.muon.scaling_strategy is None else {"scaling_strategy": cfg.muon.scaling_strategy}}


def _lora(cfg: LoraConfig) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(cfg)
    if cfg.seed is not None:
        out["seed"] = str(cfg.seed)
    return out


def session(tenant: Tenant, s: Session) -> dict[str, Any]:
    checkpoints = tenant.checkpoints
    created = rfc3339(s.created_at)
    # (a comprehension is a call of its own: a session with no checkpoints, the usual one, skips it)
    inference, training = s.inference_checkpoint_ids, s.training_checkpoint_ids
    out: dict[str, Any] = {
        "id": s.id,
        "base_model": s.base_model,
        "created_at": created,
        "created_by": s.created_by,
        "inference_checkpoints": [checkpoint_summary(checkpoints.peek(c)) for c in inference] if inference else [],
        "training_checkpoints": [checkpoint_summary(checkpoints.peek(c)) for c in training] if training else [],
        "metadata": s.metadata or {},
        "model_resources_id": s.model_resources_id,
        "policy_state": {
            "applied_weights_version": str(s.applied_weights_version),
            "pending_publish": s.pending_publish,
            "target_weights_version": str(s.target_weights_version),
            "trainer_step": str(s.trainer_step),
        },
        "status": s.status,
        "step": str(s.step),
        "updated_at": created if s.updated_at == s.created_at else rfc3339(s.updated_at),  # a new session
    }
    if s.display_name:
        out["display_name"] = s.display_name
    if s.error is not None:
        out["error"] = _error(s.error)
    if s.lora_config is not None:
        out["lora_config"] = _lora(s.lora_config)
    if s.resume_from_checkpoint_id:
        out["resume_from_checkpoint_id"] = s.resume_from_checkpoint_id
    return out


def _session_version(s: Session) -> tuple[Any, ...]:
    """Everything :func:`session` reads that can change (containers by identity: the domain replaces
    metadata, errors and LoRA configs rather than editing them; checkpoint lists only grow)."""
    return (s.status, s.updated_at, s.step, s.trainer_step, s.target_weights_version, s.applied_weights_version,
            s.pending_publish, s.display_name, s.metadata, s.error, s.lora_config, s.resume_from_checkpoint_id,
            len(s.inference_checkpoint_ids or ()), len(s.training_checkpoint_ids or ()))


def session_json(tenant: Tenant, cache: RenderCache, s: Session) -> bytes:
    """:func:`session` as JSON bytes, rendered once per version of the session (lists and polls read the
    same sessions over and over)."""
    version = _session_version(s)
    data = cache.get(s.id, version)
    if data is None:
        data = orjson.dumps(session(tenant, s))
        cache.put(s.id, version, data)
    return data


def list_page_json(items: list[bytes], has_more: bool, limit: int, last_id: str | None) -> bytes:
    """:func:`list_page` assembled from items already rendered as JSON."""
    meta = orjson.dumps({"has_more": has_more, "limit": limit, "next_cursor": last_id if has_more and last_id else ""})
    return b'{"data":[' + b",".join(items) + b'],"meta":' + meta + b"}"


def operation(tenant: Tenant, op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"id": op.id, "status": op.status}
    if op.error is not None:
        out["error"] = {"code": op.error.code, "message": op.error.message}
    if op.output is not None and op.status == "TRAINING_OPERATION_STATUS_COMPLETED":
        out["output"] = operation_output(tenant, op)
    return out


def operation_output(tenant: Tenant, op: Operation) -> JsonObject:
    """An operation's stored output as its kind's output schema shows it (its kind's render: outputs of the
    simulated model, losses and samples, are stored as the API shows them)."""
    assert op.output is not None
    return KINDS[op.kind].render(tenant, op.output)


def checkpoint(c: Checkpoint) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": c.id,
        "base_model": c.base_model,
        "created_at": rfc3339(c.created_at),
        "session_id": c.session_id,
        "step": str(c.step),
        "type": c.type,
    }
    if c.lora_rank is not None:
        out["lora_rank"] = c.lora_rank
    if c.registration is not None:
        key = "training_registration" if c.type == CheckpointType.TRAINING else "inference_registration"
        out[key] = c.registration
    return out


def shaping_job(job: ShapingJob) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.id,
        "created_at": rfc3339(job.created_at),
        "events": shaping_events(job),
        "job_type": "quantization",
        "params": msgspec.to_builtins(job.params),
        "status": job.status,
        "updated_at": rfc3339(job.updated_at),
        "user_id": job.user_id,
    }
    if job.results is not None:
        out["results"] = msgspec.to_builtins(job.results)
    return out


def shaping_events(job: ShapingJob) -> list[Any]:
    events: list[Any] = msgspec.to_builtins(job.events)
    return events


def file(f: File) -> dict[str, Any]:
    """A Files API file as the SDK's ``FileResponse`` reads it (``created_at`` in Unix seconds, as documented)."""
    out: dict[str, Any] = {"id": f.id, "object": "file", "created_at": int(f.created_at), "filename": f.filename,
                           "bytes": f.size, "purpose": f.purpose, "FileType": f.file_type,
                           "processing_status": f.processing_status}
    if f.validation_report is not None:
        out["validation_report"] = msgspec.to_builtins(f.validation_report)
    return out


def list_page(items: list[dict[str, Any]], has_more: bool, limit: int, last_id: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"has_more": has_more, "limit": limit}
    meta["next_cursor"] = last_id if has_more and last_id else ""
    return {"data": items, "meta": meta}
