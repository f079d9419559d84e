"""The virtual clock: the only place in the emulator that reads real time.

Emulates the passage of time on the real service (resources provision, sessions start, operations run,
resources expire) in three modes: ``system``, ``manual`` and ``auto``. Differences from the real API: none
visible; timestamps are rendered with millisecond precision.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from datetime import UTC, datetime

DEFAULT_MANUAL_START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
# Virtual time stays within what RFC 3339 timestamps can show (year 9999); beyond it rendering fails.
MAX_TIME = datetime(9999, 1, 1, tzinfo=UTC).timestamp()
MODES = ("system", "manual", "auto")
STILL = frozenset({"manual", "auto"})   # modes in which time moves only when something moves it
# Eleven virtual days per real second is plenty for any demo.
MAX_SPEED = 1e6


class ClockError(ValueError):
    """A clock change that is not allowed (time may never move backwards)."""


class Clock:
    def __init__(self, mode: str = "system", speed: float = 1.0, start: float | None = None) -> None:
        if mode not in MODES:
            raise ClockError(f"clock mode must be one of {MODES}, not {mode!r}")
        if not 0 < speed <= MAX_SPEED:
            raise ClockError(f"clock speed must be > 0 and at most {MAX_SPEED:g}")
        self._lock = threading.Lock()
        self._mode = mode
        self._speed = float(speed)
        if start is None:
            start = time.time() if mode == "system" else DEFAULT_MANUAL_START
        _check_time(float(start))
        self._anchor_virtual = float(start)
        self._anchor_real = time.monotonic()

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def speed(self) -> float:
        return self._speed

    def now(self) -> float:
        """Virtual time as POSIX seconds."""
        if self._mode != "system":
            return self._anchor_virtual
        # Clamped: a system clock left running fast for days must not run past what can be rendered.
        return min(self._anchor_virtual + (time.monotonic() - self._anchor_real) * self._speed, MAX_TIME)

    def advance(self, seconds: float) -> float:
        if not seconds >= 0:
            raise ClockError("seconds must be >= 0; the clock never moves backwards")
        with self._lock:
            self._rebase()
            _check_time(self._anchor_virtual + float(seconds))
            self._anchor_virtual += float(seconds)
            return self._anchor_virtual

    def set_time(self, at: float) -> float:
        with self._lock:
            self._rebase()
            if at < self._anchor_virtual:
                raise ClockError("the clock never moves backwards")
            _check_time(float(at))
            self._anchor_virtual = float(at)
            return at

    def configure(self, mode: str | None = None, speed: float | None = None) -> None:
        if mode is not None and mode not in MODES:
            raise ClockError(f"clock mode must be one of {MODES}, not {mode!r}")
        if speed is not None and not 0 < speed <= MAX_SPEED:
            raise ClockError(f"clock speed must be > 0 and at most {MAX_SPEED:g}")
        with self._lock:
            self._rebase()
            if mode is not None:
                self._mode = mode
            if speed is not None:
                self._speed = float(speed)

    def state(self) -> tuple[str, float, float, float]:
        """Everything the clock is, for :meth:`restore` (a change the journal refused is put back whole)."""
        with self._lock:
            return (self._mode, self._speed, self._anchor_virtual, self._anchor_real)

    def restore(self, state: tuple[str, float, float, float]) -> None:
        """Back to a :meth:`state`: a system clock then reads as if it had never been changed."""
        with self._lock:
            self._mode, self._speed, self._anchor_virtual, self._anchor_real = state

    def _rebase(self) -> None:
        # Freeze the current virtual time as the new anchor, so mode/speed changes never jump.
        self._anchor_virtual = self.now()
        self._anchor_real = time.monotonic()

    def describe(self) -> dict[str, object]:
        return {"now": rfc3339(self.now()), "mode": self._mode, "speed": self._speed}


def wall() -> float:
    """Seconds of real time from an arbitrary origin (monotonic), for what waits in real time: how long a
    client has polled without the clock moving (``Runtime.waiting``)."""
    return time.monotonic()


def _check_time(at: float) -> None:
    if not (math.isfinite(at) and 0 <= at <= MAX_TIME):
        raise ClockError(f"virtual time must stay between 1970-01-01 and 9999-01-01 (got {at!r} POSIX seconds)")


# Pure; objects keep their timestamps, so hits are the norm, and they come from the objects just rendered.
# 4,096 instants (~0.7 MiB): at 65,536 the cache took ~11 MiB and, at a soak's rate, minutes to fill,
# which bench.soak read as growth after warm-up.
@functools.lru_cache(maxsize=1 << 12)
def rfc3339(ts: float) -> str:
    """POSIX seconds -> RFC 3339 UTC with milliseconds, e.g. 2026-01-01T00:00:00.000Z. The same text as
    ``datetime.fromtimestamp(round(ts, 3), tz=UTC)`` gives (microseconds rounded half-even, as it does)."""
    t = round(ts, 3)
    sec = math.floor(t)
    us = round((t - sec) * 1e6)
    if us >= 1_000_000:
        sec, us = sec + 1, us - 1_000_000
    # New objects miss the cache above, but requests in the same second share the date part.
    return _second(sec) + _MILLIS[us // 1000]


_MILLIS = tuple(f"{ms:03d}Z" for ms in range(1000))  # (a format spec per call cost more than the rest)


@functools.lru_cache(maxsize=1 << 10)
def _second(sec: int) -> str:
    dt = datetime.fromtimestamp(sec, tz=UTC)
    # Formatted by hand: strftime costs several times more.
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}."


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
