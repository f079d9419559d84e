"""Handlers for the Files tag (``/v1/files``): the part of the Files API that the SDK's ``client.files`` uses."""

from __future__ import annotations

from typing import Any

from emulator.api import render
from emulator.api.request import Reply, Request
from emulator.domain import files as domain


def upload_file(req: Request) -> Reply:
    """The first step of an upload: the file is created, and the 302 points at where its bytes go."""
    f = domain.create(req.tenant, req.ctx, req.read(domain.Form))
    token = req.presign("file-upload", f.id)
    return 302, {"id": f.id}, {"Location": f"{req.base_url}/_files/uploads/{token}", "X-Together-File-Id": f.id}


def preprocess_file(req: Request) -> Reply:
    return 200, render.file(domain.preprocess(req.tenant, req.path["id"]))


def list_files(req: Request) -> Reply:
    return 200, {"data": [render.file(f) for f in domain.list_(req.tenant)]}


def retrieve_file(req: Request) -> Reply:
    return 200, render.file(domain.get(req.tenant, req.path["id"]))


def get_file_content(req: Request) -> Reply:
    headers: dict[str, Any] = {"Content-Type": "application/octet-stream"}
    return 200, domain.content(req.tenant, req.path["id"]), headers


def delete_file(req: Request) -> Reply:
    f = domain.delete(req.tenant, req.path["id"])
    return 200, {"id": f.id, "deleted": True}
