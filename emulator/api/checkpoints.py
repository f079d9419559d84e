"""Handlers for the Checkpoints tag (``/v1/rl/checkpoints``)."""

from __future__ import annotations

from emulator.api import render
from emulator.api.request import Reply, Request
from emulator.domain import checkpoints as domain


def list_checkpoints(req: Request) -> Reply:
    limit = req.query_int("limit", 20)
    items, has_more = domain.list_(req.tenant, session_id=req.query_str("session_id"), type_=req.query_str("type"),
                                   base_model=req.query_str("base_model"), after=req.query_str("after"), limit=limit)
    return 200, render.list_page([render.checkpoint(c) for c in items], has_more, limit,
                                 items[-1].id if items else None)


def get_checkpoint(req: Request) -> Reply:
    return 200, render.checkpoint(domain.get(req.tenant, req.path["id"]))


def download_checkpoint(req: Request) -> Reply:
    ckpt, variant, files = domain.files(req.tenant, req.path["id"], req.query.get("variant", ""))
    token = req.presign("checkpoint", ckpt.id, variant=variant)
    return 200, {"data": [{"filename": name, "size": str(len(blob)),
                           "url": f"{req.base_url}/_files/checkpoints/{token}/{name}"} for name, blob in files]}
