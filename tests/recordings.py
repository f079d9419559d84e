"""Regenerate the recorded demos of ``fixtures/recordings/`` and the parity recordings of ``fixtures/parity/``
(for maintainers).

    make recordings          # or: .venv/bin/python -m tests.recordings [NAME ...]

Each recording is a client script run against a fresh emulator (manual clock, a fixed seed, responses
validated against the spec) behind a canonical :class:`~emulator.tools.recording.Recorder`, which keeps
out what varies between runs though the answers do not (the port, the SDK's random idempotency keys and
its description of the machine, presigned URL tokens). So the same script and emulator give the same
bytes, and ``tests/test_fixtures.py`` regenerates every recording and fails on any difference. When the
emulator legitimately changes what it answers (a new field, real tokenizer vocabularies...), run this,
read the diff, and commit it with the change.

``fixtures/parity/`` holds recordings the emulator made (:data:`PARITY`), which ``together-rl-emulator parity``
must find faithful, and recordings altered on purpose (:data:`ALTERED`: one alteration each, applied to an
emulator-made one), whose report must show exactly that alteration (``tests/test_parity.py``).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import orjson

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.recording import Recorder, RecordingApp, load_recording
from emulator.tools.server import build_server_app
from emulator.tools.testing import serve_app

ROOT = Path(__file__).resolve().parent.parent
DIRECTORY = ROOT / "fixtures" / "recordings"
PARITY_DIRECTORY = ROOT / "fixtures" / "parity"
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


# --- parity recordings -------------------------------------------------------------------------------------------

def sdk_parity_loop(base_url: str) -> dict[str, Any]:
    """The official SDK's training loop as a user runs it: a LoRA resource and session, 8 steps of
    forward-backward and optim-step with an inference checkpoint every 4, one more step on a batch of 16
    sequences of 2,200 tokens (over the SDK's 0.5 MiB, so it offloads the batch through a presigned upload),
    a training checkpoint, weights sync, a sample, the checkpoint list, an adapter download, stop."""
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

    def sample(tokens: list[int]) -> Any:
        return Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                      loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                      "weights": {"data": [1.0] * (len(tokens) - 1), "dtype": "float32"}})

    small = [sample([1, 2, 3, 4, 5, 6, 7])]
    big = [sample([(97 * i + 31 * j) % 150_000 + 1 for j in range(2201)]) for i in range(16)]
    losses, checkpoints = [], []
    for step in range(1, 10):
        fb = session.trainer.forward_backward(samples=big if step == 9 else small,
                                              loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
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
        paths = download_checkpoint(client, checkpoints[0], variant="CHECKPOINT_VARIANT_ADAPTER", output_dir=out)
        files = sorted(p.name for p in paths)
    session.stop()
    resources.stop()
    return {"losses": len(losses), "checkpoints": len(checkpoints), "listed": len(listed.data or []),
            "sampled": len(sampled.sequences), "files": files}


def api_tour(base_url: str) -> dict[str, Any]:
    """Most of the API by hand (httpx), with the clock moved between calls: the catalog and a price, a
    resource and a session (read, listed a page at a time, updated), training, a sample, checkpoints listed
    by cursor and downloaded, a payload uploaded to its presigned URL and trained on, the Files API's upload
    (302, PUT, preprocess, list, read, delete), three refusals (404, 400, a missing Idempotency-Key), then
    time: the resource's expiry extended, a download URL expired after an hour, the resource stopped for
    inactivity and its session expired with it."""
    seen: list[int] = []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
        def call(method: str, url: str, expect: int = 200, **kw: Any) -> Any:
            resp = c.request(method, url, **kw)
            seen.append(resp.status_code)
            assert resp.status_code == expect, f"{method} {url}: {resp.status_code} {resp.text[:300]}"
            return resp.json() if resp.headers.get("content-type") == "application/json" else resp

        def advance(seconds: float) -> None:
            assert c.post("/_emulator/clock/advance", json={"seconds": seconds}).status_code == 200

        def run(kind: str, body: dict[str, Any], key: str) -> Any:
            op = call("POST", f"{sess}/operations/{kind}", json=body, headers={"Idempotency-Key": key})
            return call("GET", f"{sess}/operations/{kind}/{op['id']}")

        rl = "/v1/rl"
        call("GET", f"{rl}/supported-models")
        call("POST", f"{rl}/model-resources/estimate-cost", json={"base_model": "Qwen/Qwen3.8-27B"})
        r = call("POST", f"{rl}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True})
        call("GET", f"{rl}/model-resources/{r['id']}")
        call("GET", f"{rl}/model-resources", params={"limit": 1})
        s = call("POST", f"{rl}/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"rank": 8}})
        sess = f"{rl}/training-sessions/{s['id']}"
        call("GET", sess)
        call("PATCH", sess, json={"display_name": "tour", "metadata": {"purpose": "parity"}})
        call("GET", f"{rl}/training-sessions", params={"model_resources_id": r["id"]})
        batch = {"samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [5, 6, 7, 8]}}]},
                              "loss_fn_inputs": {"target_tokens": {"data": [6, 7, 8, 9], "dtype": "int64"},
                                                 "weights": {"data": [0, 1, 1, 1], "dtype": "float32"}}}],
                 "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "return_loss_fn_outputs": True}
        run("forward-backward", batch, "fb-1")
        run("optim-step", {"adam_params": {"learning_rate": 1e-4}}, "opt-1")
        run("inference-checkpoint", {}, "ckpt-1")
        run("forward-backward", batch, "fb-2")
        run("optim-step", {"adam_params": {"learning_rate": 1e-4}}, "opt-2")
        run("training-checkpoint", {}, "ckpt-2")
        run("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}, "sync-1")
        run("sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}], "num_samples": 2,
                       "sampling_params": {"max_tokens": 6}, "prompt_logprobs": True}, "sample-1")
        page = call("GET", f"{rl}/checkpoints", params={"session_id": s["id"], "limit": 1})
        older = call("GET", f"{rl}/checkpoints", params={"session_id": s["id"], "limit": 1,
                                                         "after": page["meta"]["next_cursor"]})
        call("GET", f"{rl}/checkpoints/{page['data'][0]['id']}")
        ckpt = older["data"][0]["id"]  # (newest first: the inference checkpoint, which can be downloaded)
        call("GET", f"{rl}/checkpoints/{ckpt}")
        files = call("GET", f"{rl}/checkpoints/{ckpt}/download", params={"variant": "CHECKPOINT_VARIANT_ADAPTER"})
        file_url = files["data"][0]["url"]
        call("GET", file_url, headers={"Authorization": ""})
        upload = call("POST", f"{sess}/payloads/upload-url")
        call("PUT", upload["upload_url"], content=orjson.dumps(batch),  # the whole body, as the SDK uploads it
             headers={"Authorization": "", "Content-Type": "application/json"})
        run("forward-backward", {"payload_id": upload["payload_id"], "samples": batch["samples"],
                                 "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}, "fb-3")
        form = {"purpose": "calibration", "file_name": "calibration.jsonl", "file_type": "jsonl"}
        started = c.post("/v1/files", files={k: (None, v) for k, v in form.items()},  # (a fixed boundary: the same bytes)
                         headers={"Content-Type": "multipart/form-data; boundary=parity-tour-boundary"})
        seen.append(started.status_code)
        file_id = started.headers["x-together-file-id"]
        line = orjson.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        call("PUT", started.headers["location"], content=line + b"\n", headers={"Authorization": ""})
        call("POST", f"/v1/files/{file_id}/preprocess")
        call("GET", "/v1/files")
        call("GET", f"/v1/files/{file_id}")
        call("GET", f"/v1/files/{file_id}/content")
        call("DELETE", f"/v1/files/{file_id}")
        call("GET", f"{rl}/training-sessions/00000000-0000-4000-8000-000000000000", expect=404)
        call("POST", f"{rl}/model-resources", expect=400, json={"lora_enabled": True})
        call("POST", f"{sess}/operations/optim-step", expect=400, json={})
        advance(1800)
        call("GET", f"{rl}/model-resources/{r['id']}")
        call("POST", f"{rl}/model-resources/{r['id']}/extend-expiry", json={"seconds": 3600})
        advance(3000)
        call("GET", file_url, expect=403, headers={"Authorization": ""})  # over an hour after it was handed out
        call("GET", f"{rl}/model-resources/{r['id']}")
        advance(7200)
        call("GET", f"{rl}/model-resources/{r['id']}")
        call("GET", sess)
    return {"statuses": seen}


PARITY: dict[str, Recording] = {
    "sdk-training-loop": Recording(sdk_parity_loop, Config(clock="manual", seed=11, validate_responses=True)),
    "api-tour": Recording(api_tour, Config(clock="manual", seed=12, validate_responses=True)),
}


# --- recordings altered on purpose: each one alteration of an emulator-made one -----------------------------------

Entries = list[dict[str, Any]]


def _body(entry: dict[str, Any]) -> Any:
    return orjson.loads(entry["response"]["body"]["text"])


def _set_body(entry: dict[str, Any], body: Any) -> None:
    entry["response"]["body"] = {"text": orjson.dumps(body).decode()}


def _nth(entries: Entries, method: str, path: str, n: int = 0) -> dict[str, Any]:
    """The n-th exchange with this method whose path matches ``path`` (a regular expression, ``ID`` for an id)."""
    pattern = re.compile(path.replace("ID", "[^/]+"))
    found = [e for e in entries if e["request"]["method"] == method and pattern.fullmatch(e["request"]["path"])]
    return found[n]


def renamed_field(entries: Entries) -> Entries:
    """The first GET of the model resource answers `lora` where the API says `lora_enabled`."""
    entry = _nth(entries, "GET", "/v1/rl/model-resources/ID")
    body = _body(entry)
    body = {("lora" if k == "lora_enabled" else k): v for k, v in body.items()}
    _set_body(entry, body)
    return entries


def extra_enum_value(entries: Entries) -> Entries:
    """The checkpoint list shows its first checkpoint with a type the contract does not know."""
    entry = _nth(entries, "GET", "/v1/rl/checkpoints")
    body = _body(entry)
    body["data"][0]["type"] = "CHECKPOINT_TYPE_MERGED"
    _set_body(entry, body)
    return entries


def other_status_code(entries: Entries) -> Entries:
    """The session is created with 201 where the API answers 200."""
    _nth(entries, "POST", "/v1/rl/training-sessions")["response"]["status"] = 201
    return entries


def reordered_lifecycle(entries: Entries) -> Entries:
    """The model resource's first two statuses are swapped: created READY, then read PENDING."""
    create, first_read = _nth(entries, "POST", "/v1/rl/model-resources"), _nth(entries, "GET", "/v1/rl/model-resources/ID")
    a, b = _body(create), _body(first_read)
    a["status"], b["status"] = b["status"], a["status"]
    _set_body(create, a)
    _set_body(first_read, b)
    return entries


def missing_field(entries: Entries) -> Entries:
    """The first GET of the session leaves out `step`."""
    entry = _nth(entries, "GET", "/v1/rl/training-sessions/ID")
    body = _body(entry)
    del body["step"]
    _set_body(entry, body)
    return entries


@dataclass(frozen=True)
class Altered:
    base: str
    alter: Callable[[Entries], Entries]


ALTERED: dict[str, Altered] = {
    "altered-renamed-field": Altered("api-tour", renamed_field),
    "altered-extra-enum-value": Altered("api-tour", extra_enum_value),
    "altered-status-code": Altered("api-tour", other_status_code),
    "altered-lifecycle-order": Altered("api-tour", reordered_lifecycle),
    "altered-missing-field": Altered("api-tour", missing_field),
}


def altered(name: str, base: Path) -> str:
    """The text of altered recording ``name``: its alteration applied to the recording at ``base``."""
    entries = ALTERED[name].alter(copy.deepcopy(load_recording(str(base))))
    return "".join(orjson.dumps(e).decode() + "\n" for e in entries)


def record(name: str, out: Path, table: dict[str, Recording] | None = None) -> dict[str, Any]:
    """Run recording ``name`` against a fresh emulator into ``out`` (replaced); the client's summary."""
    recording = (table or RECORDINGS)[name]
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
    every = {**{n: "recordings" for n in RECORDINGS}, **{f"parity/{n}": "parity" for n in PARITY},
             **{f"parity/{n}": "altered" for n in ALTERED}}
    names = argv or list(every)
    unknown = [n for n in names if n not in every]
    if unknown:
        print(f"no recording {', '.join(unknown)}; recordings: {', '.join(every)}", file=sys.stderr)
        return 2
    # the emulator-made ones first: the altered ones are made from them
    for name in sorted(names, key=lambda n: every[n] == "altered"):
        kind, short = every[name], name.removeprefix("parity/")
        target = (DIRECTORY if kind == "recordings" else PARITY_DIRECTORY) / f"{short}.jsonl"
        fresh = target.with_suffix(".jsonl.new")
        if kind == "altered":
            fresh.write_text(altered(short, PARITY_DIRECTORY / f"{ALTERED[short].base}.jsonl"))
        else:
            record(short, fresh, RECORDINGS if kind == "recordings" else PARITY)
        os.replace(fresh, target)
        print(f"wrote {target.relative_to(ROOT)} ({sum(1 for _ in target.open())} exchanges, "
              f"{target.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
