"""The fault-rule step: applies fault rules (:mod:`emulator.faults`) to vendor requests.

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
from emulator.http.asgi import HEADERS, Scope, Send, header, headers_of, send_error
from emulator.http.auth import is_admin_operation
from emulator.http.call import Call
from emulator.store import EventLog

# Set by the scenario loader's in-process requests (a scope key no client can send): the rules, which count
# and fire on what clients do, leave them alone; a step's own effect still comes through X-Emulator-Fault.
SCENARIO = "emulator_scenario"


def give_back(call: Call, faults: FaultSet, events: EventLog) -> None:
    """The request was refused before anything of it was kept (the disk would not take it): what the rules
    counted for it is given back (a ``first_n`` trigger it used serves the next request) and its fault event
    goes."""
    taken, call.taken = call.taken, None
    if taken is not None:
        faults.give_back(taken[0])
        if taken[1] is not None:
            events.discard(taken[1])


class FaultRules:
    def __init__(self, faults: FaultSet, events: EventLog, scheduled: Mapping[str, float] | None = None,
                 fire_due: Callable[[str], None] | None = None) -> None:
        self.faults = faults
        self.events = events
        self.scheduled = {} if scheduled is None else scheduled   # project -> its next fault-rule action's time
        self.fire_due = fire_due

    def pick(self, call: Call, scope: Scope) -> dict[str, Any] | None:
        """The rule that fires on this request, if any (counted, noted and logged as an event); what the rules
        counted is kept on ``call`` for :func:`give_back`."""
        if self.scheduled and self.fire_due is not None:  # (usually empty: one test of a dict)
            caller = call.caller
            if caller is not None and caller.project in self.scheduled:
                self.fire_due(caller.project)
        # (header()'s lookup first, without its call: the hot path has no such header and no rules)
        if (scope.get(HEADERS) or headers_of(scope)).get(b"x-emulator-fault") is None:
            if not self.faults.rules or scope.get(SCENARIO):
                return None
            forced = None
        else:
            forced = header(scope, b"x-emulator-fault")
        op = call.op
        if is_admin_operation(op):
            return None
        caller = call.caller
        taken: list[Any] = []
        rule = self.faults.pick(op, scope["method"], scope["path"], caller.token if caller else None, forced, taken)
        if rule is None:
            if taken:
                call.taken = (taken, None)
            return None
        note(scope, fault=rule["name"])
        self.events.append({"type": "fault", "rule": rule["name"], "operation_id": op, "path": scope["path"],
                            "project": caller.project if caller else None})
        call.taken = (taken, self.events.last_seq)
        return rule

    async def apply(self, rule: dict[str, Any], call: Call, send: Send) -> bool:
        """Apply a rule :meth:`pick` chose: its latency, then its status (answered here: True) or its state
        effect (kept on ``call`` for the dispatcher)."""
        effect = rule["effect"]
        if effect.get("latency_ms"):
            await asyncio.sleep(float(effect["latency_ms"]) / 1000)
        if "status" in effect:
            status = int(effect["status"])
            headers = {}
            if effect.get("retry_after") is not None:
                headers["retry-after"] = str(effect["retry_after"])
            await send_error(send, status, effect.get("message") or f"injected fault {rule['name']!r}",
                             code=effect.get("code"), headers=headers)
            return True
        if any(k in effect for k in STATE_EFFECTS):
            call.effect = effect
        return False
