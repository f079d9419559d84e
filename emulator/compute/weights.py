"""Sparse trained parameters of the bigram model, exact normalisation and the backward pass.

Emulates a session's trainable weights, ``logits[p, j] = base[p, j] + delta[p, j]``, exactly as a dense table
trained by gradient descent, without a vocabulary-sized array: a trained row stores its explicit columns and
one shared tail parameter (README, "Model"). Immutable: each step builds new :class:`Weights`.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from contextvars import ContextVar
from typing import Any

import msgspec
import numpy as np

from emulator.compute.base import BaseModel, base_model, log_partition, normalise, untrained_layout
from emulator.compute.bases import BaseModels
from emulator.compute.errors import invalid
from emulator.compute.inputs import state_int
from emulator.compute.portable import PAIRWISE_BLOCK, numpy_sum
from emulator.jsontypes import Json

_I64 = np.int64
_F64 = np.float64


# Zero-size arrays hold nothing to change, so every empty state shares these two (no allocation per call).
def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# Shared by every empty state: read-only, so that no session can write into another's.
EMPTY_I64 = _read_only(np.empty(0, dtype=_I64))
EMPTY_F64 = _read_only(np.empty(0, dtype=_F64))


def _flat(*arrays: np.ndarray) -> bool:
    return all(a.ndim == 1 for a in arrays)


def _sorted_unique(a: np.ndarray, bound: int) -> bool:
    """Whether ``a`` is strictly increasing within ``[0, bound)``."""
    return a.size == 0 or bool(a[0] >= 0 and a[-1] < bound and np.all(a[1:] > a[:-1]))


def flat_keys(rows: Any, cols: Any, vocab_size: int, what: str) -> np.ndarray:
    """``row * V + col`` of imported (row, column) pairs, each in ``[0, V)``: a column past the end would
    otherwise name a column of the next row."""
    r = np.asarray(rows, dtype=_I64)
    c = np.asarray(cols, dtype=_I64)
    if r.shape != c.shape or r.ndim != 1:
        raise invalid(f"malformed {what}: entry rows and columns are not two lists of the same length")
    if r.size and (min(r.min(), c.min()) < 0 or max(r.max(), c.max()) >= vocab_size):
        raise invalid(f"malformed {what}: an entry's row or column is outside the vocabulary of {vocab_size}")
    return r * vocab_size + c


def _segment_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return EMPTY_I64
    first = np.zeros(lengths.size, dtype=_I64)
    lengths[:-1].cumsum(out=first[1:])
    within = np.arange(total, dtype=_I64) - first.repeat(lengths)
    out: np.ndarray = starts.repeat(lengths) + within
    return out


def all_finite(a: np.ndarray) -> bool:
    """``np.isfinite(a).all()``, counting instead of reducing (half the cost on the small arrays of a step)."""
    return bool(np.count_nonzero(np.isfinite(a)) == a.size)


def lookup_sorted(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query key: (found mask, value or 0). ``keys`` must be sorted and unique."""
    if keys.size == 0 or query.size == 0:
        return np.zeros(query.shape, dtype=bool), np.zeros(query.shape, dtype=values.dtype)
    pos = keys.searchsorted(query)
    pos_c = np.minimum(pos, keys.size - 1)
    found = keys[pos_c] == query
    return found, np.where(found, values[pos_c], 0)


def lookup_or(keys: np.ndarray, values: np.ndarray, query: np.ndarray, default: np.ndarray) -> np.ndarray:
    """For each query key: its value, or ``default`` (an array like ``query``) where ``keys`` lacks it.
    :func:`lookup_sorted` and a ``np.where`` in one pass, without the found mask and zeros."""
    if keys.size == 0 or query.size == 0:
        return default
    pos = np.minimum(keys.searchsorted(query), keys.size - 1)
    return np.where(keys[pos] == query, values[pos], default)


