"""The dispatch step: picks the handler by operationId, builds its :class:`Request`, renders JSON.

It replaces connexion's per-request decorator layer, which cost most of the throughput. A vendor request runs
in its caller's unit of work (a write for any method but GET and HEAD), which also takes a fault rule's state
effect, so the journal writes the request's change and its effect's together before the client sees the answer.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from emulator.api import faults, handler_for
from emulator.api.request import READ_METHODS, Request
from emulator.clock import rfc3339
from emulator.errors import Invalid, NotFound, Unavailable
from emulator.http.access_log import note
from emulator.http.asgi import (
    Receive,
    Scope,
    Send,
    base_url,
    declares_body,
    encoded_slash,
    json_answer,
    query_pairs,
    read_body,
    send_file,
    send_json,
)
from emulator.http.call import Call
from emulator.http.faults import give_back
from emulator.http.validation import JSON_WHITESPACE, parse_json_body
from emulator.runtime import Runtime, UnitOfWork

_MISSING = object()


WARNING_HEADER = "X-Emulator-Warning"


def warned(scope: Scope, runtime: Runtime, request: Request, op: str) -> None:
    """Where a request's warnings (what the domain accepted and ignored, :meth:`Ctx.ignored`) are seen besides
    its headers: the access log and the event log (the dashboard's)."""
    warnings = request.ctx.warnings
    note(scope, warnings=warnings)
    project = request.principal.project if request.principal is not None else None
    for message in warnings:
        runtime.store.events.append({"type": "warning", "at": rfc3339(request.ctx.now), "project": project,
                                     "operation_id": op, "message": message})


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
                try:  # one decoding everywhere: a header naming a tenant must read as the same key in a query
                    return v.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise Invalid(f"{name}: the header is not valid UTF-8", param=name, code="invalid_header") from exc
        return default

    def __iter__(self) -> Iterator[str]:
        return (k.decode("latin-1") for k, _ in self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class Dispatcher:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # operationId -> (handler, stateless, polls): a handler's marks read once (a getattr that misses costs
        # an exception inside the interpreter, twice a request)
        self._handlers: dict[str, tuple[Any, bool, tuple[str, str] | None]] = {}

    def _handler(self, op: str) -> tuple[Any, bool, tuple[str, str] | None] | None:
        found = self._handlers.get(op)
        if found is None:
            handler = handler_for(op)
            if handler is None:
                return None
            found = (handler, getattr(handler, "stateless", False), getattr(handler, "polls", None))
            self._handlers[op] = found
        return found

    async def __call__(self, call: Call, scope: Scope, receive: Receive, send: Send) -> None:
        op = call.op
        if op is None:
            raw = scope.get("raw_path")
            # (as sent when an encoded slash kept a segment whole: the decoded path may name a real endpoint)
            shown = raw.decode("latin-1") if encoded_slash(raw) else scope["path"]
            raise NotFound(f"no endpoint {scope['method']} {shown}", code="unknown_endpoint")
        found = self._handlers.get(op) or self._handler(op)
        if found is None:
            raise NotFound(f"operation {op} is not implemented", code="not_implemented")
        handler, stateless, polled = found
        if call.parsed:  # request validation already parsed it
            body = call.body
        elif not declares_body(scope):  # most GETs: nothing to wait for
            body = None
        else:
            raw = await read_body(receive)
            body = parse_json_body(raw) if raw.strip(JSON_WHITESPACE) else None
        headers = RawHeaders(scope["headers"])
        query = call.query
        if query is None:  # no validation ran (nothing to validate): parse it here
            query = dict(query_pairs(scope)) if scope.get("query_string") else {}
        method = scope["method"]
        caller = call.caller
        request = Request(self.runtime, caller, op, call.params, query, headers, body,
                          lambda: base_url(scope), method)
        if caller is None or stateless:
            result = handler(request)
            if inspect.isawaitable(result):  # (the control plane's scenario loader calls the app itself)
                result = await result
            payload = result[1]
        else:
            try:
                # (Runtime.unit_of_work's unit for a caller, made here without that call: every request opens one)
                with UnitOfWork(self.runtime, caller, method not in READ_METHODS, True) as (tenant, ctx):
                    request.tenant, request.ctx = tenant, ctx
                    if polled is not None:  # a client reads an object it may wait on (the auto clock, a stall)
                        self.runtime.polled(tenant, ctx, polled[0], request.path.get(polled[1], ""))
                    elif self.runtime.waits:
                        self.runtime.not_polling(caller.project)
                    result = handler(request)
                    payload = result[1]
                    effect = call.effect
                    if effect is not None and result[0] < 400:
                        # Not settled first: under the instant profile what the request made is already due,
                        # and must be marked (an operation to fail, a resource to hold) before it happens.
                        faults.apply(tenant, ctx, effect, op, request.path, body, payload)
            except Unavailable:  # refused, so not applied: a fault rule's trigger it used is there for the next
                give_back(call, self.runtime.faults, self.runtime.store.events)
                raise
        status = result[0]
        extra: Mapping[str, str | list[str]] | None = result[2] if len(result) > 2 else None  # type: ignore[misc]
        if request.ctx is not None and request.ctx.warnings:
            extra = {**(extra or {}), WARNING_HEADER: list(request.ctx.warnings)}
            warned(scope, self.runtime, request, op)
        if extra is None:  # most answers: JSON, sent as send_json sends it, without its coroutine
            data = orjson.dumps(payload) if isinstance(payload, dict) else payload if type(payload) is bytes else None
            if data is not None:
                start, rest = json_answer(status, data)
                await send(start)
                await send(rest)
                return
        if isinstance(payload, dict):  # (first: io.IOBase is an ABC, and its isinstance the slow kind)
            await send_json(send, status, orjson.dumps(payload), extra)
        elif isinstance(payload, (bytes, bytearray)):
            await send_json(send, status, bytes(payload), extra)
        elif isinstance(payload, io.IOBase):  # a stored file's bytes, open: streamed from disk
            await send_file(send, payload, extra, method)  # type: ignore[arg-type]
        else:
            await send_json(send, status, orjson.dumps(payload), extra)
