"""The running emulator's services: config, store, clock, timing profile, tokens.

One :class:`Runtime` per server; handlers reach it through their request. Nothing mutable lives at
module level, so tests build as many independent emulators in one process as they like.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from emulator.clock import Clock
from emulator.config import Config, ConfigError
from emulator.domain.context import Ctx, Principal
from emulator.domain.timing import Timing, load_timing
from emulator.faults import FaultSet
from emulator.store import Store

ROOT = Path(__file__).resolve().parent
SPEC_PATH = ROOT.parent / "openapi.yaml"   # the contract lives at the repository root
ADMIN_SPEC_PATH = ROOT / "admin.yaml"


_SPEC_CACHE: dict[tuple[str, float], dict[str, Any]] = {}


def load_spec(path: Path) -> dict[str, Any]:
    """Parsed spec with libyaml, cached per (path, mtime); callers get a deep copy to mutate freely."""
    import copy

    key = (str(path), path.stat().st_mtime)
    cached = _SPEC_CACHE.get(key)
    if cached is None:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        cached = yaml.load(path.read_text(), Loader=loader)  # noqa: S506 - a safe loader
        _SPEC_CACHE[key] = cached
    return copy.deepcopy(cached)


def load_data_file(path: str) -> Any:
    text = Path(path).read_text()
    return json.loads(text) if path.endswith(".json") else yaml.safe_load(text)


class Runtime:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(seed=config.seed)
        self.clock = Clock(config.clock, config.speed, config.start_time)
        overrides = None
        if config.profile_file:
            try:
                overrides = load_data_file(config.profile_file) or {}
            except (OSError, ValueError, yaml.YAMLError) as exc:
                raise ConfigError(f"cannot read --profile-file {config.profile_file}: {exc}") from exc
        try:
            self.timing: Timing = load_timing(config.profile, overrides)
        except ValueError as exc:
            raise ConfigError(f"--profile-file: {exc}") from exc
        self.tokens: dict[str, Principal] | None = None
        if config.tokens_file:
            self.tokens = self._load_tokens(config.tokens_file)
        self.defects = frozenset(config.defects)
        self.faults = FaultSet(seed=config.seed)
        if config.faults_file:
            try:
                self.faults.load(load_data_file(config.faults_file))
            except (OSError, ValueError, yaml.YAMLError) as exc:
                raise ConfigError(f"cannot load --faults {config.faults_file}: {exc}") from exc
        self._principals: dict[str, Principal] = {}
        if config.state_file:
            self._load_state_file(config.state_file)

    def _load_state_file(self, path: str) -> None:
        """Resume from ``--state-file``; a corrupt or incompatible file is refused, never replaced."""
        import orjson

        from emulator.store import snapshot

        file = Path(path)
        if file.exists():
            try:
                doc = orjson.loads(file.read_bytes())
                if not isinstance(doc, dict):
                    raise snapshot.StateError("the file does not hold a JSON object")
                snapshot.import_state(self, doc)
            except (orjson.JSONDecodeError, snapshot.StateError) as exc:
                raise ConfigError(f"--state-file {path} cannot be used: {exc}. Move it away or pass another "
                                  "path; the emulator never overwrites a file it cannot read") from exc
        self.store.on_commit = lambda: self._write_state_file(file)
        if not file.exists():
            self._write_state_file(file)

    def _write_state_file(self, file: Path) -> None:
        import os

        import orjson

        from emulator.store import snapshot

        data = orjson.dumps(snapshot.export_state(self))
        tmp = file.with_name(f".{file.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)

    @staticmethod
    def _load_tokens(path: str) -> dict[str, Principal]:
        try:
            data = load_data_file(path) or {}
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read --tokens-file {path}: {exc}") from exc
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, dict):
            raise ConfigError(f"--tokens-file {path} must map 'tokens' to {{TOKEN: {{user, project}}}}")
        out = {}
        for token, who in tokens.items():
            if not isinstance(who, dict) or not who.get("user") or not who.get("project"):
                raise ConfigError(f"--tokens-file {path}: token entries need 'user' and 'project'")
            out[str(token)] = Principal(user=str(who["user"]), project=str(who["project"]), token=str(token))
        return out

    def principal_for(self, token: str) -> Principal | None:
        """Each unknown token is its own user in its own project, unless a tokens file is in force."""
        if self.tokens is not None:
            return self.tokens.get(token)
        principal = self._principals.get(token)
        if principal is None:
            digest = hashlib.sha256(token.encode()).hexdigest()[:16]
            principal = Principal(user=f"user_{digest}", project=f"proj_{digest}", token=token)
            self._principals[token] = principal
        return principal

    def project_for_token(self, token: str) -> str | None:
        principal = self.principal_for(token)
        return principal.project if principal else None

    def ctx(self, principal: Principal, base_url: str) -> Ctx:
        return Ctx(now=self.clock.now(), principal=principal, timing=self.timing, seed=self.store.seed,
                   defects=self.defects, base_url=base_url)

    def system_ctx(self, project: str) -> Ctx:
        """A context for work done on a tenant's state outside any caller's request."""
        return self.ctx(Principal(user="", project=project), "")

    def settle_all(self) -> None:
        """Apply every transition due by now in every tenant (for whole-store views)."""
        from emulator.domain import engine

        for project in self.store.projects():
            with self.store.transaction(project) as state:
                engine.settle(state, self.system_ctx(project))

    def apply_fault_effect(self, principal: Principal, base_url: str, effect: dict[str, Any], operation_id: str,
                           path: dict[str, str], body: Any, payload: Any) -> None:
        """A fault rule's state effect on what a request just made (see emulator.faults)."""
        from emulator.domain import fault_effects

        # No settle first: under the instant profile what the request made is already due, and must be
        # marked (an operation to fail, a resource to hold in the queue) before it happens.
        with self.store.transaction(principal.project) as state:
            fault_effects.apply(state, self.ctx(principal, base_url), effect, operation_id, path, body, payload)
        self.committed()

    def file_token(self, project: str, checkpoint_id: str, variant: str) -> str:
        token = hashlib.sha256(f"{self.store.seed}:{project}:{checkpoint_id}:{variant}".encode()).hexdigest()[:32]
        self.store.presigned[token] = (project, variant, checkpoint_id)
        return token

    def committed(self, mutating: bool = True) -> None:
        """After each transaction: persist when the request changed state (reads only settle the
        timeline, which the saved state replays deterministically)."""
        hook = self.store.on_commit
        if hook is not None and mutating:
            hook()
