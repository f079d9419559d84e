"""The recording proxy with a real key in mind (issue 41 item 1, issue 39 items 10 and 11): hostile upstreams
(unreachable, slow, garbage bytes, a 5xx, a 60 MiB body) get the client ErrorData or the upstream's answer,
never a traceback; no secret reaches a recording or the access log; the proxy has serve's cross-site guards.

Each upstream is a tiny server on loopback that the test starts (a thread on a socket), so the test controls
exactly what goes wrong.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from emulator.config import Config
from emulator.http.site import SiteGuard
from emulator.runtime import Runtime
from emulator.tools.proxy import ProxyApp, UpstreamError, check_upstream
from emulator.tools.recorded_bodies import Redactor, body_json
from emulator.tools.recording import Recorder, RecordingApp, load_recording
from emulator.tools.server import build_server_app
from emulator.tools.testing import serve_app, serve_in_thread

KEY = "sk-real-looking-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
MIB = 1 << 20


# --- tiny upstreams ------------------------------------------------------------------------------------------

@contextmanager
def tiny_upstream(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback server that runs ``handle`` on each connection, in a thread; yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conns.append(conn)
            threading.Thread(target=_run_handler, args=(handle, conn), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not, on Linux)
        listener.close()
        for conn in conns:
            conn.close()
        thread.join(timeout=5)


def _run_handler(handle: Callable[[socket.socket], None], conn: socket.socket) -> None:
    try:
        handle(conn)
    except OSError:
        pass
    finally:
        conn.close()


def read_request(conn: socket.socket, sink: Callable[[bytes], None] | None = None) -> bytes:
    """Read one request's head, and its body (Content-Length or chunked) into ``sink``; returns the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    feed = sink or (lambda _b: None)
    if b"content-length" in fields:
        left = int(fields[b"content-length"]) - len(rest)
        feed(rest)
        while left > 0:
            chunk = conn.recv(min(left, 1 << 16))
            if not chunk:
                break
            feed(chunk)
            left -= len(chunk)
    elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        buffer = rest
        while True:
            while b"\r\n" not in buffer:
                buffer += conn.recv(65536)
            size_line, _, buffer = buffer.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(buffer) < size + 2:
                buffer += conn.recv(65536)
            feed(buffer[:size])
            buffer = buffer[size + 2:]
            if size == 0:
                break
    return head


def answer(conn: socket.socket, status: str, body: bytes, content_type: bytes = b"application/json") -> None:
    conn.sendall(b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: " + content_type + b"\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CountingRecorder(Recorder):
    """A recorder that says when it has written an exchange (the line is written after the answer is sent)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, lambda: 0.0)
        self.written = threading.Semaphore(0)

    async def exchange(self, *args: Any) -> None:
        try:
            await super().exchange(*args)
        finally:
            self.written.release()


@contextmanager
def proxy(upstream: str, out: Path, *, timeout: float = 30.0, host: str = "127.0.0.1",
          recorder: Recorder | None = None) -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    recorder = recorder or Recorder(str(out), lambda: 0.0)
    try:
        with serve_app(ProxyApp(upstream, recorder, SiteGuard(host), timeout=timeout, log=log)) as url:
            yield url, log
    finally:
        recorder.close()


def assert_error_data(resp: httpx.Response, status: int, code: str, upstream: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["code"] == code and upstream in error["message"], error


# --- hostile upstreams -----------------------------------------------------------------------------------------

def test_an_unreachable_upstream_is_a_502_naming_it(tmp_path: Path) -> None:
    upstream = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    out = tmp_path / "rec.jsonl"
    with proxy(upstream, out) as (url, log):
        resp = httpx.post(f"{url}/v1/rl/model-resources", json={"base_model": "m"}, headers=AUTH, timeout=30)
    assert_error_data(resp, 502, "upstream_unreachable", upstream)
    assert "Traceback" not in log.getvalue() and log.getvalue().count("\n") == 1, log.getvalue()
    (entry,) = load_recording(str(out))
    assert entry["note"].startswith("answered by the proxy, not the upstream: cannot reach the upstream")
    assert KEY not in out.read_text()


def test_a_slow_upstream_is_a_504_after_the_timeout(tmp_path: Path) -> None:
    done = threading.Event()

    def stall(conn: socket.socket) -> None:
        read_request(conn)
        done.wait(10)  # never answers while the proxy waits

    with tiny_upstream(stall) as upstream, proxy(upstream, tmp_path / "rec.jsonl", timeout=0.3) as (url, log):
        resp = httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30)
        done.set()
    assert_error_data(resp, 504, "upstream_timeout", upstream)
    assert "did not answer within 0.3 s" in resp.json()["error"]["message"]
    assert "Traceback" not in log.getvalue()


def test_an_upstream_that_stalls_mid_body_cuts_the_answer_off(tmp_path: Path) -> None:
    done = threading.Event()

    def half(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"da")
        done.wait(10)

    out = tmp_path / "rec.jsonl"
    with tiny_upstream(half) as upstream, proxy(upstream, out, timeout=0.3) as (url, log):
        with pytest.raises(httpx.RemoteProtocolError):  # a cut-off answer, never a short one taken for whole
            httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30)
        done.set()
    assert "broke off its answer after 4 bytes" in log.getvalue() and "Traceback" not in log.getvalue()
    (entry,) = load_recording(str(out))
    assert "broke off" in entry["note"]


def test_garbage_bytes_are_a_502(tmp_path: Path) -> None:
    def garbage(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"\x00\xff\xfeSSH-2.0-not-http\r\n\r\n" + os.urandom(64))

    with tiny_upstream(garbage) as upstream, proxy(upstream, tmp_path / "rec.jsonl") as (url, log):
        resp = httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30)
    assert_error_data(resp, 502, "upstream_bad_response", upstream)
    assert "Traceback" not in log.getvalue()


def test_credentials_in_other_headers_are_not_recorded(tmp_path: Path) -> None:
    def ok(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nset-cookie: session=abc123secret\r\n"
                     b"content-length: 2\r\nconnection: close\r\n\r\n{}")

    out = tmp_path / "rec.jsonl"
    with tiny_upstream(ok) as upstream, proxy(upstream, out) as (url, _log):
        resp = httpx.get(f"{url}/v1/rl/supported-models", timeout=30, headers={
            **AUTH, "X-Api-Key": "xk-secret-1", "Cookie": "sid=ck-secret-2", "Idempotency-Key": "kept-1"})
    assert resp.status_code == 200 and resp.headers["set-cookie"] == "session=abc123secret"  # passed on as it is
    text = out.read_text()
    for secret in (KEY, "xk-secret-1", "ck-secret-2", "abc123secret"):
        assert secret not in text, secret
    (entry,) = load_recording(str(out))
    assert entry["request"]["headers"]["idempotency-key"] == "kept-1"
    assert entry["request"]["headers"]["x-api-key"] == "<redacted>"


def test_an_upstream_5xx_is_passed_on_as_it_is(tmp_path: Path) -> None:
    body = b'{"error":{"message":"overloaded","type":"server_error"}}'

    def busy(conn: socket.socket) -> None:
        read_request(conn)
        answer(conn, "503 Service Unavailable", body)

    out = tmp_path / "rec.jsonl"
    with tiny_upstream(busy) as upstream, proxy(upstream, out) as (url, log):
        resp = httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30)
    assert resp.status_code == 503 and resp.content == body
    assert log.getvalue() == ""
    (entry,) = load_recording(str(out))
    assert entry["response"]["status"] == 503 and entry["response"]["body"] == {"text": body.decode()}
    assert "note" not in entry


SIXTY_MIB = 60 * MIB
BLOCK = (b"0123456789abcdef" * 4096)  # 64 KiB of text


def test_a_60_mib_body_streams_both_ways_and_is_held_once(tmp_path: Path) -> None:
    """60 MiB up (binary) and 60 MiB down (text) through the proxy: the client and the upstream see every
    byte, the recording holds both bodies whole, and the proxy process holds each once: its peak of traced
    memory stays under 1.5 x the body (the old proxy held the answer three times and more)."""
    received = hashlib.sha256()

    def big(conn: socket.socket) -> None:
        head = read_request(conn, received.update)
        if head.startswith(b"GET"):
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                         + str(SIXTY_MIB).encode() + b"\r\n\r\n")
            for _ in range(SIXTY_MIB // len(BLOCK)):
                conn.sendall(BLOCK)
        else:
            answer(conn, "200 OK", b'{"ok":true}')

    upload_block = bytes(range(256)) * 256  # 64 KiB, not UTF-8: recorded as base64

    def upload() -> Iterator[bytes]:
        for _ in range(SIXTY_MIB // len(upload_block)):
            yield upload_block

    out = tmp_path / "rec.jsonl"
    recorder = CountingRecorder(str(out))
    with tiny_upstream(big) as upstream, proxy(upstream, out, recorder=recorder) as (url, _log):
        with httpx.Client(timeout=120) as client:
            tracemalloc.start()
            try:
                down = hashlib.sha256()
                with client.stream("GET", f"{url}/download", headers=AUTH) as resp:
                    assert resp.status_code == 200
                    for chunk in resp.iter_raw():
                        down.update(chunk)
                assert recorder.written.acquire(timeout=60)  # the recording's line too
                _, peak_down = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
                up = client.put(f"{url}/_files/payloads/some-token", content=upload(), headers={**AUTH, "content-type":
                                 "application/octet-stream", "content-length": str(SIXTY_MIB)})
                assert recorder.written.acquire(timeout=60)
                _, peak_up = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    assert up.status_code == 200, up.text
    expected_down = hashlib.sha256()
    for _ in range(SIXTY_MIB // len(BLOCK)):
        expected_down.update(BLOCK)
    expected_up = hashlib.sha256()
    for block in upload():
        expected_up.update(block)
    assert down.hexdigest() == expected_down.hexdigest()
    assert received.hexdigest() == expected_up.hexdigest()
    assert peak_down < 1.5 * SIXTY_MIB and peak_up < 1.5 * SIXTY_MIB, (peak_down / MIB, peak_up / MIB)
    first, second = load_recording(str(out))
    assert hashlib.sha256(first["response"]["body"]["text"].encode()).hexdigest() == expected_down.hexdigest()
    assert hashlib.sha256(base64.b64decode(second["request"]["body"]["base64"])).hexdigest() == \
        expected_up.hexdigest()


# --- the command ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("upstream, says", [
    ("ftp://example.com", "must start with http:// or https://"),
    ("http://", "names no host"),
    ("https://me:s3cret@example.com", "must not carry credentials"),
    ("http://127.0.0.1:{closed}", "cannot reach the upstream http://127.0.0.1:"),
])
def test_record_checks_the_upstream_at_start_in_one_sentence(upstream: str, says: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["record", "--upstream", upstream.format(closed=free_port()), "--out", "r.jsonl", "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err and "s3cret" not in err, err
    assert not (tmp_path / "r.jsonl").exists()  # nothing written, nothing listening


def test_an_upstream_speaking_garbage_is_refused_at_start(tmp_path: Path) -> None:
    def garbage(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"\x00\x01\x02 nonsense\r\n\r\n")

    with tiny_upstream(garbage) as upstream:
        with pytest.raises(UpstreamError, match="cannot reach the upstream"):
            check_upstream(upstream, timeout=5)


def test_ctrl_c_ends_the_proxy_without_a_traceback(tmp_path: Path) -> None:
    with serve_in_thread(Config()) as (upstream, _runtime):
        proc = subprocess.Popen([sys.executable, "-m", "emulator", "record", "--upstream", upstream, "--out",
                                 "r.jsonl", "--port", "0"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "listening on" in line, line
            url = line.rsplit(" ", 1)[1].strip()
            assert httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30).status_code == 200
        finally:
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert err.rstrip().endswith("record: 1 exchange(s) written to r.jsonl"), err
    assert KEY not in (tmp_path / "r.jsonl").read_text()
    assert oct((tmp_path / "r.jsonl").stat().st_mode & 0o777) == "0o600"


def test_ctrl_c_with_a_request_waiting_on_the_upstream_answers_it_and_stops_cleanly(tmp_path: Path) -> None:
    arrived, done = threading.Event(), threading.Event()

    def stall(conn: socket.socket) -> None:
        head = read_request(conn)
        if head.startswith(b"GET / "):  # the start-up check
            answer(conn, "404 Not Found", b"")
            return
        arrived.set()
        done.wait(30)

    with tiny_upstream(stall) as upstream:
        proc = subprocess.Popen([sys.executable, "-m", "emulator", "record", "--upstream", upstream, "--out",
                                 "r.jsonl", "--port", "0"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
            result: list[httpx.Response] = []
            client = threading.Thread(target=lambda: result.append(
                httpx.get(f"{url}/v1/rl/supported-models", headers=AUTH, timeout=30)))
            client.start()
            assert arrived.wait(30)
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=20)
            client.join(timeout=20)
        finally:
            done.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert result and result[0].status_code == 503 and result[0].json()["error"]["code"] == "proxy_stopping"
    (entry,) = load_recording(str(tmp_path / "r.jsonl"))
    assert "stopped before the upstream" in entry["note"]


# --- cross-site guards (issue 39, item 11) ---------------------------------------------------------------------

def test_the_proxy_has_serves_host_and_origin_guards(tmp_path: Path) -> None:
    with serve_in_thread(Config()) as (upstream, _runtime):
        direct = httpx.get(f"{upstream}/_emulator/state", headers={"Host": "attacker.example"}, timeout=30)
        assert direct.status_code == 403 and direct.json()["error"]["code"] == "host_not_allowed"
        out = tmp_path / "rec.jsonl"
        with proxy(upstream, out) as (url, _log):
            rebound = httpx.get(f"{url}/_emulator/state", headers={"Host": "attacker.example"}, timeout=30)
            foreign = httpx.get(f"{url}/_emulator/state", headers={"Origin": "http://attacker.example"}, timeout=30)
            form = httpx.post(f"{url}/_emulator/reset", content=b"x=1",
                              headers={"Content-Type": "application/x-www-form-urlencoded"}, timeout=30)
            own = httpx.get(f"{url}/_emulator/state", timeout=30)
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "host_not_allowed"
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "cross_origin_refused"
    assert form.status_code == 415
    assert own.status_code == 200  # the user's own tools still pass
    assert [e["request"]["path"] for e in load_recording(str(out))] == ["/_emulator/state"]  # refusals: not recorded


# --- secrets (issue 39, item 10) ---------------------------------------------------------------------------------

def test_files_api_upload_tokens_are_redacted_in_location_put_path_and_access_log(tmp_path: Path,
                                                                                 capfd: pytest.CaptureFixture[str]
                                                                                 ) -> None:
    out = tmp_path / "rec.jsonl"
    runtime = Runtime(Config(clock="manual", access_log=True))
    recorder = Recorder(str(out), runtime.clock.now)
    with serve_app(RecordingApp(build_server_app(runtime), recorder), runtime.config) as url:
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
            form = {"purpose": "calibration", "file_name": "d.jsonl", "file_type": "jsonl"}
            started = c.post("/v1/files", files={k: (None, v) for k, v in form.items()})
            assert started.status_code == 302
            location = started.headers["location"]
            assert c.put(location, content=b'{"messages":[]}\n', headers={"Authorization": ""}).status_code == 200
            ckpt_token = _a_checkpoint_download_token(c)
    recorder.close()
    token = location.rsplit("/", 1)[1]
    text = out.read_text()
    assert token not in text and KEY not in text and ckpt_token not in text
    first, put = load_recording(str(out))[:2]
    assert first["response"]["headers"]["location"].endswith("/_files/uploads/redacted-token-1")
    assert put["request"]["path"] == "/_files/uploads/redacted-token-1"
    log = capfd.readouterr().err
    assert "PUT /_files/uploads/" in log and "/_files/checkpoints/" in log
    assert token not in log and ckpt_token not in log and KEY not in log, log


def _a_checkpoint_download_token(c: httpx.Client) -> str:
    """Make a checkpoint, download one of its files; the token of its presigned URL."""
    r = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True}).json()
    c.get(f"/v1/rl/model-resources/{r['id']}")
    s = c.post("/v1/rl/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"rank": 8}}).json()
    c.get(f"/v1/rl/training-sessions/{s['id']}")
    op = c.post(f"/v1/rl/training-sessions/{s['id']}/operations/inference-checkpoint",
                headers={"Idempotency-Key": "k"}).json()
    done = c.get(f"/v1/rl/training-sessions/{s['id']}/operations/inference-checkpoint/{op['id']}").json()
    ckpt = done["output"]["checkpoint"]["id"]
    files = c.get(f"/v1/rl/checkpoints/{ckpt}/download", params={"variant": "CHECKPOINT_VARIANT_ADAPTER"}).json()
    file_url = files["data"][0]["url"]
    assert c.get(file_url).status_code == 200
    return str(file_url.split("/_files/checkpoints/")[1].split("/")[0])


def test_object_store_signatures_are_redacted_and_the_url_kept() -> None:
    body = (b'{"data":[{"url":"https://bucket.s3.amazonaws.com/ck/model.safetensors?X-Amz-Algorithm=AWS4-HMAC-SHA256'
            b'&X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600'
            b'&X-Amz-SignedHeaders=host&X-Amz-Signature=77c1e0deadbeef","size":"12"},'
            b'{"url":"https://x.blob.core.windows.net/c/f?sv=2024&sig=abc%2Bdef&se=2026"}]}')
    text = "".join(body_json([body], Redactor()))
    for secret in ("AKIAEXAMPLE", "77c1e0deadbeef", "abc%2Bdef"):
        assert secret not in text
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in text and "X-Amz-Signature=<redacted>" in text
    assert "https://bucket.s3.amazonaws.com/ck/model.safetensors?" in text and "sig=<redacted>" in text
    assert orjson.loads(orjson.loads(text)["text"])["data"][0]["size"] == "12"


@pytest.mark.parametrize("chunk", [1, 7, 4096, 4097, 65536])
def test_a_streamed_body_is_written_exactly_as_a_whole_one(chunk: int) -> None:
    """Bodies above 1 MiB are redacted and encoded chunk by chunk: the same bytes as the whole body at once,
    tokens straddling chunk boundaries included."""
    filler = b"x" * 5000
    text = b"".join(b'{"u":"http://h/_files/payloads/tok%d.abc-%d?a=1&X-Amz-Signature=s%d"}' % (i, i, i) + filler
                    for i in range(260))
    assert len(text) > 1 << 20
    binary = bytes(range(256)) * 5000 + b"/_files/checkpoints/bintoken/f" + bytes(range(256)) * 100
    for body in (text, binary, "é€😀".encode() * 300_000):
        chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)] if chunk > 1 else \
            [body[i:i + 1] for i in range(0, 3000)] + [body[3000:]]
        streamed = "".join(body_json(chunks, Redactor()))
        whole_redactor = Redactor()
        data = whole_redactor.redact(body, text=body is not binary)
        expected = orjson.dumps({"base64": base64.b64encode(data).decode()} if body is binary
                                else {"text": data.decode()}).decode()
        assert streamed == expected
    assert b"tok1.abc-1" not in "".join(body_json([text], Redactor())).encode()
