"""The static part of a timing profile (``Timing``: the transitions of resources, sessions and shaping jobs)
and :class:`TimingParam`, how an operation kind declares the durations it reads.

:mod:`emulator.domain.timing` adds every kind's parameters to ``Timing`` and builds the profiles; this
module knows no kind, so the domain's context and the kinds themselves can import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Self

#: The profiles' names (``--profile``); every timing parameter has a default on each.
PROFILE_NAMES = ("instant", "realistic")


@dataclass(frozen=True)
class Timing:
    queue_slot_seconds: float = 0.0          # time at the head of the GPU queue per resource ahead
    resource_creating_seconds: float = 0.0   # CREATING: pods scheduled, base model loading
    resource_stopping_seconds: float = 0.0
    session_creating_seconds: float = 0.0
    session_stopping_seconds: float = 0.0
    op_overhead_seconds: float = 0.0         # fixed cost of every operation
    shaping_phase_seconds: float = 0.0

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown timing keys: {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        for key, value in overrides.items():
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"timing {key} must be a number >= 0")
        return replace(self, **{k: float(v) for k, v in overrides.items()})

    def seconds(self, param: TimingParam) -> float:
        """The value of an operation kind's parameter in this profile."""
        value: float = getattr(self, param.name)
        return value


@dataclass(frozen=True, slots=True)
class TimingParam:
    """A duration an operation kind reads: its key in a profile (and in ``--profile-file``, a documented
    interface) and its default on each profile, in the order of :data:`PROFILE_NAMES`."""

    name: str
    instant: float
    realistic: float
    doc: str = ""

    def default(self, profile: str) -> float:
        value: float = getattr(self, profile)
        return value
