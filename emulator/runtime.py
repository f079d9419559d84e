"""The running emulator's services, wired together, and the one way into a tenant's state: the unit of work.

One :class:`Runtime` per server: config, store, clock, timing, limits, tenancy, fault rules, the journal
of ``--state-file``, and the caches the emulator keeps (rendered sessions). Nothing mutable lives at
module level, so tests build as many independent emulators in one process as they like.

``with runtime.unit_of_work(principal, write=...) as (tenant, ctx):`` is how every caller (the API's
dispatcher, presigned files, the dashboard, the event stream) reaches a tenant: it settles the tenant's
timeline to now, hands out the tenant and the domain's context, and on a clean exit of a write journals
exactly what changed before the caller answers. A refused request (an exception) writes nothing; a write
the journal cannot make durable is undone (:class:`Undo`: the tenant reloaded from the file, the events it
logged, the fault rules and clocks it moved) and refused with :class:`~emulator.errors.Unavailable`. A
control-plane change (clock, profile, reset, seed, fault rules, import) is a unit of work too
(:meth:`Runtime.control`): one line, and refused, nothing of it stays.

Concurrency: the server is one event loop and a unit of work never awaits, so units of work never
interleave. :attr:`Runtime.lock` serialises them anyway, for callers in other threads (a server run in a
thread by tests or the pytest plugin, while the test thread reads the runtime).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from emulator import fixture_files, spec
from emulator.bounds import later
from emulator.clock import STILL, Clock, parse_rfc3339, rfc3339, wall
from emulator.config import Config, ConfigError, load_data_file
from emulator.domain import actions, engine, upcoming
from emulator.domain.context import Ctx, Principal
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.domain.timing import Timing, load_timing
from emulator.domain.upcoming import Upcoming
from emulator.errors import Invalid, Misdirected, NotFound, Unavailable
from emulator.faults import FaultError, FaultSet, SavedFaults, validate_rule
from emulator.integrity import Integrity
from emulator.sharding import shard_of
from emulator.store import Store, Tenant, snapshot
from emulator.store.blobs import BlobStore
from emulator.store.memory import SavedStore
from emulator.store.persistence import Persistence, StateFileError
from emulator.store.records import ActionKind, ActionStatus, ScheduledAction
from emulator.tenancy import Tenancy
from emulator.tenant_clocks import SavedClocks, TenantClocks

# Error codes a fault effect may name: the API's own enums, so a typo cannot load silently.
FAULT_CODES = MappingProxyType({"operation_fails": "OperationErrorCode", "resource_error": "ModelResourcesErrorCode",
               "session_error": "SessionErrorCode"})
RENDER_CACHE_SIZE = 4096
log = logging.getLogger("emulator")
# How far one call may move a clock through transitions (run, a poll on the auto clock): each step is one
# instant, and a call that needs more says so rather than holding the server.
MAX_STEPS = 10_000
DEFAULT_RUN_SECONDS = 86_400.0
MAX_WAITS = 4096   # tenants whose client's last request was a poll of a waiting object (see Runtime.polled)


@dataclass(frozen=True, slots=True)
class _Quiet:
    """An event log that logs nothing (a tenant settled again to where it was: its events are logged)."""

    def transition(self, at: float, project: str, kind: str, obj_id: str, old: str | None, new: str,
                   extra: dict[str, Any] | None) -> None:
        pass


_QUIET = _Quiet()


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


class ScenarioLibrary(Protocol):
    """The named scenarios the control plane offers (:mod:`emulator.tools.scenarios`, plugged in by the
    server composition, which sits above the app that scenarios call)."""

    def available(self) -> dict[str, str]: ...

    async def load(self, name: str, tenant: str | None = None) -> dict[str, Any]: ...


class RenderCache:
    """JSON bytes of records rendered once per version of what they show (the API layer's), bounded: the
    oldest entry goes first, since polled records come back soon."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int = RENDER_CACHE_SIZE) -> None:
        self._entries: dict[str, tuple[tuple[Any, ...], bytes]] = {}
        self.size = size

    def get(self, key: str, version: tuple[Any, ...]) -> bytes | None:
        hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] == version else None

    def put(self, key: str, version: tuple[Any, ...], data: bytes) -> None:
        entries = self._entries
        if key not in entries and len(entries) >= self.size:
            del entries[next(iter(entries))]
        entries[key] = (version, data)

    def clear(self) -> None:
        self._entries.clear()


