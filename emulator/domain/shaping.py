"""The ``/v1/shaping`` group: prepare-for-FP4-inference (quantization) jobs (docs/api-surface.md A.7).

Emulates create (model in the project's registry, else 400), estimate, list, get, cancel and events; a job walks
pending -> queued -> running -> completed, one phase per ``shaping_phase_seconds``. Differs: no real quantization
(the result is a new registry entry); 402 only from a fault rule.
"""

from __future__ import annotations

from emulator.bounds import later
from emulator.clock import rfc3339
from emulator.compute.types import Wire
from emulator.domain import files
from emulator.domain.common import lookup, transition
from emulator.domain.context import Ctx
from emulator.errors import FailedPrecondition, Invalid
from emulator.jsontypes import Json
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    Artifact,
    ShapingConfiguration,
    ShapingEvent,
    ShapingInputs,
    ShapingJob,
    ShapingParams,
    ShapingResults,
    ShapingStatus,
    is_terminal,
)

Q = ShapingStatus
# Each phase: (status after it, events it adds).
PHASES: tuple[tuple[ShapingStatus, tuple[str, ...]], ...] = (
    (Q.QUEUED, ()),
    (Q.RUNNING, ("QUANTIZATION_JOB_START", "QUANTIZATION_MODEL_DOWNLOAD_COMPLETE")),
    (Q.RUNNING, ("QUANTIZATION_MERGE_COMPLETE", "QUANTIZATION_QUANTIZE_PROCESS_START")),
    (Q.COMPLETED, ("QUANTIZATION_QUANTIZE_PROCESS_COMPLETE", "QUANTIZATION_MODEL_UPLOAD_COMPLETE",
                   "QUANTIZATION_JOB_COMPLETE")),
)


class InputsRequest(Wire, frozen=True):
    model_object_id: str | None = None
    adapter_object_id: str | None = None   # (the older name of model_object_id)
    model_revision_id: str | None = None
    calibration_file_id: str | None = None


class JobRequest(Wire, frozen=True):
    """The body of a create or an estimate."""

    inputs: InputsRequest | None = None


def _resolve_inputs(tenant: Tenant, body: JobRequest) -> tuple[InputsRequest, Artifact]:
    inputs = body.inputs or InputsRequest()
    model_id = inputs.model_object_id or inputs.adapter_object_id
    if not model_id:
        raise Invalid("inputs.model_object_id is required", param="inputs.model_object_id")
    artifact = tenant.registry.get(model_id)
    if artifact is None or artifact.kind not in ("adapter", "model"):
        raise Invalid(f"model {model_id!r} is not in this project's registry or was not produced by "
                             "fine-tuning", param="inputs.model_object_id")
    revision = inputs.model_revision_id
    if revision and revision != artifact.revision_id:
        raise Invalid(f"revision {revision!r} does not belong to model {model_id}",
                             param="inputs.model_revision_id")
    calibration = inputs.calibration_file_id
    if calibration:
        files.check_calibration(tenant, calibration, "inputs.calibration_file_id")
    return inputs, artifact


def estimate(tenant: Tenant, body: JobRequest) -> dict[str, Json]:
    _resolve_inputs(tenant, body)
    return {"allowed_to_proceed": True, "credit_limit": 1000.0, "price_usd": 12.5, "time_hours": 1.5}


def create(tenant: Tenant, ctx: Ctx, body: JobRequest) -> ShapingJob:
    inputs, artifact = _resolve_inputs(tenant, body)
    now = ctx.now
    user = ctx.principal.user
    configuration = ShapingConfiguration(
        base_model_name=artifact.base_model, base_object_id=tenant.ids.token("ml_"),
        base_revision_id=tenant.ids.token("rv_"), model_name=f"{artifact.base_model}-fp4",
        model_project_id=tenant.project, model_revision_id=artifact.revision_id, user_id=user)
    clean_inputs = ShapingInputs(model_object_id=inputs.model_object_id or None,
                                 model_revision_id=inputs.model_revision_id or None,
                                 calibration_file_id=inputs.calibration_file_id or None)
    job = ShapingJob(id=tenant.ids.token("shp-quant-", 16), user_id=user, status=Q.PENDING.value, created_at=now,
                     updated_at=now, params=ShapingParams(configuration=configuration, inputs=clean_inputs))
    tenant.shaping_jobs.add(job)
    tenant.log(now, "shaping_job", job.id, None, job.status)
    tenant.timeline.schedule(later(now, ctx.timing.shaping_phase_seconds), TimelineEvent.SHAPING_PHASE, job.id)
    return job


def get(tenant: Tenant, job_id: str) -> ShapingJob:
    return lookup(tenant.shaping_jobs, job_id, "shaping job", "id")


def list_(tenant: Tenant) -> list[ShapingJob]:
    return [tenant.shaping_jobs[i] for i in reversed(tenant.shaping_jobs.ids())]


def cancel(tenant: Tenant, ctx: Ctx, job_id: str) -> ShapingJob:
    job = get(tenant, job_id)
    if job.status == Q.CANCEL_REQUESTED or is_terminal(job.status, ShapingStatus):
        raise FailedPrecondition(f"shaping job {job.id} is {job.status} and cannot be cancelled", param="id")
    transition(tenant, job, Q.CANCEL_REQUESTED, ctx.now)
    tenant.timeline.schedule(later(ctx.now, ctx.timing.shaping_phase_seconds / 10), TimelineEvent.SHAPING_CANCELLED, job.id)
    return job


def _event(job: ShapingJob, at: float, type_: str, level: str = "Info",
           result: ShapingResults | None = None) -> None:
    job.events = (*job.events, ShapingEvent(created_at=rfc3339(at), level=level,
                                            message=type_.replace("_", " ").lower(), object="shaping", type=type_,
                                            result=result))


def on_phase(tenant: Tenant, ctx: Ctx, job: ShapingJob, at: float) -> None:
    if job.status == Q.CANCEL_REQUESTED or is_terminal(job.status, ShapingStatus):
        return
    status, events = PHASES[job.phase]
    job.phase += 1
    for type_ in events:
        if type_ == "QUANTIZATION_JOB_COMPLETE":
            job.results = ShapingResults(model_object_id=tenant.ids.token("ml_"),
                                         model_revision_id=tenant.ids.token("rv_"))
            _event(job, at, type_, result=job.results)
        else:
            _event(job, at, type_)
    if status.value != job.status:
        transition(tenant, job, status, at)
    job.updated_at = max(job.updated_at, at)
    if job.results is not None:
        tenant.registry.put(job.results.model_object_id, Artifact(
            kind="model", revision_id=job.results.model_revision_id,
            base_model=job.params.configuration.base_model_name, checkpoint_id=None))
    if job.phase < len(PHASES):
        tenant.timeline.schedule(later(at, ctx.timing.shaping_phase_seconds), TimelineEvent.SHAPING_PHASE, job.id)


def on_cancelled(tenant: Tenant, ctx: Ctx, job: ShapingJob, at: float) -> None:
    if job.status == Q.CANCEL_REQUESTED:
        transition(tenant, job, Q.CANCELLED, at)
