"""The emulator's own cost per request, without sockets or a load generator:
``python -m bench.inproc [--scenario get|list|create|loop] [--requests N] [--instructions]
[--no-recorder]``.

Drives the ASGI app (``emulator.tools.server.build_server_app``) in-process with the same requests as
``make bench`` and prints the app's CPU time per request (the best of 8 batches). On a shared machine
CPU time varies by tens of percent from minute to minute; ``--instructions`` instead runs this script
twice under ``valgrind --tool=callgrind`` (with and without the measured requests) and prints the
difference in executed instructions per request, which is the same on every run of the same code:
the number BENCHMARKS.md quotes for what each change bought. For the loop, per request means per loop
divided by its 8 requests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import orjson

TOKEN = b"Bearer bench-token"
RES = {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True}
FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
      "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3, 4, 5, 6]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4, 5, 6, 7], "dtype": "int64"},
                                      "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}]}
OPT = {"adam_params": {"learning_rate": 0.0001}}
S = "/v1/rl/training-sessions"
POOL = 2000  # resources for create (5 sessions each): enough for any --requests up to 10,000


async def call(app: Any, method: str, path: str, body: Any = None, headers: tuple[tuple[bytes, bytes], ...] = ()
               ) -> tuple[int, bytes]:
    path, _, query = path.partition("?")
    raw = orjson.dumps(body) if body is not None else b""
    hdrs = [(b"host", b"127.0.0.1:8765"), (b"authorization", TOKEN), *headers]
    if body is not None:
        hdrs += [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": query.encode(), "headers": hdrs, "scheme": "http",
             "server": ("127.0.0.1", 8765), "client": ("127.0.0.1", 5000), "root_path": "", "state": {}}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    status = 0
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def _id(app: Any, method: str, path: str, body: Any = None, headers: tuple[tuple[bytes, bytes], ...] = ()
              ) -> str:
    status, raw = await call(app, method, path, body, headers)
    assert status == 200, raw[:300]
    return str(orjson.loads(raw)["id"])


async def run(scenario: str, requests: int, batches: int, recorder: bool = True) -> float | None:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.recording import RecordingApp
    from emulator.tools.server import build_server_app

    app: Any = build_server_app(Runtime(Config()))
    if not recorder:  # the B of the recorder's A/B: the app it wraps, as if there were no run-time recording
        assert isinstance(app, RecordingApp), type(app)
        app = app.app
    rids = [await _id(app, "POST", "/v1/rl/model-resources", RES) for _ in range(20)]
    await call(app, "GET", f"/v1/rl/model-resources/{rids[-1]}")
    sids = [await _id(app, "POST", S, {"model_resources_id": r}) for r in rids for _ in range(5)]
    await call(app, "GET", f"{S}/{sids[-1]}")
    pool = [await _id(app, "POST", "/v1/rl/model-resources", RES) for _ in range(POOL if scenario == "create" else 0)]
    if pool:
        await call(app, "GET", f"/v1/rl/model-resources/{pool[-1]}")

    async def one(i: int) -> None:
        if scenario == "get":
            status, raw = await call(app, "GET", f"{S}/{sids[-1]}")
        elif scenario == "list":
            status, raw = await call(app, "GET", f"{S}?limit=20")
        elif scenario == "create":
            status, raw = await call(app, "POST", S, {"model_resources_id": pool[i // 5]})
        else:
            r = await _id(app, "POST", "/v1/rl/model-resources", RES)
            await call(app, "GET", f"/v1/rl/model-resources/{r}")
            s = await _id(app, "POST", S, {"model_resources_id": r})
            await call(app, "GET", f"{S}/{s}")
            o = await _id(app, "POST", f"{S}/{s}/operations/forward-backward", FB, ((b"idempotency-key", b"f%d" % i),))
            await call(app, "GET", f"{S}/{s}/operations/forward-backward/{o}")
            o = await _id(app, "POST", f"{S}/{s}/operations/optim-step", OPT, ((b"idempotency-key", b"o%d" % i),))
            status, raw = await call(app, "GET", f"{S}/{s}/operations/optim-step/{o}")
            assert b"COMPLETED" in raw, raw[:300]
        assert status == 200, raw[:300]

    for i in range(20):  # warm-up
        await one(i)
    gc.collect()
    gc.freeze()
    if batches == 0:  # under callgrind: just run them
        for i in range(requests):
            await one(20 + i)
        return None
    per_batch = max(1, requests // batches)
    best = float("inf")
    i = 20
    for _ in range(batches):
        started = time.process_time()
        for _ in range(per_batch):
            await one(i)
            i += 1
        best = min(best, time.process_time() - started)
    return best / per_batch / (8 if scenario == "loop" else 1)


def instructions(scenario: str, requests: int, recorder: bool = True) -> float:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    counts = []
    for n in (0, requests):
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                              "bench.inproc", "--scenario", scenario, "--requests", str(n), "--raw",
                              *([] if recorder else ["--no-recorder"])],
                             capture_output=True, text=True, check=True,
                             # (OpenBLAS's idle worker threads spin for as long as the run lasts, so the count
                             # depended on the machine's load; with one thread there are none)
                             env={**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"})
        found = re.search(r"Collected : (\d+)", out.stderr)
        if found is None:
            raise SystemExit(f"no instruction count from callgrind:\n{out.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / requests / (8 if scenario == "loop" else 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=("get", "list", "create", "loop"), default="get")
    p.add_argument("--requests", type=int, default=None,
                   help="measured requests (default 4000; 400 with --instructions, 100 loops for the loop)")
    p.add_argument("--instructions", action="store_true", help="count instructions with callgrind (slow, exact)")
    p.add_argument("--no-recorder", action="store_true",
                   help="drive the app without the run-time recorder's wrapper (RecordingApp, always present so "
                        "that /_emulator/recording/start works), to measure what the wrapper costs when idle")
    p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.raw:
        asyncio.run(run(args.scenario, args.requests or 0, 0, not args.no_recorder))
        return 0
    if args.instructions:
        n = args.requests or (100 if args.scenario == "loop" else 400)
        count = instructions(args.scenario, n, not args.no_recorder)
        print(f"{args.scenario}: {count / 1000:.0f}k instructions per request")
        return 0
    per = asyncio.run(run(args.scenario, args.requests or 4000, 8, not args.no_recorder))
    assert per is not None
    print(f"{args.scenario}: {per * 1e6:.1f} us of app CPU per request (best of 8 batches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
