"""``--access-log``: one line per request on stderr.

``METHOD path operationId status duration_ms tenant=<project> key=<redacted> fault=<rule>``, then
``warning="..."`` per field accepted and ignored. No secret reaches the log: API keys and presigned tokens
are cut to four characters, secret query values are ``***``, no header is printed.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, TextIO
from urllib.parse import unquote_plus

from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send

RECORD = "emulator.access"
# The token of a presigned URL (emulator.http.files), the only credential such a URL needs.
_PRESIGNED_PATH = re.compile(r"^(/_files/(?:payloads|checkpoints|uploads)/)([^/]+)")


def note(scope: Scope, **values: Any) -> None:
    record = scope.get(RECORD)
    if record is not None:
        record.update(values)


def _secret(name: str) -> bool:
    name = name.lower()
    return "token" in name or "key" in name or "tenant" in name or "secret" in name or "password" in name


def redact_query(query: str) -> str:
    """The query string with the value of every secret-bearing parameter replaced by ``***``."""
    parts = []
    for part in query.split("&"):
        name, eq, _value = part.partition("=")
        parts.append(f"{name}=***" if eq and _secret(unquote_plus(name)) else part)
    return "&".join(parts)


def redact_path(path: str) -> str:
    """The path with a presigned URL's token cut as :func:`redact` cuts an API key."""
    if not path.startswith("/_files/"):
        return path
    return _PRESIGNED_PATH.sub(lambda m: m.group(1) + redact(m.group(2)), path)


def redact(token: str | None) -> str:
    if not token:
        return "-"
    return token[:4] + "..." if len(token) > 8 else "***"


class AccessLog:
    def __init__(self, app: ASGIApp, out: TextIO | None = None) -> None:
        self.app = app
        self.out = out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record: dict[str, Any] = {}
        scope[RECORD] = record
        status = 0
        started = time.perf_counter()  # a duration, not a reading of the wall clock

        async def send_(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_)
        finally:
            ms = (time.perf_counter() - started) * 1000
            query = scope.get("query_string", b"").decode("latin-1")
            path = redact_path(scope["path"]) + (f"?{redact_query(query)}" if query else "")
            line = (f"{scope['method']} {path} {record.get('operation_id') or '-'} {status or '-'} {ms:.1f}ms "
                    f"tenant={record.get('tenant') or '-'} key={redact(record.get('token'))} "
                    f"fault={record.get('fault') or '-'}")
            for warning in record.get("warnings") or ():
                line += f" warning={warning!r}"
            print(line, file=self.out or sys.stderr, flush=True)
