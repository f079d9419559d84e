"""Command line (``together-rl-emulator`` = ``python -m emulator``).

- ``serve [--host H] [--port P] ...``: the emulator (``--port 0`` picks a free port).
- ``replay NAME|FILE [--port P]``: answer requests from a recording (shipped, by name, or a file).
- ``record --upstream URL --out FILE [--port P]``: a recording proxy.
- ``cluster --workers N [--state-dir DIR] [serve options]``: N shards behind HAProxy (one emulator for a
  team); ``cluster --print-config --shard-address HOST:PORT ...``: HAProxy's configuration for shards
  started elsewhere.
- ``coverage``: rewrite COVERAGE.md.

Every failure to start is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import sys
import warnings
from typing import Any

import emulator

PROG = "together-rl-emulator"


def _run(app: Any, host: str, port: int, banner: str, config: Any = None) -> int:
    import uvicorn

    from emulator.config import Config
    from emulator.http.server import bind, uvicorn_config

    try:
        sock = bind(host, port)
    except OSError as exc:
        print(f"emulator: cannot bind {host}:{port}: {exc.strerror or exc}; pick another port with --port "
              "(or `make serve PORT=...`), or 0 for a free one", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn_config(app, config or Config(log_level="warning")))
    _tune_gc()
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{bound_host}:{bound_port}"
    print(f"{banner} listening on {url}", flush=True)
    if banner == "Together RL emulator":
        print(f"  export TOGETHER_BASE_URL={url} TOGETHER_API_KEY=any-key    # Swagger UI: {url}/docs", flush=True)
    server.run(sockets=[sock])
    return 0


def _tune_gc() -> None:
    """Short garbage-collection pauses whatever the size of the store (BENCHMARKS.md).

    The store is a large, growing heap of long-lived objects, and every collection of an older
    generation traverses all of it: tens of milliseconds that every request in flight waits for. So
    what survives a young collection is frozen (moved out of the collector's view; reference counting
    still frees it when it is dropped), and young collections run often and stay small. Freezing keeps
    a reference cycle that is alive at that instant from ever being collected; the server creates about
    one such object per training loop and none on reads (measured), so the cost is negligible.
    """
    gc.collect()
    gc.freeze()  # what start-up built (modules, specs, validators)
    gc.set_threshold(YOUNG_GC_THRESHOLD, 10, 10)
    gc.callbacks.append(_freeze_survivors)


YOUNG_GC_THRESHOLD = 3000


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and info["generation"] == 0:
        gc.freeze()


def _serve(args: argparse.Namespace) -> int:
    from emulator.config import ConfigError, config_from_args
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    try:
        config = config_from_args(args)
        runtime = Runtime(config)
        app = build_server_app(runtime)
    except ConfigError as exc:
        print(f"emulator: {exc}", file=sys.stderr)
        return 2
    if config.defects:
        print(f"emulator: TEST ONLY defects injected: {', '.join(config.defects)}", file=sys.stderr, flush=True)
    return _run(app, config.host, config.port, "Together RL emulator", config)


def _replay(args: argparse.Namespace) -> int:
    from emulator import fixture_files
    from emulator.http.site import SiteGuard
    from emulator.tools.recording import ReplayApp, load_recording

    try:  # a shipped recording by name (fixtures/recordings/NAME.jsonl), or a path
        app = ReplayApp(load_recording(fixture_files.resolve("recordings", args.file)), SiteGuard(args.host))
    except (OSError, LookupError, ValueError) as exc:
        print(f"emulator replay: {exc}", file=sys.stderr)
        return 2
    code = _run(app, args.host, args.port, f"Replaying {args.file}")
    report = app.report()
    print(f"replay: answered {report['answered']} of {report['recorded']} recorded requests; "
          f"{report['unanswered_total']} request(s) had no recorded answer", file=sys.stderr)
    for line in report["unanswered"]:
        print(f"  unanswered: {line}", file=sys.stderr)
    if report["unanswered_total"] > len(report["unanswered"]):
        print(f"  ... and {report['unanswered_total'] - len(report['unanswered'])} more", file=sys.stderr)
    return 1 if report["unanswered"] and code == 0 else code


def _record(args: argparse.Namespace) -> int:
    from emulator.clock import Clock
    from emulator.tools.recording import ProxyApp, Recorder

    try:
        recorder = Recorder(args.out, Clock("system").now)
    except OSError as exc:
        print(f"emulator record: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    return _run(ProxyApp(args.upstream, recorder), args.host, args.port, f"Recording proxy to {args.upstream}")


def _cluster(args: argparse.Namespace, rest: list[str]) -> int:
    from emulator.tools import cluster

    return cluster.main(args, rest)


def _coverage(args: argparse.Namespace) -> int:
    from emulator.tools import coverage

    coverage.write()
    print(f"wrote {coverage.OUT}")
    return 0


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


def build_parser() -> argparse.ArgumentParser:
    from emulator.config import add_server_arguments

    parser = argparse.ArgumentParser(prog=PROG, description="Together AI RL / post-training API emulator")
    parser.add_argument("--version", action="version", version=f"{PROG} {emulator.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_server_arguments(sub.add_parser("serve", help="run the emulator"))
    replay = sub.add_parser("replay", help="answer requests from a JSONL recording")
    replay.add_argument("file", metavar="NAME|FILE",
                        help="a shipped recording by name (fixtures/recordings/NAME.jsonl) or a JSONL file")
    replay.add_argument("--host", default="127.0.0.1")
    replay.add_argument("--port", type=_port, default=8765)
    record = sub.add_parser("record", help="recording proxy in front of another implementation")
    record.add_argument("--upstream", required=True)
    record.add_argument("--out", required=True)
    record.add_argument("--host", default="127.0.0.1")
    record.add_argument("--port", type=_port, default=8765)
    from emulator.tools.cluster import add_arguments as add_cluster_arguments

    add_cluster_arguments(sub.add_parser(
        "cluster", allow_abbrev=False, help="N shards behind HAProxy: one emulator for a team (other options go to every shard's serve)",
        description="Start N shards (serve --shard I/N) and HAProxy in front, routing every tenant to its shard. "
                    "Options not listed here are passed to every shard's serve (e.g. --clock manual --seed 1)."))
    sub.add_parser("coverage", help="rewrite COVERAGE.md (spec operations versus handlers)")
    return parser


def main(argv: list[str] | None = None) -> int:
    # connexion imports starlette's TestClient, which warns about httpx on every start; not our concern.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "cluster":  # (what it does not know goes to each shard's serve)
        return _cluster(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    commands = {"serve": _serve, "replay": _replay, "record": _record, "coverage": _coverage}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
