"""``forward-backward``: a batch's loss and gradients under the session's model, log-probs on request.

The gradients accumulate for the next optimizer step (unless ``forward_only``). A ``loss.*_params`` of another
loss type than ``loss.type`` is dropped with a warning (400 under ``--strict``): the SDK says each is "only
valid when type is" its loss, as "the server would otherwise drop it silently".
"""

from __future__ import annotations

import msgspec

from emulator.compute.losses import LOSS_TYPES
from emulator.compute.types import Loss, Sample
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
    loss: Loss
    forward_only: bool | None = None
    return_loss_fn_outputs: bool | None = None


def _check(ctx: Ctx, s: Session, request: Request) -> Request:
    loss = request.loss
    fields = msgspec.structs.astuple(loss)
    if fields.count(None) == len(fields) - 1:  # its type alone, no parameters (the usual request): nothing to drop
        return request
    dropped: dict[str, None] = {}
    for reads, spec in LOSS_TYPES.items():
        if spec.params_key is not None and getattr(loss, spec.params_key) is not None and loss.type != reads:
            ctx.ignored(f"loss.{spec.params_key}", f"it is read only when loss.type is {reads}, not {loss.type}")
            dropped[spec.params_key] = None
    if not dropped:
        return request
    return msgspec.structs.replace(request, loss=msgspec.structs.replace(loss, **dropped))


def _seconds(timing: Timing, request: Request) -> float:
    return _training.seconds(timing, request.samples)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: Request, op: Operation, at: float) -> JsonObject:
    model = session_model(tenant, ctx.seed, s)
    routed_experts.check(s, request.samples)
    return model.loss_and_grad(request.samples, request.loss, forward_only=bool(request.forward_only),
                               return_loss_fn_outputs=bool(request.return_loss_fn_outputs))


KIND = Kind(
    name="forward-backward", create="createForwardBackward", get="getForwardBackward", request=Request,
    timing=(_training.SECONDS_PER_TOKEN,), seconds=_seconds, execute=_execute, check=_check,
    keeps_request=False, output_size=_training.output_size, dashboard=_training.dashboard, shows_loss=True, lane=1)
