"""Units of work: how a tenant is reached and changed, and how a control-plane change is made, all or nothing.

A :class:`UnitOfWork` settles one tenant to now, hands it out and journals what changed; a :class:`ControlUnit`
makes one control-plane change, journaled as one line. When refused, :class:`Undo` puts back what the unit
changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import Token
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from emulator.domain import engine
from emulator.domain.context import Ctx, Principal
from emulator.errors import NotFound, Unavailable
from emulator.faults import FaultSet, SavedFaults
from emulator.sharding import Shard
from emulator.store import Store, Tenant, records, snapshot
from emulator.store.memory import SavedStore
from emulator.store.persistence import Persistence
from emulator.tenant_clocks import SavedClocks, TenantClocks


class Host(Protocol):
    """What units of work use of the runtime (:class:`emulator.runtime.Runtime`)."""

    lock: threading.RLock
    store: Store
    persistence: Persistence | None
    shard: Shard | None
    faults: FaultSet
    clocks: TenantClocks
    waits: dict[str, Any]
    scheduled_rules: dict[str, float]
    unit: UnitOfWork | ControlUnit | None
    rendered: Any

    def check_owner(self, project: str) -> None: ...

    def ctx(self, principal: Principal, warnings: list[str] | None = None) -> Ctx: ...

    def carry_out(self, tenant: Tenant) -> None: ...

    def resettle(self, project: str, at: float, before: Tenant | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Quiet:
    """An event log that logs nothing (a tenant settled again to where it was: its events are logged)."""

    def transition(self, at: float, project: str, kind: str, obj_id: str, old: str | None, new: str,
                   extra: dict[str, Any] | None) -> None:
        pass


QUIET = Quiet()



class Undo:
    """What a unit of work changed beyond the records it journals, as it was before, to put back when the
    journal refuses the change (a control-plane change: when it is refused at all). The event log's mark is
    taken when the unit opens, the rest when the unit first changes it (a write's fault rules, a poll's
    clock) or, on the control plane, at once. A tenant changed in place is reloaded from the file and settled
    quietly to where it was (its events were logged already, its scheduled fault rules carried out)."""

    __slots__ = ("clocks", "events", "faults", "memos", "runtime", "scheduled", "store", "tenants", "waits")

    def __init__(self, runtime: Host) -> None:
        self.runtime = runtime
        self.events = runtime.store.events.mark()
        self.faults: SavedFaults | None = None
        self.scheduled: dict[str, float] | None = None
        self.clocks: SavedClocks | None = None
        self.waits: dict[str, Any] | None = None
        self.store: SavedStore | None = None
        self.memos: dict[str, snapshot.TenantMemo] | None = None
        self.tenants: dict[str, tuple[float, Tenant | None]] = {}

    def keep_faults(self) -> None:
        if self.faults is None:
            self.faults = self.runtime.faults.save()
            self.scheduled = dict(self.runtime.scheduled_rules)

    def keep_clocks(self) -> None:
        if self.clocks is None:
            self.clocks = self.runtime.clocks.save()
            self.waits = dict(self.runtime.waits)

    def keep_all(self) -> None:
        runtime = self.runtime
        self.keep_faults()
        self.keep_clocks()
        self.store = runtime.store.save()
        if runtime.persistence is not None:
            self.memos = runtime.persistence.save()

    def touch(self, project: str, at: float, tenant: Tenant | None) -> None:
        """``project``'s tenant (the object, if it has one) is changed in place; ``at``: its time before."""
        if project not in self.tenants:
            self.tenants[project] = (at, tenant)

    def put_back(self) -> None:
        runtime = self.runtime
        if self.store is not None:
            runtime.store.put_back(self.store)
        if self.memos is not None and runtime.persistence is not None:
            runtime.persistence.put_back(self.memos)
        if self.clocks is not None and self.waits is not None:
            runtime.clocks.put_back(self.clocks)
            runtime.waits.clear()
            runtime.waits.update(self.waits)
        if self.faults is not None and self.scheduled is not None:
            runtime.faults.put_back(self.faults)
            runtime.scheduled_rules.clear()   # (mutated, never rebound: the fault-rule step holds it)
            runtime.scheduled_rules.update(self.scheduled)
        if self.tenants and runtime.persistence is not None and runtime.persistence.reload(sorted(self.tenants)):
            for project, (at, before) in self.tenants.items():
                runtime.resettle(project, at, before)
        runtime.store.events.rollback(self.events)
        runtime.rendered.clear()


