"""State effects of fault rules (see :mod:`emulator.faults`), as domain events applied after the request ran.

The faulted request answers as usual (a submitted operation is PENDING, a created resource PENDING); the
effect shows on the next read, as a failure that happens on the real service would. Which objects a request
named or made is the API layer's to say (``emulator.api.faults``); this module knows no request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from emulator.domain import cascade, gpu_queue
from emulator.domain.context import Ctx
from emulator.store import Tenant
from emulator.store.records import OperationStatus, ResourceStatus, SessionStatus, is_terminal


@dataclass(frozen=True, slots=True)
class Named:
    """The objects a faulted request submitted, named or made. A resource not named is its session's."""

    operation_id: str | None = None
    session_id: str | None = None
    resource_id: str | None = None


@dataclass(frozen=True, slots=True)
class OperationFails:
    """The operation fails with ``code`` when it runs (unless it has finished already)."""

    code: str


@dataclass(frozen=True, slots=True)
class QueuedAt:
    """A resource still PENDING waits at ``position`` in the GPU queue."""

    position: int


@dataclass(frozen=True, slots=True)
class SessionFails:
    code: str
    message: str = "injected fault: the session failed"


@dataclass(frozen=True, slots=True)
class ResourceFails:
    code: str
    message: str = "injected fault: the resource failed"


FaultEvent = OperationFails | QueuedAt | SessionFails | ResourceFails


def apply(tenant: Tenant, ctx: Ctx, named: Named, events: Iterable[FaultEvent]) -> int | None:
    """Apply ``events``, in order, to what ``named`` names; returns the GPU queue position of a resource that
    :class:`QueuedAt` held (None when none was)."""
    s = tenant.sessions.get(named.session_id)
    resource_id = named.resource_id if named.resource_id is not None else (s.model_resources_id if s else None)
    r = tenant.resources.get(resource_id)
    position = None
    for event in events:
        if isinstance(event, OperationFails):
            op = tenant.operations.get(named.operation_id)
            if op is not None and not is_terminal(op.status, OperationStatus):
                op.fault_code = event.code
        elif isinstance(event, QueuedAt):
            if r is not None and r.status == ResourceStatus.PENDING:
                r.queue_extra = max(0, event.position - 1)
                if r.queue_extra:
                    gpu_queue.hold(tenant, ctx, r, ctx.now)
                position = gpu_queue.position(tenant, r)
        elif isinstance(event, SessionFails):
            if s is not None and not is_terminal(s.status, SessionStatus):
                cascade.fail_session(tenant, s, event.code, event.message, ctx.now)
        elif r is not None:
            cascade.fail_resource(tenant, r, event.code, event.message, ctx.now)
    return position
