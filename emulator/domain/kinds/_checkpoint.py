"""What the two checkpoint kinds share: saving the session's model as a checkpoint of a type (a training
checkpoint carries the optimizer state; on a model that registers its checkpoints, an artifact of the
project's model registry names it), how long it takes, and the output naming it."""

from __future__ import annotations

from dataclasses import asdict

from emulator.domain.catalog import BY_NAME
from emulator.domain.context import Ctx
from emulator.domain.durations import Timing, TimingParam
from emulator.domain.session_models import model_spec, session_model
from emulator.jsontypes import Json, JsonObject
from emulator.store import Tenant
from emulator.store.records import Artifact, Checkpoint, CheckpointType, OperationRequest, Session
from emulator.wire import checkpoint_summary

SECONDS = TimingParam("checkpoint_seconds", instant=0.0, realistic=30.0)


class Request(OperationRequest, frozen=True, kw_only=True):
    """No body is read (the spec gives these endpoints none)."""


def seconds(timing: Timing, request: Request) -> float:
    return timing.seconds(SECONDS)


def save(tenant: Tenant, ctx: Ctx, s: Session, at: float, type_: CheckpointType) -> JsonObject:
    model = session_model(tenant, ctx.seed, s)
    r = tenant.resources[s.model_resources_id]
    cat = BY_NAME[s.base_model]
    training = type_ is CheckpointType.TRAINING
    registration: JsonObject | None = None
    ckpt_id = tenant.ids.uuid("checkpoint")
    if cat.registers_checkpoints:
        artifact_id, revision_id = tenant.ids.token("ml_"), tenant.ids.token("rv_")
        artifact = {"id": artifact_id, "revision_id": revision_id}
        if training:
            registration = artifact
            kind_name = "training"
        else:
            merged = s.lora_config is None or r.base_weights_ref is not None
            kind_name = "model" if merged else "adapter"
            registration = {kind_name: artifact}
        tenant.registry.put(artifact_id, Artifact(kind=kind_name, revision_id=revision_id, base_model=s.base_model,
                                                  checkpoint_id=ckpt_id))
    ckpt = Checkpoint(id=ckpt_id, session_id=s.id, type=type_._value_, base_model=s.base_model, step=s.step,
                      created_at=at, lora_rank=None if s.lora_config is None else s.lora_config.rank,
                      lora_config=s.lora_config, registration=registration,
                      model_state={"spec": asdict(model_spec(tenant, ctx.seed, s)),
                                   "model": model.to_state(include_optimizer=training)},
                      created_by=s.created_by)
    tenant.checkpoints.add(ckpt)
    if training:
        s.training_checkpoint_ids = (*(s.training_checkpoint_ids or ()), ckpt.id)
    else:
        s.inference_checkpoint_ids = (*(s.inference_checkpoint_ids or ()), ckpt.id)
    s.updated_at = max(s.updated_at, at)
    tenant.log(at, "checkpoint", ckpt.id, None, ckpt.type, session_id=s.id)
    return {"checkpoint_id": ckpt.id}


def output_schema() -> dict[str, Json]:
    return {"type": "object", "additionalProperties": False, "required": ["checkpoint_id"],
            "properties": {"checkpoint_id": {"type": "string"}}}


def render(tenant: Tenant, output: JsonObject) -> JsonObject:
    return {"checkpoint": checkpoint_summary(tenant.checkpoints.peek(str(output["checkpoint_id"])))}


def check_output(tenant: Tenant, output: JsonObject) -> str | None:
    if output["checkpoint_id"] not in tenant.checkpoints:
        return f"names checkpoint {output['checkpoint_id']!r}, which is not there"
    return None