class Undo:
    """What a unit of work changed beyond the records it journals, as it was before, to put back when the
    journal refuses the change (a control-plane change: when it is refused at all). The event log's mark is
    taken when the unit opens, the rest when the unit first changes it (a write's fault rules, a poll's
    clock) or, on the control plane, at once. A tenant changed in place is reloaded from the file and settled
    quietly to where it was (its events were logged already, its scheduled fault rules carried out)."""

    __slots__ = ("clocks", "events", "faults", "memos", "runtime", "scheduled", "store", "tenants", "waits")

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.events = runtime.store.events.mark()
        self.faults: SavedFaults | None = None
        self.scheduled: dict[str, float] | None = None
        self.clocks: SavedClocks | None = None
        self.waits: dict[str, Wait] | None = None
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
            runtime.scheduled_rules.clear()   # (mutated, never rebound: the fault middleware holds it)
            runtime.scheduled_rules.update(self.scheduled)
        if self.tenants and runtime.persistence is not None and runtime.persistence.reload(sorted(self.tenants)):
            for project, (at, before) in self.tenants.items():
                runtime.resettle(project, at, before)
        runtime.store.events.rollback(self.events)
        runtime.rendered.clear()


class UnitOfWork:
    """See :meth:`Runtime.unit_of_work`. A class rather than a generator: it runs on every request."""

    __slots__ = ("at", "creates", "moved", "outer", "principal", "runtime", "tenant", "undo", "write")

    def __init__(self, runtime: Runtime, principal: Principal, write: bool, creates: bool) -> None:
        self.runtime = runtime
        self.principal = principal
        self.write = write
        self.creates = creates
        self.tenant: Tenant | None = None
        self.undo: Undo | None = None   # made once the tenant is settled: what the unit itself changes
        self.outer: ControlUnit | UnitOfWork | None = None
        self.at = 0.0          # the tenant's time, settled to, when the unit opened
        self.moved = False     # the unit moved a clock (a poll on the auto clock): journaled with the tenant

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
            if isinstance(outer, ControlUnit):  # (its clocks were kept when it opened: the time before it)
                outer.undo.touch(project, outer.undo.clocks.now_of(project) if outer.undo.clocks else ctx.now,
                                 store.get(project))
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

    def __init__(self, runtime: Runtime, journal: bool) -> None:
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


class RecordingSwitch(Protocol):
    """Recording switched on and off at run time (:class:`emulator.tools.recording.RecordingControl`, plugged
    in by the server composition, which wraps the app in the recorder)."""

    def start(self, canonical: bool = False) -> dict[str, Any]: ...

    def stop(self) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def download(self) -> str: ...


