"""Regenerate the recorded demos of ``fixtures/recordings/`` (for maintainers).

    make recordings          # or: .venv/bin/python -m tests.recordings [NAME ...]

Each recording is a client script run against a fresh emulator (manual clock, a fixed seed, responses
validated against the spec) behind a canonical :class:`~emulator.tools.recording.Recorder`, which keeps
out what varies between runs though the answers do not (the port, the SDK's random idempotency keys and
its description of the machine, presigned URL tokens). So the same script and emulator give the same
bytes, and ``tests/test_fixtures.py`` regenerates every recording and fails on any difference. When the
emulator legitimately changes what it answers (a new field, real tokenizer vocabularies...), run this,
read the diff, and commit it with the change.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.recording import Recorder, RecordingApp
from emulator.tools.server import build_server_app
from emulator.tools.testing import serve_app

ROOT = Path(__file__).resolve().parent.parent
DIRECTORY = ROOT / "fixtures" / "recordings"
COMMAND = "`make recordings` (or `.venv/bin/python -m tests.recordings NAME`)"
KEY = "demo-key"


@dataclass(frozen=True)
class Recording:
    drive: Callable[[str], dict[str, Any]]  # base URL -> a summary of what the client saw
    config: Config


def sdk_training_loop(base_url: str) -> dict[str, Any]:
    """The official SDK trains a LoRA adapter for 12 steps on one sequence, checkpointing every 4 steps,
    then syncs the weights, samples, lists the checkpoints, downloads the last adapter and stops."""
    from together import Together
    from together.post_training import (
        AdamParams,
        LossConfig,
        ModelInput,
        ModelResourcesClient,
        Sample,
        SamplingParams,
        download_checkpoint,
    )

    resources = ModelResourcesClient.create(api_key=KEY, base_url=base_url, base_model="Qwen/Qwen3.8-27B",
                                            lora_enabled=True, compute_config={"num_generator_replicas": 1},
                                            interval=0.01, ready_timeout=30)
    session = resources.create_session(lora_config={"rank": 8}, interval=0.01, timeout=30)
    tokens = [1, 2, 3, 4, 5, 6, 7]
    sample = Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                    loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                    "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}})
    losses, checkpoints = [], []
    for step in range(1, 13):
        fb = session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
        session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
        losses.append(fb.loss)
        if step % 4 == 0:
            checkpoints.append(session.create_inference_checkpoint().id)
    checkpoints.append(session.create_training_checkpoint().id)
    session.trainer.weights_sync()
    sampled = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": [1, 2, 3, 4]}}]),
                                       num_samples=2, sampling_params=SamplingParams(max_tokens=8))
    client = Together(api_key=KEY, base_url=base_url)
    listed = client.post_training.checkpoints.list(session_id=session.session_id)
    with tempfile.TemporaryDirectory() as out:
        paths = download_checkpoint(client, checkpoints[-2], variant="CHECKPOINT_VARIANT_ADAPTER", output_dir=out)
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    session.stop()
    resources.stop()
    return {"losses": losses, "checkpoints": checkpoints, "listed": sorted(c.id for c in listed.data or []),
            "sampled": [[int(t) for t in seq.tokens] for seq in sampled.sequences], "files": files}


RECORDINGS: dict[str, Recording] = {
    "sdk-training-loop": Recording(sdk_training_loop, Config(clock="manual", seed=7, validate_responses=True)),
}


def record(name: str, out: Path) -> dict[str, Any]:
    """Run recording ``name`` against a fresh emulator into ``out`` (replaced); the client's summary."""
    recording = RECORDINGS[name]
    out.unlink(missing_ok=True)
    config = replace(recording.config, host="127.0.0.1", port=0)
    runtime = Runtime(config)
    recorder = Recorder(str(out), runtime.clock.now, canonical=True)
    try:
        with serve_app(RecordingApp(build_server_app(runtime), recorder), config) as url:
            return recording.drive(url)
    finally:
        recorder.close()


def main(argv: list[str]) -> int:
    names = argv or sorted(RECORDINGS)
    unknown = [n for n in names if n not in RECORDINGS]
    if unknown:
        print(f"no recording {', '.join(unknown)}; recordings: {', '.join(sorted(RECORDINGS))}", file=sys.stderr)
        return 2
    for name in names:
        target = DIRECTORY / f"{name}.jsonl"
        fresh = target.with_suffix(".jsonl.new")
        record(name, fresh)
        os.replace(fresh, target)
        print(f"wrote {target.relative_to(ROOT)} ({sum(1 for _ in target.open())} exchanges, "
              f"{target.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
