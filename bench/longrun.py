"""Memory over a long loop of large operation outputs, in-process.

``python -m bench.longrun --steps N [--budget-mib B]``: builds the emulator's ``Runtime`` and app (with
``operation_outputs_mib_per_tenant`` = B, else the default) and drives the ASGI app (no sockets, as
``bench.inproc``) through N steps of an RL-style loop that keeps no training state: sample 32
completions of up to 64 tokens from a 64-token prompt, then a forward pass returning the per-token
logprobs of all 32 sequences. Both answers are large outputs (emulator/domain/operations.py, "Output
retention"); nothing is trained, so the model does not grow. Prints one ``BENCH_JSON`` line: resident
memory (after a full garbage collection) at every tenth of the run, the JSON bytes of the outputs
still kept, and how many operations answered ``output_released`` when read back at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.filled import settled_rss
from bench.inproc import _id, call

PROMPT = list(range(100, 164))
S = "/v1/rl/training-sessions"
SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": PROMPT}}]}], "num_samples": 32,
          "sampling_params": {"max_tokens": 64, "temperature": 1.0}}


def _forward(sample_output: dict[str, Any]) -> dict[str, Any]:
    samples = []
    for seq in sample_output["results"][0]["sequences"]:
        tokens = PROMPT + [int(t) for t in seq["tokens"]]
        samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                        "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                           "weights": {"data": [1.0] * (len(tokens) - 1), "dtype": "float32"}}})
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "forward_only": True, "return_loss_fn_outputs": True,
            "samples": samples}


async def run(steps: int, budget_mib: int | None) -> dict[str, Any]:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    if budget_mib is None:
        runtime = Runtime(Config())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            limits = Path(tmp) / "limits.yaml"
            limits.write_text(f"operation_outputs_mib_per_tenant: {budget_mib}\n")
            runtime = Runtime(Config(limits_file=str(limits)))
    app = build_server_app(runtime)
    rid = await _id(app, "POST", "/v1/rl/model-resources", {"base_model": "Qwen/Qwen3.5-4B"})
    await call(app, "GET", f"/v1/rl/model-resources/{rid}")
    sid = await _id(app, "POST", S, {"model_resources_id": rid})
    await call(app, "GET", f"{S}/{sid}")
    rss: list[tuple[int, int]] = [(0, settled_rss())]
    ops: list[tuple[str, str]] = []
    for step in range(1, steps + 1):
        outputs: list[dict[str, Any]] = []
        for kind, body in (("sample", SAMPLE), ("forward-backward", None)):
            op = await _id(app, "POST", f"{S}/{sid}/operations/{kind}",
                           body if body is not None else _forward(outputs[0]),
                           ((b"idempotency-key", f"{kind}-{step}".encode()),))
            status, raw = await call(app, "GET", f"{S}/{sid}/operations/{kind}/{op}")
            got = orjson.loads(raw)
            assert status == 200 and got["status"].endswith("COMPLETED"), raw[:300]
            outputs.append(got["output"])
            ops.append((kind, op))
        if step % max(1, steps // 10) == 0 or step == steps:
            rss.append((step, settled_rss()))
    released = 0
    for kind, op in ops:
        status, raw = await call(app, "GET", f"{S}/{sid}/operations/{kind}/{op}")
        released += status == 404 and b"output_released" in raw
    principal = runtime.principal_for("bench-token")
    assert principal is not None
    with runtime.unit_of_work(principal, write=False) as (state, _ctx):
        kept = state.outputs.total
    return {"steps": steps, "budget_mib": runtime.limits.operation_outputs_mib_per_tenant, "rss": rss,
            "kept_output_bytes": kept, "operations": len(ops), "released": released}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.longrun")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--budget-mib", type=int, default=None, help="output budget (default: the emulator's)")
    args = parser.parse_args(argv)
    print("BENCH_JSON " + json.dumps(asyncio.run(run(args.steps, args.budget_mib))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
