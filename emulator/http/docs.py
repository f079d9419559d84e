"""Swagger UI for the vendor spec at ``/docs``, and the spec itself at ``/openapi.json``.

Kept off the hot path and built on its first request (connexion's Swagger UI middleware serves the
page and its assets). The served spec lists the address the page was loaded from first, so "Try it
out" talks to this emulator. Only GET and HEAD are allowed; anything that is not a page or an asset is
a 404, always in ``ErrorData``.
"""

from __future__ import annotations

import orjson
from connexion.middleware import ConnexionMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.options import SwaggerUIOptions

from emulator import spec
from emulator.errors import NotFound
from emulator.http.asgi import Message, Receive, Scope, Send, base_url, send_json
from emulator.http.envelope import MethodNotAllowed

SPEC_PATH = "/openapi.json"
UI_PATH = "/docs"


def is_docs_path(path: str) -> bool:
    return path == SPEC_PATH or path == UI_PATH or path.startswith(UI_PATH + "/")


async def _nothing_here(scope: Scope, receive: Receive, send: Send) -> None:
    raise NotFound("no such page", code="unknown_endpoint")


class DocsApp:
    def __init__(self) -> None:
        self._ui: ConnexionMiddleware | None = None

    def ui(self) -> ConnexionMiddleware:
        if self._ui is None:
            ui = ConnexionMiddleware(_nothing_here, middlewares=[SwaggerUIMiddleware])
            ui.add_api(spec.load_spec(spec.VENDOR), base_path="",
                       swagger_ui_options=SwaggerUIOptions(swagger_ui_path=UI_PATH, spec_path=SPEC_PATH))
            self._ui = ui
        return self._ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise MethodNotAllowed(scope["method"], scope["path"], ["GET", "HEAD"])
        if scope["path"] == SPEC_PATH:
            doc = spec.load_spec(spec.VENDOR)
            here = {"url": base_url(scope), "description": "This emulator (the address this page was loaded from)."}
            doc["servers"] = [here] + [s for s in doc.get("servers", []) if s.get("url") != here["url"]]
            await send_json(send, 200, orjson.dumps(doc))
            return
        failed = False

        async def send_(message: Message) -> None:
            # Static files answer a missing asset with a plain-text error: turn it into ErrorData.
            nonlocal failed
            if message["type"] == "http.response.start" and message["status"] >= 400:
                failed = True
            if not failed:
                await send(message)

        await self.ui()(scope, receive, send_)
        if failed:
            raise NotFound("no such page", code="unknown_endpoint")
