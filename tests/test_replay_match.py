"""Replay's matching rules (emulator/tools/replay_match.py, issue 42 item 3): strict matches the body too, under
parity's normalization; loose matches method, path and query only; the near-miss report names the actual reason,
the most specific first (already answered, then the body, then the closest recorded request)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from emulator import fixture_files
from emulator.tools import replay as replay_module
from emulator.tools.recording import load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.replay_match import MATCH_RULES
from emulator.tools.testing import serve_app
from tests.helpers import RL, assert_error

ROOT = Path(__file__).resolve().parent.parent


def exchange(seq: int, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             content_type: str = "application/json", answer: Any = None) -> dict[str, Any]:
    """A recorded exchange, as a recording's line holds it."""
    text = raw.decode() if raw is not None else ("" if body is None else orjson.dumps(body).decode())
    return {"seq": seq, "at": "2026-01-01T00:00:00.000Z", "base_url": "http://127.0.0.1:8765",
            "request": {"method": method, "path": path, "query": "", "headers": {"content-type": content_type},
                        "body": {"text": text}},
            "response": {"status": 200, "headers": {"content-type": "application/json"},
                         "body": {"text": orjson.dumps(answer if answer is not None else {"seq": seq}).decode()}}}


def client(entries: list[dict[str, Any]], **kwargs: Any) -> TestClient:
    return TestClient(ReplayApp(entries, **kwargs), base_url="http://127.0.0.1:8765")


def miss(response: Any) -> str:
    message: str = assert_error(response, 404)["message"]
    assert assert_error(response, 404)["code"] == "no_recorded_answer"
    return message


def shipped() -> list[dict[str, Any]]:
    return load_recording(fixture_files.resolve("recordings", "sdk-training-loop"))


def send(c: TestClient, entry: dict[str, Any]) -> Any:
    """A recorded request again, as its client sent it."""
    r = entry["request"]
    return c.request(r["method"], r["path"] + (f"?{r['query']}" if r.get("query") else ""),
                     content=r["body"].get("text", "").encode(), headers=r.get("headers") or {})


# --- the rules -------------------------------------------------------------------------------------------------------

@pytest.mark.sdk
def test_the_readme_quick_start_is_refused_by_the_shipped_replay_naming_the_body(tmp_path: Path) -> None:
    """Another client's requests no longer get this client's answers (they got 8 tokens for max_tokens 3)."""
    from tests.test_readme import block

    (tmp_path / "quickstart.py").write_text(block("A first training loop", 3).body)

    def quick_start(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "TOGETHER_BASE_URL": url, "TOGETHER_API_KEY": "any-key"})

    strict = ReplayApp(shipped())
    with serve_app(strict) as url:
        run = quick_start(url)
    assert run.returncode != 0 and "1 2 3 4 ->" not in run.stdout
    assert ("no recorded answer for POST /v1/rl/model-resources; the body differs from recorded #1 (the same "
            "method, path and query): body.compute_config: sent (absent), recorded {\"num_generator_replicas\":1}"
            in run.stderr), run.stderr[-2000:]
    assert strict.report()["answered"] == 0 and strict.report()["match"] == "strict"
    # --match loose is the old behaviour: any client gets the recorded answers (the 8 sampled tokens included).
    loose = ReplayApp(shipped(), match="loose")
    with serve_app(loose) as url:
        run = quick_start(url)
    assert run.returncode == 0, run.stderr[-2000:]
    [line] = [x for x in run.stdout.splitlines() if x.startswith("1 2 3 4 ->")]
    assert len(orjson.loads(line.split("->")[1])) == 8


def test_strict_names_the_body_field_that_differs_and_loose_answers_it() -> None:
    entries = shipped()
    [sample] = [i for i, e in enumerate(entries) if e["request"]["path"].endswith("/operations/sample")]
    body = orjson.loads(entries[sample]["request"]["body"]["text"])
    assert body["sampling_params"] == {"max_tokens": 8}
    mine = orjson.dumps({**body, "sampling_params": {"max_tokens": 3}})
    for mode in ("strict", "loose"):
        c = client(entries, match=mode)
        for e in entries[:sample]:
            assert send(c, e).status_code == e["response"]["status"]
        got = c.post(entries[sample]["request"]["path"], content=mine, headers={"Content-Type": "application/json"})
        if mode == "strict":
            assert (f"the body differs from recorded #{sample + 1} (the same method, path and query): "
                    "body.sampling_params.max_tokens: sent 3, recorded 8") in miss(got)
        else:
            assert got.status_code == 200 and got.json()["id"] == orjson.loads(
                entries[sample]["response"]["body"]["text"])["id"]


