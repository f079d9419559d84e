"""The innermost ASGI app: picks the handler by operationId, builds its :class:`Request`, renders JSON.

It replaces connexion's per-request decorator layer (parameter introspection, response wrapping),
which cost most of the throughput. After the handler it applies a fault rule's state effect and
persists what changed (``--state-file``) before the client sees the answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson

from emulator.api import handler_for
from emulator.api.request import READ_METHODS, Request
from emulator.errors import InvalidRequest, NotFound
from emulator.http.asgi import (
    Receive,
    Scope,
    Send,
    base_url,
    declares_body,
    encoded_slash,
    operation_id,
    read_body,
    send_json,
)
from emulator.http.auth import principal
from emulator.http.faults import state_effect
from emulator.http.validation import PARSED_BODY, PARSED_QUERY
from emulator.runtime import Runtime

_MISSING = object()


class RawHeaders(Mapping[str, str]):
    """The request's headers as a read-only mapping, decoded only when a handler asks (few do)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> str:
        value = self.get(name, _MISSING)
        if value is _MISSING:
            raise KeyError(name)
        return str(value)

    def get(self, name: str, default: Any = None) -> Any:  # (Mapping's own get goes through a KeyError)
        key = name.lower().encode("latin-1")
        for k, v in self._raw:
            if k == key:
                return v.decode("latin-1")
        return default

    def __iter__(self) -> Iterator[str]:
        return (k.decode("latin-1") for k, _ in self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class Dispatcher:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        op = operation_id(scope)
        if op is None:
            raw = scope.get("raw_path")
            # (as sent when an encoded slash kept a segment whole: the decoded path may name a real endpoint)
            shown = raw.decode("latin-1") if encoded_slash(raw) else scope["path"]
            raise NotFound(f"no endpoint {scope['method']} {shown}", code="unknown_endpoint")
        handler = handler_for(op)
        if handler is None:
            raise NotFound(f"operation {op} is not implemented", code="not_implemented")
        extensions = scope.get("extensions", {})
        if PARSED_BODY in extensions:  # request validation already parsed it
            body = extensions[PARSED_BODY]
        elif not declares_body(scope):  # most GETs: nothing to wait for
            body = None
        else:
            raw = await read_body(receive)
            body = None
            if raw.strip():
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from exc
        headers = RawHeaders(scope["headers"])
        query = extensions.get(PARSED_QUERY)
        if query is None:  # no validation ran (nothing to validate): parse it here
            raw_query = scope.get("query_string", b"")
            query = dict(parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)) if raw_query else {}
        method = scope["method"]
        request = Request(self.runtime, principal(scope), op, scope.get("path_params", {}), query, headers, body,
                          lambda: base_url(scope), method)
        try:
            result = handler(request)
            status, payload = result[0], result[1]
            effect = state_effect(scope)
            if effect is not None and status < 400 and request.principal is not None:
                self.runtime.apply_fault_effect(request.principal, effect, op, request.path, body,
                                                payload)
        finally:
            self.runtime.persist(force=method not in READ_METHODS)
        extra = result[2] if len(result) > 2 else None  # type: ignore[misc]
        if isinstance(payload, (bytes, bytearray)):
            await send_json(send, status, bytes(payload), extra)
        else:
            await send_json(send, status, orjson.dumps(payload), extra)
