"""Record and replay HTTP exchanges as JSONL (one exchange per line).

- ``serve --record FILE`` wraps the whole app: every request and response, with the virtual time.
- ``python -m emulator record --upstream URL --out FILE --port P``: a recording proxy in front of
  another implementation (the real service or another emulator).
- ``python -m emulator replay FILE --port P``: answers requests with the recorded responses, in
  order: each request takes the first unused exchange with the same method, path and query. A
  request with no answer gets 404 (``ErrorData``, code ``no_recorded_answer``) and is reported on
  stderr and at ``GET /_emulator/replay``.

The ``Authorization`` header is always redacted. Presigned URLs inside recorded bodies are
rewritten to the replaying server's address.
"""

from __future__ import annotations

import base64
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson

from emulator.clock import rfc3339
from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send, lifespan, send_json
from emulator.http.envelope import render_error
from emulator.ui import is_dashboard_path

REDACTED = "Bearer <redacted>"
SKIP_HEADERS = {"content-length", "date", "server", "transfer-encoding", "connection"}


def _encode_body(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _decode_body(body: dict[str, str]) -> bytes:
    if "base64" in body:
        return base64.b64decode(body["base64"])
    return body.get("text", "").encode("utf-8")


def _request_headers(scope: Scope) -> dict[str, str]:
    out = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1").lower()
        if name in SKIP_HEADERS or name == "host":
            continue
        out[name] = REDACTED if name == "authorization" else v.decode("latin-1")
    return out


class Recorder:
    def __init__(self, path: str, now: Any) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the server's life
        self._now = now
        self._lock = threading.Lock()
        self._seq = 0

    def write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            entry = {"seq": self._seq, **entry}
            self._file.write(orjson.dumps(entry).decode() + "\n")
            self._file.flush()

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
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        self.write({
            "at": rfc3339(self._now()),
            "base_url": f"{scope.get('scheme', 'http')}://{host}",
            "request": {"method": scope["method"], "path": scope["path"],
                        "query": scope.get("query_string", b"").decode("latin-1"),
                        "headers": _request_headers(scope), "body": _encode_body(b"".join(chunks))},
            "response": {"status": status, "headers": headers, "body": _encode_body(b"".join(out))},
        })


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
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.used = [False] * len(entries)
        self.misses: list[str] = []
        self._lock = threading.Lock()

    def report(self) -> dict[str, Any]:
        return {"recorded": len(self.entries), "answered": sum(self.used), "unused": self.used.count(False),
                "unanswered": list(self.misses)}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/_emulator/replay":
            await send_json(send, 200, orjson.dumps(self.report()))
            return
        if scope["path"] == "/_emulator/health":
            await send_json(send, 200, b'{"status":"ok"}')
            return
        method, path = scope["method"], scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        with self._lock:
            index = next((i for i, e in enumerate(self.entries) if not self.used[i]
                          and e["request"]["method"] == method and e["request"]["path"] == path
                          and e["request"].get("query", "") == query), None)
            if index is not None:
                self.used[index] = True
        if index is None:
            line = f"{method} {path}{'?' + query if query else ''}"
            self.misses.append(line)
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
