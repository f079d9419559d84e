"""What every domain function receives besides the state: time, caller, timing, limits and switches.

It also carries the one channel from the domain to the client for what the request did not do:
``warnings``. Where the real service accepts a field and ignores it (documented), the domain calls
:meth:`Ctx.ignored`: by default the field is dropped and a sentence is added to ``warnings``, which the
HTTP layer answers as ``X-Emulator-Warning`` headers, prints in the access log and puts in the event
log; with ``--strict`` (``EMULATOR_STRICT``) the same call refuses the request with 400 instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.domain.durations import Timing
from emulator.domain.limits import DEFAULT_LIMITS, Limits
from emulator.errors import Invalid


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
    strict: bool = False
    warnings: list[str] = field(default_factory=list)

    def ignored(self, param: str, why: str) -> None:
        """The request's ``param`` is one the real service accepts and drops (``why`` says which rule): warn,
        or under ``--strict`` refuse it (400 naming ``param``). The caller then leaves the field out."""
        if self.strict:
            raise Invalid(f"{param}: {why} (refused because the emulator runs with --strict; the real "
                                 "service accepts and ignores it)", param=param, code="strict_mode")
        self.warnings.append(f"{param} ignored: {why}")
