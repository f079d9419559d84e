"""Record and replay HTTP exchanges as JSONL (one exchange per line).

- ``serve --record FILE`` wraps the whole app: every request and response, with the virtual time.
- ``python -m emulator record --upstream URL --out FILE --port P``: a recording proxy in front of
  another implementation (the real service or another emulator).
- ``python -m emulator replay NAME|FILE --port P``: answers requests with the recorded responses (of
  a shipped recording, ``fixtures/recordings/NAME.jsonl``, or of a file), in order: each request takes
  the first unused exchange with the same method, path and query. A request with no answer gets 404
  (``ErrorData``, code ``no_recorded_answer``) and is reported on stderr and at ``GET /_emulator/replay``.

What a recording keeps, and what it changes:

- The ``Authorization`` header is always redacted, and so are the tokens of the emulator's presigned
  URLs (``/_files/...``, credentials too): each becomes ``redacted-token-N``, numbered in order of first
  appearance, in response bodies and in the request paths that use them alike, so replay still serves
  the files.
- The other secrets are redacted too: the ``X-Emulator-Admin-Token`` header, the query parameters that
  carry a key (``admin_token``, ``api_key``, ``tenant``: shown as ``--access-log`` shows them) and the
  ``tenant`` of a reset body (an API key). Replay redacts the queries it receives the same way before
  matching them. A recording file is created readable by its owner only (0600).
- Replay rewrites the recorded ``base_url`` inside bodies to the replaying server's address.
- A *canonical* recording (:class:`Recorder` with ``canonical=True``, what ``python -m tests.recordings``
  makes for ``fixtures/recordings/``) also drops what varies from run to run or machine to machine
  though the emulator's answers do not: the server's address becomes :data:`CANONICAL_BASE_URL`, the
  client's self-description (User-Agent, ``X-Stainless-*``, Accept-Encoding...) is dropped, keeping
  only the request headers the API defines, and client-generated ``Idempotency-Key`` values (the SDK's
  are random UUIDs) become ``key-N``. Replay matches requests on none of these. So the same client
  against the same seed on the manual clock records the same bytes.

Replay lists the requests it could not answer at ``GET /_emulator/replay``, bounded: the first
``MAX_MISSES`` of them, each cut to ``MAX_MISS_CHARS`` characters, and a count of all. Like the
emulator, it answers only Host names of its bind address and no foreign Origin (:mod:`emulator.http.site`).
"""

from __future__ import annotations

import base64
import os
import re
import sys
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import orjson

from emulator.clock import rfc3339
from emulator.http.access_log import redact_query
from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send, lifespan, send_json
from emulator.http.envelope import render_error
from emulator.http.site import SiteGuard
from emulator.ui import is_dashboard_path

REDACTED = "Bearer <redacted>"
REDACTED_HEADERS = MappingProxyType({"authorization": REDACTED, "x-emulator-admin-token": "<redacted>",
                    "x-emulator-tenant": "<redacted>"})  # (the last names a tenant by its API key)
# Control-plane bodies whose "tenant" is an API key.
TENANT_BODIES = frozenset({"/_emulator/reset"})
MAX_MISSES = 1000
MAX_MISS_CHARS = 2000
SKIP_HEADERS = frozenset({"content-length", "date", "server", "transfer-encoding", "connection"})
#: The server's address in a canonical recording (the default address of ``serve``).
CANONICAL_BASE_URL = "http://127.0.0.1:8765"
#: The request headers a canonical recording keeps: those the API defines.
CANONICAL_REQUEST_HEADERS = frozenset({"authorization", "content-type", "idempotency-key", "x-emulator-fault"})
# The token of a presigned URL of the emulator (emulator.http.files): /_files/payloads/T, /_files/checkpoints/T/F.
_PRESIGNED = re.compile(rb"(/_files/(?:payloads|checkpoints)/)([A-Za-z0-9_.-]+)")


