"""Small ASGI helpers shared by the emulator's HTTP layer and its tools (no framework on the hot path)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import BinaryIO, TypeGuard
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator.errors import Invalid
from emulator.http.envelope import BodyCut, PayloadTooLarge, render_error

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "base_url", "declares_body", "encoded_slash", "header",
           "header_count", "headers_of", "json_answer", "lifespan", "limited_receive", "query_pairs", "read_body",
           "rest_of_body", "send_error", "send_file", "send_json", "text_header"]

JSON_CONTENT_TYPE = (b"content-type", b"application/json")
JSON_HEADERS = (JSON_CONTENT_TYPE,)


def json_answer(status: int, body: bytes) -> tuple[Message, Message]:
    """The two messages of a JSON answer with no other header (most answers): plain, so a caller on the hot path
    sends them without awaiting another coroutine."""
    return ({"type": "http.response.start", "status": status,
             "headers": [JSON_CONTENT_TYPE, (b"content-length", b"%d" % len(body))]},
            {"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, body: bytes, headers: Mapping[str, str | list[str]] | None = None
                    ) -> None:
    if headers is None:
        start, rest = json_answer(status, body)
        await send(start)
        await send(rest)
        return
    # (a content-type among ``headers`` replaces JSON's: a file's content is bytes)
    typed = headers is not None and any(name.lower() == "content-type" for name in headers)
    raw = [] if typed else list(JSON_HEADERS)
    raw.append((b"content-length", str(len(body)).encode()))
    for name, value in (headers or {}).items():
        key = name.lower().encode("latin-1")
        for one in ([value] if isinstance(value, str) else value):  # a list: the header once per value
            raw.append((key, one.encode("latin-1", errors="replace")))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


FILE_CHUNK_BYTES = 1 << 20  # a file is read from disk and sent a MiB at a time


async def send_file(send: Send, opened: BinaryIO, headers: Mapping[str, str | list[str]] | None = None,
                    method: str = "GET") -> None:
    """Answer 200 with an open file's bytes (``application/octet-stream`` unless ``headers`` name a type), read
    a MiB at a time off the event loop, so no answer holds a whole file in memory; closes the file."""
    try:
        size = os.fstat(opened.fileno()).st_size
        typed = headers is not None and any(name.lower() == "content-type" for name in headers)
        raw = [] if typed else [(b"content-type", b"application/octet-stream")]
        raw.append((b"content-length", str(size).encode()))
        for name, value in (headers or {}).items():
            for one in ([value] if isinstance(value, str) else value):
                raw.append((name.lower().encode("latin-1"), one.encode("latin-1", errors="replace")))
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        left = 0 if method == "HEAD" else size
        if left == 0:
            await send({"type": "http.response.body", "body": b""})
        while left > 0:
            chunk = await asyncio.to_thread(opened.read, min(FILE_CHUNK_BYTES, left))
            if not chunk:  # (stored bytes never shrink; if they did, the answer is cut rather than padded)
                raise OSError(f"{getattr(opened, 'name', 'the file')} ended {left} bytes early")
            left -= len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
    finally:
        opened.close()


async def send_error(send: Send, status: int, message: str, *, code: str | None = None, param: str | None = None,
                     headers: dict[str, str] | None = None) -> None:
    await send_json(send, status, render_error(status, message, code=code, param=param), headers)


async def call_app(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, bytes]:
    """Run ``app`` on one request whose body is already in hand (an in-process client, a captured request);
    returns the status and body it answered."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    status, chunks = 500, []

    async def receive() -> Message:
        return pending.pop() if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def read_body(receive: Receive) -> bytes:
    """The whole body, chunked or not; its size limit is enforced by :func:`limited_receive`. A body cut short
    (a disconnect before its end) raises :class:`BodyCut`: a part of a body is never acted on."""
    message = await receive()
    if message["type"] != "http.disconnect" and not message.get("more_body", False):
        body = message.get("body", b"")  # (the usual body: one message, nothing to join)
        return body if type(body) is bytes else bytes(body)
    return await rest_of_body(message, receive)


