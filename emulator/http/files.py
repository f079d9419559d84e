"""Presigned object-store URLs, served by the emulator itself without auth.

Emulates the real service's presigned URLs (docs/api-surface.md A.4, A.5.3): ``PUT`` and ``GET``
``/_files/payloads/<token>`` for large-payload offload, ``GET /_files/checkpoints/<token>/<file>`` for
checkpoint downloads, ``PUT /_files/uploads/<token>`` for the bytes of a Files API upload. The token is the only credential, like a presigned URL's signature; tokens are
signed, expire, and an upload URL works once (:mod:`emulator.store.presigned`). Each request runs in a
unit of work of the tenant the URL names (an upload is a write, journaled before it is answered).
Errors are ``ErrorData``: an unknown, forged or revoked token is 404, an expired or used one 403.
"""

from __future__ import annotations

from emulator.domain import checkpoints, files, payloads
from emulator.errors import NotFound
from emulator.http.asgi import Receive, Scope, Send, read_body, send_json
from emulator.http.envelope import Forbidden, MethodNotAllowed
from emulator.runtime import Runtime
from emulator.store import Tenant
from emulator.store.presigned import Grant, GrantRefused, claimed_project

PAYLOADS = "/_files/payloads/"
CHECKPOINTS = "/_files/checkpoints/"
UPLOADS = "/_files/uploads/"


class FileServer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path.startswith(PAYLOADS) and "/" not in path[len(PAYLOADS):]:
            if method == "PUT":
                await self._upload(path[len(PAYLOADS):], receive, send)
            elif method in ("GET", "HEAD"):
                await self._download_payload(path[len(PAYLOADS):], method, send)
            else:
                raise MethodNotAllowed(method, path, ["GET", "HEAD", "PUT"])
            return
        if path.startswith(UPLOADS) and "/" not in path[len(UPLOADS):]:
            if method != "PUT":
                raise MethodNotAllowed(method, path, ["PUT"])
            await self._upload_file(path[len(UPLOADS):], receive, send)
            return
        token, _, name = path[len(CHECKPOINTS):].partition("/") if path.startswith(CHECKPOINTS) else ("", "", "")
        if token and name and "/" not in name:
            if method not in ("GET", "HEAD"):
                raise MethodNotAllowed(method, path, ["GET", "HEAD"])
            await self._checkpoint_file(token, name, method, send)
            return
        raise NotFound("no such object", code="no_such_object")

    def _grant(self, token: str, kinds: tuple[str, ...]) -> Grant:
        if self.runtime.shard is not None and (project := claimed_project(token)) is not None:
            self.runtime.check_owner(project)  # another shard's URL: 421, not "unknown"
        try:
            grant = self.runtime.store.presigner.redeem(token, kinds, self.runtime.clocks.now)
        except GrantRefused as exc:
            if exc.status == 403:
                raise Forbidden(exc.message, code="url_refused") from exc
            raise NotFound(exc.message, code="no_such_object") from exc
        return grant

    @staticmethod
    def _check_tenant(tenant: Tenant, grant: Grant) -> None:
        if tenant.epoch != grant.epoch:  # the tenant was reset since the URL was made: its URLs are void
            raise NotFound("no such object (unknown or revoked URL)", code="no_such_object")

    async def _upload(self, token: str, receive: Receive, send: Send) -> None:
        grant = self._grant(token, ("payload-upload",))
        data = await read_body(receive)
        try:
            with self.runtime.unit_of_work(grant.project, write=True) as (tenant, _ctx):
                self._check_tenant(tenant, grant)
                payload = tenant.payloads.get(grant.object_id)
                if payload is None:
                    raise NotFound("no such object", code="no_such_object")
                if payload.data is not None or payload.released_by is not None:
                    raise Forbidden("this upload URL was already used; request a new one", code="url_refused")
                payloads.put(tenant, grant.object_id, data)
        except NotFound as exc:
            if exc.code != "unknown_tenant":
                raise
            raise NotFound("no such object (unknown or revoked URL)", code="no_such_object") from exc
        await send_json(send, 200, b"{}")

    async def _upload_file(self, token: str, receive: Receive, send: Send) -> None:
        grant = self._grant(token, ("file-upload",))
        data = await read_body(receive)
        try:
            with self.runtime.unit_of_work(grant.project, write=True) as (tenant, _ctx):
                self._check_tenant(tenant, grant)
                f = tenant.files.get(grant.object_id)
                if f is None:  # deleted since
                    raise NotFound("no such object", code="no_such_object")
                if f.data is not None:
                    raise Forbidden("this upload URL was already used; request a new one", code="url_refused")
                files.upload(tenant, grant.object_id, data)
        except NotFound as exc:
            if exc.code != "unknown_tenant":
                raise
            raise NotFound("no such object (unknown or revoked URL)", code="no_such_object") from exc
        await send_json(send, 200, b"{}")

    async def _download_payload(self, token: str, method: str, send: Send) -> None:
        grant = self._grant(token, ("payload-download",))
        with self.runtime.unit_of_work(grant.project, write=False) as (tenant, _ctx):
            self._check_tenant(tenant, grant)
            payload = tenant.payloads.get(grant.object_id)
            data = payload.data if payload is not None else None
            released = payloads.released_message(payload) if payload is not None and payload.released_by else None
        if data is None:
            raise NotFound(released or "no such object", code="no_such_object")
        await _send_bytes(send, data, b"application/json", method)

    async def _checkpoint_file(self, token: str, name: str, method: str, send: Send) -> None:
        grant = self._grant(token, ("checkpoint",))
        with self.runtime.unit_of_work(grant.project, write=False) as (tenant, _ctx):
            self._check_tenant(tenant, grant)
            _, _, files = checkpoints.files(tenant, grant.object_id, grant.variant or "")
        for filename, blob in files:
            if filename == name:
                await _send_bytes(send, blob, b"application/octet-stream", method)
                return
        raise NotFound(f"checkpoint {grant.object_id} has no file {name!r}", code="no_such_object")


async def _send_bytes(send: Send, data: bytes, content_type: bytes, method: str) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else data})
