"""Timing profiles: how long each transition takes, in virtual seconds.

``instant`` (default): every duration is 0. ``realistic``: durations of the order the real service shows
([inferred] orders of magnitude; the real numbers are not published). Every number can be overridden with
``--profile-file`` (YAML/JSON: the keys of :class:`~emulator.domain.durations.Timing` and each kind's ``timing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, make_dataclass
from types import MappingProxyType
from typing import Any, cast

from emulator.domain import kinds
from emulator.domain.durations import PROFILE_NAMES, Timing

# The profile type: the static durations and every kind's parameters (one class, so a profile is one flat
# record: --profile-file keys, the control plane's description of a profile).
_PROFILE = make_dataclass("Timing", [(p.name, float, field(default=0.0)) for p in kinds.TIMING_PARAMS],
                          bases=(Timing,), frozen=True)
_PROFILE.__module__ = __name__

_REALISTIC = MappingProxyType({
    "queue_slot_seconds": 45.0,
    "resource_creating_seconds": 180.0,
    "resource_stopping_seconds": 30.0,
    "session_creating_seconds": 20.0,
    "session_stopping_seconds": 5.0,
    "op_overhead_seconds": 0.5,
    "shaping_phase_seconds": 300.0,
})
_STATIC = MappingProxyType({"instant": MappingProxyType({}), "realistic": _REALISTIC})

PROFILES: Mapping[str, Timing] = MappingProxyType({
    name: cast(Timing, _PROFILE(**_STATIC[name], **{p.name: p.default(name) for p in kinds.TIMING_PARAMS}))
    for name in PROFILE_NAMES
})


def load_timing(profile: str, overrides: dict[str, Any] | None = None) -> Timing:
    base = PROFILES[profile]
    return base.with_overrides(overrides) if overrides else base


__all__ = ["PROFILES", "Timing", "load_timing"]