def test_the_client_that_recorded_replays_strictly_with_other_headers() -> None:
    """The shipped recording's own requests, each with a random Idempotency-Key and another User-Agent: all answered
    (headers are never compared), in order."""
    import uuid

    entries = shipped()
    c = client(entries)
    for e in entries:
        r = e["request"]
        headers = {**(r.get("headers") or {}), "Idempotency-Key": str(uuid.uuid4()), "User-Agent": "other/1"}
        got = c.request(r["method"], r["path"] + (f"?{r['query']}" if r.get("query") else ""),
                        content=r["body"].get("text", "").encode(), headers=headers)
        assert got.status_code == e["response"]["status"], got.text
    report = c.get("/_emulator/replay").json()
    assert report["answered"] == len(entries) and report["unanswered_total"] == 0


@pytest.mark.sdk
def test_the_sdk_client_with_an_offloaded_batch_replays_strictly() -> None:
    """At a real client's size: the parity loop's 16 x 2,200-token batch goes over the SDK's 0.5 MiB, so it is
    uploaded to a presigned URL (a large PUT body) and named by payload_id; the same client replays it strictly."""
    from tests.recordings import PARITY

    entries = load_recording(fixture_files.resolve("parity", "sdk-training-loop"))
    assert max(len(e["request"]["body"].get("text", "")) for e in entries) > 512 * 1024
    app = ReplayApp(entries)
    with serve_app(app) as url:
        PARITY["sdk-training-loop"].drive(url)
    report = app.report()
    assert (report["answered"], report["unanswered"]) == (len(entries), [])


def test_ids_a_recorded_answer_holds_must_be_sent_as_recorded_others_are_mapped_once() -> None:
    answer = {"id": "res-1", "members": [], "session_ids": ["s-1"]}
    entries = [exchange(1, "POST", "/v1/things", {"name": "a"}, answer=answer),
               exchange(2, "POST", "/v1/links", {"thing_id": "res-1", "base_id": "pre-1"}),
               exchange(3, "POST", "/v1/links", {"thing_id": "s-1", "base_id": "pre-1"})]
    c = client(entries)
    assert c.post("/v1/things", json={"name": "a"}).status_code == 200
    # res-1 was handed out by a recorded answer: another id in its place is a difference...
    message = miss(c.post("/v1/links", json={"thing_id": "res-9", "base_id": "pre-1"}))
    assert "body.thing_id: sent res-9, recorded res-1 (an id the recorded answers hand out" in message
    # ...while pre-1 (no recorded answer holds it: it existed before the recording) maps to what is sent first...
    assert c.post("/v1/links", json={"thing_id": "res-1", "base_id": "mine-1"}).json() == {"seq": 2}
    # ...and after that stands for mine-1 only.
    message = miss(c.post("/v1/links", json={"thing_id": "s-1", "base_id": "mine-2"}))
    assert "body.base_id: sent mine-2, recorded pre-1 (mine-1 stood for it earlier)" in message
    assert c.post("/v1/links", json={"thing_id": "s-1", "base_id": "mine-1"}).json() == {"seq": 3}
    # A rewind is a new pass, perhaps a new client: what it maps starts over.
    c.post("/_emulator/replay/rewind")
    c.post("/v1/things", json={"name": "a"})
    assert c.post("/v1/links", json={"thing_id": "res-1", "base_id": "mine-7"}).json() == {"seq": 2}