def _encode_body(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _decode_body(body: dict[str, str]) -> bytes:
    if "base64" in body:
        return base64.b64decode(body["base64"])
    return body.get("text", "").encode("utf-8")


def _request_body(path: str, data: bytes) -> bytes:
    """The body as recorded: a reset's ``tenant`` (an API key) redacted."""
    if path not in TENANT_BODIES or b"tenant" not in data:
        return data
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    if isinstance(body, dict) and isinstance(body.get("tenant"), str):
        body["tenant"] = "<redacted>"
        return orjson.dumps(body)
    return data


class Recorder:
    """Appends one JSON line per exchange to ``path``; ``now`` gives the virtual time of each.

    ``canonical``: record the same bytes whenever the answers are the same (see the module docstring).
    """

    def __init__(self, path: str, now: Any, *, canonical: bool = False) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Owner-only: even redacted, a recording holds a client's data.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the server's life
        self._now = now
        self._canonical = canonical
        self._lock = threading.Lock()
        self._seq = 0
        # Placeholders, numbered in order of first appearance (under the lock, so in the file's order).
        self._tokens: dict[bytes, bytes] = {}
        self._keys: dict[str, str] = {}

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _redact_tokens(self, data: bytes) -> bytes:
        def placeholder(m: re.Match[bytes]) -> bytes:
            token = self._tokens.setdefault(m.group(2), b"redacted-token-%d" % (len(self._tokens) + 1))
            return m.group(1) + token

        return _PRESIGNED.sub(placeholder, data)

    def _request_headers(self, scope: Scope) -> dict[str, str]:
        out = {}
        for k, v in scope["headers"]:
            name = k.decode("latin-1").lower()
            if name in SKIP_HEADERS or name == "host":
                continue
            if self._canonical and name not in CANONICAL_REQUEST_HEADERS:
                continue
            value = v.decode("latin-1")
            if name in REDACTED_HEADERS:
                value = REDACTED_HEADERS[name]
            elif name == "idempotency-key" and self._canonical:
                value = self._keys.setdefault(value, f"key-{len(self._keys) + 1}")
            out[name] = value
        return out

    def _entry(self, scope: Scope, request_body: bytes, status: int, headers: dict[str, str],
               body: bytes) -> dict[str, Any]:
        """The recorded form of one exchange; called under the lock, in the order of the file."""
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        base_url = f"{scope.get('scheme', 'http')}://{host}"
        path = self._redact_tokens(scope["path"].encode("utf-8")).decode("utf-8")
        body = self._redact_tokens(body)
        if self._canonical and host:
            body = body.replace(base_url.encode(), CANONICAL_BASE_URL.encode())
            base_url = CANONICAL_BASE_URL
        return {
            "at": rfc3339(self._now()),
            "base_url": base_url,
            "request": {"method": scope["method"], "path": path,
                        "query": redact_query(scope.get("query_string", b"").decode("latin-1")),
                        "headers": self._request_headers(scope),
                        "body": _encode_body(self._redact_tokens(_request_body(scope["path"], request_body)))},
            "response": {"status": status, "headers": headers, "body": _encode_body(body)},
        }

    async def exchange(self, app: Any, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app`` for one HTTP request, recording what went in and came out."""
        chunks: list[bytes] = []

        async def recv() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        status = 0
        headers: dict[str, str] = {}
        out: list[bytes] = []

        async def snd(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for k, v in message.get("headers", []):
                    name = k.decode("latin-1").lower()
                    if name not in SKIP_HEADERS:
                        headers[name] = v.decode("latin-1")
            elif message["type"] == "http.response.body":
                out.append(message.get("body", b""))
            await send(message)

        await app(scope, recv, snd)
        with self._lock:  # numbering (seq, placeholders) follows the order of the file
            self._seq += 1
            entry = {"seq": self._seq, **self._entry(scope, b"".join(chunks), status, headers, b"".join(out))}
            self._file.write(orjson.dumps(entry).decode() + "\n")
            self._file.flush()


class RecordingApp:
    def __init__(self, app: ASGIApp, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The dashboard's pages and event streams are not API traffic (and a stream never ends).
        if scope["type"] != "http" or is_dashboard_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        await self.recorder.exchange(self.app, scope, receive, send)


class ProxyApp:
    """Forwards every request to ``upstream`` (token and all) and records the exchange."""

    def __init__(self, upstream: str, recorder: Recorder) -> None:
        self.upstream = upstream.rstrip("/")
        self.recorder = recorder
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=300)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await self.recorder.exchange(self._forward, scope, receive, send)

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in ("host", "content-length")]
        url = scope["path"] + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        resp = await self.client.request(scope["method"], url, content=body, headers=headers)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.items()
               if k.lower() not in SKIP_HEADERS and k.lower() != "content-encoding"]
        raw.append((b"content-length", str(len(resp.content)).encode()))
        await send({"type": "http.response.start", "status": resp.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": resp.content})


def load_recording(path: str) -> list[dict[str, Any]]:
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = orjson.loads(line)
                entry["request"]["method"], entry["request"]["path"], entry["response"]["status"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a recorded exchange ({exc})") from exc
            entries.append(entry)
    return entries


class ReplayApp:
    def __init__(self, entries: list[dict[str, Any]], guard: SiteGuard | None = None) -> None:
        self.entries = entries
        self.guard = guard
        self.used = [False] * len(entries)
        self.misses: list[str] = []   # the first MAX_MISSES, each cut short
        self.missed = 0               # all of them
        self._lock = threading.Lock()

    def report(self) -> dict[str, Any]:
        return {"recorded": len(self.entries), "answered": sum(self.used), "unused": self.used.count(False),
                "unanswered": list(self.misses), "unanswered_total": self.missed}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        refused = self.guard.refusal(scope) if self.guard is not None else None
        if refused is not None:
            status, message, code = refused
            await send_json(send, status, render_error(status, message, code=code))
            return
        if scope["path"] == "/_emulator/replay":
            await send_json(send, 200, orjson.dumps(self.report()))
            return
        if scope["path"] == "/_emulator/health":
            await send_json(send, 200, b'{"status":"ok"}')
            return
        method, path = scope["method"], scope["path"]
        query = redact_query(scope.get("query_string", b"").decode("latin-1"))
        with self._lock:
            index = next((i for i, e in enumerate(self.entries) if not self.used[i]
                          and e["request"]["method"] == method and e["request"]["path"] == path
                          and e["request"].get("query", "") == query), None)
            if index is not None:
                self.used[index] = True
        if index is None:
            line = f"{method} {path}{'?' + query if query else ''}"
            if len(line) > MAX_MISS_CHARS:
                line = line[:MAX_MISS_CHARS - 15] + "... (truncated)"
            with self._lock:
                self.missed += 1
                kept = len(self.misses) < MAX_MISSES
                if kept:
                    self.misses.append(line)
            if kept:
                print(f"replay: no recorded answer for {line}", file=sys.stderr, flush=True)
            await send_json(send, 404, render_error(404, f"no recorded answer for {line}", code="no_recorded_answer"))
            return
        entry = self.entries[index]
        body = _decode_body(entry["response"]["body"])
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        recorded_base = entry.get("base_url")
        if recorded_base and host:
            body = body.replace(recorded_base.encode(), f"{scope.get('scheme', 'http')}://{host}".encode())
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in entry["response"]["headers"].items()]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": entry["response"]["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})
