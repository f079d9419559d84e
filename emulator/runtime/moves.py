"""Moving virtual time: what is pending, the next transition, runs until a condition, the auto clock's jumps.

Part of :class:`emulator.runtime.Runtime` (a mixin: the runtime owns the state). A move of a clock is a
control-plane unit of work (journaled, or put back whole); what falls due at the new time happens after
the line is durable, each tenant in a read unit of work of its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emulator.bounds import later
from emulator.clock import STILL, Clock, rfc3339, wall
from emulator.domain import engine, upcoming
from emulator.domain.context import Ctx, Principal
from emulator.domain.upcoming import Upcoming
from emulator.errors import Invalid, NotFound
from emulator.runtime.units import ControlUnit, UnitOfWork
from emulator.store import Store, Tenant
from emulator.tenant_clocks import TenantClocks

# How far one call may move a clock through transitions (run, a poll on the auto clock): each step is one
# instant, and a call that needs more says so rather than holding the server.
MAX_STEPS = 10_000
DEFAULT_RUN_SECONDS = 86_400.0
MAX_WAITS = 4096   # tenants whose client's last request was a poll of a waiting object (see VirtualTime.polled)


@dataclass(slots=True)
class Wait:
    """A client's polls of one object that waits for a transition, while its tenant's clock stood still."""

    table: str
    id: str
    status: str
    now: float       # the tenant's virtual time at the first poll
    first: float     # real time (clock.wall) of the first poll, and of the last
    last: float
    polls: int = 1


class VirtualTime:
    """The runtime's moves of virtual time (see the module docstring)."""

    lock: threading.RLock
    store: Store
    clock: Clock
    clocks: TenantClocks
    waits: dict[str, Wait]
    unit: UnitOfWork | ControlUnit | None

    if TYPE_CHECKING:
        def unit_of_work(self, who: Principal | str, *, write: bool) -> UnitOfWork: ...

        def control(self, *, journal: bool = True) -> ControlUnit: ...

        def carry_out(self, tenant: Tenant) -> None: ...

        def _moved(self, project: str | None = None) -> None: ...

    def _global_tenants(self, projects: list[str]) -> list[str]:
        """Those of ``projects`` that follow the global clock (no clock of their own)."""
        return [p for p in projects if self.clocks.clock_for(p) is self.clock]

    def _scope(self, project: str | None) -> list[str]:
        """The tenants whose time a move of ``project``'s clock (None: the global one) moves."""
        return [project] if project is not None else self._global_tenants(self.store.projects())

    def _own_clock(self, project: str | None) -> Clock:
        """The clock a move acts on: a tenant's own (made on first use, from where its time is, as an advance
        makes it), or the global one. Inside a control unit: making one is a change."""
        return self.clocks.set_clock(project) if project is not None else self.clock

    def _pending(self, projects: list[str]) -> list[tuple[str, Upcoming]]:
        """Each tenant settled to now (a read unit of work), then what is still to come, in time order."""
        out: list[tuple[str, Upcoming]] = []
        for p in projects:
            with self.unit_of_work(p, write=False) as (tenant, ctx):
                out.extend((p, u) for u in upcoming.pending(tenant, ctx.now))
        out.sort(key=lambda pu: (pu[1].at, pu[1].seq))
        return out

    def pending(self, project: str | None = None) -> tuple[float, list[tuple[str, Upcoming]]]:
        """(now, every scheduled transition in virtual-time order, with its tenant): one tenant's, or those
        of every tenant that follows the global clock."""
        with self.lock:
            clock = self.clocks.clock_for(project) if project is not None else self.clock
            return clock.now(), self._pending(self._scope(project))

    def _move(self, clock: Clock, to: float, projects: list[str]) -> None:
        clock.set_time(max(to, clock.now()))
        for p in projects:  # what fell due happens now, at its own virtual time (and a fault rule applies)
            with self.unit_of_work(p, write=False):
                pass

    def _crossed(self, mark: int, projects: list[str], derived: list[tuple[str, Upcoming]],
                 until: float) -> list[dict[str, Any]]:
        """The transitions the event log saw since ``mark`` for ``projects`` (what happened, cascades included),
        with the derived ones passed on the way (an upload URL that expired), in time order."""
        keep = set(projects)
        seen: list[dict[str, Any]] = []
        for e in self.store.events.since(mark, None, limit=1 << 30):
            if e.get("type") != "transition" or e.get("project") not in keep:
                continue
            e = {k: v for k, v in e.items() if k != "type"}
            last = seen[-1] if seen else None
            if e["from"] is None and last is not None and (last["id"], last["to"], last["at"]) == (e["id"], e["to"], e["at"]):
                last.update((k, v) for k, v in e.items() if k not in last)  # (an expiry notes its reason apart)
                continue
            seen.append(e)
        seen.extend({"at": rfc3339(u.at), "project": p, "kind": u.kind, "id": u.id, "from": u.old, "to": u.new,
                     "detail": u.detail, "seq": 0} for p, u in derived if u.at <= until)
        seen.sort(key=lambda e: (e["at"], e["seq"] or 1 << 62))
        return seen

    def advance_to_next(self, project: str | None = None) -> tuple[Upcoming | None, list[dict[str, Any]]]:
        """Move the clock (the tenant's own, or the global one) to the next pending transition and let
        everything due then happen: (that transition, or None when nothing is pending; what was crossed)."""
        with self.lock:
            projects = self._scope(project)
            pending = self._pending(projects)  # (what is due now happens first: no part of the move)
            mark = self.store.events.last_seq
            with self.control():  # the move is journaled before anything happens at the new time
                clock = self._own_clock(project)
                if pending:
                    clock.set_time(max(pending[0][1].at, clock.now()))
            if not pending:
                return None, []
            self._move(clock, clock.now(), projects)
            self._moved(project)
            crossed = self._crossed(mark, projects, [pu for pu in pending if pu[1].seq == upcoming.DERIVED_SEQ],
                                    clock.now())
        return pending[0][1], crossed

    def run(self, project: str | None, until: tuple[str, str | None] | None,
            max_seconds: float = DEFAULT_RUN_SECONDS) -> list[dict[str, Any]]:
        """Move through the pending transitions in order until ``until`` holds (an object id and the status it
        must reach, None: any final status) or, without one, until nothing is pending within ``max_seconds``.
        Returns what was crossed. :class:`Invalid` when the condition cannot hold within ``max_seconds``,
        naming the next pending transition; the clock then stays at the last transition it crossed. One unit
        of work: refused by the disk, nothing moved."""
        with self.lock:
            projects = self._scope(project)
            if until is not None:
                projects = [self._holder(projects, until[0])]
                until = (until[0], self._status_named(projects[0], *until))
            mark = self.store.events.last_seq
            self._pending(projects)  # (what is due now happens first: no part of the run, nor undone with it)
            derived: list[tuple[str, Upcoming]] = []
            blocked: Upcoming | None = None
            met, exhausted = until is None, False
            failed: Invalid | None = None
            with self.control():
                clock = self._own_clock(project)
                start = clock.now()
                limit = later(start, max_seconds)
                try:
                    for _ in range(MAX_STEPS):
                        if until is not None:
                            met = self._check_until(projects[0], until, clock)
                            if met:
                                break
                        pending = self._pending(projects)
                        derived.extend(pu for pu in pending if pu[1].seq == upcoming.DERIVED_SEQ and pu not in derived)
                        if not pending:
                            break
                        if pending[0][1].at > limit:
                            blocked = pending[0][1]
                            break
                        self._move(clock, pending[0][1].at, projects)
                    else:  # (the last step may have been the one that was needed)
                        met = self._check_until(projects[0], until, clock) if until is not None else True
                        exhausted = not met if until is not None else bool(self._pending(projects))
                except Invalid as exc:  # (a final status the condition can no longer reach: what happened stays)
                    failed = exc
            self._moved(project)
            crossed = self._crossed(mark, projects, derived, clock.now())
        if failed is not None:
            raise failed
        if exhausted:
            raise Invalid(f"run: more than {MAX_STEPS} instants with transitions in one call; the clock stopped at "
                          f"{rfc3339(clock.now())} after crossing {len(crossed)} transition(s): run again",
                          param="max_seconds", code="too_many_transitions")
        if not met:
            self._not_met(projects[0], until, blocked, clock, start, max_seconds, len(crossed))
        return crossed

    def _holder(self, projects: list[str], obj_id: str) -> str:
        for p in projects:
            with self.unit_of_work(p, write=False) as (tenant, _ctx):
                if upcoming.find(tenant, obj_id) is not None:
                    return p
        raise NotFound(f"until.id: no object {obj_id[:80]!r} with a status in "
                       + ("this tenant" if len(projects) == 1 else "the tenants that follow the global clock"),
                       param="until.id")

    def _status_named(self, project: str, obj_id: str, status: str | None) -> str | None:
        if status is None:
            return None
        with self.unit_of_work(project, write=False) as (tenant, _ctx):
            found = upcoming.find(tenant, obj_id)
            assert found is not None
            try:
                return upcoming.status_named(found[0], status)
            except ValueError as exc:
                raise Invalid(f"until.status: {exc}", param="until.status") from exc

    def _check_until(self, project: str, until: tuple[str, str | None], clock: Clock) -> bool:
        obj_id, status = until
        with self.unit_of_work(project, write=False) as (tenant, _ctx):
            found = upcoming.find(tenant, obj_id)
            if found is None:  # (an operation forgotten by the retention limit: it had finished)
                return status is None
            table, record = found
            if upcoming.holds(table, record, status):
                return True
            if upcoming.final(table, record):
                raise Invalid(f"until: {upcoming.KINDS[table]} {obj_id} reached {record.status}, a final status: it "
                              f"will never be {status} (the clock is at {rfc3339(clock.now())})",
                              param="until", code="condition_not_met")
            return False

    def _not_met(self, project: str, until: Any, blocked: Upcoming | None, clock: Clock, start: float,
                 max_seconds: float, crossed: int) -> None:
        obj_id, status = until
        with self.unit_of_work(project, write=False) as (tenant, _ctx):
            found = upcoming.find(tenant, obj_id)
            now_status = found[1].status if found else "gone"
        want = status or "a final status"
        where = (f"the clock stopped at {rfc3339(clock.now())} after crossing {crossed} transition(s) in "
                 f"{clock.now() - start:g} s")
        if blocked is None:
            raise Invalid(f"until: {obj_id} is {now_status}, not {want}, and nothing is pending that could move it "
                          f"({where})", param="until", code="condition_not_met")
        raise Invalid(f"until: {obj_id} is {now_status}, not {want}, within max_seconds={max_seconds:g} ({where}); "
                      f"the next pending transition is {blocked.describe()} at {rfc3339(blocked.at)}, "
                      f"{blocked.at - clock.now():g} s later", param="until", code="condition_not_met")

    def polled(self, tenant: Tenant, ctx: Ctx, table: str, obj_id: str) -> None:
        """A client read one object it may be waiting on (a GET of a resource, session, operation or shaping
        job; the dispatcher calls this in the caller's unit of work, before the handler). On an auto clock
        the clock jumps to the object's next transition (what is due before it happens first, in order),
        and on until the object rests, so the answer shows it done; on a manual clock the poll is noted for
        :meth:`waiting`, so a test that waits on a clock nothing moves can be told so."""
        project = tenant.project
        clock = self.clocks.clock_for(project)
        if clock.mode not in STILL:
            return
        record = tenant.table(table).read(obj_id)
        ids = upcoming.waits_on(tenant, table, record) if record is not None else None
        if ids is None or record is None:
            self.waits.pop(project, None)
            return
        if clock.mode == "manual":
            w = self.waits.get(project)
            if w is not None and (w.id, w.status, w.now) == (obj_id, record.status, ctx.now):
                w.polls += 1
                w.last = wall()
            else:
                if len(self.waits) >= MAX_WAITS:
                    del self.waits[next(iter(self.waits))]
                self.waits[project] = Wait(table, obj_id, record.status, ctx.now, wall(), wall())
            return
        unit = self.unit
        for _ in range(MAX_STEPS):
            nxt = upcoming.next_for(tenant, ctx.now, ids)
            if nxt is None:
                break
            if isinstance(unit, UnitOfWork) and not unit.moved:  # journaled with the unit, or put back with it
                undo = unit.keeping()
                if undo is not None:
                    undo.keep_clocks()
                unit.moved = True
            clock.set_time(max(nxt.at, clock.now()))
            ctx.now = clock.now()
            engine.settle(tenant, ctx)
            if tenant.outbox:
                self.carry_out(tenant)
            record = tenant.table(table).read(obj_id)
            ids = upcoming.waits_on(tenant, table, record) if record is not None else None
            if ids is None:
                break

    def not_polling(self, project: str) -> None:
        """The client did something else than poll: it is not stuck waiting (see :meth:`polled`)."""
        self.waits.pop(project, None)

    def waiting(self, project: str) -> dict[str, Any] | None:
        """What the tenant's client seems stuck on: it polled an object that waits for a transition, and since
        then its manual clock has not moved nor the object changed. ``seconds``: real time since the first such
        poll; ``next``: the transition it waits for (None: nothing pending would move it). None otherwise."""
        with self.lock:
            w = self.waits.get(project)
            if w is None:
                return None
            with self.unit_of_work(project, write=False) as (tenant, ctx):
                record = tenant.table(w.table).read(w.id)
                if record is None or record.status != w.status or ctx.now != w.now:
                    self.waits.pop(project, None)
                    return None
                ids = upcoming.waits_on(tenant, w.table, record)
                nxt = upcoming.next_for(tenant, ctx.now, ids) if ids is not None else None
            return {"kind": upcoming.KINDS[w.table], "id": w.id, "status": w.status, "polls": w.polls,
                    "seconds": round(wall() - w.first, 3), "idle_seconds": round(wall() - w.last, 3), "next": nxt}


__all__ = ["DEFAULT_RUN_SECONDS", "MAX_STEPS", "VirtualTime", "Wait"]
