"""Settles the timeline: applies every transition that is due by ``ctx.now``, in time order.

Called when every unit of work opens, so status is computed when read from the clock (no thread, no sleep);
a client that reads after advancing the manual clock sees every intermediate transition at its virtual time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from emulator.domain import actions, model_resources, operations, sessions, shaping
from emulator.domain.context import Ctx
from emulator.store import Tenant, TimelineEvent

TimelineHandler = Callable[[Tenant, Ctx, Any, float], None]
E = TimelineEvent

# What each event of the timeline does to its record (the record's table is the event's own, TimelineEvent.table).
TIMELINE_HANDLERS: Mapping[str, TimelineHandler] = MappingProxyType({
    E.RESOURCE_DEQUEUE: model_resources.on_dequeue,
    E.RESOURCE_READY: model_resources.on_ready,
    E.RESOURCE_EXPIRE: model_resources.on_expire,
    E.RESOURCE_STOPPED: model_resources.on_stopped,
    E.SESSION_RUNNING: sessions.on_running,
    E.SESSION_STOPPED: sessions.on_stopped,
    E.OPERATION_START: operations.on_start,
    E.OPERATION_COMPLETE: operations.on_complete,
    E.SHAPING_PHASE: shaping.on_phase,
    E.SHAPING_CANCELLED: shaping.on_cancelled,
    E.ACTION_RUN: actions.on_run,
})
_TABLE_OF = MappingProxyType({event.value: event.table for event in TimelineEvent})


def settle(tenant: Tenant, ctx: Ctx) -> None:
    timeline = tenant.timeline
    now = ctx.now
    heap = timeline.heap
    if not heap or heap[0][0] > now:  # most requests find nothing due
        return
    log = tenant.changes
    noting, log.noting = log.noting, log.enabled  # (no journal: nothing to note, nothing may pile up)
    try:
        while True:
            due = timeline.pop_due(now)  # (what is due first, or None: it reads the heap as the check above did)
            if due is None:
                return
            at, _seq, event, obj_id = due
            record = getattr(tenant, _TABLE_OF[event]).get(obj_id)  # (Tenant.table, without its call)
            if record is not None:
                TIMELINE_HANDLERS[event](tenant, ctx, record, at)
    finally:
        log.noting = noting