class UnitOfWork(msgspec.Struct):
    """See :meth:`Runtime.unit_of_work`. A class rather than a generator, and a msgspec Struct (built in C): one
    is opened on every request."""

    runtime: Host
    principal: Principal
    write: bool
    creates: bool
    tenant: Tenant | None = None
    undo: Undo | None = None   # made once the tenant is settled: what the unit itself changes
    outer: ControlUnit | UnitOfWork | None = None
    at: float = 0.0          # the tenant's time, settled to, when the unit opened
    moved: bool = False      # the unit moved a clock (a poll on the auto clock): journaled with the tenant
    notes: Token[Any] | None = None   # the records' change notes, set while the unit is open

    def __enter__(self) -> tuple[Tenant, Ctx]:
        runtime = self.runtime
        runtime.lock.acquire()
        try:
            outer = self.outer = runtime.unit
            persistence = runtime.persistence
            if self.write and persistence is not None and outer is None:
                persistence.check_writable()
            project = self.principal.project
            store = runtime.store
            tenant = store.get(project)
            if tenant is None:
                if runtime.shard is not None:  # (a tenant held here is this shard's: checked when it came)
                    runtime.check_owner(project)
                if self.write and not self.creates:
                    raise NotFound(f"no tenant {project!r}", code="unknown_tenant")
                tenant = store.open(project) if self.write else store.new_tenant(project)
            ctx = runtime.ctx(self.principal)
            # Records note their changes in the tenant's change log from here on (a read's too: what its settling
            # changes is journaled with the tenant's next write).
            changes = tenant.changes  # (its notes(), without the call)
            self.notes = records.CHANGES.set(changes if changes.enabled else records.Unjournaled)
            if outer is not None and isinstance(outer, ControlUnit) and outer.undo is not None:  # (its clocks: kept as it opened)
                kept = outer.undo.clocks
                outer.undo.touch(project, kept.now_of(project) if kept is not None else ctx.now, store.get(project))
            engine.settle(tenant, ctx)
            if tenant.outbox:  # a scheduled fault rule fell due: the runtime's rules change now
                runtime.carry_out(tenant)
            # Only a journal drains what the tables note: without one, noting would keep every id handed out.
            tenant.changes.noting = self.write and tenant.changes.enabled
            if outer is None:
                runtime.unit = self
                self.at = ctx.now
                if self.write and persistence is not None:  # (settling to now was no part of the change)
                    self.undo = Undo(runtime)
        except BaseException:
            if self.notes is not None:
                records.CHANGES.reset(self.notes)
                self.notes = None
            runtime.lock.release()
            raise
        self.tenant = tenant
        return tenant, ctx

    def keeping(self) -> Undo | None:
        """The unit's :class:`Undo`, made on first use (a read that moves a clock), when a journal could refuse."""
        if self.undo is None and self.runtime.persistence is not None:
            self.undo = Undo(self.runtime)
        return self.undo

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        tenant = self.tenant
        runtime = self.runtime
        try:
            if tenant is not None:
                tenant.changes.noting = False
                persistence = runtime.persistence
                if (self.write or self.moved) and exc_type is None and persistence is not None and (
                        self.outer is None or self.write):
                    try:
                        persistence.commit(tenant, clock=self.moved)
                    except Unavailable:
                        self._put_back(tenant)
                        raise
                elif self.moved and self.outer is None and exc_type is not None:
                    self._put_back(tenant)  # (a poll that moved the clock, then failed: as if it had not come)
        finally:
            if self.outer is None:
                runtime.unit = None
            self.tenant = None
            self.undo = None
            if self.notes is not None:
                records.CHANGES.reset(self.notes)
                self.notes = None
            runtime.lock.release()

    def _put_back(self, tenant: Tenant) -> None:
        undo = self.undo
        if undo is None:
            return
        undo.touch(tenant.project, self.at, tenant)
        undo.put_back()


class ControlUnit:
    """See :meth:`Runtime.control`."""

    __slots__ = ("after", "journal", "line", "outer", "rewrite", "runtime", "undo")

    def __init__(self, runtime: Host, journal: bool) -> None:
        self.runtime = runtime
        self.journal = journal
        self.outer: ControlUnit | None = None
        self.undo: Undo | None = None
        self.line: dict[str, Any] = {}   # what the line says besides the clocks: a reset, a seeded tenant
        self.rewrite = False             # the whole file is written again instead (an import)
        self.after: list[Callable[[], None]] = []   # what happens once the change is durable (settling)

    def __enter__(self) -> ControlUnit:
        runtime = self.runtime
        runtime.lock.acquire()
        try:
            outer = runtime.unit
            if outer is not None:
                if not isinstance(outer, ControlUnit):
                    raise RuntimeError("a control-plane change inside a tenant's unit of work")
                self.outer = outer  # (one change made of several: the outermost journals it)
                return outer
            if self.journal and runtime.persistence is not None:
                runtime.persistence.check_writable()
            self.undo = Undo(runtime)
            self.undo.keep_all()
            runtime.unit = self
        except BaseException:
            runtime.lock.release()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        runtime = self.runtime
        try:
            if self.outer is not None:
                return
            undo = self.undo
            assert undo is not None
            try:
                persistence = runtime.persistence
                if exc_type is not None:
                    if not (undo.tenants and persistence is None):  # (without a file, settled tenants stay)
                        undo.put_back()
                    return
                if persistence is not None and (self.journal or self.line or self.rewrite):
                    try:
                        if self.rewrite:
                            persistence.rewrite()
                        else:
                            persistence.control(**self.line)
                    except Unavailable:
                        undo.put_back()
                        raise
            finally:
                runtime.unit = None
                self.undo = None
            for then in self.after:
                then()
        finally:
            runtime.lock.release()


__all__ = ["QUIET", "ControlUnit", "Host", "UnitOfWork", "Undo"]
