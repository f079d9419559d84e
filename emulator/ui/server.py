"""The dashboard's ASGI app, mounted by ``EmulatorApp`` at ``/_emulator/ui``.

GET only: the page, its data (:mod:`emulator.ui.views`), a key's project, server-sent events
(:mod:`emulator.ui.stream`, at most ``--max-event-streams``, then 429) and static files. With ``--admin-token``
every route but the static files needs the token (also as ``?admin_token=``, here only); errors are ``ErrorData``.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson

from emulator.errors import Invalid, NotFound
from emulator.http import asgi
from emulator.http.asgi import Receive, Scope, Send, query_pairs
from emulator.http.auth import check_admin
from emulator.http.envelope import HttpError, MethodNotAllowed
from emulator.http.shards import FanOut, named_shard
from emulator.ui import stream, views

if TYPE_CHECKING:
    from emulator.runtime import Runtime

UI_PATH = "/_emulator/ui"
TENANT_PAGE = re.compile(r"/tenants/([^/]+)/?")
TENANT_DATA = re.compile(r"/api/tenants/([^/]+)")
CONTENT_TYPES = MappingProxyType({".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".png": "image/png"})
# The page may talk to this server only: no CDN, no web font, nothing from the internet.
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


class TooManyStreams(HttpError):
    """Over the cap on open event streams (``--max-event-streams``): the page tries again after a while."""

    status = 429
    code = "too_many_event_streams"


class Dashboard:
    def __init__(self, runtime: Runtime, tick_seconds: float = stream.TICK_SECONDS,
                 stream_seconds: float = stream.STREAM_SECONDS, max_streams: int = stream.MAX_STREAMS) -> None:
        self.runtime = runtime
        self.tick_seconds = tick_seconds
        self.stream_seconds = stream_seconds
        self.max_streams = max_streams
        self.streams = 0  # open now (the event loop is single-threaded: no lock)
        self.settler = stream.Settler(runtime, tick_seconds)
        self._static: dict[str, Traversable] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"][len(UI_PATH):] or "/"
        if scope["method"] != "GET":
            # Its actions use the control plane (/_emulator/...), like any other client.
            raise MethodNotAllowed(scope["method"], scope["path"], ["GET"])
        if path.startswith("/static/"):
            await self._send_static(send, path[len("/static/"):])
            return
        query = dict(query_pairs(scope))
        # The control plane's rule; EventSource cannot set headers, so the token may come as a parameter.
        check_admin(scope, self.runtime.tenancy, given=query.get("admin_token"))
        if path == "/":
            await self._send_static(send, "index.html", csp=True)
        elif m := TENANT_PAGE.fullmatch(path):
            views.tenant_exists(self.runtime, m.group(1))
            await self._send_static(send, "index.html", csp=True)
        elif path == "/api/tenants":
            await send_json(send, await self._tenant_list(scope, query))
        elif m := TENANT_DATA.fullmatch(path):
            await send_json(send, views.tenant(self.runtime, m.group(1)))
        elif path == "/api/lookup":
            await send_json(send, views.lookup(self.runtime, query.get("api_key") or ""))
        elif path == "/api/stream":
            since = _int(asgi.header(scope, b"last-event-id") or query.get("since") or "0", "since")
            if self.streams >= self.max_streams:
                raise TooManyStreams(f"{self.streams} event streams are open, the most this server keeps "
                                     "(--max-event-streams); try again shortly", headers={"retry-after": "5"})
            self.streams += 1
            try:
                await stream.run(self.runtime, receive, send, query.get("project") or None, since,
                                 tick_seconds=self.tick_seconds, stream_seconds=self.stream_seconds,
                                 settle=self.settler.settle)
            finally:
                self.streams -= 1
        else:
            raise NotFound(f"no dashboard route {scope['path']}", code="unknown_endpoint")

    async def _tenant_list(self, scope: Scope, query: dict[str, str]) -> dict[str, Any]:
        """The tenant list; on a shard of a cluster with a balancer (and no shard named), every shard's
        tenants, gathered through the balancer, with ``shards`` saying which answered. The clock, events and
        fault rules are this shard's (the page's event stream comes from this same shard)."""
        own = views.tenants(self.runtime)
        shard, balancer = self.runtime.shard, self.runtime.config.balancer
        if shard is None or named_shard(scope, shard):
            return own
        own["shards"] = [{"shard": shard.index, "status": "ok"}]
        if balancer is None:  # (a shard on its own: the list is its own, and says so)
            return own
        headers = list(scope["headers"])
        if query.get("admin_token"):
            headers.append((b"x-emulator-admin-token", query["admin_token"].encode()))
        for answer in await FanOut(balancer, shard).send("GET", f"{UI_PATH}/api/tenants", headers):
            try:
                rows = orjson.loads(answer.body)["data"] if answer.status == 200 else None
            except (ValueError, KeyError, TypeError):
                rows = None
            if rows is None:
                own["shards"].append({"shard": answer.shard, "status": "unavailable", "error": answer.describe()})
                continue
            own["data"].extend(rows)
            own["shards"].append({"shard": answer.shard, "status": "ok"})
        own["shards"].sort(key=lambda s: s["shard"])
        return own

    def _files(self) -> dict[str, Traversable]:
        """Relative path -> file of every shipped asset; only these names are ever served."""
        if self._static is None:
            found: dict[str, Traversable] = {}

            def walk(node: Traversable, prefix: str) -> None:
                for child in node.iterdir():
                    if child.is_dir():
                        walk(child, f"{prefix}{child.name}/")
                    elif not child.name.startswith("."):
                        found[prefix + child.name] = child

            walk(resources.files("emulator.ui").joinpath("static"), "")
            self._static = found
        return self._static

    async def _send_static(self, send: Any, name: str, csp: bool = False) -> None:
        file = self._files().get(name)
        if file is None:
            raise NotFound(f"no dashboard asset {name!r}", code="unknown_endpoint")
        suffix = name[name.rfind("."):] if "." in name else ""
        headers = [(b"content-type", CONTENT_TYPES.get(suffix, "text/plain; charset=utf-8").encode()),
                   (b"cache-control", b"no-cache"), (b"x-content-type-options", b"nosniff")]
        if csp:
            headers.append((b"content-security-policy", PAGE_CSP.encode()))
        body = file.read_bytes()
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, payload: Any) -> None:
    await asgi.send_json(send, 200, orjson.dumps(payload), {"cache-control": "no-store"})


def _int(raw: str, name: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise Invalid(f"{name} must be an event sequence number (an integer)", param=name) from exc
    if value < 0:
        raise Invalid(f"{name} must be >= 0", param=name)
    return value
