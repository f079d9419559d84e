"""Handlers for the Shaping tag (``/v1/shaping``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request, polls
from emulator.domain import shaping as domain


def create_shaping_job(req: Request) -> Reply:
    return 200, render.shaping_job(domain.create(req.tenant, req.ctx, req.read(domain.JobRequest)))


def estimate_shaping_job(req: Request) -> Reply:
    return 200, domain.estimate(req.tenant, req.read(domain.JobRequest))


def list_shaping_jobs(req: Request) -> Reply:
    return 200, {"data": [render.shaping_job(j) for j in domain.list_(req.tenant)], "object": "list"}


@polls("shaping_jobs", "id")
def get_shaping_job(req: Request) -> Reply:
    return 200, render.shaping_job(domain.get(req.tenant, req.path["id"]))


def cancel_shaping_job(req: Request) -> Reply:
    return 200, render.shaping_job(domain.cancel(req.tenant, req.ctx, req.path["id"]))


def list_shaping_job_events(req: Request) -> Reply:
    return 200, {"data": render.shaping_events(domain.get(req.tenant, req.path["id"])), "object": "list"}
