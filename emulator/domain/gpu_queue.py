"""The GPU queue that PENDING model resources wait in, one FIFO per GPU type.

Emulates ``status_details.queue_position`` (older same-GPU-type resources still waiting, plus one) and the
wait: the head leaves every ``queue_slot_seconds``; a fault effect can put phantom resources ahead
(``queue_extra``, a slot of at least a virtual second each). Differs: per project here; the real one is shared.
"""

from __future__ import annotations

from emulator.bounds import later
from emulator.domain.context import Ctx
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import ModelResource, ResourceStatus


def enter(tenant: Tenant, ctx: Ctx, r: ModelResource) -> None:
    """Queue a new resource behind the others of its GPU type and schedule when it leaves."""
    now = ctx.now
    exit_at = later(max(now, tenant.gpu_queue_tail.get(r.gpu_type, now)), ctx.timing.queue_slot_seconds)
    tenant.gpu_queue_tail[r.gpu_type] = exit_at
    r.queue_exit_at = exit_at
    tenant.gpu_queue.setdefault(r.gpu_type, []).append(r.id)
    tenant.timeline.schedule(exit_at, TimelineEvent.RESOURCE_DEQUEUE, r.id)


def position(tenant: Tenant, r: ModelResource) -> int | None:
    """Older same-GPU resources still waiting, plus one; None once out of the queue."""
    if r.status != ResourceStatus.PENDING:
        return None
    waiting = tenant.gpu_queue.get(r.gpu_type, [])
    ahead = waiting.index(r.id) if r.id in waiting else 0
    return ahead + 1 + r.queue_extra


def leave(tenant: Tenant, r: ModelResource) -> None:
    waiting = tenant.gpu_queue.get(r.gpu_type)
    if waiting and r.id in waiting:
        waiting.remove(r.id)
    r.queue_exit_at = None


def hold(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    """The next phantom ahead leaves one queue slot (at least a virtual second) from ``at``."""
    r.queue_exit_at = later(at, max(ctx.timing.queue_slot_seconds, 1.0))
    tenant.timeline.schedule(r.queue_exit_at, TimelineEvent.RESOURCE_DEQUEUE, r.id)
