"""Command line (``together-rl-emulator`` = ``python -m emulator``) and its subcommands.

Emulates nothing of the real API. The bare command prints the help (exit 0); a usage error or failure to start
prints the subcommand's usage and one sentence (exit 2), never a traceback; every line starts
``together-rl-emulator: ``. Ctrl+C stops a server within a second. Each subcommand's help is its argparse text.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import emulator

PROG = "together-rl-emulator"
PREFIX = f"{PROG}: "   # the one prefix of every error and status line, whatever the subcommand


def _say(message: str) -> None:
    """One line on stderr, under the command's one prefix (errors and what the server does)."""
    print(f"{PREFIX}{message}", file=sys.stderr, flush=True)


def _bind(host: str, port: int) -> Any:
    """The listening socket, or None once the reason is said in one sentence."""
    from emulator.http.server import bind

    try:
        return bind(host, port)
    except OSError as exc:
        _say(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another port with --port (or "
             "`make serve PORT=...`), or 0 for a free one")
        return None


def _run(app: Any, sock: Any, banner: Callable[[str], list[str]], config: Any = None) -> int:
    from emulator.config import Config
    from emulator.http.server import uvicorn_config
    from emulator.http.shutdown import EndStreamsOnStop

    app = EndStreamsOnStop(app)
    server = _Server(uvicorn_config(app, config or Config(log_level="warning")), app)
    _tune_gc()
    bound_host, bound_port = sock.getsockname()[:2]
    # uvicorn raises the signal it caught again once it has stopped: SIGINT is a KeyboardInterrupt, and
    # SIGTERM, whose default action would end the process before it says so, becomes one too. Both are
    # caught from before the banner: a client that signals as soon as it reads the banner lands before
    # uvicorn has its own handlers, and must get the same quiet stop, not a traceback.
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        for line in banner(f"http://{bound_host}:{bound_port}"):
            print(line, flush=True)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    if server.stopping or interrupted:
        _say("stopped")
    return 0


def _listening(what: str) -> Callable[[str], list[str]]:
    return lambda url: [f"{what} listening on {url}"]


def _interrupt(sig: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _Server(config: Any, app: Any) -> Any:  # noqa: N802 (a class, built on first use: uvicorn loads with the server)
    import uvicorn

    from emulator.http.server import SHUTDOWN_GRACE_SECONDS

    class Server(uvicorn.Server):
        """uvicorn's server, saying what it does when asked to stop (Ctrl+C, SIGTERM)."""

        stopping = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.stopping:
                self.stopping = True
                open_now = len(self.server_state.connections)
                lead = "\n" if sig == signal.SIGINT else ""  # past the terminal's ^C
                print(f"{lead}{PREFIX}stopping ({signal.Signals(sig).name}): closing {open_now} open "
                      f"connection(s); dashboard streams end now, other open responses are cut off after "
                      f"{SHUTDOWN_GRACE_SECONDS:g} s", file=sys.stderr, flush=True)
                app.stop()  # dashboard streams end now, as if their tabs had closed
            super().handle_exit(sig, frame)

    return Server(config)


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
    from emulator.config import ConfigError, blame, check_state_path, config_from_args
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    try:
        config = config_from_args(args)
        check_state_path(config.state_file)
        runtime = Runtime(config)
        app = build_server_app(runtime)
    except ConfigError as exc:
        _say(blame(str(exc), args))
        return 2
    if config.defects:
        _say(f"TEST ONLY defects injected: {', '.join(config.defects)}")
    sock = _bind(config.host, config.port)
    if sock is None:
        return 2
    return _run(app, sock, lambda url: serve_banner(runtime, url), config)


def serve_banner(runtime: Any, url: str) -> list[str]:
    """What ``serve`` prints once it listens: an API key that works in this mode (a scenario's tenant, a key
    of the tokens file, or any key), the clock that key's tenant reads, the seed, and the files it writes."""
    from emulator.clock import rfc3339
    from emulator.tools.server import working_key

    config = runtime.config
    key, whose = working_key(config)
    lines = [f"Together RL emulator listening on {url}",
             f"  export TOGETHER_BASE_URL={url} TOGETHER_API_KEY={key}    # Swagger UI: {url}/docs"]
    if whose:
        lines.append(f"  {key}: {whose}")
    principal = runtime.principal_for(key)
    clock = runtime.clocks.clock_for(principal.project if principal else None)
    if clock.mode == "system":
        moves = "real time" if clock.speed == 1 else f"{clock.speed:g}x real time"
    else:
        moves = (f"at {rfc3339(clock.now())}, moved by POST /_emulator/clock/advance"
                 + (" or by what a client waits for" if clock.mode == "auto" else ""))
    lines.append(f"  clock: {clock.mode} ({moves}); seed {config.seed}")
    if config.state_file:
        lines.append(f"  state kept in {config.state_file} (--state-file)")
    if config.record_file:
        lines.append(f"  recording every exchange to {config.record_file} (--record"
                     + (" --record-canonical)" if config.record_canonical else ")"))
    lines.append(f"  dashboard: {url}/_emulator/ui    Ctrl+C stops")
    return lines


def _replay(args: argparse.Namespace) -> int:
    from emulator import fixture_files
    from emulator.config import Config
    from emulator.http.site import SiteGuard
    from emulator.tools.recording import load_recording
    from emulator.tools.replay import ReplayApp

    if not Config(host=args.host).is_loopback and not args.admin_token:
        _say(f"replay --host {args.host} is not loopback: set --admin-token for the control calls")
        return 2
    try:  # a shipped recording by name (fixtures/recordings/NAME.jsonl), or a path
        app = ReplayApp(load_recording(fixture_files.resolve("recordings", args.file)), SiteGuard(args.host),
                        loop=args.loop, pace=args.pace, admin_token=args.admin_token, match=args.match)
    except (OSError, LookupError, ValueError) as exc:
        _say(f"replay: {exc}")
        return 2
    sock = _bind(args.host, args.port)
    if sock is None:  # nothing was served: no report of what was answered
        return 2
    code = _run(app, sock, _listening(f"Replaying {args.file}"))
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
    from emulator.http.site import SiteGuard
    from emulator.tools.proxy import ProxyApp, UpstreamError, check_upstream
    from emulator.tools.recording import Recorder

    try:
        upstream = check_upstream(args.upstream)
    except UpstreamError as exc:
        _say(f"record: {exc}")
        return 2
    sock = _bind(args.host, args.port)
    if sock is None:
        return 2
    try:
        recorder = Recorder(args.out, Clock("system").now)
    except OSError as exc:
        sock.close()
        _say(f"record --out {args.out}: cannot write it ({exc.strerror or exc})")
        return 2
    proxy = ProxyApp(upstream, recorder, SiteGuard(args.host), timeout=args.upstream_timeout)
    try:
        return _run(proxy, sock, _listening(f"Recording proxy to {upstream}"))
    finally:
        recorder.close()
        print(f"record: {recorder.exchanges} exchange(s) written to {args.out}", file=sys.stderr)


def _parity(args: argparse.Namespace) -> int:
    from emulator import fixture_files
    from emulator.tools import parity, parity_report
    from emulator.tools.parity_diff import RULES
    from emulator.tools.recording import load_recording

    if args.rules:
        print("What is compared, and how (first rule that fits):")
        for rule in RULES:
            print(f"  {rule.name}: {rule.applies_to} -> {rule.compared_by}")
        print("Allowed differences (shipped):")
        for allowance in parity.ALLOW_LIST:
            print(f"  {allowance.operation} {allowance.field}: {allowance.reason}")
        return 0
    if args.recording is None:
        _say("parity: name a recording (a shipped one by name, or a JSONL file), or pass --rules")
        return 2
    try:
        path = fixture_files.resolve("parity", args.recording)
        entries = load_recording(path)
        allow = [a for f in args.allow for a in parity.load_allowances(f)]
        report = parity.run(entries, args.recording, base_url=args.base_url, admin_token=args.admin_token,
                            profile=args.profile, allow=allow, replay_it=not args.spec_only)
    except (OSError, LookupError, ValueError, parity.ParityError) as exc:
        _say(f"parity: {exc}")
        return 2
    written = parity_report.write(report, Path(args.report))
    ok = parity_report.faithful(report)
    print(f"parity: {args.recording}: {report.exchanges} exchanges; contract: {report.verdicts.judged} judged, "
          f"{len(report.drift)} finding(s) of spec drift; emulator: "
          + (f"{report.compared} compared, {len(report.failing)} difference(s) "
             f"({len(report.differences) - len(report.failing)} allowed)" if report.replayed else "not replayed"))
    for f in report.drift[:20]:
        print(f"  drift  {f.request}  {f.operation} {f.check} {f.field}: {f.message}")
    for d in report.failing[:20]:
        print(f"  differs  {d.request}  {d.operation} {d.field} ({d.rule}): recorded {d.recorded}, emulator "
              f"{d.emulator}")
    more = max(len(report.drift) - 20, 0) + max(len(report.failing) - 20, 0)
    if more:
        print(f"  ... and {more} more in the report")
    print(f"verdict: {'FAITHFUL' if ok else 'DIFFERS'}; report: {written[1]} ({written[0].name}, {written[2].name})")
    return 0 if ok else 1


def _cluster(args: argparse.Namespace, rest: list[str]) -> int:
    from emulator.tools import cluster

    return cluster.main(args, rest)


def _examples(args: argparse.Namespace) -> int:
    from emulator import example_files

    names = example_files.names()
    if args.copy is None:
        width = max(len(n) for n in names)
        print("Example clients (the official SDK against the emulator; they need `pip install "
              "'together[tinker]==3.1.1'`):")
        for name in names:
            print(f"  {name:<{width}}  {example_files.summary(name)}")
        print(f"Copy them out with `{PROG} examples --copy DIR`, start `{PROG} serve`, then run "
              "`python DIR/NAME.py` (README.md in DIR says more).")
        return 0
    target = Path(args.copy)
    try:
        written = example_files.copy_to(target)
    except FileExistsError as exc:  # nothing is overwritten
        _say(f"examples --copy: {exc}")
        return 2
    except OSError as exc:
        _say(f"examples --copy {target}: cannot write there ({exc.strerror or exc}); name a directory you can "
             "write to (it is created if missing)")
        return 2
    print(f"copied {len(written)} files to {target}: {', '.join(p.name for p in written)}")
    return 0


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1_000_000:
        raise argparse.ArgumentTypeError("SPEED must be > 0 and at most 1000000")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("SECONDS must be > 0 and at most 86400")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with every usage error one sentence after the usage of the (sub)command concerned."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PREFIX}{message.rstrip('.')}. Try `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    from emulator.config import add_server_arguments, port_argument

    parser = _Parser(prog=PROG, description="Together AI RL / post-training API emulator: serve it, replay or "
                     "record a session, or copy the example clients.")
    parser.add_argument("--version", action="version", version=f"{PROG} {emulator.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser("serve", help="run the emulator (every option also reads EMULATOR_<NAME>)",
                           description="Run the emulator. Every option also reads an EMULATOR_* variable "
                           "(named in brackets); a flag wins over its variable.")
    add_server_arguments(serve)
    replay = sub.add_parser("replay", help="answer requests from a recording (a shipped demo or a JSONL file)",
                            description="Answer each request with the first unused recorded exchange of the same "
                            "method, path, query and (--match strict) body; a request with no recorded answer gets 404 "
                            "no_recorded_answer and is listed at GET /_emulator/replay and on stderr.")
    replay.add_argument("file", metavar="NAME|FILE",
                        help="a shipped recording by name (fixtures/recordings/NAME.jsonl) or a JSONL file")
    replay.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    replay.add_argument("--port", type=port_argument, default=8765,
                        help="TCP port (default 8765); 0 picks a free port and prints the URL")
    replay.add_argument("--loop", action="store_true",
                        help="start over by itself when a request was only recorded already answered "
                             "(so the same client can run again); POST /_emulator/replay/rewind does it by hand")
    replay.add_argument("--pace", type=_speed, metavar="SPEED", default=None,
                        help="answer no earlier than the recorded times, at SPEED times real time (1: as recorded)")
    replay.add_argument("--admin-token", default=None,
                        help="required on /_emulator/* (mandatory when --host is not loopback)")
    replay.add_argument("--match", choices=("strict", "loose"), default="strict",
                        help="strict (default): the body must match too, ids, times and URLs normalized; "
                             "loose: method, path and query only (answers any client)")
    record = sub.add_parser("record", help="a recording proxy in front of another implementation",
                            description="Forward every request to --upstream and write each exchange to --out "
                            "(JSONL, secrets redacted, readable by its owner only), for replay later.")
    record.add_argument("--upstream", required=True, metavar="URL",
                        help="the implementation to forward to, e.g. https://api.together.ai")
    record.add_argument("--out", required=True, metavar="FILE", help="the JSONL recording to write")
    record.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    record.add_argument("--port", type=port_argument, default=8765,
                        help="TCP port (default 8765); 0 picks a free port and prints the URL")
    record.add_argument("--upstream-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                        help="how long the upstream may take to answer before the proxy answers 504 (default 120)")
    parity = sub.add_parser("parity", help="judge a recording: the contract on it, and the emulator against it",
                            description="Check every exchange of a recording against openapi.yaml (spec drift, per "
                            "operation), then replay its requests in order against a fresh emulator on a manual "
                            "clock that follows the recorded pacing, and compare each pair of answers after "
                            "normalization (--rules prints the table). Exit 0 only when nothing differs beyond the "
                            "allow-list.")
    parity.add_argument("recording", metavar="NAME|FILE", nargs="?",
                        help="a shipped parity recording by name (fixtures/parity/NAME.jsonl) or a JSONL file, such "
                             "as `record --upstream` writes")
    parity.add_argument("--report", default="reports/parity", metavar="DIR",
                        help="directory for summary.json, summary.md and junit.xml (default reports/parity)")
    parity.add_argument("--base-url", metavar="URL",
                        help="replay against this emulator, in a tenant of its own (default: start one in this process)")
    parity.add_argument("--admin-token", default=None, help="the X-Emulator-Admin-Token of the --base-url emulator")
    parity.add_argument("--profile", choices=("instant", "realistic"), default="instant",
                        help="the replay tenant's timing profile (default instant, the profile the shipped recordings "
                             "were made on)")
    parity.add_argument("--allow", metavar="FILE", action="append", default=[],
                        help="more allowed differences: a YAML list of {operation, field, check?, reason} "
                             "(repeatable)")
    parity.add_argument("--spec-only", action="store_true", help="judge the recording against the contract only")
    parity.add_argument("--rules", action="store_true",
                        help="print what is compared and how, and the shipped allow-list, then exit")
    from emulator.tools.cluster import add_arguments as add_cluster_arguments

    add_cluster_arguments(sub.add_parser(
        "cluster", allow_abbrev=False, help="N shards behind HAProxy: one emulator for a team (other options go to every shard's serve)",
        description="Start N shards (serve --shard I/N) and HAProxy in front, routing every tenant to its shard. "
                    "Options not listed here are passed to every shard's serve (e.g. --clock manual --seed 1)."))
    examples = sub.add_parser("examples", help="list the example clients that ship in the package, or copy them",
                              description="The example clients of the repository's examples/, shipped in the "
                              "package: a supervised loop, GRPO with the SDK and with its tinker clients, and a "
                              "client that survives --faults bad-day.")
    examples.add_argument("--copy", metavar="DIR", help="copy every example (and its README) into DIR, which may "
                          "exist; an existing file is never overwritten")
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl+C while starting (a running server stops in _run): one line, no traceback
        _say("interrupted")
        return 130


def _main(argv: list[str] | None) -> int:
    # connexion imports starlette's TestClient, which warns about httpx on every start; not our concern.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "cluster":  # (what it does not know goes to each shard's serve)
        return _cluster(args, unknown)
    if unknown:  # argparse would blame the top-level command; the usage that helps is the subcommand's
        sub = _subparsers(parser).get(args.command, parser)
        sub.error(f"unrecognized argument{'s' if len(unknown) > 1 else ''}: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    commands = {"serve": _serve, "replay": _replay, "record": _record, "parity": _parity, "examples": _examples}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
