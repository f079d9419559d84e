"""Ending the dashboard's event streams when the server stops (Ctrl+C, SIGTERM).

uvicorn's graceful shutdown waits for open responses, and an event stream is open by design. Once
:meth:`EndStreamsOnStop.stop` is called, each open stream's ``receive`` answers ``http.disconnect``, as if its
tab had closed; the stream returns and the wrapper ends the chunked response properly.
"""

from __future__ import annotations

import asyncio
from typing import Any

from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send

STREAM_SUFFIX = "/api/stream"  # the dashboard's server-sent events (/_emulator/ui/api/stream)


class EndStreamsOnStop:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._stopping: asyncio.Event | None = None
        self.stopped = False

    def stop(self) -> None:
        """Ask every open stream to end; call it on the server's event loop thread (a signal handler is)."""
        self.stopped = True
        if self._stopping is not None:
            self._stopping.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(STREAM_SUFFIX):
            await self.app(scope, receive, send)
            return
        if self._stopping is None:
            self._stopping = asyncio.Event()
            if self.stopped:
                self._stopping.set()
        stopping = self._stopping
        state = {"started": False, "complete": False}

        async def receive_or_stop() -> Message:
            if stopping.is_set():
                return {"type": "http.disconnect"}
            got, stop = asyncio.ensure_future(receive()), asyncio.ensure_future(stopping.wait())
            await asyncio.wait({got, stop}, return_when=asyncio.FIRST_COMPLETED)
            if got.done():
                stop.cancel()
                return got.result()
            got.cancel()
            return {"type": "http.disconnect"}

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        await self.app(scope, receive_or_stop, tracking_send)
        if stopping.is_set() and state["started"] and not state["complete"]:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def wrap(app: Any) -> EndStreamsOnStop:
    return EndStreamsOnStop(app)
