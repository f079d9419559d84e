"""Command line.

- ``python -m emulator serve [--host H] [--port P] ...``: the emulator (``--port 0`` picks a free port).
- ``python -m emulator replay FILE [--port P]``: answer requests from a recording.
- ``python -m emulator record --upstream URL --out FILE [--port P]``: a recording proxy.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # accept connections from the moment the URL is printed (uvicorn picks them up)
    return sock


def _run(app: Any, host: str, port: int, log_level: str, banner: str) -> int:
    import uvicorn

    try:
        sock = _bind(host, port)
    except OSError as exc:
        print(f"emulator: cannot bind {host}:{port}: {exc}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on"))
    _tune_gc()
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{bound_host}:{bound_port}"
    print(f"{banner} listening on {url}", flush=True)
    if banner == "Together RL emulator":
        print(f"  export TOGETHER_BASE_URL={url} TOGETHER_API_KEY=any-key    # Swagger UI: {url}/docs", flush=True)
    server.run(sockets=[sock])
    return 0


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections: the store holds many long-lived objects, and the default
    thresholds make full collections over all of them show up as latency spikes (BENCHMARKS.md)."""
    import gc

    gc.collect()
    gc.freeze()  # what start-up built (modules, specs, validators) is never collected
    gc.set_threshold(50_000, 20, 100)


def _serve(args: argparse.Namespace) -> int:
    from emulator.app import build_server_app
    from emulator.config import ConfigError, config_from_args
    from emulator.runtime import Runtime

    try:
        config = config_from_args(args)
        runtime = Runtime(config)
        app = build_server_app(runtime)
    except ConfigError as exc:
        print(f"emulator: {exc}", file=sys.stderr)
        return 2
    if config.defects:
        print(f"emulator: TEST ONLY defects injected: {', '.join(config.defects)}", file=sys.stderr, flush=True)
    return _run(app, config.host, config.port, config.log_level, "Together RL emulator")


def _replay(args: argparse.Namespace) -> int:
    from emulator.recording import ReplayApp, load_recording

    try:
        app = ReplayApp(load_recording(args.file))
    except (OSError, ValueError) as exc:
        print(f"emulator replay: {exc}", file=sys.stderr)
        return 2
    code = _run(app, args.host, args.port, "warning", f"Replaying {args.file}")
    report = app.report()
    print(f"replay: answered {report['answered']} of {report['recorded']} recorded requests; "
          f"{len(report['unanswered'])} request(s) had no recorded answer", file=sys.stderr)
    for line in report["unanswered"]:
        print(f"  unanswered: {line}", file=sys.stderr)
    return 1 if report["unanswered"] and code == 0 else code


def _record(args: argparse.Namespace) -> int:
    from emulator.recording import ProxyApp, Recorder

    return _run(ProxyApp(args.upstream, Recorder(args.out, _wall_clock())), args.host, args.port, "warning",
                f"Recording proxy to {args.upstream}")


def _wall_clock() -> Any:
    from emulator.clock import Clock

    return Clock("system").now


def main(argv: list[str] | None = None) -> int:
    import warnings

    # connexion imports starlette's TestClient, which warns about httpx on every start; not our concern.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from emulator.config import add_server_arguments

    parser = argparse.ArgumentParser(prog="python -m emulator", description="Together AI RL API emulator")
    sub = parser.add_subparsers(dest="command", required=True)
    add_server_arguments(sub.add_parser("serve", help="run the emulator"))
    replay = sub.add_parser("replay", help="answer requests from a JSONL recording")
    replay.add_argument("file")
    replay.add_argument("--host", default="127.0.0.1")
    replay.add_argument("--port", type=int, default=8765)
    record = sub.add_parser("record", help="recording proxy in front of another implementation")
    record.add_argument("--upstream", required=True)
    record.add_argument("--out", required=True)
    record.add_argument("--host", default="127.0.0.1")
    record.add_argument("--port", type=int, default=8765)
    sub.add_parser("coverage", help="rewrite COVERAGE.md (spec operations versus handlers)")
    args = parser.parse_args(argv)
    return {"serve": _serve, "replay": _replay, "record": _record, "coverage": _coverage}[args.command](args)


def _coverage(args: argparse.Namespace) -> int:
    from emulator import coverage

    coverage.write()
    print(f"wrote {coverage.OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
