"""Pure helpers: percentiles, ratios, wrk output parsing, target verdicts. No I/O, no imports of the
emulator; tested by ``tests/test_bench_smoke.py``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

MARK = "BENCH_JSON "


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (the one wrk reports): the smallest value with ``pct``% at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def median(values: Iterable[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def parse_marked_json(text: str) -> dict[str, Any]:
    """The last ``BENCH_JSON {...}`` line of a load generator's output."""
    found = None
    for line in text.splitlines():
        if line.startswith(MARK):
            found = line[len(MARK) :]
    if found is None:
        raise ValueError("no BENCH_JSON line in the load generator's output")
    return json.loads(found)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Load-generator report (latencies in microseconds) -> rps, ms percentiles, error counts."""
    seconds = raw["duration_us"] / 1e6
    errors = sum(
        int(raw.get(k, 0))
        for k in (
            "errors_connect",
            "errors_read",
            "errors_write",
            "errors_status",
            "errors_timeout",
            "errors_flow",
        )
    )
    out = {
        "requests": int(raw["requests"]),
        "seconds": seconds,
        "rps": raw["requests"] / seconds if seconds > 0 else 0.0,
        "p50_ms": raw["lat_p50"] / 1000.0,
        "p90_ms": raw["lat_p90"] / 1000.0,
        "p99_ms": raw["lat_p99"] / 1000.0,
        "mean_ms": raw["lat_mean"] / 1000.0,
        "max_ms": raw["lat_max"] / 1000.0,
        "errors": errors,
    }
    if raw.get("loops") is not None:
        out["loops"] = int(raw["loops"])
        out["loops_per_s"] = raw["loops"] / seconds if seconds > 0 else 0.0
    return out


WRK_VERSION = re.compile(r"wrk\s+(?:\S*/)?(\d+\.\d+(?:\.\d+)?)")


def wrk_version(text: str) -> str | None:
    match = WRK_VERSION.search(text)
    return match.group(1) if match else None


def pool_size(
    expected_rps: float, seconds: float, per_resource: int = 5, margin: float = 1.5, minimum: int = 20
) -> int:
    """Resources to pre-create so a create-session run never hits the per-resource session cap."""
    return max(minimum, math.ceil(expected_rps * seconds * margin / per_resource))


def better_round(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether round ``new`` should count instead of ``old``: the faster one, but a round without errors
    before any round with them (errors are quick answers: a round of 429s would look fastest)."""
    if (new["errors"] == 0) != (old["errors"] == 0):
        return new["errors"] == 0
    return bool(new["rps"] > old["rps"])


def verdict(value: float | None, limit: float, higher_is_better: bool) -> str:
    if value is None:
        return "n/a"
    ok = value >= limit if higher_is_better else value < limit
    return "PASS" if ok else "MISS"


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000 and digits <= 2:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.{digits}f}"
    return f"{text} {unit}".rstrip()


def flatten(prefix: str, data: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {f"{prefix}_{k}": data.get(k) for k in keys}
