"""Handlers for the ModelResources tag (``/v1/rl/model-resources``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request, polls, stateless
from emulator.domain import model_resources as domain


def create_model_resources(req: Request) -> Reply:
    return 200, render.model_resources(req.tenant, domain.create(req.tenant, req.ctx, req.read(domain.CreateRequest)))


def list_model_resources(req: Request) -> Reply:
    limit = req.query_int("limit", 20)
    items, has_more = domain.list_(req.tenant, req.ctx, status=req.query_set("status", domain.FILTER_STATUSES),
                                   created_by=req.query_str("created_by"), after=req.query_str("after"), limit=limit)
    return 200, render.list_page([render.model_resources(req.tenant, r) for r in items], has_more, limit,
                                 items[-1].id if items else None)


@polls("resources", "model_resources_id")
def get_model_resources(req: Request) -> Reply:
    return 200, render.model_resources(req.tenant, domain.get(req.tenant, req.path["model_resources_id"]))


def stop_model_resources(req: Request) -> Reply:
    r = domain.stop(req.tenant, req.ctx, req.path["model_resources_id"], req.query_bool("force"))
    return 200, render.model_resources(req.tenant, r)


def extend_model_resources_expiry(req: Request) -> Reply:
    r = domain.extend_expiry(req.tenant, req.ctx, req.path["model_resources_id"], req.read(domain.ExtendRequest).seconds)
    return 200, render.model_resources(req.tenant, r)


@stateless
def estimate_model_resources_cost(req: Request) -> Reply:
    # It checks the body as a create would (base_weights_ref against the project's registry): a read unit of work,
    # which never creates a tenant and changes nothing.
    assert req.principal is not None
    with req.runtime.unit_of_work(req.principal, write=False) as (tenant, _ctx):
        return 200, domain.estimate_cost(tenant, req.read(domain.CreateRequest))
