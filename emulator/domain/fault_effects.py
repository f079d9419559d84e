"""State effects of fault rules (see :mod:`emulator.faults`), applied after the request ran.

The faulted request answers as usual (a submitted operation is PENDING, a created resource PENDING);
the effect shows on the next read, as a failure that happens on the real service would.
"""

from __future__ import annotations

from typing import Any

from emulator.domain import cascade, gpu_queue
from emulator.domain.context import Ctx
from emulator.domain.lifecycle import TERMINAL, OperationStatus, ResourceStatus, SessionStatus
from emulator.store import TenantState


def apply(state: TenantState, ctx: Ctx, effect: dict[str, Any], operation_id: str, path: dict[str, str],
          body: Any, payload: Any) -> None:
    body = body if isinstance(body, dict) else {}
    created_id = payload.get("id") if isinstance(payload, dict) else None
    if "operation_fails" in effect and created_id in state.operations:
        op = state.operations[created_id]
        if OperationStatus(op.status) not in TERMINAL[OperationStatus]:
            op.fault_code = str(effect["operation_fails"])
    session_id = path.get("session_id") or (created_id if operation_id == "createSession" else None)
    resource_id = (path.get("model_resources_id") or body.get("model_resources_id")
                   or (created_id if operation_id == "createModelResources" else None))
    if resource_id is None and session_id in state.sessions:
        resource_id = state.sessions[session_id].model_resources_id
    if "queue_position" in effect and resource_id in state.resources:
        r = state.resources[resource_id]
        if r.status == ResourceStatus.PENDING:
            r.queue_extra = max(0, int(effect["queue_position"]) - 1)
            if r.queue_extra:
                gpu_queue.hold(state, ctx, r, ctx.now)
            if isinstance(payload, dict) and isinstance(payload.get("status_details"), dict):
                payload["status_details"]["queue_position"] = gpu_queue.position(state, r)
    if "session_error" in effect and session_id in state.sessions:
        s = state.sessions[session_id]
        if SessionStatus(s.status) not in TERMINAL[SessionStatus]:
            cascade.fail_session(state, s, str(effect["session_error"]),
                                 effect.get("message") or "injected fault: the session failed", ctx.now)
    if "resource_error" in effect and resource_id in state.resources:
        cascade.fail_resource(state, state.resources[resource_id], str(effect["resource_error"]),
                              effect.get("message") or "injected fault: the resource failed", ctx.now)
