"""What an operation kind is: the declaration each module of :mod:`emulator.domain.kinds` makes.

A kind is one asynchronous operation of a training session (``POST .../operations/<name>`` and its ``GET``);
its module declares all that differs from the other kinds, and the queue, handlers, render, import check and
dashboard read it from the registry (:data:`emulator.domain.kinds.KINDS`), knowing no kind by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from emulator.compute import types
from emulator.compute.errors import ComputeError
from emulator.domain.context import Ctx
from emulator.domain.durations import Timing, TimingParam
from emulator.jsontypes import Json, JsonObject
from emulator.store import Tenant
from emulator.store.records import Malformed, Operation, OperationRequest, Session

R = TypeVar("R", bound=OperationRequest)


def _as_stored(tenant: Tenant, output: JsonObject) -> JsonObject:
    return output


def _nothing(output: JsonObject) -> dict[str, Json]:
    return {}


def counter_output(name: str) -> dict[str, Json]:
    """The schema of an output that is one count (a step, a weights version): an integer as JSON holds it
    exactly."""
    return {"type": "object", "additionalProperties": False, "required": [name],
            "properties": {name: {"type": "integer", "minimum": 0, "maximum": 2**53}}}


def counter_render(name: str, tenant: Tenant, output: JsonObject) -> JsonObject:
    """How the API shows such an output: the count as a decimal string (an int64 field)."""
    return {name: str(output[name])}


def counter_dashboard(name: str, output: JsonObject) -> dict[str, Json]:
    return {name: output.get(name)}


@dataclass(frozen=True, slots=True)
class Kind(Generic[R]):
    """One operation kind.

    ``request`` is the type its body is read as (:func:`parse`). ``seconds`` is how long it runs beyond the
    profile's overhead; ``execute`` what it does to the session and its model when it completes (raising
    ``ComputeError`` fails it). ``admit`` refuses a submit before its body is read, ``check`` returns the
    request to run (documented drops through ``Ctx.ignored``, bounds the schema cannot state).
    ``keeps_request``: False for a request read only to run (released when the operation finishes).
    ``output_size``: how to measure an output that may be large (None: always small). ``render``: the stored
    output as the API shows it; ``output_schema``: the schema of the stored output when it is not what the
    API shows (None: the spec's), and ``check_output`` what an imported output must hold beyond it (a
    problem, or None). The dashboard: ``dashboard`` (fields of its row), ``shows_loss`` (a loss curve),
    ``shows_samples`` (prompts and completions, from its kept request), ``checkpoint_type`` (the checkpoint
    its output names), ``lane`` (where its row is drawn among a session's kinds: smaller first).
    """

    name: str                       # the path segment of its endpoints
    create: str                     # operationId of its submit
    get: str                        # operationId of its get
    request: type[R]
    timing: tuple[TimingParam, ...]
    seconds: Callable[[Timing, R], float]
    execute: Callable[[Tenant, Ctx, Session, R, Operation, float], JsonObject]
    admit: Callable[[Tenant, Session], None] | None = None
    check: Callable[[Ctx, Session, R], R] | None = None
    keeps_request: bool = True
    output_size: Callable[[Operation], int] | None = None
    render: Callable[[Tenant, JsonObject], JsonObject] = _as_stored
    output_schema: Callable[[], dict[str, Json]] | None = None
    check_output: Callable[[Tenant, JsonObject], str | None] | None = None
    dashboard: Callable[[JsonObject], dict[str, Json]] = _nothing
    shows_loss: bool = False
    shows_samples: bool = False
    checkpoint_type: str | None = None
    lane: int = 0

    def parse(self, body: object) -> R | Malformed:
        """``body`` (parsed JSON) as this kind's request; :class:`Malformed` (the operation fails when it runs,
        as the trainer would refuse it) when it cannot be read as one."""
        try:
            return types.decode(body, self.request)
        except ComputeError as exc:
            return Malformed(raw=body if isinstance(body, dict) else {}, error=exc.message)


__all__ = ["Kind", "counter_output"]
