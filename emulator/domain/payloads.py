"""Large-payload offload: upload URLs and download URLs (docs/api-surface.md A.4).

The SDK uploads operation bodies over 0.5 MiB to a presigned URL (here the emulator's
``/_files/payloads/<token>``, no auth, like the real ones) and submits ``payload_id``; the two are merged.
Differs: a payload's bytes are released when the first operation that read them finishes; later use is refused.
"""

from __future__ import annotations

from emulator.domain.common import lookup
from emulator.domain.context import Ctx
from emulator.errors import FailedPrecondition, NotFound
from emulator.store import Tenant
from emulator.store.blobs import Blob
from emulator.store.records import Payload


def create_upload(tenant: Tenant, ctx: Ctx, session_id: str) -> Payload:
    lookup(tenant.sessions, session_id, "training session", "session_id")
    payload = Payload(id=tenant.ids.uuid("payload"), session_id=session_id, created_at=ctx.now)
    tenant.payloads.add(payload)
    return payload


def download(tenant: Tenant, session_id: str, payload_id: str) -> Payload:
    lookup(tenant.sessions, session_id, "training session", "session_id")
    payload = tenant.payloads.get(payload_id)
    if payload is None or payload.session_id != session_id:
        raise NotFound(f"payload {payload_id!r} not found on session {session_id}", param="payload_id")
    if payload.released_by is not None:
        raise FailedPrecondition(released_message(payload), param="payload_id")
    if payload.blob is None:
        raise FailedPrecondition(f"payload {payload_id!r} has not been uploaded yet", param="payload_id")
    return payload


def released_message(payload: Payload) -> str:
    return (f"payload {payload.id!r} is no longer kept: operation {payload.released_by} read it and has finished, "
            "which releases an uploaded payload's data")


def put(tenant: Tenant, payload_id: str, blob: Blob, size: int) -> None:
    """The bytes PUT to the payload's upload URL (stored: the record names them)."""
    payload = tenant.payloads[payload_id]
    payload.blob, payload.size = blob, size
