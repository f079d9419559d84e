"""Every exception leaves as ``ErrorData`` with the right status: one map from exception type to renderer.

Domain errors carry their own status; connexion's problems (an unsupported media type) and Starlette's
errors are translated; anything else is a bug, answered as a 500 with a request id that is
also in the log, so a crash never shows a traceback to the client.
"""

from __future__ import annotations

import itertools
import logging
import traceback
from collections.abc import Callable

import orjson
from connexion.exceptions import ProblemException
from starlette.exceptions import HTTPException

from emulator.errors import ApiError, render_error
from emulator.http.asgi import ASGIApp, Receive, Scope, Send, send_json

log = logging.getLogger("emulator")
Rendered = tuple[int, bytes, dict[str, str]]


def _api_error(exc: Exception, scope: Scope) -> Rendered:
    assert isinstance(exc, ApiError)
    return exc.status, orjson.dumps(exc.body()), exc.headers


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
    (ApiError, _api_error),
    (ProblemException, _problem),
    (HTTPException, _http),
)


class ErrorEnvelope:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._request_ids = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - the one place every error is rendered
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
