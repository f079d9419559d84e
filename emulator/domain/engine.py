"""Settles the timeline: applies every transition that is due by ``ctx.now``, in time order.

Called at the start of every transaction, so status is computed when read from the clock, with
no background thread and no sleep; a client that reads after advancing the manual clock sees
every intermediate transition stamped with the virtual time it happened at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.domain import model_resources, operations, sessions, shaping
from emulator.domain.context import Ctx
from emulator.store import TenantState

Handler = Callable[[TenantState, Ctx, Any, float], None]

HANDLERS: dict[str, tuple[str, Handler]] = {
    "resource.dequeue": ("resources", model_resources.on_dequeue),
    "resource.ready": ("resources", model_resources.on_ready),
    "resource.expire": ("resources", model_resources.on_expire),
    "resource.stopped": ("resources", model_resources.on_stopped),
    "session.running": ("sessions", sessions.on_running),
    "session.stopped": ("sessions", sessions.on_stopped),
    "operation.start": ("operations", operations.on_start),
    "operation.complete": ("operations", operations.on_complete),
    "shaping.phase": ("shaping_jobs", shaping.on_phase),
    "shaping.cancelled": ("shaping_jobs", shaping.on_cancelled),
}


def settle(state: TenantState, ctx: Ctx) -> None:
    while True:
        due = state.pop_due(ctx.now)
        if due is None:
            return
        at, event, obj_id = due
        table_name, handler = HANDLERS[event]
        record = getattr(state, table_name).get(obj_id)
        if record is not None:
            handler(state, ctx, record, at)
