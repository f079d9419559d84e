"""What every domain function receives besides the state: time, caller, timing, limits and switches.

It also carries ``warnings``: where the real service accepts a field and ignores it, :meth:`Ctx.ignored` drops
it with a sentence the client sees as ``X-Emulator-Warning`` (also in the access and event logs); under
``--strict`` (``EMULATOR_STRICT``) the same call refuses the request with 400.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from emulator.domain.durations import Timing
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.errors import Invalid


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    project: str
    token: str = field(default="", repr=False)


class Ctx(msgspec.Struct, gc=False):
    """(A msgspec Struct, built in C: one is made per request. Nothing it holds refers back to it, so the
    collector need not track it.)"""

    now: float
    principal: Principal
    timing: Timing
    seed: int = 0
    limits: Limits = DEFAULT_LIMITS
    strict: bool = False
    warnings: list[str] = msgspec.field(default_factory=list)

    def ignored(self, param: str, why: str) -> None:
        """The request's ``param`` is one the real service accepts and drops (``why`` says which rule): warn,
        or under ``--strict`` refuse it (400 naming ``param``). The caller then leaves the field out."""
        if self.strict:
            raise Invalid(f"{param}: {why} (refused because the emulator runs with --strict; the real "
                                 "service accepts and ignores it)", param=param, code="strict_mode")
        self.warnings.append(f"{param} ignored: {why}")
