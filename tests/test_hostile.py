"""Hostile input, hostile browsers, hostile clients (issue 26): whatever a client sends, the emulator
answers a clear error, keeps no state it could not export and import again, and holds bounded memory.

Grouped by what attacks: deep and huge input, request-derived times and sizes, cross-site requests,
headers, slow readers, event streams, duplicate headers, secrets in logs and recordings, non-ASCII keys,
replay, and operation retention. Tests that need the real protocol (431, slow readers, the stream cap)
run a server on a loopback port; the rest run in process.
"""

from __future__ import annotations

import collections
import json
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from emulator import bounds
from emulator.clock import MAX_TIME, rfc3339
from emulator.compute.spec import MAX_SAMPLE_TOKENS
from emulator.config import Config
from emulator.runtime import Runtime
from emulator.store.memory import EventLog
from emulator.store.tenant import Tenant
from emulator.tenancy import CACHE_BYTES, Tenancy
from emulator.tools.recording import MAX_MISS_CHARS, MAX_MISSES, load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.testing import serve_in_thread
from emulator.ui.stream import Settler
from tests.conftest import make_client
from tests.helpers import (
    BASE,
    RL,
    assert_error,
    ce_sample,
    create_resource,
    ready_resource,
    run_op,
    running_session,
    submit,
)

S = f"{RL}/training-sessions"


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"x": value}
    return value


def export_imports(client: TestClient) -> dict[str, Any]:
    """The invariant: whatever the server holds it exports, and its export imports (and exports the same)."""
    exported = client.get("/_emulator/state")
    assert exported.status_code == 200, exported.text[:500]
    doc = exported.json()
    imported = client.put("/_emulator/state", json=doc)
    assert imported.status_code == 200, imported.text[:500]
    again = client.get("/_emulator/state")
    assert again.status_code == 200 and again.json()["tenants"] == doc["tenants"]
    return doc


# --- 6. deep and huge input --------------------------------------------------------------------------

def test_session_metadata_nested_past_the_limit_is_refused_before_it_is_stored(client: TestClient) -> None:
    r = ready_resource(client)
    resp = client.post(S, json={"model_resources_id": r["id"], "metadata": {"wandb": {}, "deep": nested(300)}})
    err = assert_error(resp, 400)
    assert err["code"] == "too_deep" and str(bounds.MAX_JSON_DEPTH) in err["message"], err
    assert client.get(S).json()["data"] == []  # nothing stored
    export_imports(client)


def test_every_body_has_the_same_depth_limit_and_state_stays_readable(client: TestClient) -> None:
    s = running_session(client)
    too_deep = nested(bounds.MAX_JSON_DEPTH)  # the body itself adds a level
    assert assert_error(client.patch(f"{S}/{s['id']}", json={"metadata": too_deep}), 400)["code"] == "too_deep"
    deep_junk = {"base_model": BASE, "optimizer_config": {"adam": nested(500)}}
    assert assert_error(client.post(f"{RL}/model-resources", json=deep_junk), 400)["code"] == "too_deep"
    # Just inside the limit is kept, listed, exported and imported again.
    ok = nested(bounds.MAX_JSON_DEPTH - 2)
    assert client.patch(f"{S}/{s['id']}", json={"metadata": ok}).status_code == 200
    assert client.get(S).status_code == 200 and client.get(f"{RL}/model-resources").status_code == 200
    export_imports(client)


def test_a_deep_uploaded_payload_is_refused_at_submit(client: TestClient) -> None:
    s = running_session(client)
    up = client.post(f"{S}/{s['id']}/payloads/upload-url").json()
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [2, 3])], "x": nested(400)}
    assert client.put(up["upload_url"], content=json.dumps(body), headers={"Authorization": ""}).status_code == 200
    resp = submit(client, s["id"], "forward-backward", {"loss": body["loss"], "samples": body["samples"],
                                                         "payload_id": up["payload_id"]})
    err = assert_error(resp, 400)
    assert err["code"] == "too_deep" and err["param"] == "payload_id", err
    export_imports(client)


