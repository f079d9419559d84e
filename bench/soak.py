"""A shared emulator under mixed traffic for minutes: does its memory stay flat?

``python -m bench.soak --seconds N [--workers W]``: starts ``python -m emulator serve`` (defaults: the
operation retention of ``emulator/domain/limits.py``), then W clients, each its own tenant with one READY
resource and one RUNNING session, loop for N seconds over keep-alive connections: forward-backward and
optim-step (submit, then read back), every fourth step a sample of 2 x 8 tokens and a weights-sync, a
list of sessions and a read of the resource, and a GET of an unknown operation (404). The server's
resident memory is read every ``N/60`` seconds. Warm-up lasts until every session holds as many finished
operations as the retention limit keeps (``finished_operations_per_session``) and the event log is at its
cap (50,000 entries), and at least the first ``--warmup-share`` of the run (default 20%), by when the
bounded caches have filled too (the clock's 4,096 formatted instants fill within seconds; at 65,536 they
took over 40,000 operations, which a slow machine had not reached in 10 minutes).
Prints one ``BENCH_JSON`` line: operations, requests, server errors, when warm-up ended (``warmed``:
false when the sessions never filled), RSS at its end, the highest and the last RSS after it, and the
ratio of the highest to the first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from emulator.domain.limits import DEFAULT_LIMITS

RES = {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True}
S = "/v1/rl/training-sessions"
FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
      "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3, 4, 5, 6]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4, 5, 6, 7], "dtype": "int64"},
                                      "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}]}
OPT = {"adam_params": {"learning_rate": 0.0001}}
SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3, 4]}}]}], "num_samples": 2,
          "sampling_params": {"max_tokens": 8}}
SYNC = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}
EVENT_LOG_CAP = 50_000  # emulator.store.memory.EventLog


class Counts:
    def __init__(self) -> None:
        self.requests = 0
        self.operations = 0
        self.server_errors = 0
        self.filled: dict[int, float] = {}  # worker -> when its session reached the retention limit
        self.log_full: float | None = None  # when the event log reached its cap


async def _call(client: httpx.AsyncClient, counts: Counts, method: str, path: str, body: Any = None,
                key: str | None = None) -> dict[str, Any]:
    resp = await client.request(method, path, json=body, headers={"Idempotency-Key": key} if key else None)
    counts.requests += 1
    if resp.status_code >= 500:
        counts.server_errors += 1
    return resp.json() if resp.content else {}


async def _ready(client: httpx.AsyncClient, counts: Counts) -> str:
    rid = (await _call(client, counts, "POST", "/v1/rl/model-resources", RES))["id"]
    while not (await _call(client, counts, "GET", f"/v1/rl/model-resources/{rid}"))["status"].endswith("READY"):
        await asyncio.sleep(0.01)
    sid = (await _call(client, counts, "POST", S, {"model_resources_id": rid}))["id"]
    while not (await _call(client, counts, "GET", f"{S}/{sid}"))["status"].endswith("RUNNING"):
        await asyncio.sleep(0.01)
    return rid + " " + sid


async def _worker(url: str, index: int, start: float, until: float, counts: Counts) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer soak-{index}"},
                                 timeout=30) as client:
        rid, sid = (await _ready(client, counts)).split()
        step = done = 0
        while time.monotonic() < until:
            step += 1
            kinds = [("forward-backward", FB), ("optim-step", OPT)]
            if step % 4 == 0:
                kinds += [("sample", SAMPLE), ("weights-sync", SYNC)]
            for kind, body in kinds:
                op = await _call(client, counts, "POST", f"{S}/{sid}/operations/{kind}", body, f"{kind}-{step}")
                await _call(client, counts, "GET", f"{S}/{sid}/operations/{kind}/{op['id']}")
                counts.operations += 1
                done += 1
                if done == DEFAULT_LIMITS.finished_operations_per_session:
                    counts.filled[index] = time.monotonic() - start
            await _call(client, counts, "GET", f"{S}?limit=20")
            await _call(client, counts, "GET", f"/v1/rl/model-resources/{rid}")
            await _call(client, counts, "GET", f"{S}/{sid}/operations/optim-step/no-such-operation")


async def _drive(url: str, pid: int, seconds: float, workers: int, warmup: float) -> dict[str, Any]:
    counts = Counts()
    start = time.monotonic()
    until = start + seconds
    tasks = [asyncio.create_task(_worker(url, i, start, until, counts)) for i in range(workers)]
    samples: list[tuple[float, int]] = []
    every = max(1.0, seconds / 60)
    async with httpx.AsyncClient(base_url=url, timeout=30) as control:
        while not all(t.done() for t in tasks):
            await asyncio.sleep(every)
            samples.append((round(time.monotonic() - start, 1), procs.rss_of(pid)))
            if counts.log_full is None:
                newest = (await control.get("/_emulator/events", params={"since": EVENT_LOG_CAP - 1,
                                                                         "limit": 1})).json()["data"]
                if newest:
                    counts.log_full = time.monotonic() - start
    for task in tasks:
        task.result()  # a client that failed fails the run
    warmed = len(counts.filled) == workers and counts.log_full is not None
    if warmed:
        warmup = max(warmup, counts.log_full or 0.0, *counts.filled.values())
    after = [rss for t, rss in samples if t >= warmup]
    warm = next((rss for t, rss in samples if t >= warmup), samples[-1][1])
    return {"seconds": seconds, "warmup_s": round(warmup, 1), "warmed": warmed, "workers": workers, "operations": counts.operations,
            "requests": counts.requests, "server_errors": counts.server_errors, "rss": samples,
            "rss_warm": warm, "rss_max_after_warmup": max(after or [warm]), "rss_end": samples[-1][1],
            "growth_ratio": max(after or [warm]) / warm}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup-share", type=float, default=0.2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        cmd = ["-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "warning"]
        with procs.Server("soak", cmd, Path(work)) as server:
            result = asyncio.run(_drive(server.url, server.pid, args.seconds, args.workers,
                                        args.seconds * args.warmup_share))
    print("BENCH_JSON " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
