"""Record and replay HTTP exchanges as JSONL (one exchange per line).

``serve --record FILE``, the ``record --upstream`` proxy, ``/_emulator/recording/start|stop`` at run time, and
``replay``. Secrets are redacted (presigned tokens numbered so replay still serves the files); a file is 0600;
a *canonical* recording also drops what varies between runs, so the same client records the same bytes.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import orjson

from emulator.clock import rfc3339
from emulator.http.access_log import redact_query
from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send
from emulator.tools.recorded_bodies import Redactor, body_json
from emulator.ui import is_dashboard_path

REDACTED = "Bearer <redacted>"
REDACTED_HEADERS = MappingProxyType({"authorization": REDACTED, "x-emulator-admin-token": "<redacted>",
                    "x-emulator-tenant": "<redacted>"})  # (the last names a tenant by its API key)
# Any other header whose name says it carries a credential (an `X-Api-Key`, a cookie) is redacted too; the
# Idempotency-Key is no secret, and replay needs it.
_SECRET_HEADER = re.compile(r"key|token|secret|auth|cookie|signature|credential|password")
# Control-plane bodies whose "tenant" is an API key.
TENANT_BODIES = frozenset({"/_emulator/reset"})
MAX_MISSES = 1000
MAX_MISS_CHARS = 2000
SKIP_HEADERS = frozenset({"content-length", "date", "server", "transfer-encoding", "connection"})
#: The server's address in a canonical recording (the default address of ``serve``).
CANONICAL_BASE_URL = "http://127.0.0.1:8765"
#: The request headers a canonical recording keeps: those the API defines.
CANONICAL_REQUEST_HEADERS = frozenset({"authorization", "content-type", "idempotency-key", "x-emulator-fault"})
#: A note the app puts in the scope when it answered itself rather than pass on an answer (the proxy, when its
#: upstream failed); recorded as the exchange's ``note``, so a reader can tell such an answer from the service's.
NOTE = "emulator.recording.note"


def decode_body(body: dict[str, str]) -> bytes:
    if "base64" in body:
        return base64.b64decode(body["base64"])
    return body.get("text", "").encode("utf-8")


def _request_body(path: str, data: bytes) -> bytes:
    """The body as recorded: a reset's ``tenant`` (an API key) redacted."""
    if path not in TENANT_BODIES or b"tenant" not in data:
        return data
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    if isinstance(body, dict) and isinstance(body.get("tenant"), str):
        body["tenant"] = "<redacted>"
        return orjson.dumps(body)
    return data


#: What a recording kept in memory (started at run time, no ``--record`` file) may hold; past it, the
#: exchanges are not kept and the status says ``truncated``.
MAX_MEMORY_BYTES = 256 << 20
#: Paths of the run-time recording's own control calls, never recorded.
RECORDING_PATH = "/_emulator/recording"


