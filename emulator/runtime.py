"""The running emulator's services, wired together, and the one way into a tenant's state: the unit of work.

One :class:`Runtime` per server: config, store, clock, timing, limits, tenancy, fault rules, the journal
of ``--state-file``, and the caches the emulator keeps (rendered sessions). Nothing mutable lives at
module level, so tests build as many independent emulators in one process as they like.

``with runtime.unit_of_work(principal, write=...) as (tenant, ctx):`` is how every caller (the API's
dispatcher, presigned files, the dashboard, the event stream) reaches a tenant: it settles the tenant's
timeline to now, hands out the tenant and the domain's context, and on a clean exit of a write journals
exactly what changed before the caller answers. A refused request (an exception) writes nothing; a write
the journal cannot make durable is undone (the tenant is reloaded from the file) and refused with
:class:`~emulator.errors.Unavailable`. Control-plane changes (clock, reset, seed, import) are methods
here, journaled the same way.

Concurrency: the server is one event loop and a unit of work never awaits, so units of work never
interleave. :attr:`Runtime.lock` serialises them anyway, for callers in other threads (a server run in a
thread by tests or the pytest plugin, while the test thread reads the runtime).
"""

from __future__ import annotations

import logging
import threading
from types import MappingProxyType
from typing import Any, Protocol

from emulator import fixture_files, spec
from emulator.clock import Clock, parse_rfc3339
from emulator.config import Config, ConfigError, load_data_file
from emulator.domain import engine
from emulator.domain.context import Ctx, Principal
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.domain.timing import Timing, load_timing
from emulator.errors import Misdirected, NotFound, Unavailable
from emulator.faults import FaultError, FaultSet
from emulator.integrity import Integrity
from emulator.sharding import shard_of
from emulator.store import Store, Tenant, snapshot
from emulator.store.blobs import BlobStore
from emulator.store.persistence import Persistence, StateFileError
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


class UnitOfWork:
    """See :meth:`Runtime.unit_of_work`. A class rather than a generator: it runs on every request."""

    __slots__ = ("creates", "principal", "runtime", "tenant", "write")

    def __init__(self, runtime: Runtime, principal: Principal, write: bool, creates: bool) -> None:
        self.runtime = runtime
        self.principal = principal
        self.write = write
        self.creates = creates
        self.tenant: Tenant | None = None

    def __enter__(self) -> tuple[Tenant, Ctx]:
        runtime = self.runtime
        runtime.lock.acquire()
        try:
            if self.write and runtime.persistence is not None:
                runtime.persistence.check_writable()
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
            engine.settle(tenant, ctx)
            # Only a journal drains what the tables note: without one, noting would keep every id handed out.
            tenant.changes.noting = self.write and tenant.changes.enabled
        except BaseException:
            runtime.lock.release()
            raise
        self.tenant = tenant
        return tenant, ctx

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        tenant = self.tenant
        runtime = self.runtime
        try:
            if tenant is not None:
                tenant.changes.noting = False
                if self.write and exc_type is None and runtime.persistence is not None:
                    runtime.persistence.commit(tenant)
        finally:
            self.tenant = None
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

    # --- control-plane changes (each journaled) ------------------------------------------------------

    def reset(self, project: str | None = None, seed: int | None = None, *, keep_settings: bool = False) -> None:
        """Forget one project's state, or everyone's (and reseed). A project's own clock, profile and seed go
        with it, unless ``keep_settings``; ``seed`` gives it a seed of its own."""
        with self.lock:
            self._check_writable()
            if project is not None and keep_settings:
                own_seed = self.store.seed_for(project)
                seed = seed if seed is not None else (own_seed if own_seed != self.store.seed else None)
            else:
                self.clocks.forget(project)
            tenant = self.store.reset(project, seed)
            self.rendered.clear()
            if self.persistence is not None:
                self.persistence.record_reset(project)
                if tenant is not None:  # a tenant with a seed of its own: written at once, with its seed
                    self.persistence.commit(tenant)

    def clock_changed(self) -> None:
        """Journal the clock after a control-plane change (a restart never goes back in virtual time)."""
        with self.lock:
            if self.persistence is not None:
                self.persistence.record_clock()

    def settle(self, project: str | None = None) -> None:
        """Bring one tenant (or every tenant) to now, for views of the whole store: a read unit of work each."""
        with self.lock:
            for p in self.store.projects() if project is None else [project]:
                with self.unit_of_work(p, write=False):
                    pass

    def export_state(self) -> dict[str, Any]:
        with self.lock:
            self.settle()
            return snapshot.export_state(self.store, self.describe_clocks(), inline_bytes=True)

    def describe_clocks(self) -> dict[str, Any]:
        """The global clock, with every tenant's own clock and profile (the ``clock`` of a state document)."""
        out = self.clock.describe()
        tenants = self.clocks.export()
        if tenants:
            out["tenants"] = tenants
        return out

    def import_state(self, doc: Any) -> None:
        """Replace the whole state; a bad document raises :class:`snapshot.StateError` and changes nothing."""
        with self.lock:
            self._check_writable()
            tenant_clocks = self._tenant_clocks(doc)
            foreign = self.foreign_projects([*(doc.get("tenants") or {}), *tenant_clocks]) \
                if isinstance(doc, dict) and isinstance(doc.get("tenants") or {}, dict) else []
            if foreign:
                raise snapshot.StateError(f"the document holds tenants of other shards than {self.shard} "
                                          f"({', '.join(foreign[:3])}): a shard imports its own tenants only "
                                          "(import each tenant with X-Emulator-Tenant, through the balancer)")
            snapshot.import_state(self.store, doc, self.state_checker, self.integrity.check)
            self.rendered.clear()
            self._restore_clock(doc, tenant_clocks)
            if self.persistence is not None:
                self.persistence.rewrite()
            self.collect_blobs(force=True, file_matches=True)  # the bytes of what the import replaced

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

    def import_tenant(self, project: str, doc: Any) -> None:
        """Replace one tenant with the single tenant of ``doc`` (exported from any project). The tenant's clock
        is set to the document's: its records are the document's, so no time goes back behind them. Checked
        completely first (:class:`snapshot.StateError`); nothing changes on a refusal."""
        with self.lock:
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
            clock = doc.get("clock") or {}
            entry = {k: v for k, v in clock.items() if k in ("now", "mode", "speed", "profile")}
            own = self._tenant_clocks({"clock": {"tenants": {project: entry}}}).get(project)
            self.clocks.forget(project)
            self.store.reset(project, None if seed == self.store.seed else seed)
            for tenant in built:
                self.store.put(tenant)
            if own is not None and (own.clock is not None or own.timing is not None):
                self.clocks.restore({project: own}, [project])
            self.rendered.clear()
            if self.persistence is not None:
                self.persistence.rewrite()
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


__all__ = ["Runtime", "ScenarioLibrary", "Unavailable", "UnitOfWork"]
