"""Presigned object-store URLs, served by the emulator itself without auth.

Emulates docs/api-surface.md A.4, A.5.3: ``/_files/payloads/<token>`` (offload PUT/GET),
``/_files/checkpoints/<token>/<file>`` (downloads), ``/_files/uploads/<token>`` (Files API PUT). The token is
the only credential: signed, expiring, an upload URL once; unknown, forged or revoked is 404, expired or used 403.
"""

from __future__ import annotations

from typing import Any

from emulator.api import presigned
from emulator.errors import NotFound, Unavailable
from emulator.http.asgi import Receive, Scope, Send, header, send_file, send_json
from emulator.http.envelope import BodyCut, Forbidden, MethodNotAllowed
from emulator.runtime import Runtime
from emulator.store import Tenant
from emulator.store.blobs import BlobWriter
from emulator.store.presigned import Grant, GrantRefused, claimed_project

PAYLOADS = "/_files/payloads/"
CHECKPOINTS = "/_files/checkpoints/"
UPLOADS = "/_files/uploads/"


class FileServer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.receiving: dict[str, int] = {}  # project -> bytes of its uploads being received right now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path.startswith(PAYLOADS) and "/" not in path[len(PAYLOADS):]:
            if method == "PUT":
                await self._upload(path[len(PAYLOADS):], scope, receive, send)
            elif method in ("GET", "HEAD"):
                await self._download_payload(path[len(PAYLOADS):], method, send)
            else:
                raise MethodNotAllowed(method, path, ["GET", "HEAD", "PUT"])
            return
        if path.startswith(UPLOADS) and "/" not in path[len(UPLOADS):]:
            if method != "PUT":
                raise MethodNotAllowed(method, path, ["PUT"])
            await self._upload_file(path[len(UPLOADS):], scope, receive, send)
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

    async def _upload(self, token: str, scope: Scope, receive: Receive, send: Send) -> None:
        grant = self._grant(token, ("payload-upload",))

        def target(tenant: Tenant) -> None:
            payload = tenant.payloads.get(grant.object_id)
            if payload is None:
                raise NotFound("no such object", code="no_such_object")
            if payload.blob is not None or payload.released_by is not None:
                raise Forbidden("this upload URL was already used; request a new one", code="url_refused")

        await self._store(grant, scope, receive, target,
                          lambda tenant, writer, blob: presigned.keep_payload(tenant, grant.object_id, blob, writer.size))
        await send_json(send, 200, b"{}")

    async def _upload_file(self, token: str, scope: Scope, receive: Receive, send: Send) -> None:
        grant = self._grant(token, ("file-upload",))

        def target(tenant: Tenant) -> None:
            f = tenant.files.get(grant.object_id)
            if f is None:  # deleted since
                raise NotFound("no such object", code="no_such_object")
            if f.blob is not None:
                raise Forbidden("this upload URL was already used; request a new one", code="url_refused")

        await self._store(grant, scope, receive, target,
                          lambda tenant, writer, blob: presigned.keep_file(tenant, grant.object_id, blob, writer.size))
        await send_json(send, 200, b"{}")

    async def _store(self, grant: Grant, scope: Scope, receive: Receive, target: Any, keep: Any) -> None:
        """Receive an upload's body into a blob and ``keep`` it in the tenant's record, once ``target`` (which
        raises when the record is gone or already has its bytes) and the quota allow it; refused or cut short,
        nothing is kept."""
        project, runtime = grant.project, self.runtime
        limits = runtime.limits
        try:
            with runtime.unit_of_work(project, write=False) as (tenant, _ctx):  # refuse before receiving
                self._check_tenant(tenant, grant)
                target(tenant)
                held = presigned.stored_bytes(tenant)
            length = header(scope, b"content-length")
            presigned.check_room(limits, int(length) if length and length.isdigit() else 0,
                             held + self.receiving.get(project, 0))
            try:
                writer = runtime.store.blobs.writer()
            except OSError as exc:
                raise _disk_refused(exc) from exc
            try:
                await self._receive(project, receive, writer, held)
                with runtime.unit_of_work(project, write=True) as (tenant, _ctx):
                    self._check_tenant(tenant, grant)
                    target(tenant)
                    presigned.check_room(limits, writer.size, presigned.stored_bytes(tenant))
                    try:
                        blob = runtime.store.blobs.commit(writer)
                    except OSError as exc:
                        raise _disk_refused(exc) from exc
                    keep(tenant, writer, blob)
            finally:
                writer.abort()  # (nothing is left to remove once committed)
        except NotFound as exc:
            if exc.code != "unknown_tenant":
                raise
            raise NotFound("no such object (unknown or revoked URL)", code="no_such_object") from exc
        runtime.collect_blobs()

    async def _receive(self, project: str, receive: Receive, writer: BlobWriter, held: int) -> None:
        """The body into ``writer``, refused (429) as soon as the project's uploads would pass its quota."""
        receiving = self.receiving
        limits = self.runtime.limits
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BodyCut("the upload was cut short before its last byte; nothing was kept")
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    receiving[project] = receiving.get(project, 0) + len(chunk)
                    presigned.check_room(limits, 0, held + receiving[project])  # (a chunked body declares no size)
                    try:
                        await writer.write(chunk)
                    except OSError as exc:
                        raise _disk_refused(exc) from exc
                if not message.get("more_body", False):
                    break
            try:
                await writer.finish()
            except OSError as exc:
                raise _disk_refused(exc) from exc
        finally:
            left = receiving.get(project, 0) - size
            if left > 0:
                receiving[project] = left
            else:
                receiving.pop(project, None)

    async def _download_payload(self, token: str, method: str, send: Send) -> None:
        grant = self._grant(token, ("payload-download",))
        with self.runtime.unit_of_work(grant.project, write=False) as (tenant, _ctx):
            self._check_tenant(tenant, grant)
            payload = tenant.payloads.get(grant.object_id)
            blob = payload.blob if payload is not None else None
            released = presigned.released_message(payload) if payload is not None and payload.released_by else None
            opened = blob.open() if blob is not None else None  # type: ignore[attr-defined]
        if opened is None:
            raise NotFound(released or "no such object", code="no_such_object")
        await send_file(send, opened, {"content-type": "application/json"}, method)

    async def _checkpoint_file(self, token: str, name: str, method: str, send: Send) -> None:
        grant = self._grant(token, ("checkpoint",))
        with self.runtime.unit_of_work(grant.project, write=False) as (tenant, _ctx):
            self._check_tenant(tenant, grant)
            _, _, named = presigned.checkpoint_files(tenant, grant.object_id, grant.variant or "")
        for filename, blob in named:
            if filename == name:
                await _send_bytes(send, blob, b"application/octet-stream", method)
                return
        raise NotFound(f"checkpoint {grant.object_id} has no file {name!r}", code="no_such_object")


async def _send_bytes(send: Send, data: bytes, content_type: bytes, method: str) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else data})


def _disk_refused(exc: OSError) -> Unavailable:
    return Unavailable(f"the upload could not be stored ({exc.strerror or exc}); nothing was kept. Retry once the "
                       "disk has room")
