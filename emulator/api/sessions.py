"""Handlers for the Sessions tag (``/v1/rl/training-sessions``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request
from emulator.domain import sessions as domain


def create_session(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        return 200, render.session(state, domain.create(state, ctx, req.json()))


def list_sessions(req: Request) -> Reply:
    limit = req.query_int("limit", 20)
    with req.tx() as (state, ctx):
        items, has_more = domain.list_(state, ctx, status=req.query_set("status"),
                                       model_resources_id=req.query_str("model_resources_id"),
                                       created_by=req.query_str("created_by"), after=req.query_str("after"),
                                       limit=limit)
        return 200, render.list_page_json([render.session_json(state, s) for s in items], has_more, limit,
                                          items[-1].id if items else None)


def get_session(req: Request) -> Reply:
    with req.tx() as (state, _ctx):
        return 200, render.session_json(state, domain.get(state, req.path["session_id"]))


def update_session(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        return 200, render.session(state, domain.update(state, ctx, req.path["session_id"], req.json()))


def stop_session(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        return 200, render.session(state, domain.stop(state, ctx, req.path["session_id"]))
