"""Adversarial input gets a clear error and loses nothing (issue 14): bounded clock, presigned URLs,
chunked and optional bodies, bounded error messages, Allow headers, state documents, connection
timeouts, reads that write nothing, and the admin token kept apart from API keys."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from emulator.store.presigned import TTL_SECONDS
from emulator.tools.testing import serve_in_thread
from tests.conftest import make_client
from tests.helpers import (
    RL,
    advance,
    assert_error,
    ce_sample,
    create_resource,
    run_op,
    running_session,
    submit,
)

# --- 1. the clock ------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [{"seconds": 1e12}, {"seconds": 1e308}])
def test_admin_advance_clock_beyond_year_9999_is_400_and_harmless(client: TestClient, body: dict[str, Any]) -> None:
    before = client.get("/_emulator/clock").json()
    error = assert_error(client.post("/_emulator/clock/advance", json=body), 400)
    assert error["param"] == "seconds"
    assert client.get("/_emulator/clock").json() == before
    r = create_resource(client)  # every later call still works
    assert client.get(f"{RL}/model-resources/{r['id']}").status_code == 200


def test_admin_set_clock_beyond_year_9999_is_400(client: TestClient) -> None:
    assert_error(client.post("/_emulator/clock", json={"now": "9999-12-31T00:00:00Z"}), 400)
    assert_error(client.post("/_emulator/clock", json={"speed": 1e300}), 400)
    assert client.get("/_emulator/clock").json()["speed"] == 1.0


# --- 2 and 4. presigned URLs -----------------------------------------------------------------------------

def _upload_url(client: TestClient, sid: str) -> dict[str, Any]:
    resp = client.post(f"{RL}/training-sessions/{sid}/payloads/upload-url")
    assert resp.status_code == 200, resp.text
    return resp.json()


def _local(url: str) -> str:
    return url.removeprefix("http://127.0.0.1:8765")


def test_presigned_url_after_reset_is_404(client: TestClient) -> None:
    s = running_session(client)
    upload = _upload_url(client, s["id"])
    assert client.put(_local(upload["upload_url"]), content=b'{"samples": []}').status_code == 200
    download = client.post(f"{RL}/training-sessions/{s['id']}/payloads/{upload['payload_id']}/download-url").json()
    assert client.get(_local(download["download_url"])).status_code == 200
    assert client.post("/_emulator/reset").status_code == 200
    assert assert_error(client.get(_local(download["download_url"])), 404)["code"] == "no_such_object"


def test_presigned_tokens_are_random_not_derived_from_the_seed() -> None:
    urls = []
    for _ in range(2):
        runtime = Runtime(Config(clock="manual", seed=1))
        with make_client(runtime) as client:
            s = running_session(client)
            upload = _upload_url(client, s["id"])
            urls.append((s["id"], upload["payload_id"], upload["upload_url"]))
    (sid_a, pid_a, url_a), (sid_b, pid_b, url_b) = urls
    assert (sid_a, pid_a) == (sid_b, pid_b)  # same seed, same requests: same ids ...
    assert url_a != url_b                    # ... but the URL's token is not derivable from them
    assert len(url_a.rsplit("/", 1)[1]) >= 32


def test_presigned_upload_url_works_once(client: TestClient) -> None:
    s = running_session(client)
    upload = _upload_url(client, s["id"])
    url = _local(upload["upload_url"])
    assert client.put(url, content=b'{"a": 1}').status_code == 200
    assert assert_error(client.put(url, content=b'{"a": 2}'), 403)["code"] == "url_refused"
    download = client.post(f"{RL}/training-sessions/{s['id']}/payloads/{upload['payload_id']}/download-url").json()
    for _ in range(2):  # downloads may repeat
        assert client.get(_local(download["download_url"])).json() == {"a": 1}


def test_presigned_url_expires(client: TestClient) -> None:
    s = running_session(client)
    upload = _upload_url(client, s["id"])
    advance(client, TTL_SECONDS + 1)
    error = assert_error(client.put(_local(upload["upload_url"]), content=b"{}"), 403)
    assert "expired" in error["message"]


def test_presigned_wrong_method_is_405_with_allow(client: TestClient) -> None:
    s = running_session(client)
    upload = _upload_url(client, s["id"])
    resp = client.delete(_local(upload["upload_url"]))
    assert_error(resp, 405)
    assert resp.headers["allow"] == "GET, HEAD, PUT"


# --- 3 and 6. bodies ---------------------------------------------------------------------------------

def _chunks(*parts: bytes) -> Any:
    yield from parts


def test_chunked_request_body_is_read(client: TestClient) -> None:
    resp = client.post(f"{RL}/model-resources", content=_chunks(b'{"base_model": ', b'"Qwen/Qwen3.8-27B"}'),
                       headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text
    assert "content-length" not in resp.request.headers


def test_chunked_request_body_over_the_limit_is_413() -> None:
    runtime = Runtime(Config(clock="manual", max_body_bytes=2048))
    with make_client(runtime) as client:
        body = b'{"base_model": "' + b"x" * 4096 + b'"}'
        resp = client.post(f"{RL}/model-resources", content=_chunks(body[:1000], body[1000:]),
                           headers={"content-type": "application/json"})
        assert_error(resp, 413)


@pytest.mark.parametrize("path", [f"{RL}/model-resources", "/_emulator/reset"])
def test_body_that_is_not_utf8_is_400(client: TestClient, path: str) -> None:
    resp = client.post(path, content=b'{"base_model": "\xff\xfe"}', headers={"content-type": "application/json"})
    assert assert_error(resp, 400)["code"] == "invalid_json"


def test_optional_request_bodies_may_be_empty(client: TestClient) -> None:
    s = running_session(client)
    resp = submit(client, s["id"], "optim-step")  # createOptimStep: requestBody.required is false
    assert resp.status_code == 200, resp.text
    resp = client.patch(f"{RL}/training-sessions/{s['id']}")  # updateSession: likewise
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("raw", [b"\x0c", b"\x0b", b" \x0c\n"])
def test_a_body_of_characters_json_does_not_count_as_whitespace_is_400(client: TestClient, raw: bytes) -> None:
    # bytes.strip() also strips \x0b and \x0c: such a body was taken for none, and an optional body's update
    # answered 200 (stock Schemathesis, seed 777: ST201 on updateSession). JSON's whitespace is space, tab, CR, LF.
    s = running_session(client)
    resp = client.patch(f"{RL}/training-sessions/{s['id']}", content=raw, headers={"content-type": "application/json"})
    assert assert_error(resp, 400)["code"] == "invalid_json"
    resp = client.patch(f"{RL}/training-sessions/{s['id']}", content=b" \t\r\n",
                        headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text  # JSON's own whitespace: no body, as before


def test_required_request_body_missing_is_400(client: TestClient) -> None:
    error = assert_error(client.post(f"{RL}/model-resources"), 400)
    assert "body is required" in error["message"]


# --- 7. bounded error messages -----------------------------------------------------------------------------

def test_error_messages_quote_bad_values_briefly(client: TestClient) -> None:
    huge = "Q" * 5_000_000
    resp = client.post(f"{RL}/model-resources", json={"base_model": huge})
    error = assert_error(resp, 400)
    assert len(resp.content) < 2_000 and "truncated" in error["message"]
    resp = client.post(f"{RL}/model-resources", json={"base_model": 7, "inactive_timeout": [huge]})
    assert len(resp.content) < 2_000
    assert_error(resp, 400)


# --- 5 and 8. methods --------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("PUT", f"{RL}/model-resources", {"GET", "POST"}),
    ("DELETE", f"{RL}/training-sessions/abc", {"GET", "PATCH"}),
    ("GET", f"{RL}/model-resources/abc/stop", {"POST"}),
    ("POST", "/docs", {"GET"}),
    ("PUT", "/docs/index.html", {"GET"}),
    ("DELETE", "/openapi.json", {"GET"}),
])
def test_method_not_allowed_lists_every_allowed_method(client: TestClient, method: str, path: str,
                                                        allowed: set[str]) -> None:
    resp = client.request(method, path)
    assert_error(resp, 405)
    assert allowed <= {m.strip() for m in resp.headers["allow"].split(",")}


# --- 9. state documents -----------------------------------------------------------------------------

def _exported(client: TestClient) -> dict[str, Any]:
    s = running_session(client)
    assert client.get(f"{RL}/training-sessions/{s['id']}").status_code == 200
    return client.get("/_emulator/state").json()


def _first_tenant(doc: dict[str, Any]) -> dict[str, Any]:
    return next(iter(doc["tenants"].values()))


@pytest.mark.parametrize("breakage", ["tenants_not_object", "unknown_status", "dangling_session", "bad_time",
                                      "unknown_event", "extra_field", "model_garbage", "dangling_payload",
                                      "released_by_nothing", "released_with_data", "released_output_kept"])
def test_admin_import_state_refuses_a_malformed_document(client: TestClient, breakage: str) -> None:
    doc = _exported(client)
    tenant = _first_tenant(doc)
    if breakage in ("dangling_payload", "released_by_nothing", "released_with_data", "released_output_kept"):
        sid = tenant["sessions"][0]["id"]
        upload = _upload_url(client, sid)
        assert client.put(_local(upload["upload_url"]), content=b'{"samples": []}').status_code == 200
        op = submit(client, sid, "optim-step", {}).json()
        doc = client.get("/_emulator/state").json()
        tenant = _first_tenant(doc)
        [payload] = tenant["payloads"]  # uploaded, read by no operation: it keeps its data
        exported_op = next(o for o in tenant["operations"] if o["id"] == op["id"])
        if breakage == "dangling_payload":
            exported_op["payload_id"] = "nope"
        elif breakage == "released_output_kept":
            assert exported_op["output"], exported_op
            exported_op["output_released"] = True
        else:
            payload["released_by"] = "nope" if breakage == "released_by_nothing" else op["id"]
    if breakage == "tenants_not_object":
        doc["tenants"] = [1, 2]
    elif breakage == "unknown_status":
        tenant["sessions"][0]["status"] = "TRAINING_SESSION_STATUS_NAPPING"
    elif breakage == "dangling_session":
        tenant["sessions"][0]["model_resources_id"] = "nope"
    elif breakage == "bad_time":
        tenant["resources"][0]["created_at"] = 1e300
    elif breakage == "unknown_event":
        tenant["timeline"] = [[0, "resource.explode", tenant["resources"][0]["id"]]]
    elif breakage == "extra_field":
        tenant["resources"][0]["colour"] = "blue"
    elif breakage == "model_garbage":
        tenant["models"] = {tenant["sessions"][0]["id"]: {"spec": {"nope": 1}, "state": {}}}
    before = client.get("/_emulator/state").json()
    error = assert_error(client.put("/_emulator/state", json=doc), 400)
    assert error["code"] == "invalid_state"
    said = {"dangling_payload": "payload_id names 'nope'", "released_by_nothing": "released_by names 'nope'",
            "released_with_data": "has data and released_by", "released_output_kept": "has an output and output_released"}
    assert said.get(breakage, "") in error["message"], error
    assert client.get("/_emulator/state").json() == before  # nothing was touched


@pytest.mark.parametrize("breakage", ["unsorted", "beyond_int64"])
def test_admin_import_state_refuses_malformed_pending_gradients(client: TestClient, breakage: str) -> None:
    s = running_session(client)
    op = run_op(client, s["id"], "forward-backward",
                {"samples": [ce_sample([1, 2], [3, 4, 5, 6])], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}})
    assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", op
    doc = client.get("/_emulator/state").json()
    pending = _first_tenant(doc)["models"][s["id"]]["state"]["pending_gradients"]
    assert len(pending["entry_rows"]) > 1, pending
    if breakage == "unsorted":
        for k in ("entry_rows", "entry_cols", "entry_grad"):
            pending[k] = pending[k][::-1]
    else:  # JSON allows it, int64 does not (it was a 500)
        pending["entry_cols"][0] = 2**63 + 5
    before = client.get("/_emulator/state").json()
    error = assert_error(client.put("/_emulator/state", json=doc), 400)
    assert error["code"] == "invalid_state" and "pending gradients" in error["message"], error
    assert client.get("/_emulator/state").json() == before  # nothing was touched


def test_state_file_with_unknown_status_is_refused(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual"))
    with make_client(runtime) as client:
        doc = _exported(client)
    _first_tenant(doc)["resources"][0]["status"] = "MODEL_RESOURCES_STATUS_ON_FIRE"
    state_file.write_bytes(orjson.dumps(doc))
    with pytest.raises(ConfigError, match="MODEL_RESOURCES_STATUS_ON_FIRE|is not one of"):
        Runtime(Config(clock="manual", state_file=str(state_file)))
    assert orjson.loads(state_file.read_bytes()) == doc  # never overwritten


# --- 10. connections ---------------------------------------------------------------------------------

def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes the connection within ``seconds`` (reads until EOF)."""
    sock.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if sock.recv(65536) == b"":
                return True
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True
    return False


