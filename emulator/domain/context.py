"""What every domain function receives besides the state: time, caller, timing, limits and switches."""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.domain.timing import Timing


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    project: str
    token: str = field(default="", repr=False)


@dataclass(slots=True)
class Ctx:
    now: float
    principal: Principal
    timing: Timing
    seed: int = 0
    limits: Limits = DEFAULT_LIMITS
