"""What the pytest plugin costs a user's test suite (``emulator/pytest_plugin.py``, issue 24).

``python -m bench.plugin [--starts N] [--tenants N]`` prints one ``BENCH_JSON`` line with:

- ``plugin_start_{thread,subprocess}_s``: start-up of the session's emulator, in a fresh interpreter that
  has imported pytest (as a test session has): ``EmulatorServer(mode).start()``, the emulator's imports
  included, to the first answer; the median (and max) of ``--starts`` runs. Targets: < 0.5 s in a thread.
- ``plugin_tenant_{thread,subprocess}_ms``: the per-test overhead of the ``together_emulator`` fixture: a
  fresh tenant (one reset with its own manual clock) and, after the test, forgetting it (reset, clear its
  fault rules); median and p90 over ``--tenants`` tests, and the setup alone. Target: < 5 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.stats import MARK, percentile

ROOT = Path(__file__).resolve().parent.parent
_START = """
import json, time, warnings
import pytest  # noqa: F401 - a test session has it imported already
t0 = time.perf_counter()
from emulator.testing import EmulatorServer
server = EmulatorServer({mode!r}).start()
took = time.perf_counter() - t0
server.close()
print(json.dumps(took))
"""


def start_time(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", _START.format(mode=mode)], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=120, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def tenant_overhead(mode: str, n: int) -> dict[str, float]:
    from emulator.testing import EmulatorServer

    setup, total = [], []
    with EmulatorServer(mode) as server:
        for i in range(n + 5):
            t0 = time.perf_counter()
            tenant = server.tenant(name=f"bench::test_{i}")
            t1 = time.perf_counter()
            tenant.close()
            t2 = time.perf_counter()
            if i >= 5:  # the first few warm the connection and the handlers up
                setup.append((t1 - t0) * 1000)
                total.append((t2 - t0) * 1000)
    return {"median_ms": statistics.median(total), "p90_ms": float(percentile(total, 90) or 0.0),
            "setup_median_ms": statistics.median(setup)}


def measure(starts: int, tenants: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("thread", "subprocess"):
        times = [start_time(mode) for _ in range(starts)]
        out[f"plugin_start_{mode}_s"] = statistics.median(times)
        out[f"plugin_start_{mode}_s_max"] = max(times)
        cost = tenant_overhead(mode, tenants)
        out[f"plugin_tenant_{mode}_ms"] = cost["median_ms"]
        out[f"plugin_tenant_{mode}_ms_p90"] = cost["p90_ms"]
        out[f"plugin_tenant_{mode}_setup_ms"] = cost["setup_median_ms"]
    out["plugin_tenants_measured"] = tenants
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plugin", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=5, help="start-ups measured per mode (default 5)")
    p.add_argument("--tenants", type=int, default=300, help="fresh tenants measured per mode (default 300)")
    args = p.parse_args(argv)
    print(MARK + json.dumps(measure(args.starts, args.tenants)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