@pytest.fixture(scope="module")
def guarded_server() -> Any:
    config = Config(clock="manual", header_timeout=0.5, body_timeout=0.5, keep_alive_timeout=0.5)
    with serve_in_thread(config) as (url, _runtime):
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def test_connection_that_sends_nothing_is_closed(guarded_server: str) -> None:
    with _connect(guarded_server) as sock:
        assert _closed_within(sock, 5)


def test_slow_headers_are_cut_off(guarded_server: str) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(b"GET /_emulator/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert _closed_within(sock, 5)


def test_stalled_body_is_cut_off(guarded_server: str) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(b"POST /_emulator/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        assert _closed_within(sock, 5)


def test_idle_keep_alive_connection_is_closed(guarded_server: str) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(b"GET /_emulator/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(5)
        assert b"200 OK" in sock.recv(65536)
        assert _closed_within(sock, 5)


def _drip_until_answered(socks: list[socket.socket], give_up: float) -> dict[socket.socket, bytes]:
    """Send each socket's body one byte at a time, paced by waiting for its answer (the server's event), until
    every socket has been answered and closed; what each received. Fails after ``give_up`` seconds."""
    answers = {sock: b"" for sock in socks}
    pending = list(socks)
    deadline = time.monotonic() + give_up
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} dripping request(s) still unanswered after {give_up} s"
        readable, _, _ = select.select(pending, [], [], 0.2)
        for sock in readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            answers[sock] += chunk
            if not chunk:
                pending.remove(sock)
        for sock in pending:
            if sock not in readable:
                try:
                    sock.sendall(b" ")
                except OSError:
                    pass  # closed under us: the next select reads its end
    return answers


def test_a_body_dripped_a_byte_at_a_time_is_answered_408_within_the_request_timeout() -> None:
    """Issue 39, item 9: connections that each send a body a byte at a time (never pausing long enough for
    --body-timeout) held every --max-connections slot for ever, and real clients got 503. A request must
    arrive whole within --request-timeout: then 408 in ErrorData, the connection closed, the slot free."""
    config = Config(clock="manual", request_timeout=1.0, body_timeout=30, header_timeout=30, max_connections=3)
    with serve_in_thread(config) as (url, runtime):
        drippers = [_connect(url) for _ in range(2)]
        for sock in drippers:
            sock.sendall(b"POST /_emulator/clock/advance HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100000\r\n\r\n{")
        with httpx.Client(base_url=url) as c:  # the drippers and this client fill the slots (uvicorn counts it)
            assert c.get("/_emulator/health").status_code == 503
        answers = _drip_until_answered(drippers, give_up=30)
        for sock in drippers:
            sock.close()
        for answer in answers.values():
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), answer[:300]
            error = orjson.loads(body)["error"]
            assert error["code"] == "request_timeout" and "--request-timeout" in error["message"], error
        with httpx.Client(base_url=url) as c:  # the slots are free again; nothing of the requests was applied
            assert c.get("/_emulator/health").status_code == 200
            assert c.get("/_emulator/clock").json()["now"] == "2026-01-01T00:00:00.000Z"


def test_a_request_cut_by_its_deadline_is_not_applied() -> None:
    """What arrived of a body before the deadline may already be valid JSON (the rest padding); the app, waiting
    for the rest, reads a disconnect: it must act on none of it (before: the part was the request)."""
    with serve_in_thread(Config(clock="manual", request_timeout=0.5, body_timeout=30)) as (url, _runtime):
        with _connect(url) as sock:
            sock.sendall(b"POST /_emulator/clock/advance HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n" + b'{"seconds": 3600}')
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
        with httpx.Client(base_url=url) as c:
            assert c.get("/_emulator/clock").json()["now"] == "2026-01-01T00:00:00.000Z"


def test_a_prompt_client_is_served_normally(guarded_server: str) -> None:
    with httpx.Client(base_url=guarded_server) as c:
        for _ in range(3):
            assert c.get("/_emulator/health").json() == {"status": "ok"}


# --- 11. reads write nothing; writes are proportional to what changed --------------------------------------

def test_reads_with_new_tokens_create_no_tenant(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    size = state_file.stat().st_size
    for i in range(5):
        with make_client(runtime, token=f"reader-{i}") as client:
            assert client.get(f"{RL}/model-resources").status_code == 200
            assert client.get(f"{RL}/training-sessions").status_code == 200
            assert_error(client.get(f"{RL}/model-resources/nope"), 404)
    assert runtime.store.projects() == []
    assert state_file.stat().st_size == size
    assert runtime.export_state()["tenants"] == {}


def test_state_file_write_follows_the_change_not_the_state_size(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    with make_client(runtime, token="big") as big:
        rid = create_resource(big)["id"]
        for _ in range(40):
            create_resource(big)
        assert big.get(f"{RL}/model-resources/{rid}").status_code == 200
    big_tenant = len(orjson.dumps(runtime.export_state()["tenants"]))
    with make_client(runtime, token="small") as small:
        before = state_file.stat().st_size
        create_resource(small)
        grew = state_file.stat().st_size - before
    assert grew < big_tenant / 4, (grew, big_tenant)
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]


def test_state_file_write_follows_the_change_within_one_tenant(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], list(range(3, 40)))]}
    with make_client(runtime) as client:
        sessions = [running_session(client)["id"] for _ in range(4)]
        for sid in sessions:  # trained models are most of a tenant's state
            for _step in range(2):
                assert submit(client, sid, "forward-backward", body).status_code == 200
                assert submit(client, sid, "optim-step", {}).status_code == 200
            client.get(f"{RL}/training-sessions/{sid}")
        tenant = len(orjson.dumps(runtime.export_state()["tenants"]))
        # The reads above finished the operations (settling writes nothing): the next write catches up.
        assert client.patch(f"{RL}/training-sessions/{sessions[0]}", json={"display_name": "x"}).status_code == 200
        before = state_file.stat().st_size
        assert client.patch(f"{RL}/training-sessions/{sessions[0]}", json={"display_name": "y"}).status_code == 200
        grew = state_file.stat().st_size - before
        assert grew < tenant / 10, (grew, tenant)
        assert submit(client, sessions[1], "optim-step", {}).status_code == 200
        client.get(f"{RL}/training-sessions/{sessions[1]}")
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]


