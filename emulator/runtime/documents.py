"""State documents: export and import of the whole state or one tenant's, and the clocks a document carries.

Part of :class:`emulator.runtime.Runtime` (a mixin). An import is checked and built completely before
anything changes, then swapped in as one control-plane unit of work that rewrites the state file; refused
(a bad document: 400, or the disk: 503), nothing of it stays, uploaded bytes it carried included.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from emulator.clock import Clock, parse_rfc3339
from emulator.config import Config, ConfigError
from emulator.integrity import Integrity
from emulator.runtime.actions import own_rules
from emulator.runtime.units import ControlUnit
from emulator.sharding import Shard
from emulator.store import Store, snapshot
from emulator.store.persistence import Persistence
from emulator.tenant_clocks import TenantClocks

log = logging.getLogger("emulator")


class StateDocuments:
    """The runtime's state documents (see the module docstring)."""

    config: Config
    shard: Shard | None
    lock: threading.RLock
    store: Store
    clock: Clock
    clocks: TenantClocks
    persistence: Persistence | None
    state_checker: snapshot.Checker
    integrity: Integrity
    waits: dict[str, Any]
    scheduled_rules: dict[str, float]
    rendered: Any

    if TYPE_CHECKING:
        def control(self, *, journal: bool = True) -> ControlUnit: ...

        def settle(self, project: str | None = None) -> None: ...

        def collect_blobs(self, *, force: bool = False, file_matches: bool = False) -> int: ...

        def foreign_projects(self, projects: Any) -> list[str]: ...

        def _recount_rules(self, projects: list[str]) -> None: ...

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
                    own_rules(tenant, api_key)
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


__all__ = ["StateDocuments"]
