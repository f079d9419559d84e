"""The ceiling: a bare Starlette app that answers each emulator route with a fixed body.

``python -m bench.ceiling --bodies FILE [--port 0]``. FILE maps a route key (see ``ROUTES``) to the
exact bytes the emulator answered for it during the same bench run, so the ceiling sends bodies of
the same size and content (the loop scenario's scripts follow the ids in them). POST handlers read
the request body, as any server must; nothing is parsed, validated or stored. This is the best a
Python ASGI app can do here: the limit the emulator is measured against.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

# route key -> (method, Starlette path)
ROUTES: dict[str, tuple[str, str]] = {
    "create_resource": ("POST", "/v1/rl/model-resources"),
    "get_resource": ("GET", "/v1/rl/model-resources/{rid}"),
    "create_session": ("POST", "/v1/rl/training-sessions"),
    "list_sessions": ("GET", "/v1/rl/training-sessions"),
    "get_session": ("GET", "/v1/rl/training-sessions/{sid}"),
    "create_fb": ("POST", "/v1/rl/training-sessions/{sid}/operations/forward-backward"),
    "get_fb": ("GET", "/v1/rl/training-sessions/{sid}/operations/forward-backward/{oid}"),
    "create_optim": ("POST", "/v1/rl/training-sessions/{sid}/operations/optim-step"),
    "get_optim": ("GET", "/v1/rl/training-sessions/{sid}/operations/optim-step/{oid}"),
    "health": ("GET", "/_emulator/health"),
}


def build_app(bodies: dict[str, str]) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    def endpoint(body: bytes, method: str) -> Any:
        if method == "POST":

            async def post(request: Request) -> Response:
                await request.body()
                return Response(body, media_type="application/json")

            return post

        async def get(request: Request) -> Response:
            return Response(body, media_type="application/json")

        return get

    all_bodies = {"health": '{"status":"ok"}', **bodies}
    routes = [
        Route(path, endpoint(all_bodies[key].encode(), method), methods=[method])
        for key, (method, path) in ROUTES.items()
        if key in all_bodies
    ]
    return Starlette(routes=routes)


def main(argv: list[str] | None = None) -> int:
    from bench.serve import serve

    parser = argparse.ArgumentParser(prog="python -m bench.ceiling")
    parser.add_argument("--bodies", required=True, help="JSON file: route key -> response body text")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with open(args.bodies) as fh:
        bodies = json.load(fh)
    serve(build_app(bodies), args.host, args.port, "Bench ceiling (bare Starlette)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
