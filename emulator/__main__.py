"""Command line: ``python -m emulator serve [--host H] [--port P] ...``."""

from __future__ import annotations

import argparse
import socket
import sys

from emulator.config import ConfigError, add_server_arguments, config_from_args


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from emulator.app import build_app
    from emulator.runtime import Runtime

    try:
        config = config_from_args(args)
        runtime = Runtime(config)
        app = build_app(runtime=runtime)
    except ConfigError as exc:
        print(f"emulator: {exc}", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as exc:
        print(f"emulator: cannot bind {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    print(f"Together RL emulator listening on {url}", flush=True)
    print(f"  export TOGETHER_BASE_URL={url} TOGETHER_API_KEY=any-key   # docs: {url}/docs", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=config.log_level, access_log=False, lifespan="on"))
    server.run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator", description="Together AI RL API emulator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the emulator")
    add_server_arguments(serve)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
