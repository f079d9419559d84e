"""What the pytest plugin costs a user's test suite (``emulator/pytest_plugin.py``, issue 24).

``python -m bench.plugin [--starts N] [--tenants N]`` prints one ``BENCH_JSON`` line with:

- ``plugin_start_{thread,subprocess}_s``: start-up of the session's emulator, in a fresh interpreter that
  has imported pytest (as a test session has): ``EmulatorServer(mode).start()``, the emulator's imports
  included, to the first answer; the median (and max) of ``--starts`` runs. Targets: < 0.5 s in a thread.
- ``plugin_tenant_{thread,subprocess}_ms``: the per-test overhead of the ``together_emulator`` fixture: a
  fresh tenant (one reset with its own manual clock) and, after the test, forgetting it (reset, clear its
  fault rules); median and p90 over ``--tenants`` tests, and the setup alone. Target: < 5 ms.
- ``plugin_sdk_file_{thread,subprocess}_s``: the wall time of ``pytest`` on a file of ``--sdk-tests`` SDK
  tests (each: a model resource, a session, two training steps, a checkpoint, stop) on the instant profile,
  as a user runs it (the interpreter, the session's emulator, every test); the default mode should be the
  faster. ``plugin_sdk_file_realistic_auto_s``: the same file on the realistic profile with the auto clock
  (issue 40: the tests check that their virtual timestamps show the realistic durations); target: within
  2x of the instant file (``plugin_sdk_file_realistic_auto_ratio``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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


_SDK_TEST = """
@pytest.mark.together_emulator(profile={profile!r})
def test_sdk_{i}(together_emulator):
    with ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B") as resources:
        r = resources.retrieve()
        assert {realistic} == ((r.updated_at - r.created_at).total_seconds() == 225)
        session = resources.create_session(lora_config={{"rank": 8}})
        for _ in range(2):
            session.trainer.forward_backward(samples=[SAMPLE], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
        checkpoint = session.create_training_checkpoint()
        assert {realistic} == ((checkpoint.created_at - r.updated_at).total_seconds() > 50)
        session.stop()
"""
_SDK_HEAD = """
import pytest
from together.post_training import AdamParams, LossConfig, ModelResourcesClient

TOKENS = [1, 2, 3, 4, 5, 6, 7]
SAMPLE = {"model_input": {"chunks": [{"encoded_text": {"tokens": TOKENS[:-1]}}]},
          "loss_fn_inputs": {"target_tokens": {"data": TOKENS[1:], "dtype": "int64"},
                             "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}
"""


def sdk_test_file(n: int, profile: str) -> str:
    """A user's test file of ``n`` SDK tests on ``profile`` (each checks its virtual durations are that profile's)."""
    realistic = profile == "realistic"
    return _SDK_HEAD + "".join(_SDK_TEST.format(i=i, profile=profile, realistic=realistic) for i in range(n))


def sdk_file_seconds(n: int, mode: str, profile: str) -> float:
    """Wall time of ``pytest`` on :func:`sdk_test_file` (auto clock, ``mode``), from the command to its exit (the
    interpreter and pytest's plugins included: in this environment schemathesis' and hypothesis' own pytest
    plugins take a second or two of it to load)."""
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as work:
        (Path(work) / "test_sdk_file.py").write_text(sdk_test_file(n, profile))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "PYTEST_"))}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--together-emulator-mode={mode}", "--together-emulator-clock=auto"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
        took = time.perf_counter() - t0
    if done.returncode != 0 or f"{n} passed" not in done.stdout:
        raise RuntimeError(f"the {profile} SDK file failed in {mode} mode: {done.stdout[-1500:]}")
    return took


def measure(starts: int, tenants: int, sdk_tests: int = 20) -> dict[str, Any]:
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
    if sdk_tests:
        for mode in ("thread", "subprocess"):
            out[f"plugin_sdk_file_{mode}_s"] = min(sdk_file_seconds(sdk_tests, mode, "instant") for _ in range(2))
        out["plugin_sdk_file_realistic_auto_s"] = min(sdk_file_seconds(sdk_tests, "thread", "realistic")
                                                      for _ in range(2))
        out["plugin_sdk_file_realistic_auto_ratio"] = (out["plugin_sdk_file_realistic_auto_s"]
                                                       / out["plugin_sdk_file_thread_s"])
        out["plugin_sdk_file_tests"] = sdk_tests
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plugin", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=5, help="start-ups measured per mode (default 5)")
    p.add_argument("--tenants", type=int, default=300, help="fresh tenants measured per mode (default 300)")
    p.add_argument("--sdk-tests", type=int, default=20, help="tests in the SDK file timed per mode (0: none)")
    args = p.parse_args(argv)
    print(MARK + json.dumps(measure(args.starts, args.tenants, args.sdk_tests)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
