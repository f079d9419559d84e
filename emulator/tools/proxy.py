"""The recording proxy of ``together-rl-emulator record --upstream URL``: forwards and records every exchange.

Safe with a real API key: the upstream is checked before listening; its failures are ``ErrorData`` (502/504) noted
as the proxy's; bodies stream through; secrets never reach the recording; Host and Origin guarded as ``serve``.
The upstream is the real service or any implementation; the recording is :mod:`emulator.tools.recording`'s.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any
from urllib.parse import urlsplit

import httpx

from emulator.http.asgi import Receive, Scope, Send, declares_body, send_error
from emulator.http.site import SiteGuard
from emulator.tools.recording import NOTE, SKIP_HEADERS, Recorder

#: Seconds the start-up check waits for the upstream to answer.
CHECK_TIMEOUT = 10.0
#: Headers of one hop (RFC 9110 section 7.6.1), never forwarded; and those the proxy sets itself.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "transfer-encoding", "upgrade", "host", "accept-encoding"})


class UpstreamError(ValueError):
    """The upstream URL cannot be used (the message is one sentence)."""


def normalise_upstream(url: str) -> str:
    """The upstream's base URL without a trailing slash, or :class:`UpstreamError`."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UpstreamError(f"--upstream {url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise UpstreamError(f"--upstream {url!r} must start with http:// or https://, e.g. https://api.together.ai")
    if not parts.hostname:
        raise UpstreamError(f"--upstream {url!r} names no host, e.g. https://api.together.ai")
    if parts.query or parts.fragment:
        raise UpstreamError(f"--upstream {url!r} must not have a query or a fragment")
    if parts.username is not None or parts.password is not None:
        # (it would be printed and named in every error; the client's own credentials are forwarded anyway)
        raise UpstreamError("--upstream must not carry credentials (user:password@); the proxy forwards the "
                            "client's own")
    return url.rstrip("/")


def check_upstream(url: str, timeout: float = CHECK_TIMEOUT) -> str:
    """The normalised upstream, once it answered an HTTP request (any status: an API root may well be 404);
    else :class:`UpstreamError` in one sentence."""
    base = normalise_upstream(url)
    try:
        with httpx.Client(timeout=timeout) as client:
            client.get(base + "/")
    except httpx.TimeoutException:
        raise UpstreamError(f"the upstream {base} did not answer within {timeout:g} s; check the URL and your "
                            "network") from None
    except httpx.HTTPError as exc:
        raise UpstreamError(f"cannot reach the upstream {base}: {_reason(exc)}; check the URL and your "
                            "network") from None
    return base


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    # "[Errno 111] Connection refused": the operating system's words, without Python's errno tag
    return re.sub(r"^\[Errno -?\d+\] ", "", text.splitlines()[0])[:200]


class ProxyApp:
    """Forwards every request to ``upstream`` (credentials and all) and records the exchange with ``recorder``."""

    def __init__(self, upstream: str, recorder: Recorder, guard: SiteGuard | None = None, *,
                 timeout: float = 120.0, log: Any = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.recorder = recorder
        self.guard = guard
        self.timeout = timeout
        self.log = log
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False)

    def say(self, text: str) -> None:
        print(f"record: {text}", file=self.log or sys.stderr, flush=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.shutdown":
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
                await send({"type": message["type"] + ".complete"})
        if scope["type"] != "http":
            return
        refused = self.guard.refusal(scope) if self.guard is not None else None
        if refused is not None:  # the proxy's own refusal: nothing reached the upstream, nothing is recorded
            while (await receive()).get("more_body"):
                pass
            status, sentence, code = refused
            await send_error(send, status, sentence, code=code)
            return
        await self.recorder.exchange(self._forward, scope, receive, send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in HOP_HEADERS]
        query = scope.get("query_string", b"")
        url = self.upstream + scope["path"] + (f"?{query.decode('latin-1')}" if query else "")

        async def body() -> Any:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body"):
                    return

        request = self.client.build_request(scope["method"], url, headers=headers,
                                            content=body() if declares_body(scope) else None)
        what = f"{scope['method']} {scope['path']}"
        try:
            response = await self.client.send(request, stream=True)
        except asyncio.CancelledError:
            # uvicorn cancels what is still open once Ctrl+C's grace period is over: the client gets an answer
            # that says so, the server stops without a traceback (nothing else cancels a request's task).
            await self._fail(scope, send, 503, "proxy_stopping",
                             f"the recording proxy stopped before the upstream {self.upstream} answered", what)
            return
        except httpx.TimeoutException:
            await self._fail(scope, send, 504, "upstream_timeout",
                             f"the upstream {self.upstream} did not answer within {self.timeout:g} s", what)
            return
        except httpx.HTTPError as exc:
            code = "upstream_bad_response" if isinstance(exc, httpx.RemoteProtocolError) else "upstream_unreachable"
            sentence = (f"the upstream {self.upstream} answered something that is not HTTP ({_reason(exc)})"
                        if code == "upstream_bad_response" else
                        f"cannot reach the upstream {self.upstream}: {_reason(exc)}")
            await self._fail(scope, send, 502, code, sentence, what)
            return
        try:
            await self._relay(response, send, scope, what)
        finally:
            await response.aclose()

    async def _relay(self, response: httpx.Response, send: Send, scope: Scope, what: str) -> None:
        encoded = "content-encoding" in response.headers  # httpx decodes: the length no longer holds
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()
               if k.lower() not in SKIP_HEADERS and k.lower() != "content-encoding" and k.lower() not in HOP_HEADERS]
        if not encoded and "content-length" in response.headers:
            raw.append((b"content-length", response.headers["content-length"].encode("latin-1")))
        await send({"type": "http.response.start", "status": response.status_code, "headers": raw})
        sent = 0
        try:
            async for chunk in response.aiter_bytes():
                sent += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (httpx.HTTPError, asyncio.CancelledError) as exc:
            # Too late for an ErrorData: the status is sent. Leaving the response unfinished makes the server
            # close the connection, so the client sees a cut-off answer rather than a short one.
            why = "the proxy stopped" if isinstance(exc, asyncio.CancelledError) else _reason(exc)
            scope[NOTE] = f"the upstream {self.upstream} broke off its answer after {sent} bytes: {why}"
            self.say(f"{what}: {scope[NOTE]}")
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fail(self, scope: Scope, send: Send, status: int, code: str, sentence: str, what: str) -> None:
        scope[NOTE] = f"answered by the proxy, not the upstream: {sentence}"
        self.say(f"{what}: {sentence} (answered {status})")
        await send_error(send, status, f"{sentence} (the recording proxy answered, not the upstream)", code=code)

