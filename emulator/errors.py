"""What can go wrong, in the emulator's own terms: the domain, the control plane and the handlers raise these.

They say what happened (not found, invalid, refused by the object's state, a cap reached), never how HTTP says
it: :mod:`emulator.http.errors` maps each class to status, type, code and headers. ``param`` names the field at
fault (``lora_config.rank``); ``code`` refines the class for clients (``output_released``).
"""

from __future__ import annotations

from typing import Any


class EmulatorError(Exception):
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class Invalid(EmulatorError):
    """A value the rules refuse: out of range, of the wrong kind, naming something it may not."""


class NotFound(EmulatorError):
    """The object named does not exist for this caller (or is no longer kept)."""

    code = "not_found"


class FailedPrecondition(EmulatorError):
    """The request is well formed but the object's state refuses it (stopping a stopped resource)."""

    code = "failed_precondition"


class Conflict(EmulatorError):
    """The request contradicts an earlier one: an ``Idempotency-Key`` reused with another body."""

    code = "idempotency_key_reused"


class Exists(EmulatorError):
    """The object already exists (the Files API: the same content, name and purpose). ``extra``: fields the
    answer carries next to ``error`` (the existing file's ``file_id``, which the SDK reads)."""

    code = "already_exists"

    def __init__(self, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code)
        self.extra = extra or {}


class Capacity(EmulatorError):
    """Over a cap. ``retryable``: whether waiting and retrying can help (a session cap will not free itself)."""

    code = "resource_at_capacity"

    def __init__(self, message: str, *, retryable: bool, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message, param=param, code=code)
        self.retryable = retryable


class Unavailable(EmulatorError):
    """The emulator cannot take the request now (its state file cannot be written); nothing was changed."""

    code = "storage_unavailable"


class Misdirected(EmulatorError):
    """The tenant lives in another process: this one is a shard of a cluster and holds other tenants only
    (:mod:`emulator.sharding`). Nothing was read or changed; the balancer's configuration sent it astray."""

    code = "wrong_shard"


MAX_MESSAGE = 1000


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters: error messages may quote what the client sent, which can be huge."""
    return text if len(text) <= limit else text[: limit - 15] + "... (truncated)"
