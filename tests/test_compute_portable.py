"""The simulated model's numbers are the same on every CPU (emulator/compute/README.md, "Portable numbers").

``emulator.compute.portable`` replaces numpy's and libm's exp/log, whose last bit depends on the CPU's SIMD
features: here its accuracy (within 1 ulp of the true value, numpy's results at the edges), and, in
subprocesses with numpy's SIMD code paths switched off (``NPY_DISABLE_CPU_FEATURES``) and glibc's non-FMA
libm chosen (``GLIBC_TUNABLES``), that a representative workload (tests/simd_workload.py) gives the same
bytes whatever code numpy and libm run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emulator.compute import portable

ROOT = Path(__file__).resolve().parent.parent
RNG_SEED = 20_260_504


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """How many representable doubles lie between ``got`` and ``want`` (finite, same sign)."""
    a, b = got.view(np.int64), want.view(np.int64)
    return np.abs(a - b)


def exp_inputs() -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED)
    return np.concatenate([rng.uniform(-745.1, 709.78, 200_000),          # the whole finite range
                           -rng.exponential(5.0, 200_000),                # the model's: logit - row max
                           rng.uniform(-1e-3, 1e-3, 50_000),
                           np.ldexp(rng.uniform(-1, 1, 50_000), rng.integers(-60, 0, 50_000)),
                           rng.uniform(-745.1, -708.4, 50_000)])          # results below DBL_MIN: subnormals


def log_inputs() -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED + 1)
    return np.concatenate([np.ldexp(rng.uniform(0.5, 1, 200_000), rng.integers(-1074, 1025, 200_000)),
                           1 + rng.uniform(0, 1e6, 200_000),              # the model's: a row's sum of exps
                           rng.uniform(0.7, 1.42, 50_000), 1 + rng.uniform(-1e-6, 1e-6, 50_000)])


def test_exp_is_within_one_ulp_of_libm_and_of_the_true_value() -> None:
    x = exp_inputs()
    got = portable.exp(x)
    libm = np.array([math.exp(v) for v in x.tolist()])
    assert ulp_distance(got, libm).max() <= 1
    assert np.mean(got == libm) > 0.85  # (90% measured: both are within 1 ulp, on different sides at times)
    with localcontext() as ctx:  # correctly rounded, on a sample
        ctx.prec = 50
        sample = x[::100]
        true = np.array([float(Decimal(v).exp()) for v in sample.tolist()])
    assert ulp_distance(portable.exp(sample), true).max() <= 1


def test_log_is_within_one_ulp_of_libm_and_of_the_true_value() -> None:
    x = log_inputs()
    got = portable.log(x)
    libm = np.array([math.log(v) for v in x.tolist()])
    # log changes sign at 1: compare magnitudes in ulps only where the values have the same sign
    assert np.all(np.sign(got) == np.sign(libm))
    assert ulp_distance(np.abs(got), np.abs(libm)).max() <= 1
    with localcontext() as ctx:
        ctx.prec = 50
        sample = x[::100]
        true = np.array([float(Decimal(v).ln()) for v in sample.tolist()])
    assert ulp_distance(np.abs(portable.log(sample)), np.abs(true)).max() <= 1


def test_edge_values_are_numpys() -> None:
    x = np.array([0.0, -0.0, 1.0, -1.0, 709.78, 709.79, 710.0, 1e300, np.inf, -745.13, -745.14, -746.0, -1e300,
                  -np.inf, np.nan, 5e-324, -5e-324])
    with np.errstate(over="ignore"):
        got, want = portable.exp(x), np.exp(x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want) & (want != 0)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])  # inf, 0
    assert ulp_distance(got[finite], want[finite]).max() <= 1
    assert portable.exp(np.array([-745.14]))[0] == 0.0 and portable.exp(np.array([-745.13]))[0] == 5e-324

    y = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 5e-324, 2.2250738585072014e-308, 1.0, 2.0, 0.5, 1e308])
    with np.errstate(divide="ignore", invalid="ignore"):
        got, want = portable.log(y), np.log(y)
    assert got[0] == got[1] == want[0] == -np.inf and got[4] == want[4] == np.inf
    assert np.isnan(got[[2, 3, 5]]).all() and np.isnan(want[[2, 3, 5]]).all()
    assert ulp_distance(np.abs(got[6:]), np.abs(want[6:])).max() <= 1 and got[8] == 0.0


def test_the_scalar_forms_and_any_blocking_give_the_array_bits() -> None:
    """Each element is computed alone: a value does not depend on the array it came in (the base model's
    row cache relies on it) nor on the blocks a large array is cut into, and the Python-float forms
    perform the same operations."""
    x, y = exp_inputs()[::7], log_inputs()[::7]
    assert x.size > portable.CHUNK and y.size > portable.CHUNK
    ex, ly = portable.exp(x), portable.log(y)
    idx = np.random.default_rng(1).integers(0, min(x.size, y.size - 3), 2000)
    assert ex[idx].tobytes() == np.array([portable.exp_float(v) for v in x[idx].tolist()]).tobytes()
    assert ex[idx].tobytes() == np.concatenate([portable.exp(x[i:i + 1]) for i in idx]).tobytes()
    assert ly[idx].tobytes() == np.array([portable.log_float(v) for v in y[idx].tolist()]).tobytes()
    assert ly[idx].tobytes() == np.concatenate([portable.log(y[i:i + 3])[:1] for i in idx]).tobytes()
    assert portable.exp(x[:35].reshape(5, 7)).tobytes() == ex[:35].tobytes()
    assert portable.exp_float(math.nan) != portable.exp_float(math.nan)
    assert portable.exp_float(1e300) == math.inf and portable.exp_float(-1e300) == 0.0
    assert portable.log_float(0.0) == -math.inf and math.isnan(portable.log_float(-2.0))


def test_power_int_squares_and_multiplies() -> None:
    """Adam's bias corrections: each squaring doubles the relative error so far, so after the ~log2(t)
    squarings of ``x ** t`` it is at most ~t ulps (libm's ``pow`` has 1, but not the same on every CPU)."""
    assert portable.power_int(0.9, 0) == 1.0 and portable.power_int(0.9, 1) == 0.9
    assert portable.power_int(0.95, 2) == 0.95 * 0.95 and portable.power_int(3.0, 5) == 243.0
    with localcontext() as ctx:
        ctx.prec = 60
        for b in (0.9, 0.95, 0.999, 0.5 + 2**-40, 1 - 2**-30):
            for t in [*range(1, 64), *range(64, 20_000, 371)]:
                got, want = portable.power_int(b, t), Decimal(b) ** t
                if want > Decimal("1e-300"):  # (below, it underflows, and 1 - b^t is 1 either way)
                    assert abs(Decimal(got) - want) / want <= t * Decimal(2) ** -53, (b, t)


# --- the same numbers whatever SIMD code numpy runs ----------------------------------------------------

def run_workload(disable: list[str] | None, libm_without_fma: bool = False) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("NPY_DISABLE_CPU_FEATURES", "GLIBC_TUNABLES")}
    if disable:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(disable)
    if libm_without_fma:  # glibc's exp, log and pow have FMA variants, picked at load time (ignored elsewhere)
        env["GLIBC_TUNABLES"] = "glibc.cpu.hwcaps=-AVX2,-FMA"
    out = subprocess.run([sys.executable, "-m", "tests.simd_workload"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    if importlib.util.find_spec("numpy.lib.introspect") is None:
        pytest.skip("numpy.lib.introspect.opt_func_info (numpy >= 2.0) is needed to see which SIMD code numpy runs")
    return run_workload(None)


# Which of the dispatch targets numpy uses on this machine to switch off: its AVX512 code (what made the
# recordings differ between hosts), then everything above its baseline (an old x86-64, or a bare arm64), then
# that with glibc's libm on its non-FMA code too (a CPU without FMA; numpy's baseline exp and log are libm's).
MODES = {"no AVX512": lambda targets: [t for t in targets if "AVX512" in t or t == "X86_V4"],
         "baseline only": lambda targets: list(targets),
         "baseline only, libm without FMA": lambda targets: list(targets)}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_number_is_the_same_whatever_simd_code_numpy_runs(mode: str, reference: dict[str, Any]) -> None:
    in_use = [t for t in reference["targets"] if not t.startswith("baseline")]
    disable = MODES[mode](in_use)
    if not disable:
        pytest.skip(f"nothing to switch off for '{mode}': numpy runs {reference['targets']} on this machine")
    no_fma = mode.endswith("without FMA")
    other = run_workload(disable, libm_without_fma=no_fma)
    assert other["targets"] != reference["targets"] and not set(disable) & set(other["targets"]), other["targets"]
    if no_fma and other["libm"] == reference["libm"]:
        pytest.skip("libm answered the same without FMA (not glibc, or no FMA variant on this CPU)")
    assert set(other["digests"]) == set(reference["digests"])
    assert [part for part, digest in reference["digests"].items() if other["digests"][part] != digest] == []
