"""A fault rule's state effect on a request, said in the domain's terms (:mod:`emulator.domain.fault_effects`).

Given what the request was and answered, it names the objects concerned (the operation submitted, the session,
the resource), has the domain apply the rule to them, and shows a resource held in the GPU queue at its
position in the answer. Not a handler module: nothing here answers an operation.
"""

from __future__ import annotations

from typing import Any

from emulator.domain import fault_effects as fx
from emulator.domain.context import Ctx
from emulator.store import Tenant


def named(operation_id: str, path: dict[str, str], body: Any, answer: Any) -> fx.Named:
    """What a request submitted, named or made: the id it answered, the path's ids, the body's resource."""
    made = answer.get("id") if isinstance(answer, dict) else None
    body = body if isinstance(body, dict) else {}
    resource = path.get("model_resources_id") or body.get("model_resources_id")
    return fx.Named(operation_id=made,
                    session_id=path.get("session_id") or (made if operation_id == "createSession" else None),
                    resource_id=resource or (made if operation_id == "createModelResources" else None))


def events(effect: dict[str, Any]) -> list[fx.FaultEvent]:
    """A rule's state effects (already checked when the rule loaded), in the order they apply."""
    out: list[fx.FaultEvent] = []
    message = effect.get("message")
    if "operation_fails" in effect:
        out.append(fx.OperationFails(str(effect["operation_fails"])))
    if "queue_position" in effect:
        out.append(fx.QueuedAt(int(effect["queue_position"])))
    if "session_error" in effect:
        out.append(fx.SessionFails(str(effect["session_error"]), *([message] if message else [])))
    if "resource_error" in effect:
        out.append(fx.ResourceFails(str(effect["resource_error"]), *([message] if message else [])))
    return out


def apply(tenant: Tenant, ctx: Ctx, effect: dict[str, Any], operation_id: str, path: dict[str, str], body: Any,
          answer: Any) -> None:
    """Apply a rule's state effect to what the request made, in its unit of work (before the answer goes)."""
    position = fx.apply(tenant, ctx, named(operation_id, path, body, answer), events(effect))
    details = answer.get("status_details") if isinstance(answer, dict) else None
    if position is not None and isinstance(details, dict):
        details["queue_position"] = position
