"""Errors raised by the simulated model.

Emulates the operation-level failures of the real trainer/generator: a bad request body that passed
HTTP schema validation but cannot be computed on (``INVALID_INPUT``), a loss that came out NaN/Inf
(``NON_FINITE_LOSS``) and a request too large for the emulator's in-memory budget
(``RESOURCE_EXHAUSTED``). The domain layer turns a :class:`ComputeError` into a FAILED operation
with ``error = {"code": exc.code, "message": exc.message}``. Unlike the real service, every check
runs before anything is computed, so a failed call never leaves partial state behind.
"""

from __future__ import annotations

INVALID_INPUT = "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"
NON_FINITE_LOSS = "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
RESOURCE_EXHAUSTED = "TRAINING_OPERATION_ERROR_CODE_RESOURCE_EXHAUSTED"
INTERNAL_ERROR = "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR"


class ComputeError(Exception):
    """An operation the simulated model refused; ``code`` is an ``OperationErrorCode`` value."""

    code: str
    message: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ComputeError({self.code!r}, {self.message!r})"


def invalid(message: str) -> ComputeError:
    return ComputeError(INVALID_INPUT, message)


__all__ = ["INTERNAL_ERROR", "INVALID_INPUT", "NON_FINITE_LOSS", "RESOURCE_EXHAUSTED", "ComputeError",
           "invalid"]