def test_a_state_document_may_hold_bodies_at_the_request_limit_but_no_deeper(client: TestClient) -> None:
    s = running_session(client)
    assert client.patch(f"{S}/{s['id']}", json={"metadata": nested(bounds.MAX_JSON_DEPTH - 2)}).status_code == 200
    doc = export_imports(client)  # the stored body sits a few levels down in the document
    project = next(iter(doc["tenants"]))
    doc["tenants"][project]["sessions"][0]["metadata"] = nested(bounds.MAX_STATE_DEPTH)
    assert assert_error(client.put("/_emulator/state", json=doc), 400)["code"] == "too_deep"


def test_unknown_optimizer_keys_are_dropped_not_stored_or_echoed(client: TestClient) -> None:
    # together 3.1.1: AdamConfigParam has no field, MuonConfigParam only scaling_strategy.
    junk = "j" * 200_000
    resp = client.post(f"{RL}/model-resources", json={"base_model": BASE, "optimizer_config": {"adam": {"junk": junk}}})
    assert resp.status_code == 200 and resp.json()["optimizer_config"] == {"adam": {}}
    assert "optimizer_config.adam.junk ignored" in resp.headers["x-emulator-warning"]
    # A client's key is quoted in a header: ASCII only (a header carries Latin-1 at most).
    resp = client.post(f"{RL}/model-resources", json={"base_model": BASE, "optimizer_config": {"adam": {"\x80ключ": 1}}})
    assert resp.status_code == 200 and "adam.\\x80\\u043a" in resp.headers["x-emulator-warning"]
    r = create_resource(client, optimizer_config={"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL",
                                                           "junk": junk}, "sgd": {"lr": 1}})
    assert r["optimizer_config"] == {"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_ORIGINAL"}}
    listed = client.get(f"{RL}/model-resources")
    assert listed.status_code == 200 and len(listed.content) < 10_000
    assert len(client.get("/_emulator/state").content) < 50_000
    strict = Runtime(Config(clock="manual", strict=True))
    with make_client(strict) as c:
        resp = c.post(f"{RL}/model-resources", json={"base_model": BASE, "optimizer_config": {"adam": {"junk": 1}}})
        assert assert_error(resp, 400)["code"] == "strict_mode"


def test_session_metadata_is_bounded_in_size(client: TestClient) -> None:
    r = ready_resource(client)
    # (free-form keys: a W&B field holds at most 256 characters, which the spec bounds on its own)
    big = {"wandb": {"run_name": "x" * 256}, "notes": "x" * (17 << 10)}
    err = assert_error(client.post(S, json={"model_resources_id": r["id"], "metadata": big}), 400)
    assert err["code"] == "metadata_too_large" and err["param"] == "metadata"
    s = running_session(client, r["id"], metadata={"notes": "x" * (8 << 10)})
    more = {"more_notes": "y" * (9 << 10)}  # merged with what is there: over the limit together
    assert assert_error(client.patch(f"{S}/{s['id']}", json={"metadata": more}), 400)["code"] == "metadata_too_large"


# --- 7. request-derived times, counts and sizes ------------------------------------------------------

def _realistic_session(client: TestClient) -> dict[str, Any]:
    r = create_resource(client)
    client.post("/_emulator/clock/advance", json={"seconds": 1000})
    s = client.post(S, json={"model_resources_id": r["id"]}).json()
    client.post("/_emulator/clock/advance", json={"seconds": 100})
    got = client.get(f"{S}/{s['id']}").json()
    assert got["status"] == "TRAINING_SESSION_STATUS_RUNNING", got
    return got


SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}]}


