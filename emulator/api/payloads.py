"""Handlers for the Payloads tag (large-payload offload URLs)."""

from __future__ import annotations

from emulator.api.request import Reply, Request
from emulator.domain import payloads as domain


def create_payload_upload_url(req: Request) -> Reply:
    payload = domain.create_upload(req.tenant, req.ctx, req.path["session_id"])
    token = req.presign("payload-upload", payload.id)
    return 200, {"payload_id": payload.id, "upload_url": f"{req.base_url}/_files/payloads/{token}"}


def create_payload_download_url(req: Request) -> Reply:
    payload = domain.download(req.tenant, req.path["session_id"], req.path["payload_id"])
    token = req.presign("payload-download", payload.id)
    return 200, {"download_url": f"{req.base_url}/_files/payloads/{token}"}
