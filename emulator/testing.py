"""Run an emulator inside this process on a free loopback port (for tests and tools)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import uvicorn

from emulator.app import build_app
from emulator.config import Config
from emulator.runtime import Runtime


@contextmanager
def serve_in_thread(config: Config | None = None) -> Iterator[tuple[str, Runtime]]:
    config = replace(config or Config(), host="127.0.0.1", port=0)
    runtime = Runtime(config)
    app = build_app(runtime=runtime)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("emulator did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", runtime
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
