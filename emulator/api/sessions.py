"""Handlers for the Sessions tag (``/v1/rl/training-sessions``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request, polls
from emulator.domain import sessions as domain


def create_session(req: Request) -> Reply:
    return 200, render.session(req.tenant, domain.create(req.tenant, req.ctx, req.read(domain.CreateRequest)))


def list_sessions(req: Request) -> Reply:
    limit = req.query_int("limit", 20)
    items, has_more = domain.list_(req.tenant, req.ctx, status=req.query_set("status", domain.FILTER_STATUSES),
                                   model_resources_id=req.query_str("model_resources_id"),
                                   created_by=req.query_str("created_by"), after=req.query_str("after"), limit=limit)
    cache = req.runtime.rendered
    return 200, render.list_page_json([render.session_json(req.tenant, cache, s) for s in items], has_more, limit,
                                      items[-1].id if items else None)


@polls("sessions", "session_id")
def get_session(req: Request) -> Reply:
    return 200, render.session_json(req.tenant, req.runtime.rendered, domain.get(req.tenant, req.path["session_id"]))


def update_session(req: Request) -> Reply:
    return 200, render.session(req.tenant, domain.update(req.tenant, req.ctx, req.path["session_id"], req.read(domain.UpdateRequest)))


def stop_session(req: Request) -> Reply:
    return 200, render.session(req.tenant, domain.stop(req.tenant, req.ctx, req.path["session_id"]))
