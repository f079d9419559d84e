"""Memory of one long training loop in-process, with the operation retention limit (issue 26, item 18).

``python -m bench.retention [--steps N]``: builds the emulator's ``Runtime`` and app (manual clock, default
limits) and drives the ASGI app (no sockets, as ``bench.inproc``) through N steps of forward-backward and
optim-step on one session, reading each back. Prints one ``BENCH_JSON`` line with resident memory (after a
full garbage collection) at every fifth of the run. Once the session holds its 1,000 finished operations
and the event log its 50,000 entries (about 8,000 steps), memory must stay flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bench.filled import settled_rss
from bench.inproc import _id, call

S = "/v1/rl/training-sessions"
FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
      "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3, 4, 5, 6]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4, 5, 6, 7], "dtype": "int64"},
                                      "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}]}


async def run(steps: int) -> dict[str, Any]:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    app = build_server_app(Runtime(Config(clock="manual")))
    rid = await _id(app, "POST", "/v1/rl/model-resources", {"base_model": "Qwen/Qwen3.8-27B"})
    await call(app, "GET", f"/v1/rl/model-resources/{rid}")
    sid = await _id(app, "POST", S, {"model_resources_id": rid})
    await call(app, "GET", f"{S}/{sid}")
    rss: list[tuple[int, int]] = []
    for step in range(1, steps + 1):
        for kind, body in (("forward-backward", FB), ("optim-step", {})):
            op = await _id(app, "POST", f"{S}/{sid}/operations/{kind}", body,
                           ((b"idempotency-key", f"{kind}-{step}".encode()),))
            status, _ = await call(app, "GET", f"{S}/{sid}/operations/{kind}/{op}")
            assert status == 200
        if step % max(1, steps // 5) == 0:
            rss.append((step, settled_rss()))
    return {"steps": steps, "operations": 2 * steps, "rss": rss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retention")
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args(argv)
    print("BENCH_JSON " + json.dumps(asyncio.run(run(args.steps))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