def test_a_sample_whose_max_tokens_could_never_run_is_refused_where_it_enters(realistic_client: TestClient) -> None:
    s = _realistic_session(realistic_client)
    # Within the spec's int32 bound, beyond any context length: refused by the model's rule, not by time overflow.
    resp = submit(realistic_client, s["id"], "sample", {**SAMPLE, "sampling_params": {"max_tokens": 2**31 - 1}})
    err = assert_error(resp, 400)
    assert err["param"] == "sampling_params.max_tokens" and "context length" in err["message"], err
    resp = submit(realistic_client, s["id"], "sample", {**SAMPLE, "sampling_params": {"max_tokens": 10**17}})
    err = assert_error(resp, 400)   # beyond int32: the schema's bound
    assert err["param"] == "sampling_params.max_tokens" and "maximum" in err["message"], err
    err = assert_error(submit(realistic_client, s["id"], "sample", {**SAMPLE, "num_samples": 10**15}), 400)
    assert err["param"] == "num_samples", err
    # Within int32, past the tokens one request may generate: the emulator's own bound, where the request enters.
    err = assert_error(submit(realistic_client, s["id"], "sample", {**SAMPLE, "num_samples": MAX_SAMPLE_TOKENS + 1}),
                       400)
    assert err["param"] == "num_samples" and f"{MAX_SAMPLE_TOKENS} tokens" in err["message"], err
    at_bound = {**SAMPLE, "num_samples": MAX_SAMPLE_TOKENS, "sampling_params": {"max_tokens": 2}}
    assert submit(realistic_client, s["id"], "sample", at_bound).status_code == 200  # (fails when it runs)
    export_imports(realistic_client)


def test_a_lora_seed_outside_int64_is_refused_and_never_poisons_the_export(client: TestClient) -> None:
    r = ready_resource(client)
    for seed in ("9" * 40, str(2**63), str(-(2**63) - 1)):
        resp = client.post(S, json={"model_resources_id": r["id"], "lora_config": {"rank": 8, "seed": seed}})
        assert assert_error(resp, 400)["param"] == "lora_config.seed", seed
    running_session(client, r["id"], lora_config={"rank": 8, "seed": str(2**63 - 1)})
    export_imports(client)


def test_sampling_seed_is_range_checked(client: TestClient) -> None:
    s = running_session(client)
    for seed in ("9" * 30, str(2**63), str(-(2**63) - 1)):
        resp = submit(client, s["id"], "sample", {**SAMPLE, "sampling_params": {"seed": seed, "max_tokens": 2}})
        assert assert_error(resp, 400)["param"] == "sampling_params.seed", seed
    for seed in (str(2**63 - 1), -(2**63), 7):
        op = run_op(client, s["id"], "sample", {**SAMPLE, "sampling_params": {"seed": seed, "max_tokens": 2}})
        assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", op


def test_times_near_the_end_of_the_clock_stay_renderable(realistic_client: TestClient) -> None:
    c = realistic_client
    assert c.post("/_emulator/clock", json={"now": rfc3339(MAX_TIME - 3600)}).status_code == 200
    s = _realistic_session(c)
    # ~11 virtual hours of sampling from an hour before the end of time: its end stops at the last instant.
    body = {**SAMPLE, "num_samples": 100, "sampling_params": {"max_tokens": 30_000}}
    op = submit(c, s["id"], "sample", body)
    assert op.status_code == 200, op.text
    assert c.get(f"{S}/{s['id']}").status_code == 200
    export_imports(c)
    assert c.post("/_emulator/clock", json={"now": rfc3339(MAX_TIME)}).status_code == 200
    got = c.get(f"{S}/{s['id']}/operations/sample/{op.json()['id']}").json()
    assert got["status"] == "TRAINING_OPERATION_STATUS_FAILED", got  # (too many tokens: refused when it runs)
    export_imports(c)


def test_bounds_later_never_passes_the_end_of_time() -> None:
    assert bounds.later(MAX_TIME - 1, 10**20) == MAX_TIME
    assert bounds.later(100.0, 5.0) == 105.0


# --- 9. cross-site requests ---------------------------------------------------------------------------

def test_a_foreign_origin_cannot_drive_the_control_plane(client: TestClient) -> None:
    r = ready_resource(client)
    for origin in ("http://evil.example", "null", "http://127.0.0.1:9999", "http://localhost:8765"):
        resp = client.post("/_emulator/reset", headers={"Origin": origin})
        assert assert_error(resp, 403)["code"] == "cross_origin_refused", origin
        resp = client.post("/_emulator/clock/advance", json={"seconds": 5}, headers={"Origin": origin})
        assert resp.status_code == 403
    assert client.get(f"{RL}/model-resources/{r['id']}").status_code == 200  # not reset
    # The server's own origin (the dashboard) is served.
    assert client.post("/_emulator/clock/advance", json={"seconds": 1},
                       headers={"Origin": "http://127.0.0.1:8765"}).status_code == 200


def test_a_body_must_say_it_is_json(client: TestClient) -> None:
    before = client.get("/_emulator/clock").json()["now"]
    for headers in ({}, {"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}):
        resp = client.post("/_emulator/clock/advance", content=b'{"seconds": 3600}', headers=headers)
        assert assert_error(resp, 415)["code"] == "unsupported_media_type", headers
        resp = client.post(f"{RL}/model-resources", content=json.dumps({"base_model": BASE}), headers=headers)
        assert resp.status_code == 415
    assert client.get("/_emulator/clock").json()["now"] == before
    assert client.get(f"{RL}/model-resources").json()["data"] == []
    # A bodiless POST needs no type (curl -X POST .../_emulator/reset), and +json types are JSON.
    assert client.post("/_emulator/reset").status_code == 200
    assert client.post("/_emulator/clock/advance", content=b'{"seconds": 1}',
                       headers={"Content-Type": "application/json; charset=utf-8"}).status_code == 200


def test_a_host_that_does_not_name_the_server_is_refused(runtime: Runtime) -> None:
    with make_client(runtime) as c:
        ready_resource(c)
        for host in ("evil.example", "evil.example:8765", "127.0.0.1.nip.io:8765"):
            resp = c.get("/_emulator/state", headers={"Host": host})
            assert assert_error(resp, 403)["code"] == "host_not_allowed", host
        for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST", "app.localhost:8765"):
            assert c.get("/_emulator/health", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_opens_more_names_and_a_wildcard_bind_serves_any() -> None:
    named = Runtime(Config(clock="manual", allowed_hosts=("emulator.internal",)))
    with make_client(named) as c:
        assert c.get("/_emulator/health", headers={"Host": "emulator.internal:8765"}).status_code == 200
        assert c.get("/_emulator/health", headers={"Host": "other.internal"}).status_code == 403
    wildcard = Runtime(Config(clock="manual", host="0.0.0.0", admin_token="t"))
    with make_client(wildcard) as c:
        assert c.get("/v1/rl/model-resources", headers={"Host": "build-box-7:8765"}).status_code == 200


# --- 10. header size and per-token caches -------------------------------------------------------------

@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, Runtime]]:
    with serve_in_thread(Config(max_header_bytes=8192, max_event_streams=1, send_timeout=1.0)) as served:
        yield served


def _raw(url: str, request: bytes, timeout: float = 5.0) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_headers_over_the_limit_answer_431_error_data(live: tuple[str, Runtime]) -> None:
    url, _runtime = live
    token = "k" * 20_000
    reply = _raw(url, b"GET /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                 + token.encode() + b"\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), reply[:200]
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    assert httpx.get(f"{url}/_emulator/health").status_code == 200


def test_a_control_character_in_a_dropped_key_is_escaped_in_the_warning(live: tuple[str, Runtime]) -> None:
    # (a real server: uvicorn refuses a header value with a control character, and dropped the connection)
    url, _runtime = live
    resp = httpx.post(f"{url}{RL}/model-resources", headers={"Authorization": "Bearer ctl"}, timeout=10,
                      json={"base_model": BASE, "optimizer_config": {"\x1eC\x86": [1], "adam": {}}})
    assert resp.status_code == 200, resp.text
    assert "optimizer_config.\\x1eC\\x86 ignored" in resp.headers["x-emulator-warning"]


def test_the_principal_cache_is_bounded_in_bytes_not_entries() -> None:
    tenancy = Tenancy()
    for i in range(400):  # 400 distinct 60 KiB keys: 24 MiB of keys
        tenancy.principal_for(f"{i}-" + "k" * (60 << 10))
    held = sum(len(token) for token in tenancy._principals)
    assert held <= CACHE_BYTES and tenancy.cached_bytes <= CACHE_BYTES
    assert tenancy.principal_for("0-" + "k" * (60 << 10)) is not None  # evicted keys still authenticate


# --- 11. slow readers ---------------------------------------------------------------------------------

@pytest.mark.alone
def test_clients_that_never_read_are_dropped_after_the_send_timeout(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("session_metadata_kib: 4096\n")
    # (uvicorn counts the connection asking: 3 admits two at once.) The keep-alive timer closes a connection
    # whose answer is all buffered before the send timeout: a close that waits for ever for the client.
    config = Config(max_connections=3, send_timeout=2.0, keep_alive_timeout=0.5, limits_file=str(limits))
    with serve_in_thread(config) as (url, _runtime):
        api = httpx.Client(base_url=url, headers={"Authorization": "Bearer slow"}, timeout=10)
        rid = api.post("/v1/rl/model-resources", json={"base_model": BASE}).json()["id"]
        api.get(f"/v1/rl/model-resources/{rid}")
        for _ in range(3):  # ~12 MB of sessions in the state export
            assert api.post("/v1/rl/training-sessions", json={"model_resources_id": rid, "metadata": {
                "notes": "n" * ((4 << 20) - 1024)}}).status_code == 200
        api.close()
        time.sleep(0.5)
        host, port = url.removeprefix("http://").split(":")
        stalled = []
        for _ in range(2):  # every connection the server takes, each waiting on an answer it never reads
            sock = socket.create_connection((host, int(port)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /_emulator/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            stalled.append(sock)
        time.sleep(0.5)
        statuses = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            status = httpx.get(f"{url}/_emulator/health", timeout=5).status_code
            statuses.append(status)
            if status == 200:
                break
            time.sleep(0.2)
        for sock in stalled:
            sock.close()
        assert statuses[0] == 503, statuses  # both slots were held by the stalled readers ...
        assert statuses[-1] == 200, statuses  # ... until the send timeout dropped them


# --- 12. event streams --------------------------------------------------------------------------------

def test_event_streams_are_capped_with_429(live: tuple[str, Runtime]) -> None:
    url, _runtime = live
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as first:
        first.sendall(b"GET /_emulator/ui/api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert first.recv(4096).startswith(b"HTTP/1.1 200")
        second = httpx.get(f"{url}/_emulator/ui/api/stream", timeout=5)
        assert second.status_code == 429 and second.headers["retry-after"]
        assert second.json()["error"]["code"] == "too_many_event_streams"


def test_the_event_log_reads_new_entries_from_its_newest_end() -> None:
    touched = collections.Counter()

    class Spy(collections.deque):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            for entry in super().__iter__():
                touched["read"] += 1
                yield entry

        def __reversed__(self) -> Iterator[Any]:
            for entry in super().__reversed__():
                touched["read"] += 1
                yield entry

    log = EventLog()
    for i in range(50_000):
        log.transition(float(i), "p", "operation", str(i), None, "x", None)
    log._events = Spy(log._events, maxlen=50_000)
    assert [e["seq"] for e in log.since(49_995, "p")] == [49_996, 49_997, 49_998, 49_999, 50_000]
    assert touched["read"] <= 10, touched
    assert log.since(50_000) == [] and len(log.since(0, "p", 50_000)) == 50_000


def test_streams_on_one_tenant_share_one_settle_per_tick() -> None:
    calls = collections.Counter()

    class FakeRuntime:
        def settle(self, project: str | None = None) -> None:
            calls[project or "*"] += 1

    settler = Settler(FakeRuntime(), interval=60.0)  # type: ignore[arg-type]
    for _ in range(200):
        settler.settle("proj_a")
        settler.settle(None)
    assert calls == {"proj_a": 1, "*": 1}


def test_streams_need_the_admin_token_when_the_control_plane_does() -> None:
    runtime = Runtime(Config(clock="manual", admin_token="s3cret"))
    with make_client(runtime) as c:
        assert assert_error(c.get("/_emulator/ui/api/stream"), 401)["code"] == "invalid_admin_token"


# --- 13. duplicate headers ----------------------------------------------------------------------------

def test_duplicate_idempotency_keys_are_refused(client: TestClient) -> None:
    s = running_session(client)
    for keys in (("a", "b"), ("", "x" * 60_000), ("same", "same")):
        resp = client.post(f"{S}/{s['id']}/operations/optim-step", json={},
                           headers=[("Idempotency-Key", k) for k in keys])
        err = assert_error(resp, 400)
        assert err["code"] == "duplicate_header" and err["param"] == "Idempotency-Key", err
    project = next(iter(client.get("/_emulator/state").json()["tenants"].values()))
    assert project["operations"] == [] and project["idempotency"] == []


# --- 14. secrets in logs and recordings ----------------------------------------------------------------

def test_the_access_log_prints_no_secret_from_a_query(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = Runtime(Config(clock="manual", access_log=True, admin_token="admin-secret-123"))
    with make_client(runtime, token="api-key-secret-456") as c:
        c.get("/v1/rl/model-resources")
        c.get("/_emulator/ui/api/lookup", params={"api_key": "api-key-secret-456", "admin_token": "admin-secret-123"})
        c.get("/_emulator/events", params={"tenant": "api-key-secret-456"},
              headers={"X-Emulator-Admin-Token": "admin-secret-123"})
    err = capsys.readouterr().err
    assert "/_emulator/events?tenant=***" in err, err
    assert "secret-456" not in err and "admin-secret" not in err and "secret-123" not in err, err


def test_recordings_redact_every_secret_and_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "rec" / "demo.jsonl"
    runtime = Runtime(Config(clock="manual", record_file=str(path), admin_token="admin-secret-123"))
    admin = {"X-Emulator-Admin-Token": "admin-secret-123"}
    with make_client(runtime, token="api-key-secret-456") as c:
        c.get("/v1/rl/model-resources")
        c.get("/_emulator/events", params={"tenant": "api-key-secret-456"}, headers=admin)
        c.post("/_emulator/reset", json={"tenant": "api-key-secret-456"}, headers=admin)
        c.get("/_emulator/clock", headers={**admin, "X-Emulator-Tenant": "api-key-secret-456"})
    text = path.read_text()
    assert "secret-456" not in text and "admin-secret" not in text, text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Replay redacts what it receives the same way, so the redacted query still matches.
    replay = TestClient(ReplayApp(load_recording(str(path))), base_url="http://127.0.0.1:8765")
    assert replay.get("/_emulator/events", params={"tenant": "api-key-secret-456"}).status_code == 200


def test_the_state_file_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    Runtime(Config(clock="manual", state_file=str(path)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --- 15. non-ASCII API keys ---------------------------------------------------------------------------

def test_a_non_ascii_key_names_one_tenant_in_headers_bodies_and_queries(runtime: Runtime) -> None:
    key = "ключ-café"
    with make_client(runtime, token=None) as c:
        auth = {"Authorization": f"Bearer {key}".encode()}
        rid = c.post(f"{RL}/model-resources", json={"base_model": BASE}, headers=auth).json()["id"]
        project = c.get("/_emulator/ui/api/lookup", params={"api_key": key}).json()["project"]
        events = c.get("/_emulator/events", params={"tenant": key}).json()["data"]
        assert events and {e["project"] for e in events} == {project} and project in runtime.store.projects()
        assert c.post("/_emulator/reset", json={"tenant": key}).json()["reset"] == project
        assert c.get(f"{RL}/model-resources/{rid}", headers=auth).status_code == 404  # that tenant was reset
        assert assert_error(c.get("/_emulator/events?tenant=%FF"), 400)["code"] == "invalid_query"
        # The control plane's X-Emulator-Tenant names the same tenant (and bytes that are not UTF-8 are refused).
        scoped = c.get("/_emulator/clock", headers={"X-Emulator-Tenant": key.encode()})
        assert scoped.status_code == 200, scoped.text


def test_a_key_that_is_not_utf8_is_refused_not_read_another_way(live: tuple[str, Runtime]) -> None:
    url, _runtime = live  # (the in-process client re-encodes headers as UTF-8: raw bytes need a socket)
    for key in (b"\xff\xfe", b"caf\xe9"):
        reply = _raw(url, b"GET /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     b"Authorization: Bearer " + key + b"\r\n\r\n")
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401"), reply[:300]
        assert b"not valid UTF-8" in body
    reply = _raw(url, b"GET /_emulator/clock HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                 b"X-Emulator-Tenant: caf\xe9\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["code"] == "invalid_header", reply[:300]


# --- 16. replay -------------------------------------------------------------------------------------

def test_replay_keeps_a_bounded_list_of_unanswered_requests() -> None:
    app = ReplayApp([])
    client = TestClient(app, base_url="http://127.0.0.1:8765")
    for i in range(MAX_MISSES + 200):
        assert client.get(f"/v1/{i}/" + "p" * 6000).status_code == 404
    report = client.get("/_emulator/replay").json()
    assert report["unanswered_total"] == MAX_MISSES + 200
    assert len(report["unanswered"]) == MAX_MISSES
    assert max(len(line) for line in report["unanswered"]) <= MAX_MISS_CHARS


# --- 18. operation retention --------------------------------------------------------------------------

def test_without_a_journal_the_tables_note_nothing(client: TestClient, runtime: Runtime) -> None:
    # Only a journal drains what a tenant's parts note; in memory (the default) they must note nothing, or the
    # ids of every record ever handed out pile up (a shared emulator grew by ~0.3 KB per operation).
    s = running_session(client)
    for _ in range(20):
        run_op(client, s["id"], "optim-step", {})
    tenant = runtime.store.get(next(iter(runtime.store.projects())))
    assert tenant is not None
    assert [len(t.touched) for t in tenant.tables()] == [0] * len(Tenant.TABLES)
    assert not tenant.models.touched


@pytest.fixture
def retaining(tmp_path: Path) -> Runtime:
    limits = tmp_path / "limits.yaml"
    limits.write_text("finished_operations_per_session: 3\n")
    return Runtime(Config(clock="manual", limits_file=str(limits), state_file=str(tmp_path / "state.json"),
                          validate_responses=True))


def test_a_session_keeps_only_its_newest_finished_operations(retaining: Runtime) -> None:
    with make_client(retaining) as c:
        s = running_session(c)
        err = assert_error(c.get(f"{S}/{s['id']}/operations/optim-step/never-made"), 404)
        assert err.get("code") != "operation_not_retained", err   # nothing forgotten yet: a plain not found
        ops = [run_op(c, s["id"], "optim-step", {}) for _ in range(5)]
        for op in ops[:2]:
            err = assert_error(c.get(f"{S}/{s['id']}/operations/optim-step/{op['id']}"), 404)
            assert err["code"] == "operation_not_retained" and "finished_operations_per_session" in err["message"]
        for op in ops[2:]:
            assert c.get(f"{S}/{s['id']}/operations/optim-step/{op['id']}").status_code == 200
        doc = export_imports(c)
        tenant = next(iter(doc["tenants"].values()))
        assert len(tenant["operations"]) == 3 and len(tenant["idempotency"]) == 3
        assert tenant["sessions"][0]["evicted_operations"] == 2
    # The journal wrote the deletions: a restart holds what memory held.
    restarted = Runtime(retaining.config)
    with make_client(restarted) as c:
        tenant = next(iter(c.get("/_emulator/state").json()["tenants"].values()))
        assert sorted(op["id"] for op in tenant["operations"]) == sorted(op["id"] for op in ops[2:])
        assert len(tenant["idempotency"]) == 3


def test_retention_forgets_an_uploaded_payload_with_the_operation_that_read_it(retaining: Runtime) -> None:
    with make_client(retaining) as c:
        s = running_session(c)
        up = c.post(f"{S}/{s['id']}/payloads/upload-url").json()
        body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [2, 3])]}
        assert c.put(up["upload_url"], content=json.dumps(body), headers={"Authorization": ""}).status_code == 200
        run_op(c, s["id"], "forward-backward", {**body, "payload_id": up["payload_id"]})
        for _ in range(3):
            run_op(c, s["id"], "optim-step", {})
        tenant = next(iter(export_imports(c)["tenants"].values()))
        assert tenant["payloads"] == []
    restarted = Runtime(retaining.config)
    with make_client(restarted) as c:
        assert next(iter(c.get("/_emulator/state").json()["tenants"].values()))["payloads"] == []
