"""Record and replay byte for byte; state that survives kill -9; corrupt state files refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from emulator.config import Config
from emulator.tools.recording import load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.testing import serve_app, serve_in_thread

AUTH = {"Authorization": "Bearer rec-key"}
ROOT = Path(__file__).resolve().parent.parent


def _session_script(base: str) -> list[tuple[int, bytes]]:
    out = []
    with httpx.Client(base_url=base, headers=AUTH) as c:
        def call(method: str, url: str, **kw: object) -> dict:
            resp = c.request(method, url, **kw)
            out.append((resp.status_code, resp.content))
            return resp.json()

        r = call("POST", "/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
        call("GET", f"/v1/rl/model-resources/{r['id']}")
        s = call("POST", "/v1/rl/training-sessions", json={"model_resources_id": r["id"]})
        call("GET", f"/v1/rl/training-sessions/{s['id']}")
        op = call("POST", f"/v1/rl/training-sessions/{s['id']}/operations/sample",
                  headers={"Idempotency-Key": "a"},
                  json={"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}], "num_samples": 2})
        call("GET", f"/v1/rl/training-sessions/{s['id']}/operations/sample/{op['id']}")
        call("GET", "/v1/rl/model-resources/00000000-0000-4000-8000-000000000000")
    return out


def test_recorded_session_replays_byte_for_byte(tmp_path: Path) -> None:
    recording = tmp_path / "demo.jsonl"
    with serve_in_thread(Config(clock="manual", seed=5, record_file=str(recording))) as (url, _):
        original = _session_script(url)
    entries = load_recording(str(recording))
    assert len(entries) == len(original)
    assert all(e["request"]["headers"]["authorization"] == "Bearer <redacted>" for e in entries)
    assert "rec-key" not in recording.read_text()
    replay = ReplayApp(entries)
    with serve_app(replay) as url:
        replayed = _session_script(url)
        extra = httpx.get(f"{url}/v1/rl/model-resources", headers=AUTH)
    assert replayed == original
    assert extra.status_code == 404 and extra.json()["error"]["code"] == "no_recorded_answer"
    assert replay.report()["unanswered"] == ["GET /v1/rl/model-resources"]


def test_record_proxy_records_an_upstream(tmp_path: Path) -> None:
    from emulator.tools.proxy import ProxyApp
    from emulator.tools.recording import Recorder

    out = tmp_path / "proxy.jsonl"
    with serve_in_thread(Config(clock="manual")) as (upstream, _):
        with serve_app(ProxyApp(upstream, Recorder(str(out), lambda: 0.0))) as proxy:
            resp = httpx.get(f"{proxy}/v1/rl/supported-models", headers=AUTH)
            assert resp.status_code == 200 and resp.json()["data"]
    entries = load_recording(str(out))
    assert [e["request"]["path"] for e in entries] == ["/v1/rl/supported-models"]
    assert entries[0]["response"]["status"] == 200


def _start(state_file: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "serve", "--port", "0", "--clock", "manual",
                             "--state-file", str(state_file), *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise AssertionError(f"emulator did not start: {line} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.rsplit(" ", 1)[1].strip()


def test_state_survives_kill_9(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    proc, url = _start(state_file)
    try:
        with httpx.Client(base_url=url, headers=AUTH) as c:
            r = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
            c.get(f"/v1/rl/model-resources/{r['id']}")
            s = c.post("/v1/rl/training-sessions", json={"model_resources_id": r["id"]}).json()
            c.get(f"/v1/rl/training-sessions/{s['id']}")
            c.post(f"/v1/rl/training-sessions/{s['id']}/operations/optim-step", headers={"Idempotency-Key": "1"},
                   json={})
            c.post("/_emulator/clock/advance", json={"seconds": 30})
            before = c.get(f"/v1/rl/training-sessions/{s['id']}").json()
            assert before["step"] == "1"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc, url = _start(state_file)
    try:
        with httpx.Client(base_url=url, headers=AUTH) as c:
            after = c.get(f"/v1/rl/training-sessions/{s['id']}").json()
            assert after == before
            assert c.get("/_emulator/clock").json()["now"] == "2026-01-01T00:00:30.000Z"
            # The id counter was restored too: a new object gets a fresh id.
            r2 = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
            assert r2["id"] != r["id"]
            again = c.post(f"/v1/rl/training-sessions/{s['id']}/operations/optim-step",
                           headers={"Idempotency-Key": "1"}, json={}).json()
            assert again["status"] == "TRAINING_OPERATION_STATUS_COMPLETED"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": "other"}),
                                     json.dumps({"format": "together-rl-emulator/state", "version": 99})])
def test_corrupt_state_file_is_refused(tmp_path: Path, content: str) -> None:
    state_file = tmp_path / "state.json"
    state_file.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "emulator", "serve", "--port", "0", "--state-file",
                           str(state_file)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot be used" in proc.stderr and "never overwrites" in proc.stderr
    assert state_file.read_text() == content


def test_state_export_import_roundtrip(tmp_path: Path) -> None:
    with serve_in_thread(Config(clock="manual")) as (url, _):
        with httpx.Client(base_url=url, headers=AUTH) as c:
            r = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
            c.get(f"/v1/rl/model-resources/{r['id']}")
            doc = c.get("/_emulator/state").json()
    with serve_in_thread(Config(clock="manual")) as (url, _):
        with httpx.Client(base_url=url, headers=AUTH) as c:
            assert c.put("/_emulator/state", json=doc).status_code == 200
            assert c.get(f"/v1/rl/model-resources/{r['id']}").json()["status"] == "MODEL_RESOURCES_STATUS_READY"
            assert c.put("/_emulator/state", json={"format": "x", "version": 1}).status_code == 400
    _ = os.environ  # keep imports used
    _ = time
