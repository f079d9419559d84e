"""The emulator's uvicorn protocol (the connection guards of ``emulator.http.server``) answers as HTTP/1.1
requires: a length, HEAD, ``Connection: close``, pipelining and streamed responses.

These tests drive the protocol with a recording transport (what it writes, in order), then check the same on
a real socket. (It once wrote a response in one ``send()`` instead of uvicorn's two; that was removed when
``make bench`` measured it below 10%, and these tests stayed to hold the behaviour a client sees.)
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from emulator.config import Config
from emulator.http.server import bind, guarded_protocol
from emulator.tools.testing import serve_in_thread

AUTH = b"Authorization: Bearer test-token\r\n"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _app(*, stream: bool = False, length: bool = True) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/plain")]
        if length and not stream:
            headers.append((b"content-length", b"5"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if stream:
            await send({"type": "http.response.body", "body": b"one", "more_body": True})
            await send({"type": "http.response.body", "body": b"two"})
        else:
            await send({"type": "http.response.body", "body": b"hello"})
    return app


async def _exchange(app: Any, request: bytes) -> RecordingTransport:
    protocol_class = guarded_protocol(5.0, 5.0)
    assert not isinstance(protocol_class, str), "httptools is a dependency of uvicorn[standard]"
    config = uvicorn.Config(app, http=protocol_class, lifespan="off", log_level="warning")
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(50):  # let the request tasks run to the end
        await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport


def test_a_response_with_a_length_is_its_head_then_its_body() -> None:
    transport = asyncio.run(_exchange(_app(), b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    head, _, body = b"".join(transport.writes).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 5" in head
    assert body == b"hello"


def test_a_large_body_arrives_whole_behind_its_head() -> None:
    body = b"x" * (1 << 17)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    transport = asyncio.run(_exchange(app, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    head, _, sent = b"".join(transport.writes).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and sent == body


def test_pipelined_responses_are_answered_in_order() -> None:
    request = b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    transport = asyncio.run(_exchange(_app(), request))
    answers = b"".join(transport.writes).split(b"HTTP/1.1 200 OK\r\n")
    assert answers[0] == b"" and len(answers) == 3
    assert all(a.endswith(b"\r\n\r\nhello") for a in answers[1:])


def test_head_request_sends_the_head_alone() -> None:
    transport = asyncio.run(_exchange(_app(), b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    sent = b"".join(transport.writes)
    assert sent.startswith(b"HTTP/1.1 200 OK\r\n") and sent.endswith(b"\r\n\r\n") and b"hello" not in sent


def test_connection_close_writes_the_response_before_closing() -> None:
    transport = asyncio.run(_exchange(_app(), b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
    assert transport.closed
    assert b"".join(transport.writes).endswith(b"\r\n\r\nhello")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "no-length"])
def test_a_response_without_a_length_sends_its_head_at_once(stream: bool) -> None:
    """Server-sent events must show their headers before the first event, so nothing is held."""
    transport = asyncio.run(_exchange(_app(stream=stream, length=False), b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    assert transport.writes[0].endswith(b"\r\n\r\n") and b"transfer-encoding: chunked" in transport.writes[0]
    assert b"".join(transport.writes[1:]).startswith(b"3\r\none\r\n" if stream else b"5\r\nhello\r\n")


# --- the same on a real socket ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> Any:
    with serve_in_thread(Config(clock="manual")) as (url, _runtime):
        yield url


def _roundtrip(url: str, raw: bytes, until: bytes | None = None) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(raw)
        data = b""
        while until is None or until not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_served_pipelined_requests_get_complete_responses(server: str) -> None:
    one = b"GET /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH + b"\r\n"
    data = _roundtrip(server, one + one + one.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
    responses = data.split(b"HTTP/1.1 ")[1:]
    assert len(responses) == 3
    for response in responses:
        head, _, body = response.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert head.startswith(b"200 OK") and len(body) == length and body.startswith(b"{")


def test_served_head_has_a_length_and_no_body(server: str) -> None:
    data = _roundtrip(server, b"HEAD /_emulator/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 ") and body == b""


def test_served_event_stream_shows_its_headers_before_any_event(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GET /_emulator/ui/api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before the headers"
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and b"text/event-stream" in data


def test_accepted_connections_have_nagle_off() -> None:
    """uvicorn writes a response's head and body in two ``send()`` calls; with Nagle's algorithm on, the body
    waits for the client's delayed ACK of the head (40 ms on Linux), so every request to a server in a thread
    took ~44 ms (the pytest plugin's default mode ran the README's SDK test 10x slower than a subprocess,
    whose uvloop sets TCP_NODELAY itself). asyncio sets TCP_NODELAY on accepted sockets only when the
    listening socket says it is TCP (``proto``), which ``bind`` now does."""
    sock = bind("127.0.0.1", 0)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        seen: asyncio.Future[int] = loop.create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                seen.set_result(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP,
                                                                              socket.TCP_NODELAY))

        server = await loop.create_server(Probe, sock=sock)
        _reader, writer = await asyncio.open_connection(*sock.getsockname())
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) != 0
