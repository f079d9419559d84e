"""Thin HTTP handlers, one module per spec tag; :func:`handler_for` maps operationId -> handler.

A handler is the public function named after its operationId in snake_case (``createTrainingSession`` ->
``create_training_session``), but for the operation kinds': each kind declares its two operationIds, served
by :func:`operations.submit` and :func:`operations.get`. ``tests/test_structure.py`` checks both directions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from types import MappingProxyType, ModuleType
from typing import Any

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
from emulator.domain.kind import Kind
from emulator.domain.kinds import KINDS

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


_BY_SNAKE = MappingProxyType(_collect(model_resources, sessions, payloads, checkpoints, supported_models, shaping,
                                      files, admin))


def _kind_handler(serve: Callable[[Request, Kind[Any]], Reply], kind: Kind[Any]) -> Handler:
    handler = functools.partial(serve, kind=kind)  # type: ignore[call-arg]  # (kind is serve's second parameter)
    handler.__name__ = handler.__qualname__ = f"{serve.__name__}[{kind.name}]"  # type: ignore[attr-defined]
    handler.__module__ = serve.__module__  # type: ignore[attr-defined]
    for mark in ("polls", "stateless"):  # what the dispatcher reads of a handler
        if hasattr(serve, mark):
            setattr(handler, mark, getattr(serve, mark))
    return handler


#: The operation kinds' handlers, by operationId.
KIND_HANDLERS: MappingProxyType[str, Handler] = MappingProxyType({
    operation_id: _kind_handler(serve, kind)
    for kind in KINDS.values() for operation_id, serve in ((kind.create, operations.submit), (kind.get, operations.get))
})


@functools.cache
def handler_for(operation_id: str) -> Handler | None:
    """The handler of an operationId (a pure memo: the table above never changes)."""
    return KIND_HANDLERS.get(operation_id) or _BY_SNAKE.get(_snake(operation_id))
