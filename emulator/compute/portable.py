"""exp and log with the same bits on every CPU, for the simulated model (numpy's and libm's differ in the last
bit between CPUs: AVX512F or libm code, FMA or not). fdlibm's algorithms (error < 1 ulp) in IEEE-exact
operations only (``+ - * /``, comparisons, ``ldexp``, ``frexp``: one rounding each, and numpy applies one
ufunc at a time, so nothing fuses); each has an array form and a Python-float form (``*_float``) that
perform the same operations. README.md, "Portable numbers".
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np

_F64 = np.float64
_INF = math.inf

# fdlibm e_exp.c: ln2 split so that k * LN2_HI is exact for |k| < 2^11; the rational approximation's P1-P5
_LN2_HI = float.fromhex("0x1.62e42feep-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
_P1 = float.fromhex("0x1.555555555553ep-3")
_P2 = float.fromhex("-0x1.6c16c16bebd93p-9")
_P3 = float.fromhex("0x1.1566aaf25de2cp-14")
_P4 = float.fromhex("-0x1.bbd41c5d26bf1p-20")
_P5 = float.fromhex("0x1.6376972bea4d0p-25")
# Beyond these, exp is inf or 0 (709.78 and -745.13 are the exact limits): clamping keeps k in int range.
_EXP_HI = 710.0
_EXP_LO = -746.0
# 1.5 * 2^52: adding it rounds a float of magnitude < 2^51 to an integer (ties to even), which its low bits hold.
_SHIFT = float.fromhex("0x1.8p52")
# Its low 32 bits are 0, so those of the sum are k (two's complement): ldexp's int32 loop is the fast one.
_LOW_WORD = 0 if sys.byteorder == "little" else 1

# fdlibm e_log.c (FreeBSD/musl form): x = (1 + f) 2^k with sqrt(2)/2 <= 1 + f < sqrt(2) (mantissas below are
# doubled); with s = f / (2 + f), log(1 + f) = 2s + s R(s^2), R the polynomial of Lg1-Lg7
_SQRT_HALF = float.fromhex("0x1.6a09ep-1")
_LG1 = float.fromhex("0x1.5555555555593p-1")
_LG2 = float.fromhex("0x1.999999997fa04p-2")
_LG3 = float.fromhex("0x1.2492494229359p-2")
_LG4 = float.fromhex("0x1.c71c51d8e78afp-3")
_LG5 = float.fromhex("0x1.7466496cb03dep-3")
_LG6 = float.fromhex("0x1.39a09d078c69fp-3")
_LG7 = float.fromhex("0x1.2f112df3e5244p-3")


# Arrays of one value: numpy takes them faster than Python floats.
(_A_EXP_LO, _A_EXP_HI, _A_INV_LN2, _A_SHIFT, _A_LN2_HI, _A_LN2_LO, _A_P1, _A_P2, _A_P3, _A_P4, _A_P5, _A_SQRT_HALF,
 _A_LG1, _A_LG2, _A_LG3, _A_LG4, _A_LG5, _A_LG6, _A_LG7, _A_ONE, _A_TWO, _A_HALF) = (
    np.array(c) for c in (_EXP_LO, _EXP_HI, _INV_LN2, _SHIFT, _LN2_HI, _LN2_LO, _P1, _P2, _P3, _P4, _P5, _SQRT_HALF,
                          _LG1, _LG2, _LG3, _LG4, _LG5, _LG6, _LG7, 1.0, 2.0, 0.5))
_add, _sub, _mul, _div, _min, _max = np.add, np.subtract, np.multiply, np.divide, np.minimum, np.maximum
# Elements per block: large arrays go through in blocks that stay in the cache (and below malloc's mmap size).
CHUNK = 8192


def exp(x: np.ndarray) -> np.ndarray:
    """``np.exp`` of a float64 array (inf, 0 and nan where numpy gives them, overflow warning included)."""
    return _elementwise(_exp, x)


def _exp(x: np.ndarray) -> np.ndarray:
    # (constants as arrays, in place where a temporary can be reused, ``out`` positional: on small arrays the cost
    # is the numpy calls and allocations, 142k -> 83k instructions for 16 values; on large ones, memory touched)
    x = _min(_max(x, _A_EXP_LO), _A_EXP_HI)  # (nan stays nan)
    t = x * _A_INV_LN2
    _add(t, _A_SHIFT, t)
    k = t - _A_SHIFT                         # round(x / ln2): x = k ln2 + r, |r| <= ln2 / 2
    hi = k * _A_LN2_HI
    _sub(x, hi, hi)                          # x - k ln2_hi, exact
    lo = k
    _mul(lo, _A_LN2_LO, lo)
    r = hi - lo
    z = r * r
    c = z * _A_P5                            # c = r - z (P1 + z (P2 + z (P3 + z (P4 + z P5))))
    _add(c, _A_P4, c)
    _mul(c, z, c)
    _add(c, _A_P3, c)
    _mul(c, z, c)
    _add(c, _A_P2, c)
    _mul(c, z, c)
    _add(c, _A_P1, c)
    _mul(c, z, c)
    _sub(r, c, c)
    y = r                                    # y = 1 - ((lo - r c / (2 - c)) - hi) = exp(r)
    _mul(y, c, y)
    _sub(_A_TWO, c, c)
    _div(y, c, y)
    _sub(lo, y, y)
    _sub(y, hi, y)
    _sub(_A_ONE, y, y)
    out: np.ndarray = np.ldexp(y, t.view(np.int32)[_LOW_WORD::2], y)  # y * 2^k, rounded once (also to a subnormal)
    return out


def exp_float(x: float) -> float:
    """:func:`exp` of one Python float, bit for bit."""
    if x != x:
        return x
    x = min(max(x, _EXP_LO), _EXP_HI)
    t = x * _INV_LN2 + _SHIFT
    k = t - _SHIFT
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    z = r * r
    c = r - z * (_P1 + z * (_P2 + z * (_P3 + z * (_P4 + z * _P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    try:
        return math.ldexp(y, int(k))
    except OverflowError:
        return _INF


def log(x: np.ndarray) -> np.ndarray:
    """``np.log`` of a float64 array (-inf at 0, nan below 0 and at nan, inf at inf; no warnings)."""
    return _elementwise(_log, x)


def _log(x: np.ndarray) -> np.ndarray:
    special = not (_min.reduce(x, initial=_INF) > 0.0 and _max.reduce(x, initial=0.0) < _INF)
    if special:  # (rare) compute on 1.0 there, then put numpy's values in
        bad = ~((x > 0.0) & (x < _INF))
        fix = np.where(x == 0.0, -_INF, np.where(x == _INF, _INF, np.nan))
        x = np.where(bad, 1.0, x)
    f, e = np.frexp(x)                       # x = m 2^e, 0.5 <= m < 1 (subnormals too)
    low = f < _A_SQRT_HALF
    _add(f, f, f, where=low)
    _sub(f, _A_ONE, f)                       # x = (1 + f) 2^k, sqrt(2)/2 <= 1 + f < sqrt(2)
    k = e - low
    hfsq = f * _A_HALF
    _mul(hfsq, f, hfsq)
    s = f + _A_TWO
    _div(f, s, s)                            # s = f / (2 + f)
    z = s * s
    w = z * z
    t1 = w * _A_LG6                          # t1 = w (Lg2 + w (Lg4 + w Lg6))
    _add(t1, _A_LG4, t1)
    _mul(t1, w, t1)
    _add(t1, _A_LG2, t1)
    _mul(t1, w, t1)
    t2 = w * _A_LG7                          # t2 = z (Lg1 + w (Lg3 + w (Lg5 + w Lg7)))
    _add(t2, _A_LG5, t2)
    _mul(t2, w, t2)
    _add(t2, _A_LG3, t2)
    _mul(t2, w, t2)
    _add(t2, _A_LG1, t2)
    _mul(t2, z, t2)
    out = t2                                 # s (hfsq + R) + k ln2_lo - hfsq + f + k ln2_hi, R = t2 + t1
    _add(out, t1, out)
    _add(out, hfsq, out)
    _mul(out, s, out)
    _add(out, k * _A_LN2_LO, out)
    _sub(out, hfsq, out)
    _add(out, f, out)
    _add(out, k * _A_LN2_HI, out)
    return np.where(bad, fix, out) if special else out


def log_float(x: float) -> float:
    """:func:`log` of one Python float, bit for bit."""
    if not (0.0 < x < _INF):
        return -_INF if x == 0.0 else (_INF if x == _INF else math.nan)
    m, e = math.frexp(x)
    low = m < _SQRT_HALF
    f = (m + m if low else m) - 1.0
    k = float(e - low)
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    return s * (hfsq + (t2 + t1)) + k * _LN2_LO - hfsq + f + k * _LN2_HI


def _elementwise(kernel: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``kernel`` of a float64 array of any shape, a block of at most ``CHUNK`` elements at a time."""
    x = np.asarray(x, dtype=_F64)
    if x.ndim != 1:
        return _elementwise(kernel, x.reshape(-1)).reshape(x.shape)
    if x.size <= CHUNK:
        return kernel(x)
    out = np.empty(x.size)
    for i in range(0, x.size, CHUNK):
        out[i:i + CHUNK] = kernel(x[i:i + CHUNK])
    return out


