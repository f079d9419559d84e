"""Records -> the wire JSON of the spec's response schemas (int64 as strings, RFC 3339 times).

The only place that knows the wire format: the domain stores numbers, times and ids; this module writes
``"step": "3"``, checkpoint summaries and operation outputs as the API shows them.
"""

from __future__ import annotations

from typing import Any

import orjson

from emulator.clock import rfc3339
from emulator.domain.model_resources import queue_position
from emulator.runtime import RenderCache
from emulator.store import Tenant
from emulator.store.records import (
    Checkpoint,
    CheckpointType,
    File,
    ModelResource,
    Operation,
    OperationKind,
    Session,
    ShapingJob,
)


def _error(err: dict[str, Any] | None) -> dict[str, Any] | None:
    if err is None:
        return None
    out = dict(err)
    if isinstance(out.get("occurred_at"), float):
        out["occurred_at"] = rfc3339(out["occurred_at"])
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
        "optimizer_config": r.optimizer_config,
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


def _lora(cfg: dict[str, Any]) -> dict[str, Any]:
    if "seed" not in cfg:  # as stored: the domain interns LoRA configs and never edits one, nor do renderers
        return cfg
    out = dict(cfg)
    out["seed"] = str(out["seed"])
    return out


def checkpoint_summary(ckpt: Checkpoint) -> dict[str, Any]:
    """A checkpoint as sessions and checkpoint operations show it (InferenceCheckpoint / TrainingCheckpoint)."""
    out: dict[str, Any] = {"id": ckpt.id, "created_at": rfc3339(ckpt.created_at), "step": str(ckpt.step)}
    if ckpt.registration is not None:
        out["registration"] = ckpt.registration
    return out


def session(tenant: Tenant, s: Session) -> dict[str, Any]:
    checkpoints = tenant.checkpoints
    created = rfc3339(s.created_at)
    out: dict[str, Any] = {
        "id": s.id,
        "base_model": s.base_model,
        "created_at": created,
        "created_by": s.created_by,
        "inference_checkpoints": [checkpoint_summary(checkpoints.peek(c)) for c in s.inference_checkpoint_ids or ()],
        "training_checkpoints": [checkpoint_summary(checkpoints.peek(c)) for c in s.training_checkpoint_ids or ()],
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
        out["error"] = {"code": op.error.get("code"), "message": op.error.get("message")}
    if op.output is not None and op.status == "TRAINING_OPERATION_STATUS_COMPLETED":
        out["output"] = operation_output(tenant, op)
    return out


def operation_output(tenant: Tenant, op: Operation) -> dict[str, Any]:
    """An operation's stored output as its kind's output schema shows it (outputs of the simulated model,
    losses and samples, are stored as the API shows them)."""
    out = op.output
    assert out is not None
    kind = op.kind
    if kind == OperationKind.OPTIM_STEP:
        return {"step": str(out["step"])}
    if kind == OperationKind.WEIGHTS_SYNC:
        return {"weights_version": str(out["weights_version"])}
    if kind in (OperationKind.INFERENCE_CHECKPOINT, OperationKind.TRAINING_CHECKPOINT):
        return {"checkpoint": checkpoint_summary(tenant.checkpoints.peek(out["checkpoint_id"]))}
    return out


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
        "events": job.events,
        "job_type": "quantization",
        "params": job.params,
        "status": job.status,
        "updated_at": rfc3339(job.updated_at),
        "user_id": job.user_id,
    }
    if job.results is not None:
        out["results"] = job.results
    return out


def file(f: File) -> dict[str, Any]:
    """A Files API file as the SDK's ``FileResponse`` reads it (``created_at`` in Unix seconds, as documented)."""
    out: dict[str, Any] = {"id": f.id, "object": "file", "created_at": int(f.created_at), "filename": f.filename,
                           "bytes": f.size, "purpose": f.purpose, "FileType": f.file_type,
                           "processing_status": f.processing_status}
    if f.validation_report is not None:
        out["validation_report"] = f.validation_report
    return out


def list_page(items: list[dict[str, Any]], has_more: bool, limit: int, last_id: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"has_more": has_more, "limit": limit}
    meta["next_cursor"] = last_id if has_more and last_id else ""
    return {"data": items, "meta": meta}
