"""The uvicorn server settings the emulator runs with, including the connection guards.

uvicorn closes idle keep-alive connections (``--keep-alive-timeout``) and answers 503 beyond
``--max-connections``, but waits forever for a client that opens a connection and then sends nothing
or sends its request a byte at a time (slowloris). :func:`guarded_protocol` adds the two missing
timers to uvicorn's httptools protocol: the request line and headers must arrive within
``--header-timeout`` seconds, and a body may not pause for longer than ``--body-timeout``; otherwise
the connection is closed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

from emulator.config import Config


def guarded_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol] | str:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools missing: uvicorn's h11 protocol, without the two guards
        return "h11"

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
