"""Handlers for the Operations tag: one submit and one get per operation kind."""

from __future__ import annotations

from collections.abc import Callable

from emulator.api import render
from emulator.api.request import Reply, Request
from emulator.domain import operations as domain


def _submit(kind: str) -> Callable[[Request], Reply]:
    def handler(req: Request) -> Reply:
        key = req.headers.get("idempotency-key", "")
        with req.tx() as (state, ctx):
            op, _replayed = domain.submit(state, ctx, req.path["session_id"], kind, req.json(), key)
            return 200, render.operation(op)

    handler.__name__ = f"submit_{kind}"
    return handler


def _get(kind: str) -> Callable[[Request], Reply]:
    def handler(req: Request) -> Reply:
        with req.tx() as (state, _ctx):
            return 200, render.operation(domain.get(state, req.path["session_id"], kind, req.path["operation_id"]))

    handler.__name__ = f"get_{kind}"
    return handler


create_forward_backward = _submit("forward-backward")
get_forward_backward = _get("forward-backward")
create_custom_forward_backward = _submit("custom-forward-backward")
get_custom_forward_backward = _get("custom-forward-backward")
create_optim_step = _submit("optim-step")
get_optim_step = _get("optim-step")
create_weights_sync = _submit("weights-sync")
get_weights_sync = _get("weights-sync")
create_sample = _submit("sample")
get_sample = _get("sample")
create_inference_checkpoint = _submit("inference-checkpoint")
get_inference_checkpoint = _get("inference-checkpoint")
create_training_checkpoint = _submit("training-checkpoint")
get_training_checkpoint = _get("training-checkpoint")

# Name each generated handler after its operation (tracebacks, COVERAGE.md).
for _name, _fn in list(globals().items()):
    if _name.startswith(("create_", "get_")) and callable(_fn):
        _fn.__name__ = _fn.__qualname__ = _name
