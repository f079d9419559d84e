"""The running emulator's services, wired together, and the one way into its state: the unit of work.

One :class:`Runtime` per server (nothing mutable at module level). ``with runtime.unit_of_work(principal,
write=...) as (tenant, ctx):`` settles the tenant to now, hands it out, and on a write's clean exit journals
what changed before the caller answers; a control-plane change is :meth:`Runtime.control`.
"""

from __future__ import annotations

import logging
import threading
from types import MappingProxyType
from typing import Any, Protocol

from emulator import fixture_files, spec
from emulator.clock import Clock
from emulator.config import Config, ConfigError, load_data_file
from emulator.domain import actions, engine, kinds
from emulator.domain.context import Ctx, Principal
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.domain.timing import Timing, load_timing
from emulator.errors import Misdirected
from emulator.faults import FaultError, FaultSet
from emulator.integrity import Integrity
from emulator.runtime.actions import ScheduledActions
from emulator.runtime.documents import StateDocuments
from emulator.runtime.moves import VirtualTime, Wait
from emulator.runtime.units import QUIET, ControlUnit, UnitOfWork
from emulator.sharding import shard_of
from emulator.store import Store, Tenant, records, snapshot
from emulator.store.blobs import BlobStore
from emulator.store.persistence import Persistence, StateFileError
from emulator.store.records import ActionStatus
from emulator.tenancy import Tenancy
from emulator.tenant_clocks import TenantClocks

# Error codes a fault effect may name: the API's own enums, so a typo cannot load silently.
FAULT_CODES = MappingProxyType({"operation_fails": "OperationErrorCode", "resource_error": "ModelResourcesErrorCode",
               "session_error": "SessionErrorCode"})
RENDER_CACHE_SIZE = 4096
log = logging.getLogger("emulator")


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


class RecordingSwitch(Protocol):
    """Recording switched on and off at run time (:class:`emulator.tools.recording.RecordingControl`, plugged
    in by the server composition, which wraps the app in the recorder)."""

    def start(self, canonical: bool = False) -> dict[str, Any]: ...

    def stop(self) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def download(self) -> str: ...


class Runtime(VirtualTime, ScheduledActions, StateDocuments):
    """One emulator: its services, and the units of work that are the one way into its state (see the
    module docstring and emulator/runtime/README.md)."""

    scenarios: ScenarioLibrary | None = None
    recording: RecordingSwitch | None = None

    def __init__(self, config: Config) -> None:
        self.config = config
        self.shard = config.shard   # a shard of a cluster holds only its own tenants (emulator.sharding)
        self.lock = threading.RLock()
        # Uploaded bytes live on disk, named by records: beside the state file, or in a temporary directory.
        blobs = BlobStore(f"{config.state_file}.blobs" if config.state_file else None, durable=bool(config.state_file))
        self.store = Store(seed=config.seed, journaled=bool(config.state_file), blobs=blobs,
                           bodies=kinds.decode_body)
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
        # the fault-rule step settles such a tenant before it picks a rule, so a rule due by now applies to
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
        # (positional, in the fields' order: a keyword call costs more, on every request)
        return Ctx(now, principal, timing, self.store.seed_for(project), self.limits, self.config.strict,
                   [] if warnings is None else warnings)

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
        with self.control() as unit:
            self._settled_so_far(unit, project)
            self.clocks.set_profile(project, name, overrides)

    def drop_profile(self, project: str) -> None:
        with self.control() as unit:
            self._settled_so_far(unit, project)
            self.clocks.drop_profile(project)

    def _settled_so_far(self, unit: ControlUnit, project: str | None) -> None:
        """Journal what reads have settled in the tenants whose profile changes (``project``, or every tenant
        on the global one), which only memory held: settled again under another profile (after a restart, or
        a write the disk refused) a transition would come out otherwise than clients saw it."""
        if self.persistence is None:
            return
        projects = [project] if project is not None else [
            p for p in self.store.projects() if (own := self.clocks.tenants.get(p)) is None or own.timing is None]
        reset = unit.line.get("project", "") if unit.line.get("reset") else ""   # (None: every tenant)
        for p in projects:
            tenant = self.store.get(p)
            if reset is None or reset == p:  # reset in this change: nothing settled before it, its line says all
                continue
            if tenant is not None and unit.undo is not None:
                unit.undo.touch(p, self.clocks.now(p), tenant)  # (a refused line: reloaded, settled as it was)
                self.persistence.commit(tenant)

    def reset(self, project: str | None = None, seed: int | None = None, *, keep_settings: bool = False
              ) -> list[str]:
        """Forget one project's state, or everyone's (and reseed). A project's own clock, profile and seed go
        with it, unless ``keep_settings``; ``seed`` gives it a seed of its own. The fault rules stay, and the
        counters of the rules it scopes (every rule, or the rules scoped to the project's API keys) restart,
        so a fault file plays again as it did from the start; returns those rules' names."""
        with self.control() as unit:
            if project is None:
                restarted = self.faults.restart()
            else:
                restarted = self.faults.restart([key for key in self.faults.tenant_keys()
                                                 if self.tenancy.project_for_token(key) == project])
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
        return restarted

    def _moved(self, project: str | None = None) -> None:
        """A clock moved (the tenant's, or the global one): carry out the fault rules scheduled by then for the
        tenants whose time moved, so the next request meets them (each in a unit of work of its own)."""
        for p in [project] if project is not None else self._global_tenants(list(self.scheduled_rules)):
            self.fire_due_rules(p)

    # --- fault rules (not in the state file: a restart starts with --faults) -------------------------------

    def add_faults(self, rules: Any, tenant: str | None = None, *, replace: list[str] | None = None
                   ) -> list[dict[str, Any]]:
        with self.control(journal=False):
            return self.faults.load(rules, tenant=tenant, replace=replace)

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
        sink, tenant.events = tenant.events, QUIET
        notes = records.CHANGES.set(tenant.changes.notes())  # (journaled with the tenant's next write)
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
            records.CHANGES.reset(notes)
            tenant.events = sink

    def settle(self, project: str | None = None) -> None:
        """Bring one tenant (or every tenant) to now, for views of the whole store: a read unit of work each."""
        with self.lock:
            for p in self.store.projects() if project is None else [project]:
                with self.unit_of_work(p, write=False):
                    pass


__all__ = ["RecordingSwitch", "RenderCache", "Runtime", "ScenarioLibrary"]
