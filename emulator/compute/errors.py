"""Errors raised by the simulated model.

Emulates the real trainer's operation failures: ``INVALID_INPUT`` (valid schema, but cannot be computed on),
``NON_FINITE_LOSS`` and ``RESOURCE_EXHAUSTED`` (over the in-memory budget); the domain turns a
:class:`ComputeError` into a FAILED operation. Differs: every check runs first, so no partial state is left.
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
