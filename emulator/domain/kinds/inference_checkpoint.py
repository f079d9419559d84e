"""``inference-checkpoint``: the session's model saved for serving and download (docs/api-surface.md A.5)."""

from __future__ import annotations

from emulator.domain.context import Ctx
from emulator.domain.kind import Kind
from emulator.domain.kinds import _checkpoint
from emulator.jsontypes import JsonObject
from emulator.store import Tenant
from emulator.store.records import CheckpointType, Operation, Session


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: _checkpoint.Request, op: Operation,
             at: float) -> JsonObject:
    return _checkpoint.save(tenant, ctx, s, at, CheckpointType.INFERENCE)


KIND = Kind(
    name="inference-checkpoint", create="createInferenceCheckpoint", get="getInferenceCheckpoint",
    request=_checkpoint.Request, timing=(_checkpoint.SECONDS,), seconds=_checkpoint.seconds, execute=_execute,
    render=_checkpoint.render, output_schema=_checkpoint.output_schema, check_output=_checkpoint.check_output,
    checkpoint_type=CheckpointType.INFERENCE.value, lane=6)
