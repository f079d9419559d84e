"""Run an emulator inside this process on a free loopback port (for tests and tools)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import uvicorn

from emulator.config import Config
from emulator.http.server import bind, uvicorn_config
from emulator.runtime import Runtime
from emulator.tools.server import build_server_app


@contextmanager
def serve_in_thread(config: Config | None = None) -> Iterator[tuple[str, Runtime]]:
    config = replace(config or Config(), host="127.0.0.1", port=0)
    runtime = Runtime(config)
    with serve_app(build_server_app(runtime), config) as url:
        yield url, runtime


@contextmanager
def serve_app(app: Any, config: Config | None = None) -> Iterator[str]:
    """Serve any ASGI app on a free loopback port in a background thread."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    # asyncio, not uvloop: several servers start and stop in one test process.
    server = uvicorn.Server(uvicorn_config(app, config or Config(), loop="asyncio"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("emulator did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