def power_int(x: float, n: int) -> float:
    """``x ** n`` for an integer ``n >= 0`` by repeated squaring (libm's ``pow`` is not the same everywhere)."""
    result = 1.0
    while n:
        if n & 1:
            result *= x
        x *= x
        n >>= 1
    return result


PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: a float64 sum of up to this many values is one block


def numpy_sum(xs: list[float]) -> float:
    """``np.add.reduce`` of a float64 array of up to :data:`PAIRWISE_BLOCK` values, without the array: numpy's
    pairwise summation, which for one block is eight running sums over every eighth value (one sum from -0.0
    below eight values), combined in pairs, then the remaining values in order, added to +0.0 (the same
    additions in the same order, so the same bits: tests/test_compute_support.py compares the two)."""
    n = len(xs)
    if n < 8:
        res = -0.0
        for x in xs:
            res += x
        return 0.0 + res  # (numpy adds the sum to its identity, +0.0: a sum of -0.0 alone is +0.0)
    r0, r1, r2, r3, r4, r5, r6, r7 = xs[:8]
    end = n - n % 8
    for i in range(8, end, 8):
        r0 += xs[i]
        r1 += xs[i + 1]
        r2 += xs[i + 2]
        r3 += xs[i + 3]
        r4 += xs[i + 4]
        r5 += xs[i + 5]
        r6 += xs[i + 6]
        r7 += xs[i + 7]
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, n):
        res += xs[i]
    return 0.0 + res


__all__ = ["PAIRWISE_BLOCK", "exp", "exp_float", "log", "log_float", "numpy_sum", "power_int"]
