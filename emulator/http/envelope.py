"""The ``ErrorData`` envelope, and the errors that exist only in HTTP (credentials, methods, body size).

Every error the emulator answers leaves as ``{"error": {"message", "type", "param", "code"}}``, the
envelope of the real API's spec. The real service's ``type`` / ``code`` strings are not documented;
ours follow the OpenAI-style names Together uses on its other endpoints (``invalid_request_error`` ...).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson

from emulator.errors import shorten


class HttpError(Exception):
    """An error of the transport itself (no domain meaning): it carries its own status and headers."""

    status = 400
    code: str | None = None

    def __init__(self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers or {}


class Unauthenticated(HttpError):
    status = 401
    code = "invalid_api_key"


class Forbidden(HttpError):
    status = 403
    code = "forbidden"


class MethodNotAllowed(HttpError):
    status = 405
    code = "method_not_allowed"

    def __init__(self, method: str, path: str, allowed: list[str]) -> None:
        super().__init__(f"method {method} is not allowed on {path}; allowed: {', '.join(allowed)}",
                         headers={"allow": ", ".join(allowed)})


class PayloadTooLarge(HttpError):
    status = 413
    code = "payload_too_large"


class BodyCut(HttpError):
    """The client went away, or the request deadline passed, before the whole body arrived: nothing of the
    request is done (its answer reaches nobody; the deadline's own 408 was already sent)."""

    status = 408
    code = "request_timeout"


_TYPE_BY_STATUS = MappingProxyType({
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
})


def type_for_status(status: int) -> str:
    return _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": shorten(message), "type": type_, "param": shorten(param, 200) if param else param,
                      "code": code}}


def render_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str | None = None) -> bytes:
    return orjson.dumps(error_body(message, type_ or type_for_status(status), param, code))
