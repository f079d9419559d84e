"""Applies fault rules (:mod:`emulator.faults`) to vendor requests.

After auth (a rule may match the caller), before validation (an injected 503 answers even a malformed request,
as an overloaded real service would). A ``status`` effect answers ``ErrorData`` at once; state effects are
applied by the dispatcher after the handler ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from emulator.faults import STATE_EFFECTS, FaultSet
from emulator.http.access_log import note
from emulator.http.asgi import ASGIApp, Receive, Scope, Send, header, operation_id, send_error
from emulator.http.auth import is_admin_operation, principal
from emulator.store import EventLog

STATE_EFFECT = "emulator_fault"
TAKEN = "emulator_fault_taken"   # what the rules counted for this request, and the fault event's number
# Set by the scenario loader's in-process requests (a scope key no client can send): the rules, which count
# and fire on what clients do, leave them alone; a step's own effect still comes through X-Emulator-Fault.
SCENARIO = "emulator_scenario"


def state_effect(scope: Scope) -> dict[str, Any] | None:
    return scope.get("extensions", {}).get(STATE_EFFECT)


def give_back(scope: Scope, faults: FaultSet, events: EventLog) -> None:
    """The request was refused before anything of it was kept (the disk would not take it): what the rules
    counted for it is given back (a ``first_n`` trigger it used serves the next request) and its fault event
    goes."""
    taken = scope.get("extensions", {}).pop(TAKEN, None)
    if taken is not None:
        faults.give_back(taken[0])
        if taken[1] is not None:
            events.discard(taken[1])


class FaultMiddleware:
    def __init__(self, app: ASGIApp, faults: FaultSet, events: EventLog, scheduled: Mapping[str, float] | None = None,
                 fire_due: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.faults = faults
        self.events = events
        self.scheduled = {} if scheduled is None else scheduled   # project -> its next fault-rule action's time
        self.fire_due = fire_due

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.scheduled and self.fire_due is not None:  # (usually empty: one test of a dict)
            caller = principal(scope)
            if caller is not None and caller.project in self.scheduled:
                self.fire_due(caller.project)
        forced = header(scope, b"x-emulator-fault")
        if forced is None and (not self.faults.rules or scope.get(SCENARIO)):  # the hot path: no rules
            await self.app(scope, receive, send)
            return
        op = operation_id(scope)
        if is_admin_operation(op):
            await self.app(scope, receive, send)
            return
        caller = principal(scope)
        taken: list[Any] = []
        rule = self.faults.pick(op, scope["method"], scope["path"], caller.token if caller else None, forced, taken)
        extensions = scope.setdefault("extensions", {})
        if rule is None:
            if taken:
                extensions[TAKEN] = (taken, None)
            await self.app(scope, receive, send)
            return
        effect = rule["effect"]
        note(scope, fault=rule["name"])
        self.events.append({"type": "fault", "rule": rule["name"], "operation_id": op, "path": scope["path"],
                            "project": caller.project if caller else None})
        extensions[TAKEN] = (taken, self.events.last_seq)
        if effect.get("latency_ms"):
            await asyncio.sleep(float(effect["latency_ms"]) / 1000)
        if "status" in effect:
            status = int(effect["status"])
            headers = {}
            if effect.get("retry_after") is not None:
                headers["retry-after"] = str(effect["retry_after"])
            await send_error(send, status, effect.get("message") or f"injected fault {rule['name']!r}",
                             code=effect.get("code"), headers=headers)
            return
        if any(k in effect for k in STATE_EFFECTS):
            extensions[STATE_EFFECT] = effect
        await self.app(scope, receive, send)
