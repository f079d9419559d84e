"""Swagger UI at ``/docs`` (vendor spec) and ``/docs/admin`` (control plane), and the root page ``/``.

``/`` redirects a browser to the dashboard; any other client gets the docs', dashboard's and control plane's
addresses as JSON. Specs are served at ``/openapi.json`` and ``/docs/admin/openapi.json``, listing the address
the page was loaded from first, so "Try it out" talks to this emulator.
"""

from __future__ import annotations

from types import MappingProxyType

import orjson
from connexion.middleware import ConnexionMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.options import SwaggerUIOptions

import emulator
from emulator import spec
from emulator.errors import NotFound
from emulator.http.asgi import Message, Receive, Scope, Send, base_url, header, send_json
from emulator.http.envelope import MethodNotAllowed

SPEC_PATH = "/openapi.json"
UI_PATH = "/docs"
ADMIN_UI_PATH = "/docs/admin"
ADMIN_SPEC_PATH = "/docs/admin/openapi.json"
_VENDOR_ENTRY = MappingProxyType({"url": SPEC_PATH, "name": "Together RL API (openapi.yaml)"})
_ADMIN_ENTRY = MappingProxyType({"url": ADMIN_SPEC_PATH, "name": "Emulator control plane /_emulator (admin.yaml)"})


ROOT_PATH = "/"
LINKS = MappingProxyType({
    "docs": UI_PATH + "/",
    "openapi": SPEC_PATH,
    "dashboard": "/_emulator/ui",
    "control_plane": "/_emulator",
    "control_plane_docs": ADMIN_UI_PATH + "/",
    "health": "/_emulator/health",
})


def is_docs_path(path: str) -> bool:
    return path == ROOT_PATH or path == SPEC_PATH or path == UI_PATH or path.startswith(UI_PATH + "/")


async def _index(scope: Scope, send: Send) -> None:
    """``/``: a browser (asking for HTML) is sent on to the dashboard, whose header links the docs; any other
    client gets where everything is, as JSON."""
    if "text/html" in (header(scope, b"accept") or ""):
        query = scope.get("query_string", b"").decode("latin-1")  # (an admin_token goes along)
        location = LINKS["dashboard"] + (f"?{query}" if query else "")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0"),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": b""})
        return
    body = {"name": "Together RL emulator", "version": emulator.__version__, "api": ["/v1/rl", "/v1/shaping"],
            **LINKS}
    await send_json(send, 200, orjson.dumps(body))


async def _nothing_here(scope: Scope, receive: Receive, send: Send) -> None:
    raise NotFound("no such page", code="unknown_endpoint")


def _ui(which: str, ui_path: str, spec_path: str, urls: list[dict[str, str]]) -> ConnexionMiddleware:
    ui = ConnexionMiddleware(_nothing_here, middlewares=[SwaggerUIMiddleware])
    ui.add_api(spec.load_spec(which), base_path="",
               swagger_ui_options=SwaggerUIOptions(swagger_ui_path=ui_path, spec_path=spec_path,
                                                   swagger_ui_template_arguments={"urls": urls}))
    return ui


class DocsApp:
    def __init__(self) -> None:
        self._ui: ConnexionMiddleware | None = None
        self._admin_ui: ConnexionMiddleware | None = None

    def ui(self) -> ConnexionMiddleware:
        if self._ui is None:
            self._ui = _ui(spec.VENDOR, UI_PATH, SPEC_PATH, [dict(_VENDOR_ENTRY), dict(_ADMIN_ENTRY)])
        return self._ui

    def admin_ui(self) -> ConnexionMiddleware:
        if self._admin_ui is None:
            self._admin_ui = _ui(spec.ADMIN, ADMIN_UI_PATH, ADMIN_SPEC_PATH, [dict(_ADMIN_ENTRY), dict(_VENDOR_ENTRY)])
        return self._admin_ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise MethodNotAllowed(scope["method"], scope["path"], ["GET", "HEAD"])
        path = scope["path"]
        if path == ROOT_PATH:
            await _index(scope, send)
            return
        if path == SPEC_PATH:
            doc = spec.load_spec(spec.VENDOR)
            here = {"url": base_url(scope), "description": "This emulator (the address this page was loaded from)."}
            doc["servers"] = [here] + [s for s in doc.get("servers", []) if s.get("url") != here["url"]]
            await send_json(send, 200, orjson.dumps(doc))
            return
        if path == ADMIN_SPEC_PATH:
            doc = spec.load_spec(spec.ADMIN)
            doc["servers"] = [{"url": base_url(scope) + spec.ADMIN_BASE_PATH,
                               "description": "This emulator's control plane."}]
            await send_json(send, 200, orjson.dumps(doc))
            return
        ui = self.admin_ui() if path == ADMIN_UI_PATH or path.startswith(ADMIN_UI_PATH + "/") else self.ui()
        failed = False

        async def send_(message: Message) -> None:
            # Static files answer a missing asset with a plain-text error: turn it into ErrorData.
            nonlocal failed
            if message["type"] == "http.response.start" and message["status"] >= 400:
                failed = True
            if not failed:
                await send(message)

        await ui(scope, receive, send_)
        if failed:
            raise NotFound("no such page", code="unknown_endpoint")
