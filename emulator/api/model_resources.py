"""Handlers for the ModelResources tag (``/v1/rl/model-resources``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request
from emulator.domain import model_resources as domain


def create_model_resources(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        r = domain.create(state, ctx, req.json())
        return 200, render.model_resources(state, r)


def list_model_resources(req: Request) -> Reply:
    limit = req.query_int("limit", 20)
    with req.tx() as (state, ctx):
        items, has_more = domain.list_(state, ctx, status=req.query_set("status"),
                                       created_by=req.query_str("created_by"), after=req.query_str("after"),
                                       limit=limit)
        return 200, render.list_page([render.model_resources(state, r) for r in items], has_more, limit,
                                     items[-1].id if items else None)


def get_model_resources(req: Request) -> Reply:
    with req.tx() as (state, _ctx):
        return 200, render.model_resources(state, domain.get(state, req.path["model_resources_id"]))


def stop_model_resources(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        r = domain.stop(state, ctx, req.path["model_resources_id"], req.query_bool("force"))
        return 200, render.model_resources(state, r)


def extend_model_resources_expiry(req: Request) -> Reply:
    with req.tx() as (state, ctx):
        r = domain.extend_expiry(state, ctx, req.path["model_resources_id"], int(req.json()["seconds"]))
        return 200, render.model_resources(state, r)


def estimate_model_resources_cost(req: Request) -> Reply:
    return 200, domain.estimate_cost(req.json())
