"""Handlers for the Operations tag: one submit and one get per operation kind (:class:`OperationKind`)."""

from __future__ import annotations

from collections.abc import Callable

from emulator.api import render
from emulator.api.request import Reply, Request, polls
from emulator.domain import operations as domain
from emulator.store.records import OperationKind as K


def _submit(kind: K) -> Callable[[Request], Reply]:
    def handler(req: Request) -> Reply:
        key = req.headers.get("idempotency-key", "")
        op, _replayed = domain.submit(req.tenant, req.ctx, req.path["session_id"], kind, req.json(), key)
        return 200, render.operation(req.tenant, op)

    return handler


def _get(kind: K) -> Callable[[Request], Reply]:
    @polls("operations", "operation_id")
    def handler(req: Request) -> Reply:
        op = domain.get(req.tenant, req.path["session_id"], kind, req.path["operation_id"])
        return 200, render.operation(req.tenant, op)

    return handler


create_forward_backward = _submit(K.FORWARD_BACKWARD)
get_forward_backward = _get(K.FORWARD_BACKWARD)
create_custom_forward_backward = _submit(K.CUSTOM_FORWARD_BACKWARD)
get_custom_forward_backward = _get(K.CUSTOM_FORWARD_BACKWARD)
create_optim_step = _submit(K.OPTIM_STEP)
get_optim_step = _get(K.OPTIM_STEP)
create_weights_sync = _submit(K.WEIGHTS_SYNC)
get_weights_sync = _get(K.WEIGHTS_SYNC)
create_sample = _submit(K.SAMPLE)
get_sample = _get(K.SAMPLE)
create_inference_checkpoint = _submit(K.INFERENCE_CHECKPOINT)
get_inference_checkpoint = _get(K.INFERENCE_CHECKPOINT)
create_training_checkpoint = _submit(K.TRAINING_CHECKPOINT)
get_training_checkpoint = _get(K.TRAINING_CHECKPOINT)

# Name each generated handler after its operation (tracebacks, COVERAGE.md).
for _name, _fn in list(globals().items()):
    if _name.startswith(("create_", "get_")) and callable(_fn):
        _fn.__name__ = _fn.__qualname__ = _name
