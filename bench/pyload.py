"""Fallback load generator (used when Debian's wrk cannot be installed): asyncio over raw sockets,
HTTP/1.1 keep-alive, one coroutine per connection, the same scenarios as ``bench/lua/*.lua``.

``python -m bench.pyload SPEC.json`` prints one ``BENCH_JSON`` line in wrk's format. It runs in its
own process so it has a core of its own, like wrk; being Python it saturates sooner than wrk, so
the ceiling's figures measured with it are a lower bound (BENCHMARKS.md says which generator ran).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from bench.stats import MARK, percentile

FB = (
    b'{"loss":{"type":"LOSS_TYPE_CROSS_ENTROPY"},"samples":[{"model_input":{"chunks":[{"encoded_text":'
    b'{"tokens":[1,2,3,4,5,6]}}]},"loss_fn_inputs":{"target_tokens":{"data":[2,3,4,5,6,7],"dtype":"int64"},'
    b'"weights":{"data":[0,0,0,1,1,1],"dtype":"float32"}}}]}'
)
OPT = b'{"adam_params":{"learning_rate":0.0001}}'
RES = b'{"base_model":"Qwen/Qwen3.8-27B","lora_enabled":true}'
S = "/v1/rl/training-sessions/"
ID = re.compile(rb'"id":"([^"]+)"')
STATUS = re.compile(rb'"status":"([A-Z_]+)"')


class FlowError(Exception):
    pass


def build(
    method: str,
    path: str,
    host: str,
    token: str,
    body: bytes | None = None,
    extra: dict[str, str] | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Authorization: Bearer {token}"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    for name, value in (extra or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


class Machine(Protocol):
    """One connection's request generator: what to send next, and what the answer changes."""

    def request(self) -> bytes: ...

    def response(self, status: int, body: bytes) -> None: ...


class Static:
    """GET one fixed path."""

    def __init__(self, spec: dict[str, Any], host: str, conn: int) -> None:
        self.raw = build("GET", spec["path"], host, spec["token"])

    def request(self) -> bytes:
        return self.raw

    def response(self, status: int, body: bytes) -> None:
        pass


class CreateSession:
    """POST a session naming the next pre-created resource, five per resource (shared counter)."""

    counter = 0

    def __init__(self, spec: dict[str, Any], host: str, conn: int) -> None:
        self.host, self.token = host, spec["token"]
        with open(spec["ids_file"]) as fh:
            self.ids = [line.strip() for line in fh if line.strip()]

    def request(self) -> bytes:
        rid = self.ids[(CreateSession.counter // 5) % len(self.ids)]
        CreateSession.counter += 1
        return build(
            "POST",
            "/v1/rl/training-sessions",
            self.host,
            self.token,
            b'{"model_resources_id":"' + rid.encode() + b'"}',
        )

    def response(self, status: int, body: bytes) -> None:
        pass


class Loop:
    """The same state machine as ``lua/loop.lua``."""

    def __init__(self, spec: dict[str, Any], host: str, conn: int) -> None:
        self.host, self.token, self.conn = host, spec["token"], conn
        if spec.get("tenants"):  # each connection a tenant of its own (as loop.lua's per-connection)
            self.token = f"{self.token}-{conn}"
        self.state, self.polls, self.seq = 0, 0, 0
        self.rid = self.sid = self.oid = ""
        self.loops = 0
        self.flow_errors = 0

    def _op(self, path: str, body: bytes) -> bytes:
        self.seq += 1
        return build(
            "POST", path, self.host, self.token, body, {"Idempotency-Key": f"bench-{self.conn}-{self.seq}"}
        )

    def request(self) -> bytes:
        st, h, t = self.state, self.host, self.token
        if st == 0:
            return build("POST", "/v1/rl/model-resources", h, t, RES)
        if st == 1:
            return build("GET", "/v1/rl/model-resources/" + self.rid, h, t)
        if st == 2:
            return build(
                "POST",
                "/v1/rl/training-sessions",
                h,
                t,
                b'{"model_resources_id":"' + self.rid.encode() + b'"}',
            )
        if st == 3:
            return build("GET", S + self.sid, h, t)
        if st == 4:
            return self._op(S + self.sid + "/operations/forward-backward", FB)
        if st == 5:
            return build("GET", S + self.sid + "/operations/forward-backward/" + self.oid, h, t)
        if st == 6:
            return self._op(S + self.sid + "/operations/optim-step", OPT)
        return build("GET", S + self.sid + "/operations/optim-step/" + self.oid, h, t)

    def _restart(self) -> None:
        self.flow_errors += 1
        self.state, self.polls = 0, 0

    def _poll(self, status: str | None, want: str) -> bool:
        if status and status.endswith(want):
            self.polls = 0
            return True
        self.polls += 1
        if (status and status.endswith(("FAILED", "ERROR"))) or self.polls > 1000:
            self._restart()
        return False

    def response(self, code: int, body: bytes) -> None:
        if code != 200:
            self._restart()
            return
        m_id, m_st = ID.search(body), STATUS.search(body)
        oid = m_id.group(1).decode() if m_id else None
        status = m_st.group(1).decode() if m_st else None
        st = self.state
        if st in (0, 2, 4, 6):  # an answer that created something: its id is the next step's
            if oid is None:
                self._restart()
            elif st == 0:
                self.rid, self.state = oid, 1
            elif st == 2:
                self.sid, self.state = oid, 3
            elif st == 4:
                self.oid, self.state = oid, 5
            else:
                self.oid, self.state = oid, 7
        elif st == 1:
            if self._poll(status, "READY"):
                self.state = 2
        elif st == 3:
            if self._poll(status, "RUNNING"):
                self.state = 4
        elif st == 5:
            if self._poll(status, "COMPLETED"):
                self.state = 6
        elif self._poll(status, "COMPLETED"):
            self.loops += 1
            self.state = 0


SCENARIOS: dict[str, Callable[[dict[str, Any], str, int], Machine]] = {
    "static": Static, "create_session": CreateSession, "loop": Loop}


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    body = await reader.readexactly(length) if length else b""
    return status, body


async def worker(
    spec: dict[str, Any],
    conn: int,
    deadline: float,
    lat: list[int],
    counts: dict[str, int],
    machines: list[Any],
) -> None:
    url = urlsplit(spec["url"])
    host = url.netloc
    machine = SCENARIOS[spec["scenario"]](spec, host, conn)
    machines.append(machine)
    try:
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
    except OSError:
        counts["errors_connect"] += 1
        return
    try:
        while time.monotonic() < deadline:
            raw = machine.request()
            start = time.perf_counter_ns()
            writer.write(raw)
            status, body = await asyncio.wait_for(read_response(reader), timeout=5.0)
            lat.append((time.perf_counter_ns() - start) // 1000)
            counts["requests"] += 1
            counts["bytes"] += len(body)
            if status >= 400:
                counts["errors_status"] += 1
            machine.response(status, body)
    except TimeoutError:
        counts["errors_timeout"] += 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        counts["errors_read"] += 1
    finally:
        writer.close()


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    lat: list[int] = []
    counts = dict.fromkeys(
        ("requests", "bytes", "errors_connect", "errors_read", "errors_status", "errors_timeout"), 0
    )
    machines: list[Any] = []
    started = time.monotonic()
    deadline = started + float(spec["duration"])
    await asyncio.wait_for(
        asyncio.gather(
            *(worker(spec, i, deadline, lat, counts, machines) for i in range(spec["connections"]))
        ),
        timeout=float(spec["duration"]) + 15,
    )
    elapsed = time.monotonic() - started
    return {
        **counts,
        "errors_write": 0,
        "duration_us": int(elapsed * 1e6),
        "errors_flow": sum(getattr(m, "flow_errors", 0) for m in machines),
        "lat_p50": percentile(lat, 50) or 0,
        "lat_p90": percentile(lat, 90) or 0,
        "lat_p99": percentile(lat, 99) or 0,
        "lat_mean": sum(lat) / len(lat) if lat else 0.0,
        "lat_max": max(lat) if lat else 0,
        "loops": sum(getattr(m, "loops", 0) for m in machines),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as fh:
        spec = json.load(fh)
    try:
        import uvloop  # type: ignore[import-not-found]

        result = uvloop.run(run(spec))
    except ImportError:
        result = asyncio.run(run(spec))
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
