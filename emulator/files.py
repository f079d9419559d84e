"""Presigned object-store URLs, served by the emulator itself without auth.

Emulates the real service's presigned URLs (api-surface.md A.4, A.5.3): ``PUT`` and ``GET``
``/_files/payloads/<token>`` for large-payload offload, ``GET /_files/checkpoints/<token>/<file>``
for checkpoint downloads. The token is the only credential, like a presigned URL's signature.
Differences: URLs never expire.
"""

from __future__ import annotations

from typing import Any

from emulator.domain import checkpoints, payloads
from emulator.errors import render_error
from emulator.runtime import Runtime


class FileServer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from emulator.app import read_body, send_json
        from emulator.errors import ApiError

        parts = scope["path"].split("/")  # ['', '_files', kind, token, ...]
        method = scope["method"]
        store = self.runtime.store
        try:
            if len(parts) == 4 and parts[2] == "payloads":
                target = store.presigned.get(parts[3])
                if target is None or target[1] != "payload":
                    await send_json(send, 404, render_error(404, "no such object"))
                    return
                project, _, payload_id = target
                if method == "PUT":
                    data = await read_body(receive)
                    with store.transaction(project) as state:
                        payloads.put(state, payload_id, data)
                    self.runtime.committed()
                    await send_json(send, 200, b"{}")
                    return
                if method in ("GET", "HEAD"):
                    with store.transaction(project) as state:
                        data = state.payloads[payload_id].data
                    if data is None:
                        await send_json(send, 404, render_error(404, "payload not uploaded yet"))
                        return
                    await send_json(send, 200, data)
                    return
            elif len(parts) == 5 and parts[2] == "checkpoints" and method in ("GET", "HEAD"):
                target = store.presigned.get(parts[3])
                if target is not None:
                    project, variant, checkpoint_id = target
                    with store.transaction(project) as state:
                        _, _, files = checkpoints.files(state, checkpoint_id, variant)
                    for name, blob in files:
                        if name == parts[4]:
                            await send({"type": "http.response.start", "status": 200, "headers": [
                                (b"content-type", b"application/octet-stream"),
                                (b"content-length", str(len(blob)).encode())]})
                            await send({"type": "http.response.body", "body": b"" if method == "HEAD" else blob})
                            return
            await send_json(send, 404, render_error(404, "no such object"))
        except ApiError as exc:
            await send_json(send, exc.status, render_error(exc.status, exc.message))
