"""Thin HTTP handlers, one module per spec tag; ``HANDLERS`` maps operationId -> handler.

The registry is explicit: an operation of ``openapi.yaml`` without a handler fails start-up
(a test checks both directions).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType

from emulator.api import (
    admin,
    checkpoints,
    files,
    model_resources,
    operations,
    payloads,
    sessions,
    shaping,
    supported_models,
)
from emulator.api.request import Reply, Request

Handler = Callable[[Request], Reply]


def _snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def _collect(*modules: ModuleType) -> dict[str, Handler]:
    out: dict[str, Handler] = {}
    for module in modules:
        for name, fn in vars(module).items():
            if callable(fn) and not name.startswith("_") and getattr(fn, "__module__", "") == module.__name__:
                out[name] = fn
    return out


_BY_SNAKE = _collect(model_resources, sessions, operations, payloads, checkpoints, supported_models, shaping, files,
                     admin)


_BY_OPERATION: dict[str, Handler | None] = {}


def handler_for(operation_id: str) -> Handler | None:
    try:
        return _BY_OPERATION[operation_id]
    except KeyError:
        handler = _BY_OPERATION[operation_id] = _BY_SNAKE.get(_snake(operation_id))
        return handler