def test_timestamps_by_type_urls_by_shape_numbers_by_value_key_order_and_an_empty_body() -> None:
    recorded = {"not_before": "2026-01-01T00:00:00Z", "started_at": 5, "learning_rate": 1,
                "callback": "http://127.0.0.1:8765/_files/payloads/redacted-token-1"}
    entries = [exchange(1, "POST", "/v1/a", recorded), exchange(2, "POST", "/v1/a", recorded),
               exchange(3, "POST", "/v1/b", {}), exchange(4, "POST", "/v1/c", None)]
    c = client(entries)
    sent = {"learning_rate": 1.0, "callback": "http://localhost:9999/_files/payloads/redacted-token-1",
            "started_at": 7, "not_before": "2031-05-05T10:00:00.5+02:00"}
    assert c.post("/v1/a", content=orjson.dumps(sent), headers={"Content-Type": "application/json"}).json() == {"seq": 1}
    message = miss(c.post("/v1/a", json={**sent, "not_before": 17, "learning_rate": 2}))
    assert "body.not_before: sent integer, recorded RFC 3339 string" in message
    assert "body.learning_rate: sent 2, recorded 1" in message
    assert miss(c.post("/v1/a", json={**sent, "callback": "not a url"})).count("body.callback") == 1
    assert c.post("/v1/b").json() == {"seq": 3}                   # an empty body is {}
    assert c.post("/v1/c", json={}).json() == {"seq": 4}          # and {} an empty one


def test_a_multipart_body_matches_whatever_its_boundary() -> None:
    def form(boundary: str, content: str) -> bytes:
        return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n"
                f"{content}\r\n--{boundary}--\r\n").encode()

    entries = [exchange(n, "POST", "/v1/files", raw=form("rec-boundary", '{"x": 1}'),
                        content_type="multipart/form-data; boundary=rec-boundary") for n in (1, 2)]
    c = client(entries)
    got = c.post("/v1/files", content=form("a1b2c3", '{"x": 1}'),
                 headers={"Content-Type": "multipart/form-data; boundary=a1b2c3"})
    assert got.json() == {"seq": 1}
    other = form("d4e5", '{"x": 2}')
    message = miss(c.post("/v1/files", content=other, headers={"Content-Type": "multipart/form-data; boundary=d4e5"}))
    assert "the body differs from recorded #2" in message
    recorded = form("rec-boundary", '{"x": 1}')
    assert f"body: sent {len(other)} bytes, recorded {len(recorded)} bytes" in message


def test_a_body_too_large_to_compare_field_by_field_matches_by_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "MAX_COMPARED_BYTES", 1024)
    big = {"tokens": list(range(600))}
    entries = [exchange(1, "PUT", "/_files/payloads/redacted-token-1", big),
               exchange(2, "PUT", "/_files/payloads/redacted-token-1", big)]
    c = client(entries)
    assert c.put("/_files/payloads/redacted-token-1", content=orjson.dumps(big)).json() == {"seq": 1}
    # The same JSON written otherwise is the same request under the rules, but past the limit only bytes count.
    message = miss(c.put("/_files/payloads/redacted-token-1", content=orjson.dumps(big, option=orjson.OPT_INDENT_2)))
    assert "too large to compare field by field" in message


def test_loose_matches_method_path_and_query_only() -> None:
    entries = [exchange(1, "POST", "/v1/a", {"x": 1}), exchange(2, "GET", "/v1/a")]
    c = client(entries, match="loose")
    assert c.post("/v1/a", json={"x": 2, "y": 3}).json() == {"seq": 1}
    assert miss(c.get("/v1/a?limit=1")).startswith("no recorded answer for GET /v1/a?limit=1; closest recorded "
                                                    "request: #2 GET /v1/a; differs in query 'limit=1', recorded ''")
    assert c.get("/_emulator/replay").json()["match"] == "loose"


def test_an_unknown_match_mode_is_refused() -> None:
    from emulator.__main__ import main

    with pytest.raises(ValueError, match="--match must be one of strict, loose"):
        ReplayApp([], match="fuzzy")
    with pytest.raises(SystemExit) as exc:
        main(["replay", "sdk-training-loop", "--match", "fuzzy"])
    assert exc.value.code == 2


