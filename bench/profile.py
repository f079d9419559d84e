"""Profile the emulator's hot path: ``python -m bench.profile [--seconds 5] [--connections 32] [--top 30]``.

Starts ``python -m cProfile -o FILE -m emulator serve`` on a loopback port, creates one session,
drives ``GET /v1/rl/training-sessions/{id}`` with the load generator (wrk, else the Python
fallback), stops the server with SIGINT (uvicorn exits cleanly, so cProfile writes its stats) and
prints the functions with the most own time and the most cumulative time. cProfile slows every
Python call, so read the shares, not the absolute rates.
"""

from __future__ import annotations

import argparse
import io
import pstats
import shutil
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from bench import procs
    from bench.client import Client
    from bench.loadgen import LoadGen
    from bench.run import RES, SESSIONS, TOKEN, log, poll

    p = argparse.ArgumentParser(prog="python -m bench.profile")
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--path", default=None, help="profile this GET path instead of one session")
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
        r = c.json("POST", "/v1/rl/model-resources", RES)[0]
        poll(c, f"/v1/rl/model-resources/{r['id']}", "READY")
        s = c.json("POST", SESSIONS, {"model_resources_id": r["id"]})[0]
        poll(c, f"{SESSIONS}/{s['id']}", "RUNNING")
        c.close()
        path = args.path or f"{SESSIONS}/{s['id']}"
        m = gen.run(srv.url, "static", args.connections, args.seconds, TOKEN, path=path)
        log(
            f"under cProfile: {m['rps']:.0f} req/s, p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms "
            f"({gen.label})"
        )
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