class _MemorySink:
    """The lines of a recording kept in memory, bounded by ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.limit = limit
        self.truncated = False

    def write_line(self, pieces: Iterable[str]) -> None:
        text = "".join(pieces)
        if self.size + len(text) > self.limit:
            self.truncated = True
            return
        self.lines.append(text)
        self.size += len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _FileSink:
    """The lines of a recording appended to a file, each written piece by piece."""

    def __init__(self, file: TextIO) -> None:
        self.file = file

    def write_line(self, pieces: Iterable[str]) -> None:
        for piece in pieces:
            self.file.write(piece)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Recorder:
    """Appends one JSON line per exchange to ``path`` (None: to memory, :meth:`text`); ``now`` gives the
    virtual time of each.

    ``canonical``: record the same bytes whenever the answers are the same (see emulator/tools/README.md).
    """

    def __init__(self, path: str | None, now: Any, *, canonical: bool = False,
                 memory_limit: int = MAX_MEMORY_BYTES) -> None:
        self._memory: _MemorySink | None = None
        self._file: Any
        if path is None:
            self._file = self._memory = _MemorySink(memory_limit)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Owner-only: even redacted, a recording holds a client's data.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = _FileSink(open(fd, "a", encoding="utf-8"))  # noqa: SIM115 - kept open for the server's life
        self.path = path
        self._now = now
        self._canonical = canonical
        self._lock = threading.Lock()
        self._seq = 0
        # Placeholders, numbered in order of first appearance (under the lock, so in the file's order).
        self._redactor = Redactor()
        self._keys: dict[str, str] = {}

    def close(self) -> None:
        with self._lock:
            self._file.close()

    @property
    def exchanges(self) -> int:
        return self._seq

    @property
    def canonical(self) -> bool:
        return self._canonical

    @property
    def truncated(self) -> bool:
        return self._memory is not None and self._memory.truncated

    def text(self) -> str:
        """What a recording in memory holds (JSONL, as a file recording would)."""
        if self._memory is None:
            raise ValueError("this recording goes to a file")
        with self._lock:
            return "".join(self._memory.lines)

    def _request_headers(self, scope: Scope) -> dict[str, str]:
        out = {}
        for k, v in scope["headers"]:
            name = k.decode("latin-1").lower()
            if name in SKIP_HEADERS or name == "host":
                continue
            if self._canonical and name not in CANONICAL_REQUEST_HEADERS:
                continue
            value = v.decode("latin-1")
            if name in REDACTED_HEADERS:
                value = REDACTED_HEADERS[name]
            elif name != "idempotency-key" and _SECRET_HEADER.search(name):
                value = "<redacted>"
            elif name == "idempotency-key" and self._canonical:
                value = self._keys.setdefault(value, f"key-{len(self._keys) + 1}")
            out[name] = value
        return out

    def _line(self, scope: Scope, request_body: list[bytes], status: int, headers: dict[str, str],
              body: list[bytes]) -> Iterator[str]:
        """The recorded form of one exchange, a JSON line in pieces (bodies are streamed, never joined but in
        canonical mode, for the emulator's own small answers); called under the lock, in the order of the file.
        Placeholders are numbered in the order path, response headers, response body, request body."""
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        base_url = f"{scope.get('scheme', 'http')}://{host}"
        redactor = self._redactor
        path = redactor.text(scope["path"])
        headers = {name: "<redacted>" if name == "set-cookie" else redactor.text(value) for name, value in headers.items()}
        if self._canonical and host:
            body = [b"".join(body).replace(base_url.encode(), CANONICAL_BASE_URL.encode())]
            headers = {name: value.replace(base_url, CANONICAL_BASE_URL) for name, value in headers.items()}
            base_url = CANONICAL_BASE_URL
        redactor.scan(body)
        if scope["path"] in TENANT_BODIES:
            request_body = [_request_body(scope["path"], b"".join(request_body))]
        head = {"seq": self._seq, "at": rfc3339(self._now()), "base_url": base_url}
        request = {"method": scope["method"], "path": path,
                   "query": redact_query(scope.get("query_string", b"").decode("latin-1")),
                   "headers": self._request_headers(scope)}
        yield orjson.dumps(head).decode()[:-1] + ',"request":' + orjson.dumps(request).decode()[:-1] + ',"body":'
        yield from body_json(request_body, redactor)
        yield '},"response":' + orjson.dumps({"status": status, "headers": headers}).decode()[:-1] + ',"body":'
        yield from body_json(body, redactor)
        note = scope.get(NOTE)
        yield "}" + (',"note":' + orjson.dumps(note).decode() if note else "") + "}\n"

    async def exchange(self, app: Any, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app`` for one HTTP request, recording what went in and came out (each body kept once)."""
        chunks: list[bytes] = []

        async def recv() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        status = 0
        headers: dict[str, str] = {}
        out: list[bytes] = []

        async def snd(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for k, v in message.get("headers", []):
                    name = k.decode("latin-1").lower()
                    if name not in SKIP_HEADERS:
                        headers[name] = v.decode("latin-1")
            elif message["type"] == "http.response.body":
                out.append(message.get("body", b""))
            await send(message)

        await app(scope, recv, snd)
        with self._lock:  # numbering (seq, placeholders) follows the order of the file
            self._seq += 1
            self._file.write_line(self._line(scope, chunks, status, headers, out))
            self._file.flush()


class RecordingError(ValueError):
    pass


class RecordingControl:
    """Recording switched on and off while the server runs (``/_emulator/recording/start|stop``).

    With a ``--record`` file, one recorder appends to it for the server's life and start/stop pause and resume
    it (one numbering of exchanges and placeholders for the whole file). Without one, each start begins a new
    recording in memory, which ``GET /_emulator/recording`` downloads (during it, or after the stop).
    """

    def __init__(self, now: Any, path: str | None = None, *, recording: bool = False, canonical: bool = False
                 ) -> None:
        self.now = now
        self.path = path
        self.recorder: Recorder | None = Recorder(path, now, canonical=canonical) if path else None
        self.active = bool(path) and recording
        self._lock = threading.Lock()

    def current(self) -> Recorder | None:
        return self.recorder if self.active else None

    def start(self, canonical: bool = False) -> dict[str, Any]:
        with self._lock:
            if self.active:
                raise RecordingError("already recording; stop it first (POST /_emulator/recording/stop)")
            if self.recorder is not None and self.path is not None and canonical and not self.recorder.canonical:
                # One file, one numbering: a canonical stretch inside a plain file would replay as neither.
                raise RecordingError("this server records into its --record file, which is not canonical; start "
                                     "the server with --record-canonical for a canonical file")
            if self.path is None:
                self.recorder = Recorder(None, self.now, canonical=canonical)
            self.active = True
        return self.status()

    def stop(self) -> dict[str, Any]:
        with self._lock:
            if not self.active:
                raise RecordingError("not recording; start it with POST /_emulator/recording/start")
            self.active = False
        return self.status()

    def status(self) -> dict[str, Any]:
        recorder = self.recorder
        return {"recording": self.active, "file": self.path,
                "canonical": recorder.canonical if recorder is not None else False,
                "exchanges": recorder.exchanges if recorder is not None else 0,
                "truncated": recorder.truncated if recorder is not None else False}

    def download(self) -> str:
        if self.path is not None:
            raise RecordingError("this server records into its --record file; read it there")
        if self.recorder is None:
            raise RecordingError("nothing recorded yet; start with POST /_emulator/recording/start")
        return self.recorder.text()


class RecordingApp:
    """Records the exchanges of ``app`` with a recorder (always on) or a :class:`RecordingControl` (when on)."""

    def __init__(self, app: ASGIApp, recorder: Recorder | RecordingControl) -> None:
        self.app = app
        self.control = recorder if isinstance(recorder, RecordingControl) else None
        self.recorder = recorder if isinstance(recorder, Recorder) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Idle (not recording), this wrapper costs ~2k instructions of a GET's ~145k (bench.inproc
        # --instructions, with and without --no-recorder).
        control = self.control  # (control.current(), without its call)
        recorder = self.recorder if control is None else control.recorder if control.active else None
        # The dashboard's pages and event streams are not API traffic (and a stream never ends); the calls that
        # switch recording are not part of what is recorded.
        if (recorder is None or scope["type"] != "http" or is_dashboard_path(scope["path"])
                or scope["path"].startswith(RECORDING_PATH)):
            await self.app(scope, receive, send)
            return
        await recorder.exchange(self.app, scope, receive, send)


def load_recording(path: str) -> list[dict[str, Any]]:
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = orjson.loads(line)
                entry["request"]["method"], entry["request"]["path"], entry["response"]["status"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a recorded exchange ({exc})") from exc
            entries.append(entry)
    return entries
