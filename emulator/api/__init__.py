"""Thin HTTP handlers, one module per spec tag; :func:`handler_for` maps operationId -> handler.

A handler is the public function of a handler module named after its operationId in snake_case
(``createTrainingSession`` -> ``create_training_session``). ``tests/test_structure.py`` checks both
directions: every operation of ``openapi.yaml`` and ``admin.yaml`` has a handler, and every public function
of a handler module is the handler of an operation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from types import MappingProxyType, ModuleType

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


_BY_SNAKE = MappingProxyType(_collect(model_resources, sessions, operations, payloads, checkpoints,
                                      supported_models, shaping, files, admin))


@functools.cache
def handler_for(operation_id: str) -> Handler | None:
    """The handler of an operationId (a pure memo: the table above never changes)."""
    return _BY_SNAKE.get(_snake(operation_id))
