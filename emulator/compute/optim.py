"""Optimizer step: AdamW or Muon applied to the sparse bigram parameters.

Emulates the optimizer step (docs/api-surface.md A.3.3): global-norm gradient clipping, then AdamW or Muon with
the vendor's defaults (learning rates of the emulator's choice), scaled by the session's learning-rate
multiplier (README, "Optimizer"). Muon is a per-row stand-in: a bigram has no hidden-layer matrices.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import msgspec
import numpy as np

from emulator.compute.errors import NON_FINITE_LOSS, RESOURCE_EXHAUSTED, ComputeError, invalid
from emulator.compute.inputs import parse_float, state_int
from emulator.compute.portable import power_int
from emulator.compute.spec import (
    ADAM_DEFAULTS,
    MAX_ENTRIES,
    MUON_DEFAULTS,
    MUON_LR_DIVISOR,
    NS_COEFFS,
    ModelSpec,
)
from emulator.compute.types import AdamParams, MuonParams, Wire
from emulator.compute.weights import (
    EMPTY_F64,
    EMPTY_I64,
    GradAccum,
    Weights,
    all_finite,
    lookup_sorted,
    note_sizes,
    setdiff_unique,
    union_sorted,
)
from emulator.jsontypes import Json

_F64 = np.float64
_I64 = np.int64


class OptState(msgspec.Struct, frozen=True, eq=False):
    """Optimizer state aligned with a :class:`Weights`: per entry and per trained row."""

    m: np.ndarray         # Adam first moment, per entry
    v: np.ndarray         # Adam second moment, per entry
    buf: np.ndarray       # Muon momentum, per entry
    m_tail: np.ndarray    # Adam moments of each row's tail parameter
    v_tail: np.ndarray
    t_entries: int = 0    # Adam steps applied to entries (bias correction)
    t_tail: int = 0       # Adam steps applied to tails

    @staticmethod
    def zeros(weights: Weights) -> OptState:
        n, r = weights.num_entries, weights.rows.size
        if n == 0 and r == 0:  # an untrained model (immutable, with zero-size arrays: one instance serves all)
            return _EMPTY_OPT
        return OptState(np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(r), np.zeros(r))

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.m, self.v, self.buf, self.m_tail, self.v_tail)))

    def to_state(self) -> dict[str, Json]:
        return {"adam_m": self.m.tolist(), "adam_v": self.v.tolist(), "muon_momentum": self.buf.tolist(),
                "tail_adam_m": self.m_tail.tolist(), "tail_adam_v": self.v_tail.tolist(),
                "adam_steps": self.t_entries, "tail_adam_steps": self.t_tail}

    @staticmethod
    def from_state(state: dict[str, Any], weights: Weights) -> OptState:
        try:
            out = OptState(np.asarray(state["adam_m"], dtype=_F64), np.asarray(state["adam_v"], dtype=_F64),
                           np.asarray(state["muon_momentum"], dtype=_F64),
                           np.asarray(state["tail_adam_m"], dtype=_F64),
                           np.asarray(state["tail_adam_v"], dtype=_F64),
                           state_int(state["adam_steps"], "optimizer state: adam_steps"),
                           state_int(state["tail_adam_steps"], "optimizer state: tail_adam_steps"))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise invalid(f"malformed optimizer state: {exc}") from exc
        n, r = weights.num_entries, weights.rows.size
        if not (out.m.size == out.v.size == out.buf.size == n and out.m_tail.size == out.v_tail.size == r):
            raise invalid("malformed optimizer state: arrays do not match the weights")
        return out


_EMPTY_OPT = OptState(EMPTY_F64, EMPTY_F64, EMPTY_F64, EMPTY_F64, EMPTY_F64)


# --- hyperparameters ---------------------------------------------------------------------------------

def _num(params: Wire, key: str, default: float, where: str) -> float:
    val: float | None = getattr(params, key)
    if val is None:
        return default
    if type(val) is float and math.isfinite(val):  # what parse_float returns, without building its label
        return val
    return parse_float(val, f"{where}.{key}")


_NO_MUON = MuonParams()


# AdamParams' fields in their order, which is ADAM_DEFAULTS' (the order errors are reported in), with defaults
_ADAM_KEYS: tuple[str, ...] = AdamParams.__struct_fields__
_ADAM_HP = MappingProxyType({k: ADAM_DEFAULTS[k] for k in _ADAM_KEYS})


def parse_adam(params: AdamParams | None, where: str = "adam_params") -> dict[str, float]:
    hp = _ADAM_HP.copy()
    if params is not None:  # (the given values read in one call, a label built only for one to parse)
        for k, val in zip(_ADAM_KEYS, msgspec.structs.astuple(params)):
            if val is not None:
                hp[k] = val if type(val) is float and math.isfinite(val) else parse_float(val, f"{where}.{k}")
    # (checks written out, not looped over key tuples: this runs on every optimizer step)
    if hp["learning_rate"] < 0:
        raise invalid(f"{where}.learning_rate must be >= 0, got {hp['learning_rate']}")
    if not 0 <= hp["beta1"] < 1:
        raise invalid(f"{where}.beta1 must be in [0, 1), got {hp['beta1']}")
    if not 0 <= hp["beta2"] < 1:
        raise invalid(f"{where}.beta2 must be in [0, 1), got {hp['beta2']}")
    if not hp["eps"] > 0:
        raise invalid(f"{where}.eps must be > 0, got {hp['eps']}")
    if hp["weight_decay"] < 0:
        raise invalid(f"{where}.weight_decay must be >= 0, got {hp['weight_decay']}")
    if hp["grad_clip_norm"] < 0:
        raise invalid(f"{where}.grad_clip_norm must be >= 0, got {hp['grad_clip_norm']}")
    return hp


def parse_muon(params: MuonParams | None, fallback_adam: AdamParams | None
               ) -> tuple[dict[str, float], dict[str, float]]:
    if params is None:
        params = _NO_MUON
    where = "muon_params"
    hp = {k: _num(params, k, d, where) for k, d in MUON_DEFAULTS.items() if k != "newton_schulz_steps"}
    ns = params.newton_schulz_steps
    hp["newton_schulz_steps"] = float(MUON_DEFAULTS["newton_schulz_steps"] if ns is None else ns)
    if hp["learning_rate"] < 0:
        raise invalid(f"{where}.learning_rate must be >= 0, got {hp['learning_rate']}")
    if not 0 <= hp["momentum"] < 1:
        raise invalid(f"{where}.momentum must be in [0, 1), got {hp['momentum']}")
    if not 0 <= hp["newton_schulz_steps"] <= 100:
        raise invalid(f"{where}.newton_schulz_steps must be in [0, 100], "
                      f"got {int(hp['newton_schulz_steps'])}")
    for k in ("weight_decay", "grad_clip_norm"):
        if hp[k] < 0:
            raise invalid(f"{where}.{k} must be >= 0, got {hp[k]}")
    nested = params.adam
    adam = parse_adam(nested if nested is not None else fallback_adam,
                      f"{where}.adam" if nested is not None else "adam_params")
    return hp, adam


def choose(spec: ModelSpec, adam_params: AdamParams | None, muon_params: MuonParams | None
           ) -> tuple[str, dict[str, float], dict[str, float]]:
    """(algorithm, matrix hyperparameters, adam hyperparameters). The session's optimizer decides,
    except that a request carrying only the other optimizer's params object gets that optimizer."""
    algo = "muon" if (adam_params is None and muon_params is not None) else spec.optimizer
    if algo == "muon":
        hp, adam = parse_muon(muon_params, adam_params)
        return algo, hp, adam
    adam = parse_adam(adam_params)
    return algo, adam, adam


# --- the step ----------------------------------------------------------------------------------------

def _adam(theta: np.ndarray, m: np.ndarray, v: np.ndarray, g: np.ndarray, t: int, hp: dict[str, float],
          mult: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b1, b2 = hp["beta1"], hp["beta2"]
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    m_hat = m / (1.0 - power_int(b1, t))
    v_hat = v / (1.0 - power_int(b2, t))
    lr = hp["learning_rate"]
    theta = theta * (1.0 - lr * hp["weight_decay"]) - (lr * mult) * m_hat / (np.sqrt(v_hat) + hp["eps"])
    return theta, m, v


def _adam_first(g: np.ndarray, t: int, hp: dict[str, float], mult: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_adam` of parameters and moments that are all zeros (a session's first step), in fewer numpy
    calls and to the same bits: ``b * 0.0`` is +0.0 for every ``b`` in [0, 1), so each moment is its new term
    plus +0.0 (which turns a -0.0 into +0.0, as the sum with the zero moment does), and the decayed parameter
    ``0.0 * (1 - lr * wd)`` is one scalar for all (tests/test_compute_support.py compares the two)."""
    b1, b2 = hp["beta1"], hp["beta2"]
    m = (1.0 - b1) * g + 0.0
    v = (1.0 - b2) * g * g + 0.0
    m_hat = m / (1.0 - power_int(b1, t))
    v_hat = v / (1.0 - power_int(b2, t))
    lr = hp["learning_rate"]
    theta = 0.0 * (1.0 - lr * hp["weight_decay"]) - (lr * mult) * m_hat / (np.sqrt(v_hat) + hp["eps"])
    return theta, m, v


def newton_schulz_sigma(sigma: np.ndarray, steps: int) -> np.ndarray:
    """Newton-Schulz quintic on the singular value of a rank-one matrix: X <- aX + b(XX^T)X + c(XX^T)^2X."""
    a, b, c = NS_COEFFS
    for _ in range(steps):
        s2 = sigma * sigma
        sigma = a * sigma + b * s2 * sigma + c * s2 * s2 * sigma
    return sigma


# Extreme hyperparameters can overflow: non-finite weights are refused below (NON_FINITE_LOSS), so numpy's
# RuntimeWarnings would only be noise on the server's console (the decorator costs ~1 us per step).
@np.errstate(all="ignore")
def update(spec: ModelSpec, weights: Weights, opt: OptState, acc: GradAccum, adam_params: AdamParams | None,
           muon_params: MuonParams | None) -> tuple[Weights, OptState, dict[str, float]]:
    algo, hp, adam_hp = choose(spec, adam_params, muon_params)
    v_size = weights.vocab_size
    base = weights.base
    k = base.k

    # 1. global-norm clipping factor (dense-table norm of the accumulated gradient)
    norm = math.sqrt(acc.dense_norm_sq(v_size)) if not acc.is_empty else 0.0  # IEEE sqrt: same as np.sqrt
    clip = hp["grad_clip_norm"]
    scale = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0

    # 2. materialise new rows (their preferred columns) and new target columns
    new_rows = setdiff_unique(acc.rows, weights.rows)
    if weights.num_entries + new_rows.size * k + acc.keys.size > MAX_ENTRIES:
        raise ComputeError(RESOURCE_EXHAUSTED,
                           f"the session's model would exceed {MAX_ENTRIES} trained entries")
    pc, pl = base.prefs(new_rows)
    nr_keys = (new_rows[:, None] * v_size + pc).reshape(-1)
    nr_base = pl.reshape(-1)
    # (new_rows and nr_keys are sorted and unique: with nothing trained yet, either is its own union)
    rows_all = union_sorted(weights.rows, new_rows) if weights.rows.size else new_rows
    if weights.rows.size:
        in_old, old = weights.row_index(rows_all)
        beta, m_tail, v_tail = (np.where(in_old, a[old], 0.0) for a in (weights.beta, opt.m_tail, opt.v_tail))
    else:  # one array of zeros stands for the three: they are only read (the updates below make new arrays)
        beta = m_tail = v_tail = np.zeros(rows_all.size)
    known = union_sorted(weights.keys, nr_keys) if weights.keys.size else nr_keys
    cand = setdiff_unique(acc.keys, known)
    leftover = EMPTY_I64
    cap = spec.lora_row_capacity
    trim = cap is not None and cand.size and (weights.keys.size or cand.size > cap)  # else every row has room
    # each candidate's row: read to trim full rows and to join trained rows' tails (a first step mostly does neither)
    cand_ri = rows_all.searchsorted(cand // v_size) if trim or weights.rows.size else EMPTY_I64
    if trim:
        assert cap is not None
        lo = weights.keys.searchsorted(rows_all * v_size)
        hi = weights.keys.searchsorted((rows_all + 1) * v_size)
        existing = np.where(hi > lo, hi - lo - k, 0)
        room = np.maximum(cap - existing, 0)
        if cand.size > room[cand_ri].min():  # else no row has more candidates than room: all are kept
            g_abs = np.abs(acc.value_at(cand, v_size))
            order = np.lexsort((cand, -g_abs, cand_ri))
            sorted_ri = cand_ri[order]
            first = sorted_ri.searchsorted(sorted_ri)   # first index of each row's group
            rank = np.arange(order.size) - first
            keep_sorted = rank < room[sorted_ri]
            keep = np.zeros(cand.size, dtype=bool)
            keep[order[keep_sorted]] = True
            leftover = cand[~keep]
            cand, cand_ri = cand[keep], cand_ri[keep]
    fresh = False  # every parameter and moment below a zero (a session's first step)
    if nr_keys.size == 0 and cand.size == 0:  # no new entries: the (immutable) arrays carry over
        keys, base_vals, theta, m, v, buf = weights.keys, weights.base_vals, weights.theta, opt.m, opt.v, opt.buf
    else:
        all_keys = np.concatenate([weights.keys, nr_keys, cand])
        order = np.argsort(all_keys, kind="stable")
        keys = all_keys[order]

        def _join(old: np.ndarray, new_rows_vals: np.ndarray, cand_vals: np.ndarray) -> np.ndarray:
            return np.concatenate([old, new_rows_vals, cand_vals])[order]

        base_vals = _join(weights.base_vals, nr_base, np.zeros(cand.size))
        if weights.rows.size:
            zeros_nr = np.zeros(nr_keys.size)
            theta = _join(weights.theta, zeros_nr, beta[cand_ri])
            m = _join(opt.m, zeros_nr, m_tail[cand_ri])
            v = _join(opt.v, zeros_nr, v_tail[cand_ri])
            buf = _join(opt.buf, zeros_nr, np.zeros(cand.size))
        else:  # nothing trained yet: no old entries, and every tail value joined in is a zero of the lines above
            # (one array of zeros for the four: each update below makes new arrays, and an optimizer state that
            # keeps some of them unchanged holds immutable arrays, like every state)
            theta = m = v = buf = np.zeros(keys.size)
            fresh = True
    note_sizes(keys)

    # 3. gradients per entry and per tail (per-column units), clipped
    # (x * 1.0 is x bit for bit, so an unclipped gradient skips the multiplication)
    # 0 for a row without gradient; every gradient row is among rows_all, so with as many rows they are the same
    # rows (a session's first step, or a step on the rows already trained) and the tails are the gradient's
    g_tail = acc.tail if rows_all.size == acc.rows.size else lookup_sorted(acc.rows, acc.tail, rows_all)[1]
    ri = rows_all.searchsorted(keys // v_size)  # each entry's row (every entry's row is among rows_all)
    # An entry has its own accumulated gradient if it has one, else its row's tail gradient: what
    # acc.value_at(keys) answers, in a third of the numpy calls. (Every gradient column is an entry, but
    # for the leftover of a full LoRA row.)
    g_entry = g_tail[ri]
    if acc.keys.size and not leftover.size:
        g_entry[keys.searchsorted(acc.keys)] = acc.vals
    elif acc.keys.size:
        pos = np.minimum(keys.searchsorted(acc.keys), keys.size - 1)
        own = keys[pos] == acc.keys
        g_entry[pos[own]] = acc.vals[own]
    if scale != 1.0:
        g_entry = g_entry * scale
    if leftover.size:
        lo_ri = rows_all.searchsorted(leftover // v_size)
        extra = np.bincount(lo_ri, weights=acc.value_at(leftover, v_size) - g_tail[lo_ri],
                            minlength=rows_all.size)
        lo2 = keys.searchsorted(rows_all * v_size)
        hi2 = keys.searchsorted((rows_all + 1) * v_size)
        n_tail = v_size - (hi2 - lo2)
        g_tail = g_tail + np.where(n_tail > 0, extra / np.maximum(n_tail, 1), 0.0)
    if scale != 1.0:
        g_tail = g_tail * scale

    # 4. update
    mult = spec.lr_multiplier
    t_tail = opt.t_tail + 1
    t_entries = opt.t_entries
    finite: bool | None = None  # the new parameters are all finite (checked here: the caller keeps no such model)
    if algo == "adam" and t_entries + 1 == t_tail:
        # entries and tails take the same Adam update (same hyperparameters and step): one elementwise pass
        # over both costs half as many numpy calls and gives the same bits
        t_entries = t_tail
        n = keys.size
        if fresh:  # every parameter and moment is a zero
            joint = _adam_first(np.concatenate((g_entry, g_tail)), t_tail, adam_hp, mult)
        else:
            joint = _adam(np.concatenate((theta, beta)), np.concatenate((m, m_tail)), np.concatenate((v, v_tail)),
                          np.concatenate((g_entry, g_tail)), t_tail, adam_hp, mult)
        theta_all, m_all, v_all = joint  # (spelled out: a generator here cost more than the six slices)
        finite = all_finite(theta_all)  # (the entries' and the tails' parameters in one check)
        theta, beta_new, m, m_tail, v, v_tail = theta_all[:n], theta_all[n:], m_all[:n], m_all[n:], v_all[:n], v_all[n:]
    elif algo == "adam":
        beta_new, m_tail, v_tail = _adam(beta, m_tail, v_tail, g_tail, t_tail, adam_hp, mult)
        t_entries += 1
        theta, m, v = _adam(theta, m, v, g_entry, t_entries, hp, mult)
    else:
        beta_new, m_tail, v_tail = _adam(beta, m_tail, v_tail, g_tail, t_tail, adam_hp, mult)
        mu = hp["momentum"]
        buf = mu * buf + g_entry
        upd = g_entry + mu * buf
        nrm = np.sqrt(np.bincount(ri, weights=upd * upd, minlength=rows_all.size))
        sigma0 = nrm / (nrm + 1e-7)
        sigma = newton_schulz_sigma(sigma0, int(hp["newton_schulz_steps"]))
        factor = np.where(nrm > 0, sigma / np.maximum(sigma0, 1e-300) / (nrm + 1e-7), 0.0)
        lr = hp["learning_rate"]
        theta = theta * (1.0 - lr * hp["weight_decay"]) - (lr * mult / MUON_LR_DIVISOR) * upd * factor[ri]
    if finite is None:
        finite = all_finite(theta) and all_finite(beta_new)
    if not finite:
        raise ComputeError(NON_FINITE_LOSS, "the optimizer step produced non-finite weights")
    new_w = Weights(base, keys, base_vals, theta, rows_all, beta_new)
    new_opt = OptState(m, v, buf, m_tail, v_tail, t_entries, t_tail)
    info = {"grad_norm": norm, "clip_scale": scale}
    return new_w, new_opt, info


__all__ = ["OptState", "choose", "newton_schulz_sigma", "parse_adam", "parse_muon", "update"]
