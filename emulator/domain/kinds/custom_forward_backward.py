"""``custom-forward-backward``: gradients the caller computed (d loss / d logprob, one value per token),
accumulated through the session model's backward pass for the next optimizer step."""

from __future__ import annotations

from emulator.compute.types import Gradient, Sample
from emulator.domain import routed_experts
from emulator.domain.context import Ctx
from emulator.domain.durations import Timing
from emulator.domain.kind import Kind
from emulator.domain.kinds import _training
from emulator.domain.session_models import session_model
from emulator.jsontypes import JsonObject
from emulator.store import Tenant
from emulator.store.records import Operation, OperationRequest, Session


class Request(OperationRequest, frozen=True, kw_only=True):
    samples: tuple[Sample, ...]
    gradients: tuple[Gradient, ...]


def _seconds(timing: Timing, request: Request) -> float:
    return _training.seconds(timing, request.samples)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: Request, op: Operation, at: float) -> JsonObject:
    model = session_model(tenant, ctx.seed, s)
    routed_experts.check(s, request.samples)
    return model.accumulate_gradients(request.samples, request.gradients)


KIND = Kind(
    name="custom-forward-backward", create="createCustomForwardBackward", get="getCustomForwardBackward",
    request=Request, timing=(_training.SECONDS_PER_TOKEN,), seconds=_seconds, execute=_execute,
    keeps_request=False, output_size=_training.output_size, dashboard=_training.dashboard, shows_loss=True, lane=2)
