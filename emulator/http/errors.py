"""Every exception leaves as ``ErrorData`` with the right status: the one place errors become HTTP.

:data:`SEMANTIC` maps the emulator's errors (:mod:`emulator.errors`) to a status, type and headers; transport
errors carry their own status; connexion's and Starlette's are translated; anything else is a bug, a 500 with
a request id that is also in the log, never a traceback.
"""

from __future__ import annotations

import itertools
import logging
import traceback
from collections.abc import Callable, Mapping
from types import MappingProxyType

import orjson
from connexion.exceptions import ProblemException
from starlette.exceptions import HTTPException

from emulator import errors
from emulator.http.asgi import ASGIApp, Receive, Scope, Send, send_json
from emulator.http.envelope import HttpError, error_body, render_error, type_for_status

log = logging.getLogger("emulator")
Rendered = tuple[int, bytes, dict[str, str]]

# Semantic error -> (status, ErrorData type). Failed preconditions answer 400 as the real service maps
# FAILED_PRECONDITION [inferred]; a reused Idempotency-Key is 400 too [inferred; undocumented].
SEMANTIC: Mapping[type[errors.EmulatorError], tuple[int, str]] = MappingProxyType({
    errors.Invalid: (400, "invalid_request_error"),
    errors.FailedPrecondition: (400, "invalid_request_error"),
    errors.Conflict: (400, "idempotency_error"),
    errors.NotFound: (404, "not_found_error"),
    errors.Exists: (409, "conflict_error"),
    errors.Misdirected: (421, "invalid_request_error"),   # 421 Misdirected Request (RFC 9110 15.5.20)
    errors.Capacity: (429, "rate_limit_error"),
    errors.Unavailable: (503, "server_error"),
})
# A cap that will not free itself by waiting (the sessions of a resource) says so, or the SDK retries it
# seven times; a write refused because the state file cannot be written may work a little later.
NO_RETRY = MappingProxyType({"x-should-retry": "false"})
STORAGE_RETRY_AFTER = "5"


def status_of(exc: errors.EmulatorError) -> tuple[int, str]:
    for cls in type(exc).__mro__:
        entry = SEMANTIC.get(cls)  # type: ignore[call-overload]
        if entry is not None:
            return entry
    return 500, "server_error"


def headers_of(exc: errors.EmulatorError) -> dict[str, str]:
    if isinstance(exc, errors.Capacity) and not exc.retryable:
        return dict(NO_RETRY)
    if isinstance(exc, errors.Unavailable):
        return {"retry-after": STORAGE_RETRY_AFTER}
    return {}


def _semantic(exc: Exception, scope: Scope) -> Rendered:
    assert isinstance(exc, errors.EmulatorError)
    status, type_ = status_of(exc)
    body = error_body(exc.message, type_, exc.param, exc.code)
    if isinstance(exc, errors.Exists):  # (fields a client reads next to the error: the existing file's id)
        body = {**body, **exc.extra}
    return status, orjson.dumps(body), headers_of(exc)


def _transport(exc: Exception, scope: Scope) -> Rendered:
    assert isinstance(exc, HttpError)
    return exc.status, orjson.dumps(error_body(exc.message, type_for_status(exc.status), None, exc.code)), exc.headers


def _problem(exc: Exception, scope: Scope) -> Rendered:
    assert isinstance(exc, ProblemException)
    message = str(exc.detail or exc.title or "request rejected")
    return exc.status, render_error(exc.status, message), {}


def _http(exc: Exception, scope: Scope) -> Rendered:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request rejected"
    code = None
    if exc.status_code == 404:
        message, code = "no such endpoint", "unknown_endpoint"
    return exc.status_code, render_error(exc.status_code, message, code=code), dict(exc.headers or {})


RENDERERS: tuple[tuple[type[Exception], Callable[[Exception, Scope], Rendered]], ...] = (
    (errors.EmulatorError, _semantic),
    (HttpError, _transport),
    (ProblemException, _problem),
    (HTTPException, _http),
)


class ErrorEnvelope:
    """Wraps an app (the dashboard, files, docs) or, with no app, renders for the request path's pipeline."""

    def __init__(self, app: ASGIApp | None) -> None:
        self.app = app
        self._request_ids = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - the one place every error is rendered
            await self.answer(exc, scope, send)

    async def answer(self, exc: Exception, scope: Scope, send: Send) -> None:
        """Answer ``exc`` rendered; re-raise it if that cannot be sent."""
        status, body, headers = self.render(exc, scope)
        try:
            await send_json(send, status, body, headers)
        except Exception:  # noqa: BLE001 - e.g. the response had already started: nothing can replace it
            raise exc from None

    def render(self, exc: Exception, scope: Scope) -> Rendered:
        for kind, renderer in RENDERERS:
            if isinstance(exc, kind):
                return renderer(exc, scope)
        request_id = f"req_{next(self._request_ids):08d}"
        log.error("unhandled error (%s): %s", request_id, "".join(traceback.format_exception(exc)))
        return 500, render_error(500, f"internal error in the emulator (request id {request_id}); "
                                      "this is a bug, please report it", code="internal_error"), {}