class Runtime:
    scenarios: ScenarioLibrary | None = None
    recording: RecordingSwitch | None = None

    def __init__(self, config: Config) -> None:
        self.config = config
        self.shard = config.shard   # a shard of a cluster holds only its own tenants (emulator.sharding)
        self.lock = threading.RLock()
        # Uploaded bytes live on disk, named by records: beside the state file, or in a temporary directory.
        blobs = BlobStore(f"{config.state_file}.blobs" if config.state_file else None, durable=bool(config.state_file))
        self.store = Store(seed=config.seed, journaled=bool(config.state_file), blobs=blobs)
        self.clock = Clock(config.clock, config.speed, config.start_time)
        self.rendered = RenderCache()
        self.state_checker = snapshot.Checker()
        self.integrity = Integrity()
        overrides = load_data_file(config.profile_file, "--profile-file") if config.profile_file else None
        try:
            timing = load_timing(config.profile, overrides or None)
        except ValueError as exc:
            raise ConfigError(f"--profile-file {config.profile_file}: {exc}") from exc
        # The global clock and profile, and the tenants that have their own (tenant-scoped time).
        self.clocks = TenantClocks(self.clock, timing, {"name": config.profile, "overrides": dict(overrides or {})},
                                   self.holds_state)
        self.limits: Limits = DEFAULT_LIMITS
        if config.limits_file:
            data = load_data_file(config.limits_file, "--limits-file")
            try:
                self.limits = Limits.from_mapping(data)
            except ValueError as exc:
                raise ConfigError(f"--limits-file {config.limits_file}: {exc}") from exc
        self.tenancy = Tenancy.from_config(config.tokens_file, config.admin_token)
        # Project -> when its first scheduled fault-rule action falls due (derived from the tenants' actions):
        # the fault middleware settles such a tenant before it picks a rule, so a rule due by now applies to
        # the first request after its time whatever the clock (emulator.http.faults). Mutated, never rebound.
        self.scheduled_rules: dict[str, float] = {}
        self.waits: dict[str, Wait] = {}   # the stall a test watchdog asks about (Runtime.waiting)
        self.unit: UnitOfWork | ControlUnit | None = None   # the unit of work open now (they never interleave)
        self.faults = FaultSet(seed=config.seed, operations=spec.operation_ids(),
                               codes={k: spec.enum_values(v) for k, v in FAULT_CODES.items()})
        if config.faults_file:
            try:  # a shipped fault file by name (fixtures/faults/NAME.yaml), or a path
                self.faults.load(load_data_file(fixture_files.resolve("faults", config.faults_file), "--faults"))
            except (FaultError, LookupError) as exc:
                raise ConfigError(f"--faults {config.faults_file}: {exc}") from exc
        self.persistence: Persistence | None = None
        if config.state_file:
            self.persistence = Persistence(config.state_file, self.store, self.describe_clocks, self.state_checker,
                                           self.integrity.check)
            try:
                doc = self.persistence.open()
            except (StateFileError, OSError) as exc:
                raise ConfigError(str(exc)) from exc
            if doc is not None:
                try:
                    self._restore_clock(doc)
                except snapshot.StateError as exc:
                    raise ConfigError(f"--state-file {config.state_file}: {exc}") from exc
                self._restore_settings(doc)
            self.collect_blobs(force=True, file_matches=True)  # (just read: what a crash left behind goes)
            foreign = self.foreign_projects([*self.store.projects(), *self.clocks.tenants])
            if foreign:
                named = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise ConfigError(f"--state-file {config.state_file} holds tenants of other shards than "
                                  f"{self.shard} ({named}): was it written by another shard, or with another "
                                  "shard count? Each shard keeps its own file, and the count stays fixed for "
                                  "the life of the files")

    @property
    def timing(self) -> Timing:
        """The global timing profile (a tenant may have its own: :attr:`clocks`)."""
        return self.clocks.timing

    def holds_state(self, project: str) -> bool:
        """Whether a tenant holds records (its virtual time may then never go back behind them)."""
        tenant = self.store.get(project)
        return tenant is not None and (len(tenant.timeline) > 0 or any(len(t) for t in tenant.tables()))

    # --- shards ------------------------------------------------------------------------------------

    def check_owner(self, project: str) -> None:
        """:class:`~emulator.errors.Misdirected` unless this process may hold ``project``'s tenant (always,
        unless it is a shard of a cluster). Called before anything of the tenant is read or made."""
        shard = self.shard
        if shard is not None and not shard.owns(project):
            raise Misdirected(f"tenant {project} belongs to shard {shard_of(project, shard.count)} of "
                              f"{shard.count}, and this is shard {shard.index}: the balancer in front sent the "
                              "request to the wrong shard (is it configured for this shard count?)")

    def foreign_projects(self, projects: Any) -> list[str]:
        """Those of ``projects`` that belong to other shards (none unless this is a shard)."""
        shard = self.shard
        return [] if shard is None else sorted({p for p in projects if not shard.owns(p)})

    # --- callers and their context -------------------------------------------------------------------

    def principal_for(self, api_key: str) -> Principal | None:
        return self.tenancy.principal_for(api_key)

    def ctx(self, principal: Principal, warnings: list[str] | None = None) -> Ctx:
        """A domain context; ``warnings`` is the list the request answers as ``X-Emulator-Warning``. Time, timing
        and seed are the tenant's own when it has them (tenant-scoped time), else the global ones."""
        project = principal.project
        own = self.clocks.tenants.get(project)  # a tenant with a clock or profile of its own
        if own is None:
            now, timing = self.clock.now(), self.clocks.timing
        else:
            now = (own.clock or self.clock).now()
            timing = own.timing if own.timing is not None else self.clocks.timing
        return Ctx(now=now, principal=principal, timing=timing, seed=self.store.seed_for(project), limits=self.limits,
                   strict=self.config.strict, warnings=[] if warnings is None else warnings)

    def unit_of_work(self, who: Principal | str, *, write: bool) -> UnitOfWork:
        """The tenant of ``who`` (a caller, or a project for work no caller asked for: the dashboard, a
        presigned URL) settled to now, with the domain's context: ``with runtime.unit_of_work(p, write=True)
        as (tenant, ctx)``. A caller's write creates the tenant on first use (work for a project never does:
        :class:`~emulator.errors.NotFound`) and journals what changed when the block ends without an
        exception (:class:`~emulator.errors.Unavailable` if the journal cannot be written: then nothing
        changed). A read never creates a tenant and writes nothing; what its settling changed is journaled
        with the tenant's next write (a restored state would settle the same way anyway)."""
        if isinstance(who, Principal):
            return UnitOfWork(self, who, write, creates=True)
        return UnitOfWork(self, Principal(user="", project=who), write, creates=False)

    # --- uploaded bytes -------------------------------------------------------------------------------

    def collect_blobs(self, *, force: bool = False, file_matches: bool = False) -> int:
        """Delete the blobs no record names once the blob directory has grown enough since the last sweep (or
        now, ``force``); returns the bytes freed. With a journal the file is compacted first, unless it was
        just written or read whole (``file_matches``): a change that settling made and no line has written yet
        (a released payload) must not leave the file naming a blob that is gone."""
        with self.lock:
            blobs = self.store.blobs
            if not (force or blobs.wants_sweep):
                return 0
            if self.persistence is not None and not file_matches and not self.persistence.compact():
                return 0
            try:
                return blobs.sweep(self.store.blob_names())
            except OSError as exc:  # (tried again at the next sweep; nothing is lost)
                log.warning("the blob directory could not be swept: %s", exc)
                return 0

    # --- control-plane changes: each one unit of work, journaled as one line --------------------------

    def control(self, *, journal: bool = True) -> ControlUnit:
        """``with runtime.control() as unit:`` one change of the control plane, as a write is one change of a
        tenant: it takes :attr:`lock`, refuses at once while the state file takes no writes, keeps the small
        state it may change (the clocks and profiles, the fault rules and their counters, which tenants there
        are, the seeds, the event log's end), and when the block ends journals one line (the clocks and
        profiles; ``unit.line``: a reset, a seeded tenant; ``unit.rewrite``: the whole file, for an import).
        An exception in the block, or a line the disk refuses (:class:`Unavailable`), puts back everything it
        kept, and a tenant it settled meanwhile is reloaded from the file. ``journal=False``: nothing is
        written (fault rules, which the file does not hold). What ``unit.after`` holds runs once the change is
        durable. Opened inside another, it is part of that one."""
        return ControlUnit(self, journal)

    def set_clock(self, project: str | None, mode: str | None = None, speed: float | None = None,
                  now: float | None = None) -> None:
        """Switch a clock's mode or speed, or move it to ``now`` (the tenant's own clock, made on first use, or
        the global one); :class:`ClockError` when not allowed (nothing changed)."""
        with self.control() as unit:
            if project is not None:
                self.clocks.set_clock(project, mode=mode, speed=speed, now=now)
            else:
                self.clock.configure(mode=mode, speed=speed)
                if now is not None:
                    self.clock.set_time(now)
                self.clocks.set_globally(mode=mode, speed=speed)
            unit.after.append(lambda: self._moved(project))

    def advance(self, project: str | None, seconds: float) -> None:
        """Move a clock on by ``seconds`` (the tenant's own, made on first use, or the global one)."""
        with self.control() as unit:
            if project is not None:
                self.clocks.advance(project, seconds)
            else:
                self.clock.advance(seconds)
            unit.after.append(lambda: self._moved(project))

    def drop_clock(self, project: str) -> None:
        with self.control() as unit:
            self.clocks.drop_clock(project)
            unit.after.append(lambda: self._moved(project))

    def set_profile(self, project: str | None, name: Any, overrides: Any = None) -> None:
        """The timing profile of a tenant, or the global one; ValueError naming what is wrong."""
        with self.control():
            self.clocks.set_profile(project, name, overrides)

    def drop_profile(self, project: str) -> None:
        with self.control():
            self.clocks.drop_profile(project)

    def reset(self, project: str | None = None, seed: int | None = None, *, keep_settings: bool = False) -> None:
        """Forget one project's state, or everyone's (and reseed). A project's own clock, profile and seed go
        with it, unless ``keep_settings``; ``seed`` gives it a seed of its own."""
        with self.control() as unit:
            if project is not None and keep_settings:
                own_seed = self.store.seed_for(project)
                seed = seed if seed is not None else (own_seed if own_seed != self.store.seed else None)
            else:
                self.clocks.forget(project)
            tenant = self.store.reset(project, seed)
            self.rendered.clear()
            if project is None:
                self.scheduled_rules.clear()
                self.waits.clear()
            else:
                self.scheduled_rules.pop(project, None)
                self.waits.pop(project, None)
            # A tenant with a seed of its own is written at once, with its seed, in the reset's line.
            unit.line.update(reset=True, project=project, tenant=tenant)

    def _moved(self, project: str | None = None) -> None:
        """A clock moved (the tenant's, or the global one): carry out the fault rules scheduled by then for the
        tenants whose time moved, so the next request meets them (each in a unit of work of its own)."""
        for p in [project] if project is not None else self._global_tenants(list(self.scheduled_rules)):
            self.fire_due_rules(p)

    # --- fault rules (not in the state file: a restart starts with --faults) -------------------------------

    def add_faults(self, rules: Any, tenant: str | None = None) -> list[dict[str, Any]]:
        with self.control(journal=False):
            return self.faults.load(rules, tenant=tenant)

    def clear_faults(self, tenant: str | None = None) -> None:
        with self.control(journal=False):
            self.faults.clear(tenant)

    def remove_fault(self, name: str, tenant: str | None = None) -> bool:
        with self.control(journal=False):
            return self.faults.remove(name, tenant)

    def resettle(self, project: str, at: float, before: Tenant | None) -> None:
        """A tenant just reloaded from the file (a change to it was refused), settled to ``at``, where it was
        before: what that settles was logged already (the event log stays as it is), and a fault rule
        scheduled by then was carried out already (its action ends as it ended then, ``before``'s)."""
        tenant = self.store.get(project)
        if tenant is None:
            return
        ctx = self.ctx(Principal(user="", project=project))
        ctx.now = at
        sink, tenant.events = tenant.events, _QUIET
        try:
            engine.settle(tenant, ctx)
            log = tenant.changes
            noting, log.noting = log.noting, log.enabled
            try:
                while tenant.outbox:
                    record, when = tenant.outbox.pop(0)
                    then = before.actions.read(record.id) if before is not None else None
                    if then is not None and then.status in (ActionStatus.DONE, ActionStatus.FAILED):
                        actions.finish(tenant, record, then.status == ActionStatus.DONE, then.result or "", when)
                    else:
                        tenant.outbox.insert(0, (record, when))
                        self.carry_out(tenant)
            finally:
                log.noting = noting
        finally:
            tenant.events = sink

    def settle(self, project: str | None = None) -> None:
        """Bring one tenant (or every tenant) to now, for views of the whole store: a read unit of work each."""
        with self.lock:
            for p in self.store.projects() if project is None else [project]:
                with self.unit_of_work(p, write=False):
                    pass

    # --- virtual time: what is pending, the next transition, runs, the auto clock, scheduled actions -------

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

    # scheduled actions

    def schedule_action(self, project: str, api_key: str, kind: Any, params: dict[str, Any], at: float | None,
                        delay: float | None) -> tuple[ScheduledAction, float]:
        """Schedule an action for the tenant (at ``at``, or ``delay`` seconds from its now): checked first
        (a fault rule as the fault set checks it, scoped to ``api_key``); journaled as a write. Returns the
        action and the tenant's now."""
        with self.lock, self.unit_of_work(Principal(user="", project=project, token=api_key), write=True) as (
                tenant, ctx):
            action = actions.check(tenant, kind, params)
            params = dict(params)
            if action is ActionKind.ADD_FAULT:
                params["rule"] = self._scheduled_rule(params["rule"], api_key)
            elif action is ActionKind.REMOVE_FAULT:
                params["tenant"] = api_key
            when = ctx.now if at is None and delay is None else at if at is not None else later(ctx.now, delay or 0.0)
            record = actions.schedule(tenant, ctx, action, when, params)
            now = ctx.now
            if action in (ActionKind.ADD_FAULT, ActionKind.REMOVE_FAULT):
                self.scheduled_rules[project] = min(self.scheduled_rules.get(project, when), when)
        if when <= now:  # an action for now happens at once
            self.settle(project)
        return record, now

    def _scheduled_rule(self, rule: Any, api_key: str) -> dict[str, Any]:
        try:
            checked = validate_rule(rule, 0, self.faults.operations, self.faults.codes)
        except FaultError as exc:
            raise Invalid(f"rule: {exc}", param="rule", code="invalid_fault_rule") from exc
        if not isinstance(rule, dict) or not rule.get("name"):
            raise Invalid("rule.name: a scheduled rule needs a name (to be told apart, and removed)", param="rule.name")
        given = checked["match"].get("tenant")
        if given is not None and given != api_key:
            raise Invalid("rule.match.tenant names another tenant than the one the action is for", param="rule")
        return {**checked, "match": {**checked["match"], "tenant": api_key}}

    def list_actions(self, project: str) -> list[ScheduledAction]:
        with self.lock, self.unit_of_work(project, write=False) as (tenant, _ctx):
            return tenant.actions.ordered()

    def cancel_action(self, project: str, action_id: str) -> ScheduledAction:
        with self.lock, self.unit_of_work(Principal(user="", project=project), write=True) as (tenant, ctx):
            record = actions.cancel(tenant, ctx, action_id)
            self._recount_rules([project])
            return record

    def carry_out(self, tenant: Tenant) -> None:
        """The fault-rule actions that settling found due (``tenant.outbox``): add or remove the rule, then
        finish the action (noted for the journal as settling notes its changes)."""
        unit = self.unit
        undo = unit.keeping() if isinstance(unit, UnitOfWork) else None
        if undo is not None:  # (settling as a unit opens is no part of its change: it has no Undo yet)
            undo.keep_faults()
        log = tenant.changes
        noting, log.noting = log.noting, log.enabled
        try:
            while tenant.outbox:
                record, at = tenant.outbox.pop(0)
                p = record.params
                try:
                    if record.action == ActionKind.ADD_FAULT:
                        self.faults.load(p["rule"], tenant=p["rule"]["match"]["tenant"])
                        ok, result = True, f"fault rule {p['rule']['name']!r} added"
                    else:
                        ok = self.faults.remove(p["name"], p["tenant"])
                        result = (f"fault rule {p['name']!r} removed" if ok
                                  else f"no fault rule {p['name']!r} to remove")
                except FaultError as exc:
                    ok, result = False, str(exc)
                actions.finish(tenant, record, ok, result, at)
        finally:
            log.noting = noting
        self._recount_rules([tenant.project])

    def _recount_rules(self, projects: list[str]) -> None:
        """When each of ``projects`` next has a fault-rule action due (``scheduled_rules``)."""
        for p in projects:
            tenant = self.store.get(p)
            due = [a.at for a in tenant.actions.values() if a.status == "scheduled"
                   and a.action in (ActionKind.ADD_FAULT, ActionKind.REMOVE_FAULT)] if tenant is not None else []
            if due:
                self.scheduled_rules[p] = min(due)
            else:
                self.scheduled_rules.pop(p, None)

    def fire_due_rules(self, project: str) -> None:
        """Settle the tenant if a fault-rule action of it is due by its now (the fault middleware calls this
        before it picks a rule for the tenant's request)."""
        at = self.scheduled_rules.get(project)
        if at is not None and self.clocks.now(project) >= at:
            self.settle(project)

    def export_state(self) -> dict[str, Any]:
        with self.lock:
            self.settle()
            return snapshot.export_state(self.store, self.describe_clocks(), inline_bytes=True)

    def describe_clocks(self) -> dict[str, Any]:
        """The global clock, with every tenant's own clock and profile (the ``clock`` of a state document), and
        what the control plane set globally (``settings``: the mode, speed and profile a restart restores)."""
        out = self.clock.describe()
        tenants = self.clocks.export()
        if tenants:
            out["tenants"] = tenants
        if self.clocks.settings:
            out["settings"] = dict(self.clocks.settings)
        return out

    def import_state(self, doc: Any) -> None:
        """Replace the whole state; a bad document raises :class:`snapshot.StateError` and changes nothing. One
        unit of work: checked and built completely first, then swapped in and the file rewritten; a rewrite
        the disk refuses puts the old store back (:class:`Unavailable`)."""
        with self.lock, self._refused_bytes():
            self._check_writable()
            tenant_clocks = self._tenant_clocks(doc)
            foreign = self.foreign_projects([*(doc.get("tenants") or {}), *tenant_clocks]) \
                if isinstance(doc, dict) and isinstance(doc.get("tenants") or {}, dict) else []
            if foreign:
                raise snapshot.StateError(f"the document holds tenants of other shards than {self.shard} "
                                          f"({', '.join(foreign[:3])}): a shard imports its own tenants only "
                                          "(import each tenant with X-Emulator-Tenant, through the balancer)")
            built = snapshot.built_state(self.store, doc, self.state_checker, self.integrity.check)
            with self.control() as unit:
                unit.rewrite = True
                snapshot.install(self.store, built)
                self.rendered.clear()
                self._restore_clock(doc, tenant_clocks)
        self.collect_blobs(force=True, file_matches=True)  # the bytes of what the import replaced

    @contextlib.contextmanager
    def _refused_bytes(self) -> Iterator[None]:
        """Uploaded bytes a document carried inline are stored as it is checked: refused, they go again."""
        blobs = self.store.blobs
        before = blobs.names()
        try:
            yield
        except BaseException:
            blobs.discard(blobs.names() - before - self.store.blob_names())
            raise

    def export_tenant(self, project: str) -> dict[str, Any]:
        """One tenant's state document: the format of the whole state with that tenant only, its seed, and the
        clock and profile it reads (no URL secret: its presigned URLs are not carried over)."""
        with self.lock:
            tenants = {}
            if self.store.get(project) is not None:
                self.settle(project)
                tenant = self.store.get(project)
                assert tenant is not None
                tenants[project] = snapshot.export_tenant(tenant, inline_bytes=True)
            clock = self.clocks.describe(project)
            del clock["scope"]
            own = self.clocks.tenants.get(project)
            if own is not None and own.profile is not None:
                clock["profile"] = dict(own.profile)
            return {"format": snapshot.STATE_FORMAT, "version": snapshot.STATE_VERSION,
                    "seed": self.store.seed_for(project), "clock": clock, "tenants": tenants}

    def import_tenant(self, project: str, doc: Any, api_key: str | None = None) -> None:
        """Replace one tenant with the single tenant of ``doc`` (exported from any project). The tenant's clock
        is set to the document's: its records are the document's, so no time goes back behind them. Checked
        completely first (:class:`snapshot.StateError`); nothing changes on a refusal."""
        with self.lock, self._refused_bytes():
            self._check_writable()
            doc = snapshot.store_inline_bytes(snapshot.upgrade(doc), self.store.blobs)
            self.state_checker.check(doc)
            if len(doc["tenants"]) > 1:
                raise snapshot.StateError(f"a tenant's document holds one tenant, not {len(doc['tenants'])} "
                                          "(import the whole state without a tenant)")
            seed = int(doc.get("seed", self.store.seed))
            built = [snapshot.build_tenant(self.store, project, dict(data, epoch=None), seed)
                     for data in doc["tenants"].values()]
            for tenant in built:
                self.integrity.check(tenant)
                if api_key is not None:
                    _own_rules(tenant, api_key)
            clock = doc.get("clock") or {}
            entry = {k: v for k, v in clock.items() if k in ("now", "mode", "speed", "profile")}
            own = self._tenant_clocks({"clock": {"tenants": {project: entry}}}).get(project)
            with self.control() as unit:
                unit.rewrite = True
                self.clocks.forget(project)
                self.store.reset(project, None if seed == self.store.seed else seed)
                for tenant in built:
                    self.store.put(tenant)
                if own is not None and (own.clock is not None or own.timing is not None):
                    self.clocks.restore({project: own}, [project])
                self.rendered.clear()
                self._recount_rules([project])
        self.collect_blobs(force=True, file_matches=True)

    @staticmethod
    def _tenant_clocks(doc: Any) -> Any:
        clock = doc.get("clock") if isinstance(doc, dict) else None
        try:
            return TenantClocks.check_entries(clock.get("tenants") if isinstance(clock, dict) else None)
        except ValueError as exc:
            raise snapshot.StateError(str(exc)) from exc

    def projects(self) -> list[str]:
        return self.store.projects()

    def _check_writable(self) -> None:
        if self.persistence is not None:
            self.persistence.check_writable()

    def _restore_clock(self, doc: dict[str, Any], tenant_clocks: Any = None) -> None:
        now = (doc.get("clock") or {}).get("now")
        if now:
            at = parse_rfc3339(now)
            if at > self.clock.now():
                self.clock.set_time(at)
        self.clocks.restore(self._tenant_clocks(doc) if tenant_clocks is None else tenant_clocks)
        self.waits.clear()
        self.scheduled_rules.clear()
        self._recount_rules(self.store.projects())

    def _restore_settings(self, doc: dict[str, Any]) -> None:
        """At start-up, what the control plane had set of the global clock and profile (a state file's): it
        outlives the restart, over the command line's, which is said."""
        settings = (doc.get("clock") or {}).get("settings")
        if not settings:
            return
        where = f"--state-file {self.config.state_file}: clock.settings"
        if not isinstance(settings, dict) or set(settings) - {"mode", "speed", "profile"}:
            raise ConfigError(f"{where} holds what this emulator does not set (mode, speed, profile)")
        profile = settings.get("profile")
        try:
            self.clock.configure(mode=settings.get("mode"), speed=settings.get("speed"))
            if profile is not None:
                if not isinstance(profile, dict):
                    raise ValueError("profile must be an object {name, overrides}")
                self.clocks.set_profile(None, profile.get("name"), profile.get("overrides"))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        self.clocks.set_globally(mode=settings.get("mode"), speed=settings.get("speed"))
        told = [f"{what} {value!r} (the command line said {said!r})" for what, value, said in (
            ("clock mode", settings.get("mode"), self.config.clock),
            ("speed", settings.get("speed"), self.config.speed),
            ("profile", (profile or {}).get("name"), self.config.profile)) if value is not None and value != said]
        if told:
            log.warning("--state-file %s: keeps what the control plane set: %s; the control plane changes it",
                        self.config.state_file, ", ".join(told))


def _own_rules(tenant: Tenant, api_key: str) -> None:
    """A tenant document imported into the tenant of ``api_key``: the fault rules its scheduled actions will
    add or remove are that key's (a rule names the API key it matches)."""
    for a in tenant.actions.values():
        if a.status == "scheduled" and a.action == ActionKind.ADD_FAULT:
            a.params["rule"]["match"]["tenant"] = api_key
        elif a.status == "scheduled" and a.action == ActionKind.REMOVE_FAULT:
            a.params["tenant"] = api_key


__all__ = ["Runtime", "ScenarioLibrary", "Unavailable", "UnitOfWork"]
