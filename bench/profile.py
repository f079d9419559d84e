"""Profile the emulator under load: ``python -m bench.profile [--scenario get|list|create|loop] [--seconds 5]
[--connections 32] [--top 30]``.

Starts ``python -m cProfile -o FILE -m emulator serve`` on a loopback port, sets up what the scenario
needs over HTTP (a READY session for ``get``; 100 sessions for ``list``; a pool of READY resources for
``create``; nothing for ``loop``, which makes its own), drives the scenario with the load generator
(wrk, else the Python fallback) exactly as ``make bench`` does, stops the server with SIGINT (uvicorn
exits cleanly, so cProfile writes its stats) and prints the functions with the most own time and the
most cumulative time. cProfile slows every Python call, so read the shares, not the absolute rates.
"""

from __future__ import annotations

import argparse
import io
import pstats
import shutil
import tempfile
from pathlib import Path
from typing import Any

SCENARIOS = ("get", "list", "create", "loop")


def main(argv: list[str] | None = None) -> int:
    from bench import procs
    from bench.client import Client
    from bench.loadgen import LoadGen
    from bench.run import LIST_PATH, SESSIONS, TOKEN, log, make_resources, poll

    p = argparse.ArgumentParser(prog="python -m bench.profile")
    p.add_argument("--scenario", choices=SCENARIOS, default="get")
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--path", default=None, help="with --scenario get: profile this GET path instead of one session")
    p.add_argument("--out", default=None, help="keep the raw cProfile stats here")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    out = Path(args.out) if args.out else work / "emulator.prof"
    gen = LoadGen("auto", work, log)
    srv = procs.Server(
        "profiled",
        ["-m", "cProfile", "-o", str(out), "-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0"],
        work,
    )
    try:
        c = Client(srv.url, TOKEN)
        kwargs: dict[str, Any] = {}
        if args.scenario in ("get", "list"):
            rids = make_resources(c, 20 if args.scenario == "list" else 1)
            sids = [c.json("POST", SESSIONS, {"model_resources_id": rid})[0]["id"] for rid in rids for _ in range(5)]
            poll(c, f"{SESSIONS}/{sids[-1]}", "RUNNING")
            default = LIST_PATH if args.scenario == "list" else f"{SESSIONS}/{sids[-1]}"
            kwargs["path"] = args.path or default
            kind = "static"
        elif args.scenario == "create":
            ids = make_resources(c, 2000)  # 10,000 session slots: more than a run under cProfile answers
            ids_file = work / "resources.txt"
            ids_file.write_text("\n".join(ids) + "\n")
            kwargs["ids_file"] = str(ids_file)
            kind = "create_session"
        else:
            kind = "loop"
        c.close()
        m = gen.run(srv.url, kind, args.connections, args.seconds, TOKEN, **kwargs)
        log(f"{args.scenario} under cProfile: {m['rps']:.0f} req/s, p50 {m['p50_ms']:.2f} ms, "
            f"p99 {m['p99_ms']:.2f} ms, errors {m['errors']} ({gen.label})")
    finally:
        srv.stop()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(str(out), stream=buf).strip_dirs().sort_stats(key).print_stats(args.top)
        print(f"\n=== top {args.top} by {key} ===")
        print(buf.getvalue().split("\n", 6)[-1])
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