async def rest_of_body(message: Message, receive: Receive) -> bytes:
    """:func:`read_body` from its first message on, when that message is not the whole body (the request
    path reads the first itself, and comes here only for more)."""
    chunks = []
    while True:
        if message["type"] == "http.disconnect":
            raise BodyCut("the request body was cut short (the client went away, or the request deadline "
                          "passed); nothing was done")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
        message = await receive()
    return b"".join(chunks)


def limited_receive(receive: Receive, limit: int) -> Receive:
    """A receive channel that refuses bodies over ``limit`` bytes, whether or not they declared a length
    (chunked uploads have none)."""
    seen = 0

    async def receive_() -> Message:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        return message

    return receive_


async def lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge ASGI start-up and shutdown; nothing needs doing at either."""
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


HEADERS = "emulator.headers"


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name (the last one, if repeated). Several layers ask for a few
    headers each, so the list is turned into a dict once per request (and kept in the scope)."""
    headers: dict[bytes, bytes] | None = scope.get(HEADERS)
    if headers is None:
        headers = scope[HEADERS] = dict(scope["headers"])
    return headers


def header(scope: Scope, name: bytes) -> str | None:
    """A request header by its lower-case name (the last one, if repeated), read as UTF-8 like every other
    text the emulator receives; bytes that are not UTF-8 become U+FFFD. For headers that name someone or
    something (an API key, an idempotency key) use :func:`text_header`, which refuses them instead."""
    value = (scope.get(HEADERS) or headers_of(scope)).get(name)
    return None if value is None else value.decode("utf-8", "replace")


def text_header(scope: Scope, name: bytes, shown: str) -> str | None:
    """A header that identifies something, decoded as UTF-8 (the decoding of JSON bodies and queries, so a
    non-ASCII API key names one tenant however it is sent). Bytes that are not UTF-8 are refused (400),
    never replaced: two different keys must not read as the same text."""
    value = (scope.get(HEADERS) or headers_of(scope)).get(name)
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{shown}: the header is not valid UTF-8", param=shown, code="invalid_header") from exc


def header_count(scope: Scope, name: bytes) -> int:
    """How many times the request sent a header."""
    return sum(1 for k, _ in scope["headers"] if k == name)


def query_pairs(scope: Scope) -> list[tuple[str, str]]:
    """The query string's (name, value) pairs, percent-decoded as UTF-8 (raw bytes too). A query that is not
    UTF-8 is refused (400) rather than read with replacement characters, which could make two different
    keys (``?api_key=``, ``?tenant=``) name the same tenant."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return []
    try:
        return parse_qsl(raw.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise Invalid("the query string is not valid UTF-8", code="invalid_query") from exc


def declares_body(scope: Scope) -> bool:
    """Whether the request says a body follows. An HTTP/1.x request with neither ``Content-Length`` nor
    ``Transfer-Encoding`` has none (RFC 9112 section 6.3), nor has one declaring length 0; nothing needs
    to be received or counted for it (most GETs)."""
    headers = scope.get(HEADERS) or headers_of(scope)
    length = headers.get(b"content-length")
    return (length is not None and length != b"0") or b"transfer-encoding" in headers


def encoded_slash(raw_path: bytes | None) -> TypeGuard[bytes]:
    """Whether the path as sent has a percent-encoded ``/``: data inside a segment (RFC 3986 section 2.2),
    which the decoded ``scope["path"]`` no longer tells apart from a separator."""
    # (find, not ``in``: bytes' ``in`` first tries its operand as an integer, and that failure costs an exception)
    return raw_path is not None and raw_path.find(b"%") >= 0 and (
        raw_path.find(b"%2F") >= 0 or raw_path.find(b"%2f") >= 0)


def base_url(scope: Scope) -> str:
    host = header(scope, b"host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"
