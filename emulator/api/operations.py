"""Handlers for the Operations tag: one submit and one get, serving every operation kind.

The operationIds of a kind (``create<Kind>`` / ``get<Kind>``) are declared by the kind's module
(:mod:`emulator.domain.kinds`); :func:`emulator.api.handler_for` maps them to :func:`submit` and :func:`get`
with that kind.
"""

from __future__ import annotations

from typing import Any

from emulator.api import render
from emulator.api.request import Reply, Request, polls
from emulator.domain import operations as domain
from emulator.domain.kind import Kind
from emulator.errors import Invalid
from emulator.store.records import Malformed


def submit(req: Request, kind: Kind[Any]) -> Reply:
    body = req.json()
    request = kind.parse(body)
    if isinstance(request, Malformed):  # (request validation passed it: the spec and the kind's type disagree)
        raise Invalid(f"the body is not a {kind.name} request: {request.error}")
    key = req.headers.get("idempotency-key", "")
    op, _replayed = domain.submit(req.tenant, req.ctx, req.path["session_id"], kind, request,
                                  domain.body_hash(body), key)
    return 200, render.operation(req.tenant, op)


@polls("operations", "operation_id")
def get(req: Request, kind: Kind[Any]) -> Reply:
    op = domain.get(req.tenant, req.path["session_id"], kind, req.path["operation_id"])
    return 200, render.operation(req.tenant, op)