def test_the_rules_are_the_ones_the_docs_list() -> None:
    """README's "Matching rules" (or the docs page it moved to) lists MATCH_RULES, word for word."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    sections = [p.read_text().split("# Matching rules", 1)[1].split("\n#", 1)[0] for p in pages
                if "# Matching rules" in p.read_text()]
    assert len(sections) == 1, "one page documents replay's matching rules"
    for what, how in MATCH_RULES:
        assert f"| {what} | {how} |" in sections[0], what


# --- the near-miss report names the actual reason ---------------------------------------------------------------------

def test_replaying_twice_without_a_rewind_says_already_answered_at_its_step() -> None:
    entries = shipped()
    c = client(entries)
    for e in entries:
        send(c, e)
    message = miss(send(c, entries[0]))
    assert message == ("no recorded answer for POST /v1/rl/model-resources; already answered: this request was "
                       "answered at step 1 of this pass (recorded #1); rewind with POST /_emulator/replay/rewind to "
                       "answer it again, or replay with --loop")
    assert "already answered" in miss(send(c, entries[5])) and "step 6 of this pass (recorded #6)" in miss(send(c, entries[5]))


def test_loose_second_run_of_another_client_says_already_answered_not_a_body_field() -> None:
    """The issue's second report: run again, it named body.compute_config.num_generator_replicas."""
    c = client(shipped(), match="loose")
    quick_start = {"base_model": "Qwen/Qwen3.8-27B"}
    assert c.post(f"{RL}/model-resources", json=quick_start).status_code == 200
    message = miss(c.post(f"{RL}/model-resources", json=quick_start))
    assert "already answered" in message and "compute_config" not in message


def test_an_exact_request_already_answered_beats_an_unused_one_with_another_body() -> None:
    entries = [exchange(1, "POST", "/v1/a", {"x": 1}), exchange(2, "POST", "/v1/a", {"x": 2})]
    c = client(entries)
    assert c.post("/v1/a", json={"x": 1}).json() == {"seq": 1}
    message = miss(c.post("/v1/a", json={"x": 1}))
    assert "already answered: this request was answered at step 1 of this pass (recorded #1)" in message
    assert "#2" not in message and "differs" not in message


def test_a_body_difference_names_the_closest_exchange_of_the_route() -> None:
    entries = [exchange(1, "POST", "/v1/a", {"a": 1, "b": 1, "c": 1}), exchange(2, "POST", "/v1/a", {"a": 2, "b": 2, "c": 1}),
               exchange(3, "POST", "/v1/a", {"a": 2, "b": 2, "c": 2})]
    c = client(entries)
    message = miss(c.post("/v1/a", json={"a": 2, "b": 2, "c": 9}))
    assert "the body differs from recorded #2 (the same method, path and query): body.c: sent 9, recorded 1" in message
    assert c.post("/v1/a", json={"a": 2, "b": 2, "c": 1}).json() == {"seq": 2}
    # The closest one answered already: said too, since a rewind would not help the body.
    message = miss(c.post("/v1/a", json={"a": 2, "b": 9, "c": 1}))
    assert "the body differs from recorded #2" in message and "it was answered already too" in message
    # A tie goes to the exchange not answered yet.
    assert "#3 (the same method, path and query): body.c: sent 7, recorded 2 (" in miss(
        c.post("/v1/a", json={"a": 2, "b": 2, "c": 7}))


def test_with_no_exchange_of_the_route_the_closest_request_is_named() -> None:
    entries = [exchange(1, "POST", "/v1/things", {"name": "a"}), exchange(2, "GET", "/v1/things/t-1")]
    c = client(entries)
    c.get("/v1/things/t-1")
    message = miss(c.get("/v1/things/t-2"))
    assert message == ("no recorded answer for GET /v1/things/t-2; closest recorded request: #2 GET /v1/things/t-1 "
                       "(answered already); differs in path segment 3: 't-2', recorded 't-1'")
    assert "the recording is empty" in miss(client([]).get("/v1/things"))


def test_loop_rewinds_only_for_a_request_that_matches_body_included() -> None:
    entries = [exchange(1, "POST", "/v1/a", {"x": 1})]
    c = client(entries, loop=True)
    assert c.post("/v1/a", json={"x": 1}).json() == {"seq": 1}
    assert "the body differs from recorded #1" in miss(c.post("/v1/a", json={"x": 2}))
    assert c.get("/_emulator/replay").json()["rewinds"] == 0
    assert c.post("/v1/a", json={"x": 1}).json() == {"seq": 1}
    assert c.get("/_emulator/replay").json()["rewinds"] == 1
