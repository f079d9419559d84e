"""Replay a recording (:mod:`emulator.tools.recording`): the ``replay`` subcommand's server.

Each request takes the first unused recorded exchange that matches it (:mod:`emulator.tools.replay_match`).
Around that: rewind (and ``--loop``), pacing (``--pace``), its own clock, docs and a dashboard, and a 404
``no_recorded_answer`` that says why nothing matched.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import threading
from typing import Any

import orjson

from emulator.clock import Clock, ClockError, parse_rfc3339
from emulator.errors import Invalid, NotFound
from emulator.http.access_log import redact_query
from emulator.http.asgi import Receive, Scope, Send, lifespan, send_json
from emulator.http.auth import check_admin
from emulator.http.docs import DocsApp, is_docs_path
from emulator.http.envelope import MethodNotAllowed, render_error
from emulator.http.errors import ErrorEnvelope
from emulator.http.site import SiteGuard
from emulator.tenancy import Tenancy
from emulator.tools.recording import MAX_MISS_CHARS, MAX_MISSES, decode_body
from emulator.tools.replay_match import MAX_COMPARED_BYTES, Matcher, SentBody
from emulator.tools.replay_view import ReplayDashboard
from emulator.ui import is_dashboard_path

PACE_POLL_SECONDS = 0.01   # how often a paced answer looks at the clock


class ReplayApp:
    def __init__(self, entries: list[dict[str, Any]], guard: SiteGuard | None = None, *, loop: bool = False,
                 pace: float | None = None, clock: str = "system", admin_token: str | None = None,
                 match: str = "strict") -> None:
        self.entries = entries
        self.matcher = Matcher(entries, match)
        self.guard = guard
        self.loop = loop
        self.pace = pace
        self._clock_mode = clock if pace is not None else "manual"
        self.tenancy = Tenancy(None, admin_token)
        self.used = [False] * len(entries)
        self.order: list[int] = []    # answered exchanges, in the order they were answered (this pass)
        self.misses: list[str] = []   # the first MAX_MISSES, each cut short
        self.hints: list[str] = []    # the near-miss report of each of them
        self.missed = 0               # all of them
        self.rewinds = 0
        self._lock = threading.Lock()
        self._times = [_at(e) for e in entries]
        self._first = next((t for t in self._times if t is not None), None)
        self.clock = self._new_clock()
        self._armed = False           # paced: the clock starts at the first answer of a pass
        self.docs = ErrorEnvelope(DocsApp())
        self.dashboard = ErrorEnvelope(ReplayDashboard(self))
        self.control = ErrorEnvelope(self._control)

    def _new_clock(self) -> Clock:
        """At the recording's start, keeping the mode and speed the clock was given since."""
        current = getattr(self, "clock", None)
        mode, speed = (current.mode, current.speed) if current is not None else (self._clock_mode, self.pace or 1.0)
        return Clock(mode, speed, self._first)

    # --- state ---------------------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        return {"recorded": len(self.entries), "answered": sum(self.used), "unused": self.used.count(False),
                "unanswered": list(self.misses), "near_misses": list(self.hints), "unanswered_total": self.missed,
                "rewinds": self.rewinds, "match": self.matcher.mode,
                "loop": self.loop, "pace": self.pace, "clock": self.clock.describe()}

    def rewind(self) -> None:
        """Every exchange unused again, the clock back at the recording's start; the misses stay listed."""
        with self._lock:
            self._rewind()

    def _rewind(self) -> None:
        self.used = [False] * len(self.entries)
        self.order = []
        self.rewinds += 1
        self.matcher.rewind()
        self.clock = self._new_clock()
        self._armed = False

    def answered(self) -> list[dict[str, Any]]:
        """The exchanges answered in this pass, in order (what the dashboard shows)."""
        with self._lock:
            return [self.entries[i] for i in self.order]

    # --- HTTP ----------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        refused = self.guard.refusal(scope) if self.guard is not None else None
        if refused is not None:
            while (await receive()).get("more_body"):
                pass
            status, message, code = refused
            await send_json(send, status, render_error(status, message, code=code))
            return
        path = scope["path"]
        if is_dashboard_path(path):
            await self.dashboard(scope, receive, send)
            return
        content_type = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), "")
        body = await _read_body(receive, content_type)
        if path == "/_emulator/health":
            await send_json(send, 200, b'{"status":"ok"}')
        elif path in ("/_emulator/replay", "/_emulator/replay/rewind") or path.startswith("/_emulator/clock"):
            scope = {**scope, "replay_body": body.data}
            await self.control(scope, receive, send)
        elif is_docs_path(path):
            await self.docs(scope, receive, send)
        else:
            await self._answer(scope, receive, send, body)

    async def _control(self, scope: Scope, receive: Receive, send: Send) -> None:
        check_admin(scope, self.tenancy)
        path, method = scope["path"], scope["method"]
        allowed = {"/_emulator/replay": ["GET"], "/_emulator/replay/rewind": ["POST"], "/_emulator/clock": ["GET", "POST"],
                   "/_emulator/clock/advance": ["POST"]}.get(path)
        if allowed is None:
            raise NotFound(f"no replay control route {path}", code="unknown_endpoint")
        if method not in allowed:
            raise MethodNotAllowed(method, path, allowed)
        if path == "/_emulator/replay":
            out: Any = self.report()
        elif path == "/_emulator/replay/rewind":
            self.rewind()
            out = self.report()
        else:
            out = self._clock_call(path, method, scope["replay_body"])
        await send_json(send, 200, orjson.dumps(out))

    def _clock_call(self, path: str, method: str, raw: bytes) -> dict[str, Any]:
        if method == "GET":
            return {**self.clock.describe(), "scope": "global"}
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise Invalid(f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise Invalid("the body must be a JSON object")
        try:
            if path.endswith("/advance"):
                seconds = body.get("seconds")
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                    raise Invalid("seconds: a number of seconds >= 0", param="seconds")
                self.clock.advance(float(seconds))
            else:
                speed = body.get("speed")
                if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))):
                    raise Invalid("speed: a number", param="speed")
                self.clock.configure(mode=body.get("mode"), speed=speed)
                if body.get("now"):
                    self.clock.set_time(parse_rfc3339(str(body["now"])))
        except (ClockError, ValueError) as exc:
            if isinstance(exc, Invalid):
                raise
            raise Invalid(str(exc)) from exc
        return {**self.clock.describe(), "scope": "global"}

    def _take(self, method: str, path: str, query: str, body: SentBody) -> int | None:
        """The first unused exchange that matches (with ``loop``, after a rewind when only used ones do)."""
        def find() -> int | None:
            index, trial = self.matcher.find(method, path, query, body,
                                             (i for i in range(len(self.entries)) if not self.used[i]))
            self.matcher.keep(trial)  # (the ids this request mapped, when it matched)
            return index

        with self._lock:
            index = find()
            if (index is None and self.loop
                    and self.matcher.find(method, path, query, body, range(len(self.entries)))[0] is not None):
                self._rewind()
                index = find()
            if index is not None:
                self.used[index] = True
                self.order.append(index)
                at = self._times[index]
                if at is not None and not self._armed:
                    # A pass starts at its first answer: a running clock starts from there (a client may
                    # come long after the server started); a manual one only ever moves forward.
                    self._armed = True
                    if self.clock.mode == "system":
                        self.clock = Clock("system", self.clock.speed, at)
                    elif at > self.clock.now():
                        self.clock.set_time(at)
            return index

    async def _answer(self, scope: Scope, receive: Receive, send: Send, body: SentBody) -> None:
        method, path = scope["method"], scope["path"]
        query = redact_query(scope.get("query_string", b"").decode("latin-1"))
        index = self._take(method, path, query, body)
        if index is None:
            line = _cut(f"{method} {path}{'?' + query if query else ''}")
            with self._lock:
                hint = _cut(self.matcher.near_miss(self.used, self.order, method, path, query, body))
                self.missed += 1
                kept = len(self.misses) < MAX_MISSES
                if kept:
                    self.misses.append(line)
                    self.hints.append(hint)
            text = f"no recorded answer for {line}; {hint}"
            if kept:
                print(f"replay: {text}", file=sys.stderr, flush=True)
            await send_json(send, 404, render_error(404, text, code="no_recorded_answer"))
            return
        entry = self.entries[index]
        due = self._times[index]
        if due is not None:
            if self.pace is not None and self.clock.now() < due:
                gone = asyncio.ensure_future(_disconnected(receive))
                try:  # (a client that gives up stops the wait: nothing holds the server's shutdown)
                    while self.clock.now() < due and not gone.done():
                        await asyncio.sleep(PACE_POLL_SECONDS)
                finally:
                    gone.cancel()
                if gone.done():
                    return
            elif due > self.clock.now():
                self.clock.set_time(due)  # unpaced, the clock follows the recording
        out = decode_body(entry["response"]["body"])
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        recorded_base = entry.get("base_url")
        if recorded_base and host:
            out = out.replace(recorded_base.encode(), f"{scope.get('scheme', 'http')}://{host}".encode())
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in entry["response"]["headers"].items()]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": entry["response"]["status"], "headers": headers})
        await send({"type": "http.response.body", "body": out})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MISS_CHARS else text[:MAX_MISS_CHARS - 15] + "... (truncated)"


async def _read_body(receive: Receive, content_type: str) -> SentBody:
    """The whole body's digest and size; its bytes up to what is compared field by field."""
    chunks: list[bytes] = []
    digest = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        data = message.get("body", b"")
        digest.update(data)
        if size < MAX_COMPARED_BYTES:
            chunks.append(data[:MAX_COMPARED_BYTES - size])
        size += len(data)
        if not message.get("more_body"):
            return SentBody(b"".join(chunks), digest.digest(), size, content_type)


def _at(entry: dict[str, Any]) -> float | None:
    try:
        return parse_rfc3339(str(entry["at"]))
    except (KeyError, ValueError):
        return None


__all__ = ["ReplayApp"]
