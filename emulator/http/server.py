"""The uvicorn server settings the emulator runs with, including the connection guards.

:func:`guarded_protocol` adds to uvicorn's httptools protocol what it lacks against slow or hostile clients:
header, body, request and send timeouts (408 or a dropped connection) and a header size bound (431).
Private internals of uvicorn 0.55.0, kept for these protections (no public hook), not for speed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

from emulator.config import Config
from emulator.http.envelope import render_error

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_SEND_TIMEOUT = 30.0
DEFAULT_REQUEST_TIMEOUT = 120.0


class _HeadersTooLarge(Exception):
    """Raised inside the parser's callback: httptools stops parsing and uvicorn answers, through
    ``send_400_response``, which turns it into a 431."""


def guarded_protocol(header_timeout: float, body_timeout: float, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                     send_timeout: float = DEFAULT_SEND_TIMEOUT, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
                     ) -> type[asyncio.Protocol] | str:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools missing: uvicorn's h11 protocol, without the guards
        return "h11"

    too_large = render_error(431, f"the request line and headers are larger than {max_header_bytes} bytes",
                             code="headers_too_large")
    late = render_error(408, f"the request did not arrive whole in time: within {request_timeout:g} s (--request-"
                             f"timeout), its headers within {header_timeout:g} s and no pause in its body over "
                             f"{body_timeout:g} s", code="request_timeout")
    late_response = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (len(late), late))

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        # One timer per connection, re-armed only when it fires early: moving a deadline is an assignment,
        # not a new timer per request phase (three per request would cost more than the check itself).
        _deadline: float | None = None
        _request_deadline: float | None = None  # while a request is arriving: when it must be whole
        _in_body = False                        # its headers are in, its body is arriving
        _timer: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _headers_too_large = False
        _send_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(header_timeout)  # the first request must start arriving

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._header_bytes = 0
            self._request_deadline = self.loop.time() + request_timeout
            self._in_body = False
            self._arm(header_timeout)

        def on_url(self, url: bytes) -> None:
            self._count_header_bytes(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_header_bytes(len(name) + len(value) + 4)  # ": " and CRLF, as sent
            super().on_header(name, value)

        def _count_header_bytes(self, n: int) -> None:
            # The parser hands over a long header in pieces as they arrive: counting them refuses a huge
            # header before it is ever joined, let alone kept (e.g. as a cached bearer token).
            self._header_bytes += n
            if self._header_bytes > max_header_bytes:
                self._headers_too_large = True
                raise _HeadersTooLarge

        def send_400_response(self, msg: str) -> None:
            if not self._headers_too_large:
                super().send_400_response(msg)
                return
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(too_large), too_large))
            self.transport.close()

        def pause_writing(self) -> None:
            # The client has stopped reading (the socket buffers are full): it has send_timeout to go on.
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(send_timeout, self._send_expired)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _send_expired(self) -> None:
            self._send_timer = None
            if self.flow.write_paused:
                # abort, not close: close keeps the unsent answer in memory until it is read. (The answer may
                # already be closing: once it is all buffered the app is done, and the keep-alive timer
                # closes the connection, which then waits for ever for the buffer to drain.)
                self.transport.abort()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._in_body = True
            self._arm(body_timeout)

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            self._arm(body_timeout)  # progress: the pause allowance starts again

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._deadline = self._request_deadline = None  # from here uvicorn's keep-alive timer takes over
            self._in_body = False

        def connection_lost(self, exc: Exception | None) -> None:
            self._deadline = self._request_deadline = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None
            super().connection_lost(exc)

        def _arm(self, seconds: float) -> None:
            deadline = self.loop.time() + seconds
            if self._request_deadline is not None and self._request_deadline < deadline:
                deadline = self._request_deadline
            self._deadline = deadline
            timer = self._timer
            if timer is None or timer.when() > deadline:  # (a request's deadline may come before a phase's)
                if timer is not None:
                    timer.cancel()
                self._timer = self.loop.call_at(deadline, self._expire)

        def _expire(self) -> None:
            self._timer = None
            deadline = self._deadline
            if deadline is None or self.transport.is_closing():
                return
            if self.loop.time() < deadline:  # moved later since the timer was set
                self._timer = self.loop.call_at(deadline, self._expire)
                return
            if self._request_deadline is not None:
                self._answer_late()
            self.transport.close()

        def _answer_late(self) -> None:
            # A request has begun and is not whole: 408, unless this connection already carries an answer
            # (the app answered this request early, or an earlier pipelined answer is still being written),
            # which a 408 would follow or corrupt: then the connection is only closed.
            cycle = self.cycle
            if self.pipeline:
                return
            if self._in_body:  # (cycle is this request's)
                if cycle.response_started:
                    return
                # The app may be waiting for the rest of the body: it now reads a disconnect (nothing of the
                # request is kept), and whatever it would answer is dropped.
                cycle.disconnected = True
                cycle.message_event.set()
            elif cycle is not None and not cycle.response_complete:
                return
            self.transport.write(late_response)

    return GuardedHttpToolsProtocol


#: Seconds a stopping server (Ctrl+C) waits for open responses before cancelling them: a dashboard stream
#: would otherwise hold it until the stream's own end (emulator/ui/stream.py), ~10 s.
SHUTDOWN_GRACE_SECONDS = 0.5


def uvicorn_config(app: Any, config: Config, loop: str = "auto") -> uvicorn.Config:
    return uvicorn.Config(app, log_level=config.log_level, access_log=False, lifespan="on", loop=loop,
                          timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,  # type: ignore[arg-type]
                          timeout_keep_alive=config.keep_alive_timeout,  # type: ignore[arg-type]
                          limit_concurrency=config.max_connections,
                          http=guarded_protocol(config.header_timeout, config.body_timeout, config.max_header_bytes,
                                                config.send_timeout, config.request_timeout))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, so connections are accepted from the moment the URL is printed. Made with
    ``IPPROTO_TCP`` named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on accepted sockets that
    say so, and with it on, each response's body (uvicorn's second ``send()``) waited ~40 ms for the
    client's delayed ACK of its head (uvloop sets TCP_NODELAY whatever the socket says)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock
