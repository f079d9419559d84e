"""A small synchronous keep-alive HTTP client (stdlib) for setting up state and capturing bodies."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class Client:
    def __init__(self, url: str, token: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the bench talks to loopback addresses only, not {parts.hostname}")
        self.host, self.port, self.token, self.timeout = parts.hostname, parts.port, token, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        hdrs = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=hdrs)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        expect: int = 200,
    ) -> tuple[dict[str, Any], bytes]:
        status, raw = self.request(method, path, body, headers)
        if status != expect:
            raise RuntimeError(f"{method} {path} answered {status}: {raw[:300]!r}")
        return json.loads(raw), raw

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