def test_state_file_replays_resets_and_dropped_weights(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [3, 4, 5])]}
    sample = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "num_samples": 1,
              "sampling_params": {"max_tokens": 3}}
    with make_client(runtime, token="one") as one, make_client(runtime, token="two") as two:
        sid = running_session(one)["id"]
        running_session(two)
        assert submit(one, sid, "forward-backward", body).status_code == 200
        assert submit(one, sid, "optim-step", {}).status_code == 200
        sync = {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"}
        assert submit(one, sid, "weights-sync", sync).status_code == 200   # a pending publish ...
        one.get(f"{RL}/training-sessions/{sid}")
        assert create_resource(one)                                       # ... is written
        assert submit(one, sid, "sample", sample).status_code == 200      # the sample applies it: dropped
        one.get(f"{RL}/training-sessions/{sid}")
        assert one.post("/_emulator/reset", json={"tenant": "two"}).status_code == 200
        running_session(two)                                              # the tenant again, from nothing
        assert create_resource(one)
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]
    with make_client(runtime, token="one") as one:
        assert one.post("/_emulator/reset").status_code == 200
        create_resource(one)
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]
    assert len(restored.export_state()["tenants"]) == 1


def test_state_file_drops_a_released_payload(tmp_path: Path) -> None:
    """An uploaded payload is journaled with its bytes, and again without them once the operation that
    read them has finished: a restart must not bring the bytes back (nor a long loop grow the file)."""
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [3, 4, 5])]}
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        upload = _upload_url(client, sid)
        assert client.put(_local(upload["upload_url"]), content=orjson.dumps(body)).status_code == 200
        ref = {**body, "payload_id": upload["payload_id"]}
        op = submit(client, sid, "forward-backward", ref).json()
        done = client.get(f"{RL}/training-sessions/{sid}/operations/forward-backward/{op['id']}").json()
        assert done["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", done
        assert create_resource(client)  # the next write carries what the read settled
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]
    [tenant] = restored.export_state()["tenants"].values()
    assert [(p["data"], p["released_by"]) for p in tenant["payloads"]] == [(None, op["id"])]
    assert b"__bytes__" not in state_file.read_bytes().splitlines()[-1]


def test_state_file_is_compacted_into_one_document(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert runtime.persistence is not None
    runtime.persistence.file.compact_min_bytes = 4096
    with make_client(runtime) as client:
        for _ in range(30):
            create_resource(client)
    lines = state_file.read_bytes().splitlines()
    assert 1 <= len(lines) < 30  # compacted at least once on the way
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]


def test_state_file_torn_last_line_is_dropped(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    with make_client(runtime) as client:
        r = create_resource(client)
    expected = runtime.export_state()["tenants"]
    with open(state_file, "ab") as f:
        f.write(b'{"reset_all": false, "tenants": {"x"')  # a crash in the middle of the next write
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    assert restored.export_state()["tenants"] == expected
    with make_client(restored) as client:
        assert client.get(f"{RL}/model-resources/{r['id']}").status_code == 200


# --- 12. the admin token ------------------------------------------------------------------------------

def test_admin_token_is_not_an_api_key() -> None:
    runtime = Runtime(Config(clock="manual", admin_token="admin-secret"))
    with make_client(runtime, token="admin-secret") as client:
        error = assert_error(client.get(f"{RL}/model-resources"), 401)
        assert "admin token" in error["message"]
        assert client.get("/_emulator/clock").status_code == 200  # still opens the control plane
    with make_client(runtime, token="tenant-key") as client:
        assert client.get(f"{RL}/model-resources").status_code == 200
        assert_error(client.get("/_emulator/clock"), 401)
        assert client.get("/_emulator/health").json() == {"status": "ok"}  # liveness needs no admin token
