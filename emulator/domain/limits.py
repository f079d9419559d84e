"""Limits the emulator enforces where the real service documents only part of the number.

Documented (docs/api-surface.md C.2): a LoRA resource holds up to 5 sessions "by default, fewer for some
models", a full-weight one 1; more is 429. The rest is [inferred] (which models hold fewer, retention and
size bounds, the upload quota); every number can be overridden with ``--limits-file`` (see the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from emulator.domain.catalog import BY_NAME

_TOP_KEYS = ("max_full_weight_sessions", "max_lora_sessions", "routed_experts_keys_per_session",
             "operation_outputs_mib_per_tenant", "finished_operations_per_session", "session_metadata_kib",
             "uploads_mib_per_tenant", "models")
_MODEL_KEYS = ("max_lora_sessions",)


@dataclass(frozen=True)
class Limits:
    max_full_weight_sessions: int = 1
    max_lora_sessions: int | None = None            # None: each model's catalog number
    routed_experts_keys_per_session: int = 1024
    operation_outputs_mib_per_tenant: int = 256
    finished_operations_per_session: int = 1000
    session_metadata_kib: int = 16
    uploads_mib_per_tenant: int = 2048
    lora_sessions_by_model: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def session_cap(self, base_model: str, lora_enabled: bool) -> int:
        """How many active sessions one resource of ``base_model`` holds."""
        if not lora_enabled:
            return self.max_full_weight_sessions
        by_model = self.lora_sessions_by_model.get(base_model)
        if by_model is not None:
            return by_model
        if self.max_lora_sessions is not None:
            return self.max_lora_sessions
        return BY_NAME[base_model].max_lora_sessions

    @classmethod
    def from_mapping(cls, data: Any) -> Limits:
        """Limits from a ``--limits-file`` document; a ``ValueError`` names the first bad key."""
        if not isinstance(data, dict):
            raise ValueError("a limits file is a mapping of " + ", ".join(_TOP_KEYS))
        _known(data, _TOP_KEYS, "")
        values: dict[str, int] = {k: _count(data[k], k) for k in _TOP_KEYS[:-1] if k in data}
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise ValueError("models must map base model names to {max_lora_sessions: N}")
        by_model: dict[str, int] = {}
        for name, entry in models.items():
            if name not in BY_NAME:
                raise ValueError(f"models: {name!r} is not a catalog model; known: {', '.join(sorted(BY_NAME))}")
            if not isinstance(entry, dict):
                raise ValueError(f"models.{name} must be a mapping like {{max_lora_sessions: 3}}")
            _known(entry, _MODEL_KEYS, f"models.{name}.")
            if "max_lora_sessions" in entry:
                by_model[name] = _count(entry["max_lora_sessions"], f"models.{name}.max_lora_sessions")
        return cls(**values, lora_sessions_by_model=MappingProxyType(by_model))


def _known(data: dict[Any, Any], known: tuple[str, ...], prefix: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ValueError(f"unknown limits keys: {', '.join(prefix + k for k in unknown)}; known: "
                         f"{', '.join(prefix + k for k in known)}")


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a whole number >= 1, not {value!r}")
    return value


DEFAULT_LIMITS = Limits()