# The set operations below replace np.unique / np.union1d / np.setdiff1d on int64 arrays. Their results
# are exact (sorted unique integers), so they equal numpy's; they exist because a typical batch has a
# few dozen elements and numpy's wrappers cost several times the work itself.
SMALL = 32  # up to this many elements, Python's set and sort beat numpy's per-call overhead (measured)


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` of a 1-D int64 array, the inverse as int64."""
    if a.size > SMALL:
        u, inv = np.unique(a, return_inverse=True)
        return u, inv.reshape(-1).astype(_I64)
    vals = a.tolist()
    uniq = sorted(set(vals))
    index = {x: i for i, x in enumerate(uniq)}
    return np.array(uniq, dtype=_I64), np.array([index[x] for x in vals], dtype=_I64)


def union_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d`` of two int64 arrays (sort, drop repeats: faster than numpy's hash-based unique)."""
    if a.size + b.size <= SMALL // 2:
        return np.array(sorted(set(a.tolist()).union(b.tolist())), dtype=_I64)
    c = np.concatenate((a, b))
    c.sort()
    keep = np.empty(c.size, dtype=bool)
    keep[:1] = True
    np.not_equal(c[1:], c[:-1], out=keep[1:])
    return c[keep]


def setdiff_unique(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(a, b, assume_unique=True)`` of int64 arrays: the elements of ``a`` not in ``b``, in order."""
    if b.size == 0:
        return a
    if a.size + b.size <= 4 * SMALL:
        vals = a.tolist()
        if len(set(vals)) == len(vals):  # numpy's result differs from the plain one if ``a`` has repeats
            drop = set(b.tolist())
            return np.array([x for x in vals if x not in drop], dtype=_I64)
    return np.setdiff1d(a, b, assume_unique=True)


class ArrayProbe:
    """Records the largest internal array the computations build, so that a test can check sparsity
    (nothing O(vocabulary)) without timing. Injected per context: ``token = ARRAY_PROBE.set(probe)``."""

    __slots__ = ("max_len",)

    def __init__(self) -> None:
        self.max_len = 0

    def note(self, *arrays: np.ndarray) -> None:
        for a in arrays:
            if a.size > self.max_len:
                self.max_len = int(a.size)


# Context-local, not shared: unset (None) unless a caller injected a probe into its own context.
ARRAY_PROBE: ContextVar[ArrayProbe | None] = ContextVar("emulator_array_probe", default=None)


def note_sizes(*arrays: np.ndarray) -> None:
    probe = ARRAY_PROBE.get()
    if probe is not None:
        probe.note(*arrays)


class RowSet(msgspec.Struct, frozen=True, eq=False, dict=True):
    """Explicit columns, tail and log-partition of a set of rows, laid out flat.

    Row ``r`` (``uprevs[r]``) owns ``cols[offsets[r]:offsets[r+1]]`` (sorted) with logits in the same
    slice, plus ``tail_n[r]`` further columns that all have logit ``tail_logit[r]``. ``all_tails``: every
    row has tail columns (always, unless the vocabulary is tiny). ``probs`` and ``tail_p``: the probability
    of each explicit column and of one tail column (0 without tail), as
    :func:`~emulator.compute.base.normalise` gives them with each row's max and sum (``row_max``,
    ``row_sum``), from which :attr:`logz` is computed when first read; rows no session trained come with
    all of it remembered by the base model (``known_logz``).
    """

    uprevs: np.ndarray
    offsets: np.ndarray
    seg: np.ndarray
    cols: np.ndarray
    logits: np.ndarray
    tail_n: np.ndarray
    tail_logit: np.ndarray
    probs: np.ndarray
    tail_p: np.ndarray
    vocab_size: int
    all_tails: bool
    row_max: np.ndarray | None = None
    row_sum: np.ndarray | None = None
    known_logz: np.ndarray | None = None

    @functools.cached_property
    def logz(self) -> np.ndarray:
        """Each row's log-partition (a logarithm per row, taken when first asked: sampling does without)."""
        if self.known_logz is not None:
            return self.known_logz
        assert self.row_max is not None and self.row_sum is not None
        return log_partition(self.row_max, self.row_sum)

    @property
    def flatkey(self) -> np.ndarray:
        key: np.ndarray = self.seg * self.vocab_size + self.cols
        return key

    def logit_of(self, ridx: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return lookup_or(self.flatkey, self.logits, ridx * self.vocab_size + tokens, self.tail_logit[ridx])

    def small_logprobs(self, ridx: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """``logit_of(ridx, tokens) - logz[ridx]`` for a few positions, by bisecting each row's columns: the
        same lookup and the same subtraction, in a third of the instructions of the dozen numpy calls."""
        cols, offsets, logits = self.cols.tolist(), self.offsets.tolist(), self.logits.tolist()
        tail, logz = self.tail_logit.tolist(), self.logz.tolist()
        out = []
        for r, t in zip(ridx.tolist(), tokens.tolist()):
            end = offsets[r + 1]
            j = bisect_left(cols, t, offsets[r], end)
            out.append((logits[j] if j < end and cols[j] == t else tail[r]) - logz[r])
        return np.array(out, dtype=_F64)

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray, int, float]:
        a, b = int(self.offsets[r]), int(self.offsets[r + 1])
        return self.cols[a:b], self.logits[a:b], int(self.tail_n[r]), float(self.tail_logit[r])


def tail_tokens(explicit_sorted: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The ``ranks``-th smallest token ids (0-based) that are *not* in ``explicit_sorted``."""
    ranks = np.asarray(ranks, dtype=_I64)
    if explicit_sorted.size == 0:
        return ranks
    adj = explicit_sorted - np.arange(explicit_sorted.size, dtype=_I64)
    return ranks + adj.searchsorted(ranks, side="right")


class GradAccum(msgspec.Struct, frozen=True, eq=False):
    """Accumulated d loss / d logit, in dense-table terms.

    ``vals[i]`` is the gradient of the column ``keys[i] = p * V + j``; every other column of a row
    listed in ``rows`` has gradient ``tail[row]``; rows not listed have zero gradient.
    """

    keys: np.ndarray
    vals: np.ndarray
    rows: np.ndarray
    tail: np.ndarray

    @staticmethod
    def empty() -> GradAccum:
        return _EMPTY_ACC  # (immutable, like every accumulator: one instance serves every session)

    @property
    def is_empty(self) -> bool:
        return self.rows.size == 0

    def value_at(self, keys: np.ndarray, vocab_size: int) -> np.ndarray:
        return lookup_or(self.keys, self.vals, keys, lookup_sorted(self.rows, self.tail, keys // vocab_size)[1])

    def merge(self, other: GradAccum, vocab_size: int) -> GradAccum:
        if self.is_empty:
            return other
        if other.is_empty:
            return self
        keys = union_sorted(self.keys, other.keys)
        vals = self.value_at(keys, vocab_size) + other.value_at(keys, vocab_size)
        rows = union_sorted(self.rows, other.rows)
        tail = lookup_sorted(self.rows, self.tail, rows)[1] + lookup_sorted(other.rows, other.tail, rows)[1]
        return GradAccum(keys, vals, rows, tail)

    def row_counts(self, vocab_size: int) -> np.ndarray:
        if self.keys.size <= 4 * SMALL:  # bisecting the key list beats six numpy calls
            keys = self.keys.tolist()
            return np.array([bisect_left(keys, (r + 1) * vocab_size) - bisect_left(keys, r * vocab_size)
                             for r in self.rows.tolist()], dtype=_I64)
        lo = self.keys.searchsorted(self.rows * vocab_size)
        hi = self.keys.searchsorted((self.rows + 1) * vocab_size)
        return hi - lo

    def dense_norm_sq(self, vocab_size: int) -> float:
        if self.keys.size <= PAIRWISE_BLOCK and self.rows.size <= PAIRWISE_BLOCK:  # the same sums in Python
            keys, v = self.keys.tolist(), vocab_size
            # (each row's tail columns as a float, then times its tail twice: numpy's int64 * float64 * float64)
            tail_sq = [float(v - bisect_left(keys, (r + 1) * v) + bisect_left(keys, r * v)) * t * t
                       for r, t in zip(self.rows.tolist(), self.tail.tolist())]
            return numpy_sum([x * x for x in self.vals.tolist()]) + numpy_sum(tail_sq)
        tail_cols = vocab_size - self.row_counts(vocab_size)
        return float((self.vals * self.vals).sum() + (tail_cols * self.tail * self.tail).sum())

    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.vals.nbytes + self.rows.nbytes + self.tail.nbytes)

    def check(self, vocab_size: int) -> None:
        """Structural invariants of an imported accumulator; raises INVALID_INPUT. :meth:`value_at` and
        :meth:`row_counts` bisect ``keys`` and ``rows``, and a column's row must be listed for its tail to
        be known, so a state that breaks these would give wrong numbers, not an error."""
        n = self.keys.size
        if not (_flat(self.keys, self.vals, self.rows, self.tail) and self.vals.size == n
                and self.tail.size == self.rows.size):
            raise invalid("malformed pending gradients: misaligned arrays")
        if not _sorted_unique(self.rows, vocab_size):
            raise invalid("malformed pending gradients: rows are not sorted and unique")
        if not _sorted_unique(self.keys, vocab_size * vocab_size):
            raise invalid("malformed pending gradients: entries are not sorted and unique")
        if n and not lookup_sorted(self.rows, self.rows, self.keys // vocab_size)[0].all():
            raise invalid("malformed pending gradients: an entry's row is not among the rows")
        if not (all_finite(self.vals) and all_finite(self.tail)):
            raise invalid("malformed pending gradients: non-finite values")



_EMPTY_ACC = GradAccum(EMPTY_I64, EMPTY_F64, EMPTY_I64, EMPTY_F64)


class Weights(msgspec.Struct, frozen=True, eq=False):
    """An immutable snapshot of the model's parameters (what a weights sync publishes)."""

    base: BaseModel
    keys: np.ndarray       # int64, sorted: row * V + col of every explicit trained column
    base_vals: np.ndarray  # float64: base logit of those columns
    theta: np.ndarray      # float64: their delta
    rows: np.ndarray       # int64, sorted: trained rows
    beta: np.ndarray       # float64: the delta shared by each trained row's tail columns

    @staticmethod
    def initial(base: BaseModel) -> Weights:
        weights: Weights = base.derived("initial weights", _initial)
        return weights

    @property
    def vocab_size(self) -> int:
        return self.base.vocab_size

    @property
    def num_entries(self) -> int:
        return int(self.keys.size)

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.keys, self.base_vals, self.theta, self.rows, self.beta)))

    def row_index(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(trained mask, index into ``self.rows``) for each row id."""
        if self.rows.size == 0:
            return np.zeros(rows.shape, dtype=bool), np.zeros(rows.shape, dtype=_I64)
        pos = np.minimum(self.rows.searchsorted(rows), self.rows.size - 1)
        return self.rows[pos] == rows, pos

    # --- forward --------------------------------------------------------------------------------
    def rowset(self, uprevs: np.ndarray) -> RowSet:
        """Explicit columns, tails and exact log-partition for the sorted unique rows ``uprevs``."""
        v = self.vocab_size
        k = self.base.k
        uprevs = np.asarray(uprevs, dtype=_I64)
        n = uprevs.size
        if self.rows.size == 0:  # nothing trained yet: each row is its k preferred columns and a zero tail
            pc, pl, logz, probs, tail_p = self.base.untrained(uprevs)  # (normalised once per row, remembered)
            offsets, seg, tail_n, tail_logit = _small_layout(n, k, v) if n <= 256 else untrained_layout(n, k, v)
            cols, logits = pc.reshape(-1), pl.reshape(-1)
            note_sizes(cols, logits, seg)
            return RowSet(uprevs, offsets, seg, cols, logits, tail_n, tail_logit, probs.reshape(-1), tail_p, v, k < v,
                          known_logz=logz)
        trained, tidx = self.row_index(uprevs)
        lengths = np.full(n, k, dtype=_I64)
        t_pos = trained.nonzero()[0]
        starts = self.keys.searchsorted(uprevs[t_pos] * v)
        ends = self.keys.searchsorted((uprevs[t_pos] + 1) * v)
        lengths[t_pos] = ends - starts
        offsets = np.zeros(n + 1, dtype=_I64)
        lengths.cumsum(out=offsets[1:])
        total = int(offsets[-1])
        cols = np.empty(total, dtype=_I64)
        logits = np.empty(total, dtype=_F64)
        if t_pos.size:
            t_len = ends - starts
            src = _segment_ranges(starts, t_len)
            dst = src + (offsets[t_pos] - starts).repeat(t_len)
            cols[dst] = self.keys[src] - uprevs[t_pos].repeat(t_len) * v
            logits[dst] = self.base_vals[src] + self.theta[src]
        u_pos = (~trained).nonzero()[0]
        if u_pos.size:
            pc, pl = self.base.prefs(uprevs[u_pos])
            dst2 = offsets[u_pos][:, None] + np.arange(k, dtype=_I64)[None, :]
            cols[dst2] = pc
            logits[dst2] = pl
        tail_logit = np.zeros(n, dtype=_F64)
        tail_logit[t_pos] = self.beta[tidx[t_pos]]
        tail_n = v - lengths
        seg = np.arange(n, dtype=_I64).repeat(lengths)
        all_tails = n == 0 or bool(lengths.max() < v)
        note_sizes(cols, logits, seg)
        if not n:
            return RowSet(uprevs, offsets, seg, cols, logits, tail_n, tail_logit, EMPTY_F64, EMPTY_F64, v, all_tails,
                          known_logz=EMPTY_F64)
        m, s, probs, tail_p = normalise(logits, offsets, seg, tail_n, tail_logit, all_tails)
        return RowSet(uprevs, offsets, seg, cols, logits, tail_n, tail_logit, probs, tail_p, v, all_tails, m, s)

    def token_logprobs(self, prevs: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, RowSet, np.ndarray]:
        """log p(target | prev) per position, plus the row set and each position's row index."""
        prevs = np.asarray(prevs, dtype=_I64)
        targets = np.asarray(targets, dtype=_I64)
        uprevs, ridx = unique_inverse(prevs)
        rs = self.rowset(uprevs)
        if ridx.size <= SMALL and rs.cols.size <= 4 * SMALL:
            return rs.small_logprobs(ridx, targets), rs, ridx
        lp = rs.logit_of(ridx, targets) - rs.logz[ridx]
        return lp, rs, ridx

    # --- state ----------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Json]:
        v = self.vocab_size
        return {
            "base": self.base.describe(),
            "entry_rows": (self.keys // v).tolist(),
            "entry_cols": (self.keys % v).tolist(),
            "entry_base": self.base_vals.tolist(),
            "entry_delta": self.theta.tolist(),
            "rows": self.rows.tolist(),
            "row_tail_delta": self.beta.tolist(),
        }

    @staticmethod
    def from_state(state: dict[str, Any], bases: BaseModels | None = None) -> Weights:
        try:
            b = state["base"]
            vocab = state_int(b["vocab_size"], "weights state: base.vocab_size", 1, 2**31)
            base = base_model(state_int(b["seed"], "weights state: base.seed", 0, 2**64),
                              vocab, state_int(b["eos_token_id"], "weights state: base.eos_token_id", 0, vocab - 1),
                              bases)
            v = base.vocab_size
            keys = flat_keys(state["entry_rows"], state["entry_cols"], v, "weights")
            w = Weights(base, keys, np.asarray(state["entry_base"], dtype=_F64),
                        np.asarray(state["entry_delta"], dtype=_F64), np.asarray(state["rows"], dtype=_I64),
                        np.asarray(state["row_tail_delta"], dtype=_F64))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise invalid(f"malformed weights state: {exc}") from exc
        w.check()
        return w

    def check(self) -> None:
        """Structural invariants (sorted unique keys, aligned arrays); raises INVALID_INPUT."""
        n = self.keys.size
        if not (_flat(self.keys, self.base_vals, self.theta, self.rows, self.beta) and self.base_vals.size == n
                and self.theta.size == n and self.beta.size == self.rows.size):
            raise invalid("malformed weights: misaligned arrays")
        if not _sorted_unique(self.keys, self.vocab_size * self.vocab_size):
            raise invalid("malformed weights: entries are not sorted and unique")
        if not _sorted_unique(self.rows, self.vocab_size):
            raise invalid("malformed weights: rows are not sorted and unique")
        if not (all_finite(self.theta) and all_finite(self.beta) and all_finite(self.base_vals)):
            raise invalid("malformed weights: non-finite values")


@functools.lru_cache(maxsize=256)
def _small_layout(n: int, k: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`untrained_layout` of a few rows (a batch's), the same for every batch of ``n`` rows: built once
    and shared, read-only (nothing writes into a row set's arrays; numpy would refuse it)."""
    arrays = untrained_layout(n, k, v)
    for a in arrays:
        a.flags.writeable = False
    return arrays


def _initial(base: BaseModel) -> Weights:
    """The untrained weights of a base model: immutable, so every new session on it shares one instance
    (kept with the base model: :meth:`BaseModel.derived`)."""
    return Weights(base, EMPTY_I64, EMPTY_F64, EMPTY_F64, EMPTY_I64, EMPTY_F64)


def backward(rs: RowSet, ridx: np.ndarray, targets: np.ndarray, dlp: np.ndarray) -> GradAccum:
    """Turn d loss / d logprob per position into d loss / d logit (dense-table terms).

    For a position with row ``p``, target ``y`` and upstream gradient ``g``:
    ``d logp / d logit[p, j] = 1[j = y] - P(j | p)``, so the row's gradient is
    ``c_j - S_p * P(j | p)`` with ``S_p = sum(g)`` over its positions and ``c_j`` the ``g`` summed over
    positions targeting ``j``. Every tail column that is not a target gets ``-S_p * P_tail``.
    """
    if dlp.size + rs.cols.size <= SMALL_BACKWARD:
        return _backward_small(rs, ridx, targets, dlp)
    return _backward_arrays(rs, ridx, targets, dlp)


# Up to this many positions and explicit columns together, Python's loops beat the ~45 numpy calls of
# :func:`_backward_arrays` (a training step on a few short samples); it is the same arithmetic in the same
# order, so the same bits (tests/test_compute_support.py compares the two).
SMALL_BACKWARD = 256


def _backward_small(rs: RowSet, ridx: np.ndarray, targets: np.ndarray, dlp: np.ndarray) -> GradAccum:
    """:func:`_backward_arrays` for a few positions: each sum starts at 0.0 and adds in position order, as
    ``np.bincount`` does, and every value gets its target sum added (0.0 if none), as ``vals + t_part`` does."""
    v = rs.vocab_size
    uprevs = rs.uprevs.tolist()
    s_row: dict[int, float] = {}   # touched row -> sum of its positions' g
    t_sum: dict[int, float] = {}   # target key -> sum of its positions' g
    t_row: dict[int, int] = {}     # target key -> its row
    for r, y, g in zip(np.asarray(ridx, dtype=_I64).tolist(), np.asarray(targets, dtype=_I64).tolist(),
                       np.asarray(dlp, dtype=_F64).tolist()):
        if g != 0:
            s_row[r] = s_row.get(r, 0.0) + g
            key = uprevs[r] * v + y
            t_sum[key] = t_sum.get(key, 0.0) + g
            t_row[key] = r
    if not s_row:
        return GradAccum.empty()
    offsets, cols, probs, tail_p = rs.offsets.tolist(), rs.cols.tolist(), rs.probs.tolist(), rs.tail_p.tolist()
    rows_t = sorted(s_row)
    base: dict[int, float] = {}    # key -> its gradient before the target sums: explicit, else the tail's
    for r in rows_t:
        neg = -s_row[r]
        first = uprevs[r] * v
        for j in range(offsets[r], offsets[r + 1]):
            base[first + cols[j]] = neg * probs[j]
    for key, r in t_row.items():
        if key not in base:
            base[key] = -s_row[r] * tail_p[r]
    keys = sorted(base)
    vals = [base[k] + t_sum.get(k, 0.0) for k in keys]
    if rs.all_tails:
        tail = [-s_row[r] * tail_p[r] for r in rows_t]
    else:  # a row without tail columns has no tail gradient (not even -0.0)
        tail_n = rs.tail_n.tolist()
        tail = [-s_row[r] * tail_p[r] if tail_n[r] > 0 else 0.0 for r in rows_t]
    out = GradAccum(np.array(keys, dtype=_I64), np.array(vals, dtype=_F64), np.array([uprevs[r] for r in rows_t],
                    dtype=_I64), np.array(tail, dtype=_F64))
    note_sizes(out.keys, out.vals)
    return out


def _backward_arrays(rs: RowSet, ridx: np.ndarray, targets: np.ndarray, dlp: np.ndarray) -> GradAccum:
    """:func:`backward` in numpy calls, whatever the batch's size."""
    v = rs.vocab_size
    nz = (dlp != 0).nonzero()[0]
    if nz.size == 0:
        return GradAccum.empty()
    r = ridx[nz]
    y = np.asarray(targets, dtype=_I64)[nz]
    g = np.asarray(dlp, dtype=_F64)[nz]
    n = rs.uprevs.size
    s_row = np.bincount(r, weights=g, minlength=n)
    neg_s = -s_row  # (negated once: -x[i] is (-x)[i] bit for bit)
    touched = np.bincount(r, minlength=n) > 0
    in_touched = touched[rs.seg]
    e_keys = (rs.uprevs[rs.seg] * v + rs.cols)[in_touched]
    e_vals = (neg_s[rs.seg] * rs.probs)[in_touched]
    p_tail = rs.tail_p
    t_keys_all = rs.uprevs[r] * v + y
    t_keys, inv = unique_inverse(t_keys_all)
    t_vals = np.bincount(inv, weights=g, minlength=t_keys.size)
    keys = union_sorted(e_keys, t_keys)
    row_of = rs.uprevs.searchsorted(keys // v)
    vals = neg_s[row_of] * p_tail[row_of]          # a target column outside the explicit ones: tail
    vals[keys.searchsorted(e_keys)] = e_vals       # both key sets are part of ``keys``
    t_part = np.zeros(keys.size, dtype=_F64)
    t_part[keys.searchsorted(t_keys)] = t_vals
    vals = vals + t_part                           # (adding the zeros too keeps the sign of -0.0 as before)
    rows_t = touched.nonzero()[0]
    tail = neg_s[rows_t] * p_tail[rows_t]
    if not rs.all_tails:  # a row without tail columns has no tail gradient (not even -0.0)
        tail = np.where(rs.tail_n[rows_t] > 0, tail, 0.0)
    note_sizes(keys, vals)
    return GradAccum(keys, vals, rs.uprevs[rows_t], tail)


__all__ = ["ARRAY_PROBE", "EMPTY_F64", "EMPTY_I64", "ArrayProbe", "GradAccum", "RowSet", "Weights", "all_finite", "backward",
           "flat_keys", "lookup_or", "lookup_sorted", "note_sizes", "setdiff_unique", "tail_tokens", "union_sorted",
           "unique_inverse"]
