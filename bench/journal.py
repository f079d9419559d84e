"""The journal's cost per write against the size of the tenant, in-process.

``python -m bench.journal [--resources 10,1000,10000] [--grants 1000] [--patches 20]``: for each count, a
fresh emulator with ``--state-file`` in a temporary directory holds that many live (READY) model resources
and one session, and ``--grants`` open presigned upload URLs; then a one-field PATCH of the session
(``display_name``) runs ``--patches`` times. Prints one ``BENCH_JSON`` line: per count, the bytes of the
journal line one PATCH appends (median) and the PATCH's wall time (median, fsync included). Issue 25's
target: flat within 2x across the range.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.inproc import _id, call

S = "/v1/rl/training-sessions"
R = "/v1/rl/model-resources"


async def measure(resources: int, grants: int, patches: int, work: Path) -> dict[str, Any]:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    path = work / f"state-{resources}.jsonl"
    runtime = Runtime(Config(clock="manual", state_file=str(path)))
    app = build_server_app(runtime)
    rid = await _id(app, "POST", R, {"base_model": "Qwen/Qwen3.5-4B"})
    await call(app, "GET", f"{R}/{rid}")
    sid = await _id(app, "POST", S, {"model_resources_id": rid})
    for _ in range(resources - 1):
        await _id(app, "POST", R, {"base_model": "Qwen/Qwen3.5-4B"})
    await call(app, "GET", f"{R}?limit=1")  # settles: every resource READY
    for _ in range(grants):
        status, _raw = await call(app, "POST", f"{S}/{sid}/payloads/upload-url")
        assert status == 200
    sizes, seconds = [], []
    for i in range(patches):
        before = path.stat().st_size
        started = time.perf_counter()
        status, raw = await call(app, "PATCH", f"{S}/{sid}", {"display_name": f"run {i}"})
        seconds.append(time.perf_counter() - started)
        assert status == 200, raw[:200]
        sizes.append(path.stat().st_size - before)
    return {"resources": resources, "grants": grants, "line_bytes": statistics.median(sizes),
            "patch_ms": statistics.median(seconds) * 1000, "file_bytes": path.stat().st_size}


async def run(counts: list[int], grants: int, patches: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return [await measure(n, grants, patches, Path(tmp)) for n in counts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.journal")
    parser.add_argument("--resources", default="10,1000,10000")
    parser.add_argument("--grants", type=int, default=1000)
    parser.add_argument("--patches", type=int, default=20)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.resources.split(",")]
    print("BENCH_JSON " + json.dumps(asyncio.run(run(counts, args.grants, args.patches))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
