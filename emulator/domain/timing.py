"""Timing profiles: how long each transition takes, in virtual seconds.

``instant`` (default): every duration is 0. A create answers with the initial status and the
first GET shows the settled one, because the SDK polls at once and then only every 10 s.

``realistic``: durations of the order the real service shows (documented in the README; the real
numbers are not published, so these are [inferred] orders of magnitude). Every number can be
overridden with ``--profile-file`` (YAML/JSON mapping of the keys below to seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Timing:
    queue_slot_seconds: float = 0.0          # time at the head of the GPU queue per resource ahead
    resource_creating_seconds: float = 0.0   # CREATING: pods scheduled, base model loading
    resource_stopping_seconds: float = 0.0
    session_creating_seconds: float = 0.0
    session_stopping_seconds: float = 0.0
    op_overhead_seconds: float = 0.0         # fixed cost of every operation
    forward_backward_seconds_per_token: float = 0.0
    optim_step_seconds: float = 0.0
    weights_sync_seconds: float = 0.0        # synchronous publish; deferred modes take a tenth
    sample_seconds_per_token: float = 0.0    # per generated token and sample
    checkpoint_seconds: float = 0.0
    shaping_phase_seconds: float = 0.0

    def with_overrides(self, overrides: dict[str, Any]) -> Timing:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown timing keys: {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        for key, value in overrides.items():
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"timing {key} must be a number >= 0")
        return replace(self, **{k: float(v) for k, v in overrides.items()})


PROFILES = MappingProxyType({
    "instant": Timing(),
    "realistic": Timing(
        queue_slot_seconds=45.0,
        resource_creating_seconds=180.0,
        resource_stopping_seconds=30.0,
        session_creating_seconds=20.0,
        session_stopping_seconds=5.0,
        op_overhead_seconds=0.5,
        forward_backward_seconds_per_token=0.0002,
        optim_step_seconds=1.5,
        weights_sync_seconds=4.0,
        sample_seconds_per_token=0.02,
        checkpoint_seconds=30.0,
        shaping_phase_seconds=300.0,
    ),
})


def load_timing(profile: str, overrides: dict[str, Any] | None = None) -> Timing:
    base = PROFILES[profile]
    return base.with_overrides(overrides) if overrides else base
