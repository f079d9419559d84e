"""The running emulator's services, wired together: config, store, clock, timing, limits, tenancy, fault
rules and persistence. One :class:`Runtime` per server; handlers reach it through their request. Nothing
mutable lives at module level, so tests build as many independent emulators in one process as they like.
"""

from __future__ import annotations

from typing import Any, Protocol

from emulator import fixture_files, spec
from emulator.clock import Clock, parse_rfc3339
from emulator.config import Config, ConfigError, load_data_file
from emulator.domain import engine, fault_effects
from emulator.domain.context import Ctx, Principal
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.domain.timing import Timing, load_timing
from emulator.faults import FaultError, FaultSet
from emulator.store import Store, snapshot
from emulator.store.persistence import Persistence, StateFileError
from emulator.tenancy import Tenancy

# Error codes a fault effect may name: the API's own enums, so a typo cannot load silently.
FAULT_CODES = {"operation_fails": "OperationErrorCode", "resource_error": "ModelResourcesErrorCode",
               "session_error": "SessionErrorCode"}


class ScenarioLibrary(Protocol):
    """The named scenarios the control plane offers (:mod:`emulator.tools.scenarios`, plugged in by the
    server composition, which sits above the handlers that scenarios replay)."""

    def available(self) -> dict[str, str]: ...

    def load(self, runtime: Runtime, name: str) -> dict[str, Any]: ...


class Runtime:
    scenarios: ScenarioLibrary | None = None

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(seed=config.seed)
        self.clock = Clock(config.clock, config.speed, config.start_time)
        overrides = load_data_file(config.profile_file, "--profile-file") if config.profile_file else None
        try:
            self.timing: Timing = load_timing(config.profile, overrides or None)
        except ValueError as exc:
            raise ConfigError(f"--profile-file {config.profile_file}: {exc}") from exc
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
            self.persistence = Persistence(config.state_file, self.store, self.clock.describe, engine.HANDLERS)
            try:
                doc = self.persistence.restore()
            except (StateFileError, OSError) as exc:
                raise ConfigError(str(exc)) from exc
            if doc is not None:
                self._restore_clock(doc)

    def principal_for(self, token: str) -> Principal | None:
        return self.tenancy.principal_for(token)

    def ctx(self, principal: Principal) -> Ctx:
        return Ctx(now=self.clock.now(), principal=principal, timing=self.timing, seed=self.store.seed,
                   limits=self.limits)

    def system_ctx(self, project: str) -> Ctx:
        """A context for work done on a tenant's state outside any caller's request."""
        return self.ctx(Principal(user="", project=project))

    def settle(self, project: str) -> None:
        """Apply every transition due by now in one tenant, outside any request (views, streams)."""
        with self.store.transaction(project, write=False) as state:
            engine.settle(state, self.system_ctx(project))

    def settle_all(self) -> None:
        """:meth:`settle` every tenant (for whole-store views)."""
        for project in self.store.projects():
            self.settle(project)

    def apply_fault_effect(self, principal: Principal, effect: dict[str, Any], operation_id: str,
                           path: dict[str, str], body: Any, payload: Any) -> None:
        """A fault rule's state effect on what a request just made (see emulator.faults)."""
        # No settle first: under the instant profile what the request made is already due, and must be
        # marked (an operation to fail, a resource to hold in the queue) before it happens.
        with self.store.transaction(principal.project) as state:
            fault_effects.apply(state, self.ctx(principal), effect, operation_id, path, body, payload)

    def export_state(self) -> dict[str, Any]:
        self.settle_all()
        return snapshot.export_state(self.store, self.clock.describe())

    def import_state(self, doc: Any) -> None:
        """Replace the whole state; a bad document raises :class:`snapshot.StateError` and changes nothing."""
        snapshot.import_state(self.store, doc, engine.HANDLERS)
        self._restore_clock(doc)

    def _restore_clock(self, doc: dict[str, Any]) -> None:
        now = (doc.get("clock") or {}).get("now")
        if now:
            at = parse_rfc3339(now)
            if at > self.clock.now():
                self.clock.set_time(at)

    def persist(self, force: bool = False) -> None:
        """Write what the last request changed to ``--state-file`` before it is answered."""
        if self.persistence is not None:
            self.persistence.flush(force)
