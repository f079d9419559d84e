"""``optim-step``: the optimizer applies the gradients accumulated since the last step; the session's
``step`` and ``trainer_step`` become ``trainer_step + 1`` (docs/api-surface.md C.4)."""

from __future__ import annotations

import functools

from emulator.compute.types import AdamParams, MuonParams
from emulator.domain.context import Ctx
from emulator.domain.durations import Timing, TimingParam
from emulator.domain.kind import Kind, counter_dashboard, counter_output, counter_render
from emulator.domain.session_models import session_model
from emulator.jsontypes import JsonObject
from emulator.store import Tenant
from emulator.store.records import Operation, OperationRequest, Session

SECONDS = TimingParam("optim_step_seconds", instant=0.0, realistic=1.5)


class Request(OperationRequest, frozen=True, kw_only=True):
    adam_params: AdamParams | None = None
    muon_params: MuonParams | None = None


def _seconds(timing: Timing, request: Request) -> float:
    return timing.seconds(SECONDS)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: Request, op: Operation, at: float) -> JsonObject:
    step = session_model(tenant, ctx.seed, s).update(request.adam_params, request.muon_params)
    s.step = step
    s.trainer_step = step
    s.updated_at = max(s.updated_at, at)
    return {"step": step}


KIND = Kind(
    name="optim-step", create="createOptimStep", get="getOptimStep", request=Request, timing=(SECONDS,),
    seconds=_seconds,
    execute=_execute, render=functools.partial(counter_render, "step"),
    dashboard=functools.partial(counter_dashboard, "step"),
    output_schema=functools.partial(counter_output, "step"), lane=3)
