"""The dashboard's live feed: server-sent events for one tenant, or for all of them.

Nothing runs in the background, so the stream itself reads: every tick it settles the timeline to now (in
system mode this is what turns PENDING to READY on screen) and sends ``log``, ``clock``, ``faults`` and
``tenant`` events for what changed. A stream ends after ``STREAM_SECONDS`` and the browser reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from emulator.ui import views

if TYPE_CHECKING:
    from emulator.runtime import Runtime

TICK_SECONDS = 0.5      # how often the stream settles and looks for changes
STREAM_SECONDS = 10.0   # then the browser reconnects, resuming from Last-Event-ID
RETRY_MS = 500
LOG_BATCH = 200         # the page lists the newest 200 events; older ones in one tick are skipped
MAX_STREAMS = 32        # open at once (--max-event-streams): a page opens one


class Settler:
    """Settles a tenant, or all of them, for the streams, at most once per ``interval`` (real seconds)
    each: two hundred streams on one tenant settle it twice a second, not four hundred times."""

    def __init__(self, runtime: Runtime, interval: float) -> None:
        self.runtime = runtime
        self.interval = interval
        self._last: dict[str | None, float] = {}  # project (None: all) -> when it was last settled

    def settle(self, project: str | None) -> None:
        now = time.monotonic()  # a rate limit, not a reading of virtual time
        last = self._last.get(project)
        if last is not None and now - last < self.interval * 0.9:
            return
        if len(self._last) > 4 * MAX_STREAMS:  # projects of streams long closed
            self._last.clear()
        self._last[project] = now
        self.runtime.settle(project)


def sse(event: str, data: Any, seq: int) -> bytes:
    # orjson never emits a newline, so one data: line carries the whole document.
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event.encode(), orjson.dumps(data))


async def run(runtime: Runtime, receive: Any, send: Any, project: str | None, since: int, *,
              tick_seconds: float = TICK_SECONDS, stream_seconds: float = STREAM_SECONDS,
              settle: Callable[[str | None], None] | None = None) -> None:
    if project is not None:
        views.tenant_exists(runtime, project)  # 404 before the response starts
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.create_task(watch())
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
                            (b"x-accel-buffering", b"no")]})
    seq, exists = since, True
    last_clock: Any = None
    last_faults: Any = None
    try:
        await send({"type": "http.response.body", "body": b"retry: %d\n\n" % RETRY_MS, "more_body": True})
        for _ in range(max(1, round(stream_seconds / tick_seconds))):
            chunks: list[bytes] = []
            now_exists = project is None or project in runtime.projects()
            if now_exists != exists:
                exists = now_exists
                chunks.append(sse("tenant", {"exists": exists}, seq))
            if exists:
                if settle is not None:
                    settle(project)
                else:
                    runtime.settle(project)
            new = runtime.store.events.since(seq, project, views.EVENT_SCAN)
            if new:
                last = new[-1]["seq"]
                assert isinstance(last, int)  # (the log numbers its events)
                seq = last
                chunks.append(sse("log", new[-LOG_BATCH:], seq))
            clock = runtime.clocks.describe(project)
            if clock != last_clock:
                last_clock = clock
                chunks.append(sse("clock", clock, seq))
            faults = runtime.faults.describe()
            if faults != last_faults:
                last_faults = faults
                chunks.append(sse("faults", faults, seq))
            if chunks:
                await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), tick_seconds)
            if gone.is_set():
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        watcher.cancel()

