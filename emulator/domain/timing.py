"""Timing profiles: how long each transition takes, in virtual seconds.

``instant`` (default): every duration is 0. A create answers with the initial status and the
first GET shows the settled one, because the SDK polls at once and then only every 10 s.

``realistic``: durations of the order the real service shows (documented in docs/server-options.md; the real
numbers are not published, so these are [inferred] orders of magnitude). Every number can be
overridden with ``--profile-file`` (YAML/JSON mapping of the keys below to seconds): those of
:class:`~emulator.domain.durations.Timing`, and each operation kind's own (``timing`` of its module).
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
