"""The uvicorn server settings the emulator runs with, including the connection guards.

uvicorn closes idle keep-alive connections (``--keep-alive-timeout``) and answers 503 beyond
``--max-connections``, but waits forever for a client that opens a connection and then sends nothing
or sends its request a byte at a time (slowloris). :func:`guarded_protocol` adds the two missing
timers to uvicorn's httptools protocol: the request line and headers must arrive within
``--header-timeout`` seconds, and a body may not pause for longer than ``--body-timeout``; otherwise
the connection is closed. The same protocol writes each response with a declared length in one
``send()`` system call instead of uvicorn's two (head, then body); the bench's ceiling runs on it too.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

from emulator.config import Config


def guarded_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol] | str:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
    except ImportError:  # httptools missing: uvicorn's h11 protocol, without the two guards
        return "h11"

    cycle_class = _one_write_cycle(RequestResponseCycle)

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        # One timer per connection, re-armed only when it fires early: moving a deadline is an assignment,
        # not a new timer per request phase (three per request would cost more than the check itself).
        _deadline: float | None = None
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(header_timeout)  # the first request must start arriving

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm(header_timeout)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm(body_timeout)
            cycle = self.cycle
            if cycle is not None and type(cycle) is RequestResponseCycle:
                # uvicorn builds the cycle inline; its task has not run yet, so its send can still change.
                cycle.__class__ = cycle_class

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            self._arm(body_timeout)  # progress: the pause allowance starts again

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._deadline = None  # from here uvicorn's keep-alive timer takes over

        def connection_lost(self, exc: Exception | None) -> None:
            self._deadline = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _arm(self, seconds: float) -> None:
            self._deadline = self.loop.time() + seconds
            if self._timer is None:
                self._timer = self.loop.call_at(self._deadline, self._expire)

        def _expire(self) -> None:
            self._timer = None
            deadline = self._deadline
            if deadline is None or self.transport.is_closing():
                return
            if self.loop.time() < deadline:  # moved later since the timer was set
                self._timer = self.loop.call_at(deadline, self._expire)
                return
            self.transport.close()

    return GuardedHttpToolsProtocol


COPY_LIMIT = 1 << 16


class _Collect:
    """Stands in for the transport while uvicorn renders a response's status line and headers."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)


class _HeadThenBody:
    """Stands in for the transport while uvicorn writes a response's body: the held status line and
    headers go out in front of the first body bytes, or on their own before a close."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport = transport
        self.head: bytes | None = head

    def write(self, data: bytes) -> None:
        head = self.head
        if head is not None:
            self.head = None
            if len(data) > COPY_LIMIT:  # a large body: two writes cost less than copying it
                self.transport.write(head)
            else:
                data = head + data
        self.transport.write(data)

    def flush(self) -> None:
        if self.head is not None:
            self.transport.write(self.head)
            self.head = None

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return bool(self.transport.is_closing())


def _one_write_cycle(base: type) -> type:
    class OneWriteCycle(base):  # type: ignore[misc, valid-type]
        """uvicorn's request cycle, writing a response with a declared length in one ``send()`` call
        instead of two: its headers wait for the first body message. Responses without a length
        (streams, server-sent events) keep uvicorn's behaviour, so their headers leave at once."""

        _held: _HeadThenBody | None = None
        transport: Any  # the real one, or a stand-in during a send

        async def send(self, message: Any) -> None:
            # The stand-ins are swapped in only around a send that cannot suspend (uvicorn awaits just
            # for flow control, i.e. when writing is paused), so no other code ever sees them.
            held = self._held
            transport = self.transport
            if held is not None:
                if self.flow.write_paused or self.disconnected:
                    self._held = None
                    if not self.disconnected:
                        held.flush()
                    return await super().send(message)
                self.transport = held
                try:
                    await super().send(message)
                finally:
                    self.transport = transport
                if held.head is None or self.response_complete:
                    self._held = None
                    held.flush()  # HEAD: the body wrote nothing
                return
            if (message["type"] != "http.response.start" or self.response_started or self.flow.write_paused
                    or not any(name.lower() == b"content-length" for name, _ in message.get("headers", ()))):
                return await super().send(message)
            self.transport = collect = _Collect()
            try:
                await super().send(message)
            finally:
                self.transport = transport
            if collect.parts:
                self._held = _HeadThenBody(transport, b"".join(collect.parts))

    return OneWriteCycle


def uvicorn_config(app: Any, config: Config, loop: str = "auto") -> uvicorn.Config:
    return uvicorn.Config(app, log_level=config.log_level, access_log=False, lifespan="on", loop=loop,
                          timeout_keep_alive=config.keep_alive_timeout,  # type: ignore[arg-type]
                          limit_concurrency=config.max_connections,
                          http=guarded_protocol(config.header_timeout, config.body_timeout))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, so connections are accepted from the moment the URL is printed."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock
