"""Figures for RELIABILITY.md: what hostile clients cost a running emulator (issue 26).

``python -m bench.hostile [--send-timeout S] [--request-timeout S] [--only slow-bodies]`` starts ``python -m emulator serve`` processes and measures:

- **headers**: resident memory after 400 requests with distinct 60 KiB bearer tokens (under the header
  limit: the principal cache is bounded in bytes), then after 400 with distinct 1 MiB tokens (refused:
  431, or a reset connection when the kernel drops the answer because the request's rest was unread);
- **slow readers**: six clients ask for a ~12 MB state export and never read it, on a server with
  ``--max-connections 7``: how long other clients get 503, and the memory held meanwhile;
- **slow bodies**: twenty clients send a body one byte every 2.5 s, on a server with ``--max-connections 21``
  and ``--request-timeout`` (10 s here): how long other clients get 503, and what the twenty are answered;
- **event streams**: 200 dashboard streams opened at once (how many are served, how many refused), and
  the server's CPU share and a probe's latency while the served ones run;
- **replay**: a replay server asked 3,000 unrecorded requests with 60 KB paths: the size of its report.

Prints one ``BENCH_JSON`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from bench.stats import percentile

SERVE = ["-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "error"]


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _get_status(url: str, token: str) -> int:
    """The status, or 0 when the server closed the connection before answering (a refused request whose
    unread rest makes the kernel reset the connection, which can drop the 431 on the way)."""
    data = b""
    with socket.create_connection(_addr(url), timeout=30) as sock:
        try:
            sock.sendall(b"GET /v1/rl/model-resources HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                         b"Authorization: Bearer " + token.encode() + b"\r\n\r\n")
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0


def headers(work: Path) -> dict[str, Any]:
    with procs.Server("hostile-headers", SERVE, work) as srv:
        base = procs.rss_of(srv.pid)
        ok = sum(_get_status(srv.url, f"{i}-" + "k" * (60 << 10)) == 200 for i in range(400))
        after_small = procs.rss_of(srv.pid)
        refused = sum(_get_status(srv.url, f"{i}-" + "k" * (1 << 20)) in (431, 0) for i in range(400))
        after_large = procs.rss_of(srv.pid)
    return {"headers_rss_base_mb": base / 2**20, "headers_60k_ok": ok, "headers_60k_growth_mb": (after_small - base) / 2**20,
            "headers_1m_431": refused, "headers_1m_growth_mb": (after_large - after_small) / 2**20}


def slow_readers(work: Path, send_timeout: float) -> dict[str, Any]:
    limits = work / "limits.yaml"
    limits.write_text("session_metadata_kib: 4096\n")
    cmd = SERVE + ["--max-connections", "7", "--send-timeout", str(send_timeout), "--limits-file", str(limits)]
    with procs.Server("hostile-slow", cmd, work) as srv:
        api = httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer slow"}, timeout=60)
        rid = api.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()["id"]
        api.get(f"/v1/rl/model-resources/{rid}")
        for _ in range(3):
            api.post("/v1/rl/training-sessions", json={"model_resources_id": rid,
                                                        "metadata": {"notes": "n" * ((4 << 20) - 1024)}})
        size = len(api.get("/_emulator/state").content)
        api.close()
        time.sleep(0.5)
        base = procs.rss_of(srv.pid)
        stalled = []
        for _ in range(6):
            sock = socket.create_connection(_addr(srv.url))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /_emulator/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            stalled.append(sock)
        started = time.monotonic()
        peak, refused, served_after = base, 0, None
        while time.monotonic() - started < send_timeout + 60:
            peak = max(peak, procs.rss_of(srv.pid))
            status = httpx.get(f"{srv.url}/_emulator/health", timeout=10).status_code
            if status == 200:
                served_after = time.monotonic() - started
                break
            refused += 1
            time.sleep(0.25)
        time.sleep(1)
        after = procs.rss_of(srv.pid)
        for sock in stalled:
            sock.close()
    return {"slow_answer_mb": size / 2**20, "slow_send_timeout_s": send_timeout, "slow_probes_503": refused,
            "slow_served_again_after_s": served_after, "slow_rss_base_mb": base / 2**20,
            "slow_rss_peak_mb": peak / 2**20, "slow_rss_after_mb": after / 2**20}


def slow_bodies(work: Path, request_timeout: float, drippers: int = 20, every: float = 2.5) -> dict[str, Any]:
    """``drippers`` connections send a request whose body comes one byte every ``every`` seconds (never pausing
    as long as ``--body-timeout``), on a server with one connection slot more than that (the probe's): how
    long other clients get 503, and what the drippers are answered."""
    cmd = SERVE + ["--max-connections", str(drippers + 1), "--request-timeout", str(request_timeout)]
    with procs.Server("hostile-slow-bodies", cmd, work) as srv:
        socks = []
        for _ in range(drippers):
            sock = socket.create_connection(_addr(srv.url))
            sock.sendall(b"POST /_emulator/clock/advance HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 1000\r\n\r\n{")
            sock.setblocking(False)
            socks.append(sock)
        answers = {sock: b"" for sock in socks}
        open_ = set(socks)
        started = last_drip = time.monotonic()
        refused, served_after = 0, None
        while time.monotonic() - started < request_timeout + 60 and (open_ or served_after is None):
            if time.monotonic() - last_drip >= every:
                last_drip = time.monotonic()
                for sock in list(open_):
                    try:
                        sock.send(b" ")
                    except OSError:
                        pass
            for sock in list(open_):
                try:
                    chunk = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                answers[sock] += chunk
                if not chunk:
                    open_.discard(sock)
            if served_after is None:
                status = httpx.get(f"{srv.url}/_emulator/health", timeout=10).status_code
                if status == 200:
                    served_after = time.monotonic() - started
                else:
                    refused += 1
            time.sleep(0.25)
        for sock in socks:
            sock.close()
    statuses: dict[str, int] = {}
    for answer in answers.values():
        code = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "none"
        statuses[code] = statuses.get(code, 0) + 1
    return {"slow_bodies": drippers, "slow_bodies_request_timeout_s": request_timeout,
            "slow_bodies_probes_503": refused, "slow_bodies_served_again_after_s": served_after,
            "slow_bodies_answers": statuses}


async def _streams(url: str, n: int, hold: float) -> dict[str, Any]:
    host, port = _addr(url)
    opened: list[asyncio.StreamWriter] = []
    statuses: dict[str, int] = {}
    for _ in range(n):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /_emulator/ui/api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        line = await reader.readline()
        status = line.split(b" ")[1].decode()
        statuses[status] = statuses.get(status, 0) + 1
        if status == "200":
            opened.append(writer)
        else:
            writer.close()
    return {"statuses": statuses, "writers": opened}


def streams(work: Path) -> dict[str, Any]:
    with procs.Server("hostile-streams", SERVE, work) as srv:
        api = httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer streams"}, timeout=60)
        for _ in range(200):  # an event log with some history
            api.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
        api.close()
        loop = asyncio.new_event_loop()
        try:
            opened = loop.run_until_complete(_streams(srv.url, 200, 0))
            cpu0, t0 = procs.cpu_seconds(srv.pid), time.monotonic()
            latencies = []
            with httpx.Client(base_url=srv.url, timeout=10) as probe:
                while time.monotonic() - t0 < 8:
                    start = time.perf_counter()
                    probe.get("/_emulator/health")
                    latencies.append((time.perf_counter() - start) * 1000)
                    time.sleep(0.02)
            cpu = (procs.cpu_seconds(srv.pid) - cpu0) / (time.monotonic() - t0)
            for writer in opened["writers"]:
                writer.close()
        finally:
            loop.close()
    return {"streams_asked": 200, "streams_statuses": opened["statuses"], "streams_server_cpu_share": cpu,
            "streams_probe_p50_ms": percentile(latencies, 50), "streams_probe_p99_ms": percentile(latencies, 99)}


def replay() -> dict[str, Any]:
    from starlette.testclient import TestClient

    from emulator.tools.replay import ReplayApp

    app = ReplayApp([])
    client = TestClient(app, base_url="http://127.0.0.1:8765")  # type: ignore[arg-type]
    for i in range(3000):
        client.get(f"/v1/{i}/" + "p" * 60_000)
    report = client.get("/_emulator/replay")
    return {"replay_misses": 3000, "replay_report_kb": len(report.content) / 1024,
            "replay_kept": len(report.json()["unanswered"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile")
    parser.add_argument("--send-timeout", type=float, default=30.0)
    parser.add_argument("--request-timeout", type=float, default=10.0,
                        help="the slow bodies' server's --request-timeout (default 10; the server's default is 120)")
    parser.add_argument("--only", choices=("slow-bodies",), help="measure this one attack only")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.only == "slow-bodies":
            out.update(slow_bodies(work, args.request_timeout))
            print("BENCH_JSON " + json.dumps(out), flush=True)
            return 0
        out.update(headers(work))
        out.update(slow_readers(work, args.send_timeout))
        out.update(slow_bodies(work, args.request_timeout))
        out.update(streams(work))
    out.update(replay())
    print("BENCH_JSON " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
