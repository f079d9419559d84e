"""Typed errors and the one renderer that maps them to HTTP status + ``ErrorData``.

Every error the emulator answers, whatever raised it (domain rules, auth, connexion's own
validation problems, an unexpected crash), leaves as
``{"error": {"message", "type", "param", "code"}}``, the envelope of the real API's spec.
The real service's ``type`` / ``code`` strings are not documented; ours follow the OpenAI-style
names Together uses on its other endpoints (``invalid_request_error`` ...).
"""

from __future__ import annotations

from typing import Any

import orjson


class ApiError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


class InvalidRequest(ApiError):
    """Schema violation or bad value: 400."""

    status = 400
    type = "invalid_request_error"


class FailedPrecondition(ApiError):
    """The request is well-formed but the object's state refuses it (the real service answers 400)."""

    status = 400
    type = "invalid_request_error"
    code = "failed_precondition"


class IdempotencyKeyReused(ApiError):
    status = 400
    type = "idempotency_error"
    code = "idempotency_key_reused"


class Unauthenticated(ApiError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(ApiError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class Forbidden(ApiError):
    status = 403
    type = "permission_error"
    code = "forbidden"


class MethodNotAllowed(ApiError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"

    def __init__(self, method: str, path: str, allowed: list[str]) -> None:
        super().__init__(f"method {method} is not allowed on {path}; allowed: {', '.join(allowed)}",
                         headers={"allow": ", ".join(allowed)})


class PayloadTooLarge(ApiError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class AtCapacity(ApiError):
    """Over a cap (sessions per resource): 429."""

    status = 429
    type = "rate_limit_error"
    code = "resource_at_capacity"


MAX_MESSAGE = 1000


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters: error messages may quote what the client sent, which can be huge."""
    return text if len(text) <= limit else text[: limit - 15] + "... (truncated)"


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": shorten(message), "type": type_, "param": shorten(param, 200) if param else param,
                      "code": code}}


_TYPE_BY_STATUS = {
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
}


def type_for_status(status: int) -> str:
    return _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")


def render_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str | None = None) -> bytes:
    return orjson.dumps(error_body(message, type_ or type_for_status(status), param, code))
