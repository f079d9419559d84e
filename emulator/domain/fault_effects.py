"""State effects of fault rules (see :mod:`emulator.faults`), applied after the request ran.

The faulted request answers as usual (a submitted operation is PENDING, a created resource PENDING);
the effect shows on the next read, as a failure that happens on the real service would.
"""

from __future__ import annotations

from typing import Any

from emulator.domain import cascade, gpu_queue
from emulator.domain.context import Ctx
from emulator.store import Tenant
from emulator.store.records import OperationStatus, ResourceStatus, SessionStatus, is_terminal


def apply(tenant: Tenant, ctx: Ctx, effect: dict[str, Any], operation_id: str, path: dict[str, str],
          body: Any, payload: Any) -> None:
    body = body if isinstance(body, dict) else {}
    created_id = payload.get("id") if isinstance(payload, dict) else None
    op = tenant.operations.get(created_id) if "operation_fails" in effect else None
    if op is not None and not is_terminal(op.status, OperationStatus):
        op.fault_code = str(effect["operation_fails"])
    session_id = path.get("session_id") or (created_id if operation_id == "createSession" else None)
    resource_id = (path.get("model_resources_id") or body.get("model_resources_id")
                   or (created_id if operation_id == "createModelResources" else None))
    s = tenant.sessions.get(session_id)
    if resource_id is None and s is not None:
        resource_id = s.model_resources_id
    r = tenant.resources.get(resource_id)
    if "queue_position" in effect and r is not None:
        if r.status == ResourceStatus.PENDING:
            r.queue_extra = max(0, int(effect["queue_position"]) - 1)
            if r.queue_extra:
                gpu_queue.hold(tenant, ctx, r, ctx.now)
            if isinstance(payload, dict) and isinstance(payload.get("status_details"), dict):
                payload["status_details"]["queue_position"] = gpu_queue.position(tenant, r)
    if "session_error" in effect and s is not None and not is_terminal(s.status, SessionStatus):
        cascade.fail_session(tenant, s, str(effect["session_error"]),
                             effect.get("message") or "injected fault: the session failed", ctx.now)
    if "resource_error" in effect and r is not None:
        cascade.fail_resource(tenant, r, str(effect["resource_error"]),
                              effect.get("message") or "injected fault: the resource failed", ctx.now)
