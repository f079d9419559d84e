"""``weights-sync``: the trained weights become the sampler's. SYNCHRONOUS publishes them at once (overtaking a
deferred publish not yet applied); BACKGROUND_PUBLISH and PIPELINE mark them pending and the next sample applies
them (docs/api-surface.md C.4; [inferred] PIPELINE behaves like BACKGROUND_PUBLISH: a sample never switches
versions mid-sequence). A deferred sync takes a tenth of ``weights_sync_seconds``."""

from __future__ import annotations

import functools

from emulator.domain.context import Ctx
from emulator.domain.durations import Timing, TimingParam
from emulator.domain.kind import Kind, counter_dashboard, counter_output, counter_render
from emulator.domain.session_models import session_model
from emulator.jsontypes import JsonObject
from emulator.store import Tenant
from emulator.store.records import Operation, OperationRequest, Session

SECONDS = TimingParam("weights_sync_seconds", instant=0.0, realistic=4.0, doc="synchronous; deferred: a tenth")


class Request(OperationRequest, frozen=True, kw_only=True):
    weight_sync_type: str | None = None


def _seconds(timing: Timing, request: Request) -> float:
    sync = request.weight_sync_type in (None, "WEIGHT_SYNC_TYPE_SYNCHRONOUS")
    return timing.seconds(SECONDS) * (1.0 if sync else 0.1)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: Request, op: Operation, at: float) -> JsonObject:
    model = session_model(tenant, ctx.seed, s)
    sync_type = request.weight_sync_type or "WEIGHT_SYNC_TYPE_SYNCHRONOUS"
    s.target_weights_version = s.trainer_step
    weights = model.weights()
    if sync_type == "WEIGHT_SYNC_TYPE_SYNCHRONOUS":
        tenant.models.publish(s.id, s.trainer_step, weights)
        tenant.models.discard_staged(s.id)  # an older deferred publish must not replace these at the next sample
        s.applied_weights_version = s.trainer_step
        s.pending_publish = False
    else:
        tenant.models.stage(s.id, s.trainer_step, weights)
        s.pending_publish = True
    s.updated_at = max(s.updated_at, at)
    return {"weights_version": s.target_weights_version}


KIND = Kind(
    name="weights-sync", create="createWeightsSync", get="getWeightsSync", request=Request, timing=(SECONDS,),
    seconds=_seconds,
    execute=_execute, render=functools.partial(counter_render, "weights_version"),
    dashboard=functools.partial(counter_dashboard, "weights_version"),
    output_schema=functools.partial(counter_output, "weights_version"), lane=5)
