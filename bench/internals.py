"""What the private uvicorn internals of ``emulator/http/server.py`` buy or cost, served, A/B in one run.

``python -m bench.internals [--rounds 3] [--seconds 4] [--connections 8]``: starts the emulator two ways, in
turn, for ``--rounds`` rounds (so a machine's drift hits every variant alike), and drives GET one session
with wrk over keep-alive connections:

- ``shipped``: as users get it (the guarded httptools protocol);
- ``stock``: uvicorn's own httptools protocol (no connection guards).

(A third variant, uvicorn's own request cycle against a one-write subclass of it, measured that subclass at
2% and -3%: it was removed, as issue 25 asks of an internal that buys less than 10%.)

For each it reports the server process's CPU time per request (user + system, from ``/proc``), the median
over the rounds. CPU per request, not requests per second, because on a shared 2-core machine the rate
moves with the neighbours while the server's own work per request does not (much). Prints one
``BENCH_JSON`` line. Needs wrk (Debian's package) and Linux.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VARIANTS = ("shipped", "stock")
TOKEN = "bench-internals"


def serve(variant: str, port: int) -> None:
    """Run the emulator with one variant of the server protocol (in the child process)."""
    import emulator.http.server as server

    if variant == "stock":
        server.guarded_protocol = lambda *args, **kwargs: "httptools"  # type: ignore[assignment]
    from emulator.__main__ import main

    raise SystemExit(main(["serve", "--port", str(port), "--log-level", "warning"]))


def serve_spec_checked() -> None:
    """Run ``serve --port 0`` with connexion's own check of the packaged specs at start-up (the skip of
    ``emulator/app.py`` undone), for the start-up A/B of ``bench.run``."""
    import contextlib

    import emulator.app as app

    app._packaged_specs = contextlib.nullcontext  # type: ignore[assignment]
    from emulator.__main__ import main

    raise SystemExit(main(["serve", "--host", "127.0.0.1", "--port", "0"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(base: str, method: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def measure(variant: str, seconds: float, connections: int) -> dict[str, float]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", f"import bench.internals as b; b.serve({variant!r}, {port})"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/_emulator/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        r = _call(base, "POST", "/v1/rl/model-resources", {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True})
        s = _call(base, "POST", "/v1/rl/training-sessions", {"model_resources_id": r["id"]})
        url = f"{base}/v1/rl/training-sessions/{s['id']}"
        warm = ["wrk", "-t1", f"-c{connections}", "-d1s", "-H", f"Authorization: Bearer {TOKEN}", url]
        subprocess.run(warm, capture_output=True, check=True)
        before = _cpu_seconds(proc.pid)
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-H",
                              f"Authorization: Bearer {TOKEN}", url], capture_output=True, text=True, check=True).stdout
        cpu = _cpu_seconds(proc.pid) - before
        found = re.search(r"(\d+) requests in", out)
        if found is None or int(found.group(1)) == 0:
            raise SystemExit(f"no requests counted by wrk:\n{out}")
        if "Non-2xx" in out:
            raise SystemExit(f"{variant}: non-2xx answers:\n{out}")
        n = int(found.group(1))
        return {"requests": n, "cpu_us_per_req": cpu / n * 1e6}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.internals", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--connections", type=int, default=8)
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("bench.internals needs wrk (apt-get install -y wrk)")
    runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            runs[variant].append(measure(variant, args.seconds, args.connections)["cpu_us_per_req"])
    med = {v: statistics.median(xs) for v, xs in runs.items()}
    result = {"cpu_us_per_req": med, "runs": runs,
              "guards_cost": med["shipped"] / med["stock"] - 1,
              "connections": args.connections, "seconds": args.seconds}
    print("BENCH_JSON " + json.dumps(result))
    for v in VARIANTS:
        print(f"{v:>10}: {med[v]:.1f} us of server CPU per GET (runs: {', '.join(f'{x:.1f}' for x in runs[v])})")
    print(f"the connection guards cost {result['guards_cost']:+.0%} of the server's CPU per GET")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
