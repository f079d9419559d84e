"""Replay for demos: rewind and loop, pacing by the recorded times, the clock/docs/dashboard of a replay
server, near-miss reports, and recording started and stopped at run time, then replayed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.recording import load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.testing import serve_app
from tests.conftest import make_client
from tests.helpers import BASE, RL, advance, assert_error, run_op

FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
      "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                                      "weights": {"data": [1, 1, 1], "dtype": "float32"}}}]}


def client_run(c: TestClient) -> list[Any]:
    """A small client: what it saw, in order (ids included)."""
    seen: list[Any] = []
    r = c.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True})
    seen.append(r.json())
    rid = r.json()["id"]
    seen.append(c.get(f"{RL}/model-resources/{rid}").json())
    s = c.post(f"{RL}/training-sessions", json={"model_resources_id": rid, "lora_config": {"rank": 8},
                                                "display_name": "demo"}).json()
    seen.append(s)
    c.get(f"{RL}/training-sessions/{s['id']}")  # (RUNNING once read, under the instant profile)
    op = c.post(f"{RL}/training-sessions/{s['id']}/operations/forward-backward", json=FB,
                headers={"Idempotency-Key": "fb-1"}).json()
    seen.append(c.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{op['id']}").json())
    return seen


def record_at_run_time(tmp_path: Path, *, seconds_between: float = 0.0) -> tuple[Path, list[Any]]:
    """Record ``client_run`` between /_emulator/recording/start and /stop; download it to a file."""
    with make_client(Runtime(Config(clock="manual")), token="rec-key") as c:
        c.get(f"{RL}/model-resources")  # before the start: not recorded
        assert c.post("/_emulator/recording/start", json={"canonical": True}).json()["recording"] is True
        assert_error(c.post("/_emulator/recording/start"), 400)  # already on
        seen: list[Any] = []
        if seconds_between:
            # spread the exchanges over virtual time, for pacing
            orig = c.request

            def spaced(*args: Any, **kwargs: Any) -> Any:
                resp = orig(*args, **kwargs)
                if not str(args[1]).startswith("/_emulator"):
                    advance(c, seconds_between)
                return resp

            c.request = spaced  # type: ignore[method-assign]
        seen = client_run(c)
        c.request = TestClient.request.__get__(c)  # type: ignore[method-assign]
        status = c.post("/_emulator/recording/stop").json()
        c.get(f"{RL}/model-resources")  # after the stop: not recorded
        got = c.get("/_emulator/recording")
        assert got.status_code == 200 and got.headers["content-type"] == "application/x-ndjson"
    path = tmp_path / "run.jsonl"
    path.write_text(got.text)
    assert status["recording"] is False and status["exchanges"] == len(got.text.splitlines())
    return path, seen


def test_recording_started_at_run_time_replays_byte_for_byte_twice_with_a_rewind(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path)
    entries = load_recording(str(path))
    # Only what happened between start and stop, advances of the clock included; no recording's own calls.
    paths = [e["request"]["path"] for e in entries]
    assert paths[0] == f"{RL}/model-resources" and entries[0]["request"]["method"] == "POST"
    assert not any(p.startswith("/_emulator/recording") for p in paths)
    app = ReplayApp(entries)
    replay = TestClient(app, base_url="http://127.0.0.1:8765", headers={"Authorization": "Bearer x"})
    assert client_run(replay) == seen
    # The same client again: one-shot without a rewind...
    again = replay.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True})
    assert assert_error(again, 404)["code"] == "no_recorded_answer"
    assert "already answered" in again.json()["error"]["message"]
    # ...and the whole run again after one.
    rewound = replay.post("/_emulator/replay/rewind").json()
    assert rewound["rewinds"] == 1 and rewound["unused"] == len(entries)
    assert client_run(replay) == seen
    # Re-recorded through the replay, canonically, the recording is the same bytes.
    with make_client(Runtime(Config(clock="manual")), token="rec-key") as c:
        c.post("/_emulator/recording/start", json={"canonical": True})
        assert client_run(c) == seen
        c.post("/_emulator/recording/stop")
        assert c.get("/_emulator/recording").text == path.read_text()


def test_loop_starts_over_by_itself(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path)
    app = ReplayApp(load_recording(str(path)), loop=True)
    replay = TestClient(app, base_url="http://127.0.0.1:8765")
    for _ in range(3):
        assert client_run(replay) == seen
    report = replay.get("/_emulator/replay").json()
    assert report["rewinds"] == 2 and report["unanswered_total"] == 0 and report["loop"] is True


def test_pacing_waits_for_the_manual_replay_clock(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path, seconds_between=30)
    entries = load_recording(str(path))
    assert entries[1]["at"] == "2026-01-01T00:00:30.000Z"  # (the recording's own times)
    app = ReplayApp(entries, pace=1.0, clock="manual")
    with serve_app(app) as url:
        import httpx

        with httpx.Client(base_url=url) as http:
            first = http.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True})
            assert first.json() == seen[0]  # the first answer starts the pass: at once
            done: list[Any] = []
            waiting = threading.Thread(target=lambda: done.append(
                http.get(f"{RL}/model-resources/{seen[0]['id']}")))
            waiting.start()
            time.sleep(0.3)
            assert done == []  # due 30 s of replay time later; the clock does not move by itself
            assert http.post("/_emulator/clock/advance", json={"seconds": 29}).json()["now"] == "2026-01-01T00:00:29.000Z"
            time.sleep(0.2)
            assert done == []
            http.post("/_emulator/clock/advance", json={"seconds": 1})
            waiting.join(5)
            assert done and done[0].json() == seen[1]


@pytest.mark.alone
def test_pacing_at_a_speed_takes_the_recorded_span_divided_by_it(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path, seconds_between=20)
    entries = [e for e in load_recording(str(path)) if not e["request"]["path"].startswith("/_emulator")]
    app = ReplayApp(entries, pace=100.0)  # 60 s of recorded time between the 1st and 4th answer: 0.6 s
    replay = TestClient(app, base_url="http://127.0.0.1:8765")
    start = time.monotonic()
    assert client_run(replay) == seen
    elapsed = time.monotonic() - start
    span = 60 / 100
    assert span * 0.9 <= elapsed < span + 1.5, elapsed
    unpaced = TestClient(ReplayApp(entries), base_url="http://127.0.0.1:8765")
    start = time.monotonic()
    client_run(unpaced)
    assert time.monotonic() - start < span * 0.8
    # Unpaced, the replay clock reads the recorded time of the latest answer.
    assert unpaced.get("/_emulator/clock").json()["now"] == entries[-1]["at"]


def test_a_near_miss_names_the_closest_recorded_request_and_how_it_differs(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path)
    app = ReplayApp(load_recording(str(path)))
    replay = TestClient(app, base_url="http://127.0.0.1:8765")
    replay.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True})
    rid = seen[0]["id"]
    wrong = replay.get(f"{RL}/model-resources/{rid[:-4]}abcd")
    error = assert_error(wrong, 404)
    assert error["code"] == "no_recorded_answer"
    assert f"closest recorded request: #2 GET {RL}/model-resources/{rid}" in error["message"]
    assert f"path segment 4: '{rid[:-4]}abcd', recorded '{rid}'" in error["message"]
    posted = replay.put(f"{RL}/training-sessions", json={"model_resources_id": rid, "lora_config": {"rank": 16}})
    message = assert_error(posted, 404)["message"]
    assert "method PUT, recorded POST" in message
    assert "body.lora_config.rank: sent 16, recorded 8" in message and "body.display_name: sent (absent), recorded \"demo\"" in message
    report = replay.get("/_emulator/replay").json()
    assert report["unanswered"][-1] == f"PUT {RL}/training-sessions"
    assert "body.lora_config.rank" in report["near_misses"][-1]


def test_the_replay_server_has_docs_a_clock_and_a_dashboard_with_the_admin_token(tmp_path: Path) -> None:
    path, seen = record_at_run_time(tmp_path)
    app = ReplayApp(load_recording(str(path)), admin_token="s3cret")
    replay = TestClient(app, base_url="http://127.0.0.1:8765")
    admin = {"X-Emulator-Admin-Token": "s3cret"}
    assert replay.get("/docs/").status_code == 200
    assert replay.get("/openapi.json").json()["info"]["title"]
    assert replay.get("/docs/admin/openapi.json").status_code == 200
    assert replay.get("/", headers={"Accept": "text/html"}, follow_redirects=False).headers["location"] == "/_emulator/ui"
    for path_, method in (("/_emulator/replay", "GET"), ("/_emulator/replay/rewind", "POST"),
                          ("/_emulator/clock", "GET"), ("/_emulator/ui", "GET"), ("/_emulator/ui/api/tenants", "GET")):
        assert assert_error(replay.request(method, path_), 401)["code"] == "invalid_admin_token", path_
    assert replay.get("/_emulator/health").status_code == 200
    assert replay.get("/_emulator/clock", headers=admin).json()["mode"] == "manual"
    assert_error(replay.post("/_emulator/clock/advance", json={"seconds": -1}, headers=admin), 400)
    assert_error(replay.get("/_emulator/replay/rewind", headers=admin), 405)
    client_run(TestClient(app, base_url="http://127.0.0.1:8765"))
    page = replay.get("/_emulator/ui?admin_token=s3cret")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    view = replay.get("/_emulator/ui/api/tenants/replay", headers=admin).json()
    assert [s["display_name"] for s in view["sessions"]] == ["demo"]
    assert view["losses"] == [{"session_id": seen[2]["id"], "label": "demo", "x": [1],
                               "loss": [seen[3]["output"]["loss"]]}]
    [resource_row, session_row] = view["timeline"]["rows"]
    assert [m["kind"] for m in session_row["marks"]] == ["forward-backward"]
    assert view["replay"]["answered"] == view["replay"]["recorded"] == 6  # (the client made 6 requests)


def test_recording_to_the_record_file_pauses_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    with make_client(Runtime(Config(clock="manual", record_file=str(out)))) as c:
        c.get(f"{RL}/model-resources")
        assert c.post("/_emulator/recording/stop").json() == {"recording": False, "file": str(out), "exchanges": 1,
                                                              "canonical": False, "truncated": False}
        # One file, one kind: a canonical stretch inside a plain file is refused, not silently plain.
        refused = assert_error(c.post("/_emulator/recording/start", json={"canonical": True}), 400)
        assert "--record-canonical" in refused["message"]
        c.get(f"{RL}/supported-models")  # paused
        c.post("/_emulator/recording/start")
        c.get(f"{RL}/model-resources")
        assert assert_error(c.get("/_emulator/recording"), 400)["code"] == "recording_state"
    assert [e["request"]["path"] for e in load_recording(str(out))] == [f"{RL}/model-resources"] * 2
    assert [e["seq"] for e in load_recording(str(out))] == [1, 2]


def test_record_canonical_writes_the_same_bytes_for_the_same_client(tmp_path: Path) -> None:
    """``serve --record F --record-canonical``: two runs of one client (SDK-style random Idempotency-Keys, a
    User-Agent, a different Host) give byte-identical files, with none of those in them."""
    import uuid

    def run(out: Path, host: str) -> bytes:
        config = Config(clock="manual", seed=3, record_file=str(out), record_canonical=True)
        with make_client(Runtime(config)) as c:
            headers = {"User-Agent": f"client/{uuid.uuid4()}", "Host": host}
            r = c.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True},
                       headers={**headers, "Idempotency-Key": str(uuid.uuid4())}).json()
            c.get(f"{RL}/model-resources/{r['id']}", headers=headers)
            assert c.post("/_emulator/recording/stop").json()["canonical"] is True
        return out.read_bytes()

    first, second = run(tmp_path / "a.jsonl", "127.0.0.1:8765"), run(tmp_path / "b.jsonl", "localhost:9999")
    assert first == second and first.count(b"\n") == 2
    assert b"client/" not in first and b"key-1" in first and b"9999" not in first


def test_record_canonical_needs_a_record_file() -> None:
    from emulator.config import ConfigError

    with pytest.raises(ConfigError, match="--record-canonical .* --record FILE"):
        Config(record_canonical=True)


@pytest.mark.parametrize("speed", ["0", "x"])
def test_replay_pace_refuses_a_bad_speed_in_one_line(speed: str, capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["replay", "sdk-training-loop", "--pace", speed])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "SPEED must be > 0" in err or "'x' is not a number" in err



def test_the_replay_dashboard_pairs_sample_prompts_with_their_completions(tmp_path: Path) -> None:
    from emulator.compute import tokenizers

    with make_client(Runtime(Config(clock="manual")), token="rec-key") as c:
        c.post("/_emulator/recording/start")
        r = c.post(f"{RL}/model-resources", json={"base_model": BASE, "lora_enabled": True}).json()
        s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"rank": 8}}).json()
        c.get(f"{RL}/training-sessions/{s['id']}")
        done = run_op(c, s["id"], "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [9707, 11]}}]}],
                                             "num_samples": 2, "sampling_params": {"max_tokens": 4}})
        c.post("/_emulator/recording/stop")
        (tmp_path / "s.jsonl").write_text(c.get("/_emulator/recording").text)
    app = ReplayApp(load_recording(str(tmp_path / "s.jsonl")))
    replay = TestClient(app, base_url="http://127.0.0.1:8765")
    for e in app.entries:  # the client again, request for request
        req = e["request"]
        replay.request(req["method"], req["path"], content=req["body"].get("text", "").encode())
    [smp] = replay.get("/_emulator/ui/api/tenants/replay").json()["samples"]
    [result] = smp["results"]
    assert result["prompt"] == [9707, 11] and result["prompt_text"] == tokenizers.decode([9707, 11], "qwen3.5")
    completions = done["output"]["results"][0]["sequences"]
    assert [seq["tokens"] for seq in result["sequences"]] == [seq["tokens"] for seq in completions]
    assert result["sequences"][0]["text"] == tokenizers.decode([int(t) for t in completions[0]["tokens"]], "qwen3.5")
