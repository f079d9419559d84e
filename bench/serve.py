"""Run an ASGI app on uvicorn exactly as ``python -m emulator serve`` does (emulator/__main__.py):
a pre-bound loopback socket and the emulator's own uvicorn settings (``emulator.http.server``: its
connection guards, keep-alive, concurrency limit; uvloop and httptools when installed), one process.
Prints ``... listening on http://HOST:PORT`` first, like the emulator."""

from __future__ import annotations

import socket
from typing import Any


def serve(app: Any, host: str, port: int, banner: str) -> None:
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the bench binds loopback addresses only")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_host, bound_port = sock.getsockname()[:2]
    print(f"{banner} listening on http://{bound_host}:{bound_port}", flush=True)
    from emulator.config import Config
    from emulator.http.server import uvicorn_config

    server = uvicorn.Server(uvicorn_config(app, Config(log_level="warning")))
    server.run(sockets=[sock])
