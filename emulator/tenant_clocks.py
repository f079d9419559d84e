"""Tenant-scoped time: the global clock and timing profile, and the tenants that have their own.

Emulates nothing of the real API (its time is the world's): several users of one emulator each move their own
virtual time. A tenant follows the global clock and profile unless it has its own (``/_emulator/clock`` with a
tenant); a tenant's time never goes back behind what its records hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from emulator.clock import Clock, ClockError, parse_rfc3339, rfc3339
from emulator.domain.timing import PROFILES, Timing, load_timing


@dataclass(slots=True)
class TenantTime:
    """What one tenant has of its own: a clock, a timing profile (either may be None: the global one)."""

    clock: Clock | None = None
    timing: Timing | None = None
    profile: dict[str, Any] | None = None   # {"name", "overrides"}: how ``timing`` was made


ClockState = tuple[str, float, float, float]
# A tenant's own time as saved: the object, its clock, the clock's state and time, its timing and profile.
SavedTime = tuple["TenantTime", Clock | None, ClockState | None, float | None, Timing | None, dict[str, Any] | None]


@dataclass(slots=True, frozen=True)
class SavedClocks:
    """What :meth:`TenantClocks.save` keeps: each clock's state and the time it read (the clock objects are
    kept, so whoever holds one still holds the right one), and the profiles."""

    clock: ClockState
    now: float
    timing: Timing
    profile: dict[str, Any]
    settings: dict[str, Any]
    tenants: dict[str, SavedTime]

    def now_of(self, project: str) -> float:
        """The virtual time the tenant read when this was saved."""
        own = self.tenants.get(project)
        return own[3] if own is not None and own[3] is not None else self.now


def make_timing(name: Any, overrides: Any = None) -> Timing:
    """A timing profile by name with overrides; ValueError naming what is wrong."""
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {name!r}")
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError("overrides must be an object of Timing fields")
    return load_timing(str(name), overrides or None)


class TenantClocks:
    """The global clock and profile, and per project what a tenant has of its own.

    ``has_state(project)`` tells whether a tenant holds records (then its time may not go back).
    Readers on the hot path use :attr:`tenants` directly (a dict lookup); changes take the lock.
    """

    def __init__(self, clock: Clock, timing: Timing, profile: dict[str, Any],
                 has_state: Callable[[str], bool]) -> None:
        self.clock = clock
        self.timing = timing
        self.profile = profile   # {"name", "overrides"} of the global timing
        self.tenants: dict[str, TenantTime] = {}
        # What the control plane set of the global clock and profile ("mode", "speed", "profile"): a state file
        # keeps it, and a restart restores it over the command line's (the command line's is the rest).
        self.settings: dict[str, Any] = {}
        self._has_state = has_state
        self._lock = threading.Lock()

    # --- reading -----------------------------------------------------------------------------------

    def clock_for(self, project: str | None) -> Clock:
        own = self.tenants.get(project) if project is not None else None
        return own.clock if own is not None and own.clock is not None else self.clock

    def now(self, project: str) -> float:
        own = self.tenants.get(project)
        return (own.clock if own is not None and own.clock is not None else self.clock).now()

    def timing_for(self, project: str) -> Timing:
        own = self.tenants.get(project)
        return own.timing if own is not None and own.timing is not None else self.timing

    def describe(self, project: str | None = None) -> dict[str, Any]:
        """The clock a tenant reads (``scope``: its own, or the global one), or the global clock."""
        own = self.tenants.get(project) if project is not None else None
        has_clock = own is not None and own.clock is not None
        out = self.clock_for(project).describe()
        out["scope"] = "tenant" if has_clock else "global"
        return out

    def describe_profile(self, project: str | None = None) -> dict[str, Any]:
        own = self.tenants.get(project) if project is not None else None
        if own is not None and own.timing is not None and own.profile is not None:
            profile, timing, scope = own.profile, own.timing, "tenant"
        else:
            profile, timing, scope = self.profile, self.timing, "global"
        return {"profile": profile["name"], "overrides": dict(profile["overrides"]), "timing": asdict(timing),
                "scope": scope}

    # --- changing a tenant's clock ------------------------------------------------------------------

    def set_clock(self, project: str, mode: str | None = None, speed: float | None = None,
                  now: float | None = None) -> Clock:
        """Give the tenant its own clock if it has none (it starts where the tenant's time is), then change
        its mode, speed or time. An earlier time is refused while the tenant holds state."""
        with self._lock:
            own = self.tenants.setdefault(project, TenantTime())
            current = own.clock or self.clock
            if own.clock is None or (now is not None and now < current.now()):
                if now is not None and now < current.now() and self._has_state(project):
                    raise ClockError(f"the tenant's clock never moves backwards while it holds state (it is at "
                                     f"{rfc3339(current.now())}); reset the tenant first")
                start = current.now() if now is None else now
                # A new clock, not a rewound one: Clock itself never moves backwards.
                clock = Clock(mode or current.mode, current.speed if speed is None else speed, start)
                own.clock = clock
                return clock
            own.clock.configure(mode=mode, speed=speed)
            if now is not None:
                own.clock.set_time(now)
            return own.clock

    def advance(self, project: str, seconds: float) -> Clock:
        if not seconds >= 0:
            raise ClockError("seconds must be >= 0; the clock never moves backwards")
        clock = self.set_clock(project)
        clock.advance(seconds)
        return clock

    def drop_clock(self, project: str) -> None:
        """The tenant follows the global clock again; refused when that would move its time backwards."""
        with self._lock:
            own = self.tenants.get(project)
            if own is None or own.clock is None:
                return
            if own.clock.now() > self.clock.now() and self._has_state(project):
                raise ClockError(f"the global clock ({rfc3339(self.clock.now())}) is behind this tenant's "
                                 f"({rfc3339(own.clock.now())}): following it would move the tenant's time "
                                 "backwards; reset the tenant first")
            own.clock = None
            self._prune(project)

    # --- timing profiles ----------------------------------------------------------------------------

    def set_globally(self, mode: str | None = None, speed: float | None = None) -> None:
        """Note what the control plane set of the global clock (see :attr:`settings`)."""
        with self._lock:
            settings = dict(self.settings)
            if mode is not None:
                settings["mode"] = mode
            if speed is not None:
                settings["speed"] = float(speed)
            self.settings = settings

    def set_profile(self, project: str | None, name: Any, overrides: Any = None) -> None:
        timing = make_timing(name, overrides)
        profile = {"name": str(name), "overrides": dict(overrides or {})}
        with self._lock:
            if project is None:
                self.timing, self.profile = timing, profile
                self.settings = {**self.settings, "profile": profile}
            else:
                own = self.tenants.setdefault(project, TenantTime())
                own.timing, own.profile = timing, profile

    def drop_profile(self, project: str) -> None:
        with self._lock:
            own = self.tenants.get(project)
            if own is not None:
                own.timing = own.profile = None
                self._prune(project)

    # --- putting back what a refused change changed ---------------------------------------------------

    def save(self) -> SavedClocks:
        """Every clock's state and every profile, for :meth:`put_back` (a unit of work the journal refuses)."""
        with self._lock:
            tenants: dict[str, SavedTime] = {
                p: (own, own.clock, None, None, own.timing, own.profile) if own.clock is None
                else (own, own.clock, own.clock.state(), own.clock.now(), own.timing, own.profile)
                for p, own in self.tenants.items()}
            return SavedClocks(self.clock.state(), self.clock.now(), self.timing, self.profile, self.settings, tenants)

    def put_back(self, saved: SavedClocks) -> None:
        with self._lock:
            self.clock.restore(saved.clock)
            self.timing, self.profile, self.settings = saved.timing, saved.profile, saved.settings
            tenants: dict[str, TenantTime] = {}
            for project, (own, clock, state, _now, timing, profile) in saved.tenants.items():
                if clock is not None and state is not None:
                    clock.restore(state)
                own.clock, own.timing, own.profile = clock, timing, profile
                tenants[project] = own
            self.tenants = tenants

    # --- forgetting, export and import --------------------------------------------------------------

    def forget(self, project: str | None = None) -> None:
        """A tenant reset (or, with None, a reset of everything): its clock and profile go with its state."""
        with self._lock:
            if project is None:
                self.tenants.clear()
            else:
                self.tenants.pop(project, None)

    def _prune(self, project: str) -> None:
        own = self.tenants.get(project)
        if own is not None and own.clock is None and own.timing is None:
            del self.tenants[project]

    def export(self) -> dict[str, Any]:
        """``clock.tenants`` of a state document: per project, its own clock and/or profile."""
        out: dict[str, Any] = {}
        for project, own in list(self.tenants.items()):
            entry: dict[str, Any] = {}
            if own.clock is not None:
                entry.update(own.clock.describe())
            if own.profile is not None:
                entry["profile"] = dict(own.profile)
            out[project] = entry
        return out

    @staticmethod
    def check_entries(entries: Any) -> dict[str, TenantTime]:
        """Build the tenants of ``clock.tenants``; ValueError naming the first bad entry."""
        if entries is None:
            return {}
        if not isinstance(entries, dict):
            raise ValueError("clock.tenants must be an object of project -> clock")
        built: dict[str, TenantTime] = {}
        for project, entry in entries.items():
            where = f"clock.tenants.{project}"
            if not isinstance(entry, dict):
                raise ValueError(f"{where} must be an object")
            own = TenantTime()
            try:
                if entry.get("now") is not None:
                    own.clock = Clock(entry.get("mode") or "manual", float(entry.get("speed") or 1.0),
                                      parse_rfc3339(str(entry["now"])))
                if entry.get("profile") is not None:
                    profile = entry["profile"]
                    if not isinstance(profile, dict):
                        raise ValueError("profile must be an object")
                    own.timing = make_timing(profile.get("name"), profile.get("overrides"))
                    own.profile = {"name": profile["name"], "overrides": dict(profile.get("overrides") or {})}
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{where}: {exc}") from exc
            built[project] = own
        return built

    def restore(self, built: dict[str, TenantTime], projects: list[str] | None = None) -> None:
        """Install what :meth:`check_entries` built: every tenant's (``projects`` None), or those named."""
        with self._lock:
            if projects is None:
                self.tenants = dict(built)
            else:
                for project in projects:
                    if project in built:
                        self.tenants[project] = built[project]
                    else:
                        self.tenants.pop(project, None)
