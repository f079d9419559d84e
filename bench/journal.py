"""The journal's cost per write against the size of the tenant, and per step of a training loop, in-process.

``python -m bench.journal [--resources 10,1000,10000] [--grants 1000] [--patches 20]``: for each count, a
fresh emulator with ``--state-file`` in a temporary directory holds that many live (READY) model resources
and one session, and ``--grants`` open presigned upload URLs; then a one-field PATCH of the session
(``display_name``) runs ``--patches`` times. Prints one ``BENCH_JSON`` line: per count, the bytes of the
journal line one PATCH appends (median) and the PATCH's wall time (median, fsync included). Issue 25's
target: flat within 2x across the range.

``python -m bench.journal --loop [--steps 1000] [--at 10,100,1000] [--tokens sampled|random]``: one session
trains with ``--state-file`` (issue 39): each step samples 16 x 64 tokens and trains on them with advantages
(``sampled``, an RL loop), or trains on 16 x 64 random tokens (``random``: the model grows fastest), then
optim-step and a synchronous weights-sync. Prints one ``BENCH_JSON`` line: at each ``--at`` step, the
journal bytes the step appended and their mean over the 10 steps before, the compactions' bytes, the step's
wall time; then the restart's load time and whether the restored state is the one held (bit for bit).
Target: bytes per step flat within 2x from step 10 to step 1,000.
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


PROMPT = list(range(1000, 1016))


def _fb_body(rng: Any, tokens: str, sampled: dict[str, Any] | None) -> dict[str, Any]:
    """16 samples of 64 trained tokens: the sampled sequences with their logprobs and an advantage each
    (longer than average: +1, else -1), or random tokens for cross-entropy."""
    samples = []
    if sampled is None:
        for _ in range(16):
            toks = [rng.randrange(248_000) for _ in range(65)]
            samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]},
                            "loss_fn_inputs": {"target_tokens": {"data": toks[1:], "dtype": "int64"},
                                               "weights": {"data": [1.0] * 64, "dtype": "float32"}}})
        return {"samples": samples, "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
    seqs = sampled["results"][0]["sequences"]
    mean_len = sum(len(q["tokens"]) for q in seqs) / len(seqs)
    for q in seqs:
        toks = PROMPT + [int(t) for t in q["tokens"]]
        k, n = len(PROMPT) - 1, len(toks) - 1
        adv = 1.0 if len(q["tokens"]) >= mean_len else -1.0
        samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]},
                        "loss_fn_inputs": {"target_tokens": {"data": toks[1:], "dtype": "int64"},
                                           "logprobs": {"data": [0.0] * k + list(q["logprobs"]), "dtype": "float32"},
                                           "advantages": {"data": [0.0] * k + [adv] * (n - k), "dtype": "float32"}}})
    return {"samples": samples, "loss": {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}}


async def loop(steps: int, at: list[int], tokens: str, work: Path) -> dict[str, Any]:
    import random

    import orjson

    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    path = work / f"loop-{tokens}.jsonl"
    runtime = Runtime(Config(clock="manual", state_file=str(path)))
    assert runtime.persistence is not None
    file = runtime.persistence.file
    tally = {"lines": 0, "compactions": 0, "compacted": 0}
    append, write_all = file.append, file.write_all

    def counted_append(change: dict[str, Any], *rest: Any) -> None:
        before = file.size
        append(change, *rest)
        tally["lines"] += file.size - before

    def counted_write_all(doc: dict[str, Any]) -> None:
        write_all(doc)
        tally["compactions"] += 1
        tally["compacted"] += file.size

    file.append, file.write_all = counted_append, counted_write_all  # type: ignore[method-assign,assignment]
    app = build_server_app(runtime)
    rid = await _id(app, "POST", R, {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True})
    await call(app, "GET", f"{R}/{rid}")
    sid = await _id(app, "POST", S, {"model_resources_id": rid})
    await call(app, "GET", f"{S}/{sid}")
    rng = random.Random(7)
    sample_body = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": PROMPT}}]}], "num_samples": 16,
                   "sampling_params": {"max_tokens": 64, "temperature": 1.0}}
    per_step: list[tuple[int, float, int, int]] = []  # (line bytes, seconds, compaction bytes, compactions)

    async def run_op(kind: str, body: dict[str, Any], step: int) -> dict[str, Any]:
        op = await _id(app, "POST", f"{S}/{sid}/operations/{kind}", body,
                       ((b"idempotency-key", f"{kind}-{step}".encode()),))
        status, raw = await call(app, "GET", f"{S}/{sid}/operations/{kind}/{op}")
        got = orjson.loads(raw)
        assert status == 200 and got["status"].endswith("COMPLETED"), raw[:300]
        return got

    for step in range(1, steps + 1):
        lines, compacted, compactions = tally["lines"], tally["compacted"], tally["compactions"]
        started = time.perf_counter()
        sampled = (await run_op("sample", sample_body, step))["output"] if tokens == "sampled" else None
        await run_op("forward-backward", _fb_body(rng, tokens, sampled), step)
        await run_op("optim-step", {"adam_params": {"learning_rate": 1e-4}}, step)
        await run_op("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}, step)
        per_step.append((tally["lines"] - lines, time.perf_counter() - started, tally["compacted"] - compacted,
                         tally["compactions"] - compactions))
    points = []
    for n in at:
        if n > steps:
            continue
        window = per_step[max(0, n - 10):n]
        points.append({"step": n, "line_bytes": per_step[n - 1][0],
                       "line_bytes_mean10": statistics.mean(w[0] for w in window),
                       "step_ms_median10": statistics.median(w[1] for w in window) * 1000,
                       "compacted_bytes_per_step_so_far": sum(w[2] for w in per_step[:n]) / n,
                       "compactions_so_far": sum(w[3] for w in per_step[:n])})
    held = runtime.export_state()
    started = time.perf_counter()
    restored = Runtime(Config(clock="manual", state_file=str(path)))
    load_s = time.perf_counter() - started
    again = restored.export_state()
    same = orjson.dumps(held["tenants"]) == orjson.dumps(again["tenants"])
    entries = len(held["tenants"][next(iter(held["tenants"]))]["models"][sid]["state"]["weights"]["entry_rows"])
    return {"tokens": tokens, "steps": steps, "points": points, "file_bytes": path.stat().st_size,
            "compactions": tally["compactions"], "compacted_bytes": tally["compacted"],
            "line_bytes_total": tally["lines"], "model_entries": entries, "load_s": load_s,
            "restored_identical": same}


async def run(counts: list[int], grants: int, patches: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return [await measure(n, grants, patches, Path(tmp)) for n in counts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.journal")
    parser.add_argument("--resources", default="10,1000,10000")
    parser.add_argument("--grants", type=int, default=1000)
    parser.add_argument("--patches", type=int, default=20)
    parser.add_argument("--loop", action="store_true", help="measure a training loop instead (issue 39)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--at", default="10,100,1000")
    parser.add_argument("--tokens", choices=("sampled", "random"), default="sampled")
    args = parser.parse_args(argv)
    if args.loop:
        with tempfile.TemporaryDirectory() as tmp:
            got = asyncio.run(loop(args.steps, [int(n) for n in args.at.split(",")], args.tokens, Path(tmp)))
        print("BENCH_JSON " + json.dumps(got), flush=True)
        return 0
    counts = [int(n) for n in args.resources.split(",")]
    print("BENCH_JSON " + json.dumps(asyncio.run(run(counts, args.grants, args.patches))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
