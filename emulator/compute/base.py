"""The analytic base model: a seeded bigram table over the full vocabulary that is never stored.

Emulates the frozen pretrained weights a session starts from: row ``p`` is flat except for ``min(8, V)``
seeded preferred next tokens (README, "Model"). Differs: only the previous token matters and ~96% of a row's
mass is on eight tokens, enough for text-shaped samples and measurable training effects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from emulator.compute.bases import BaseModels
from emulator.compute.portable import exp, log, log_float
from emulator.compute.spec import EOS_ROW_PERIOD, EOS_SLOT, NUM_PREFERRED, PREF_JITTER, PREF_LADDER

T = TypeVar("T")

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_SALT_B = _U64(0xD1B54A32D192ED03)
_SALT_EOS = _U64(0x8CB92BA72F3D8DD7)
_SALT_JIT = _U64(0xABC98388FB8FAC03)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic, no warnings on arrays)."""
    x = x + _GOLDEN
    x = (x ^ (x >> _U64(30))) * _M1
    x = (x ^ (x >> _U64(27))) * _M2
    out: np.ndarray = x ^ (x >> _U64(31))
    return out


def seed_to_u64(seed: int | str) -> int:
    return int(seed) & _MASK64


def hash_tokens(tokens: np.ndarray) -> int:
    """Order-sensitive 64-bit hash of a token array (used to seed sampling per prompt)."""
    t = np.asarray(tokens, dtype=np.int64).astype(_U64)
    n = t.size
    if n == 0:
        return 0
    pos = mix64(np.arange(n, dtype=_U64) + _SALT_B)
    folded = np.bitwise_xor.reduce(mix64(t ^ pos))
    return int(mix64(np.array([folded ^ _U64(n)], dtype=_U64))[0])


@dataclass(frozen=True)
class BaseModel:
    """The analytic base table for one (seed, vocab_size, eos) triple."""

    seed: int
    vocab_size: int
    eos: int
    k: int = field(init=False)
    log_v: float = field(init=False)
    _s: np.ndarray = field(init=False, repr=False, compare=False)
    _ladder: np.ndarray = field(init=False, repr=False, compare=False)
    _rows: _RowCache = field(init=False, repr=False, compare=False)
    _derived: dict[str, object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", min(NUM_PREFERRED, self.vocab_size))
        object.__setattr__(self, "log_v", log_float(float(self.vocab_size)))
        object.__setattr__(self, "_s", mix64(np.array([seed_to_u64(self.seed)], dtype=_U64)))
        object.__setattr__(self, "_ladder", np.asarray(PREF_LADDER[: self.k], dtype=np.float64))
        object.__setattr__(self, "_rows", _RowCache(self.k))
        object.__setattr__(self, "_derived", {})

    def derived(self, name: str, build: Callable[[BaseModel], T]) -> T:
        """A value built once from this base model and kept with it (its untrained weights, say): it lives
        and dies with the base model, so with the runtime that owns it. A name is built by one ``build``."""
        value = self._derived.get(name)
        if value is None:
            value = self._derived[name] = build(self)
        return cast(T, value)

    def describe(self) -> dict[str, object]:
        return {"seed": int(self.seed), "vocab_size": int(self.vocab_size), "eos_token_id": int(self.eos)}

    def prefs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Preferred tokens and their logits for each row: two ``(len(rows), k)`` arrays, sorted by token."""
        cols, logits = self._cached(rows, 2, self._compute)
        return cols, logits

    def untrained(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`prefs` plus each row's normalisation while untrained (its tail logit 0): log-partition
        ``(n,)``, probabilities of the preferred tokens ``(n, k)`` and of each tail token ``(n,)``, as
        :func:`normalise` and :func:`log_partition` give them."""
        cols, logits, logz, probs, tail_p = self._cached(rows, 5, self._compute_untrained)
        return cols, logits, logz, probs, tail_p

    def _cached(self, rows: np.ndarray, count: int, direct: Any) -> tuple[np.ndarray, ...]:
        """The row cache's first ``count`` tables for ``rows``, or ``direct(rows)`` where the cache does not
        answer: no rows, a batch too large to be worth remembering, or a full cache."""
        rows = np.asarray(rows, dtype=np.int64)
        if 0 < rows.size <= ROW_CACHE_BATCH:
            got = self._rows.get(rows, self._compute_untrained, count)
            if got is not None:
                return got
        return tuple(direct(rows))

    def _compute_untrained(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                            np.ndarray]:
        cols, logits = self._compute(rows)
        n, k, v = rows.size, self.k, self.vocab_size
        if n == 0:
            return cols, logits, np.empty(0), np.empty((0, k)), np.empty(0)
        offsets, seg, tail_n, tail_logit = untrained_layout(n, k, v)
        flat = logits.reshape(-1)
        m, s, probs, tail_p = normalise(flat, offsets, seg, tail_n, tail_logit, k < v)
        return cols, logits, log_partition(m, s), probs.reshape(n, k), tail_p

    def _compute(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = self.vocab_size
        k = self.k
        if rows.size == 0:
            return np.empty((0, k), dtype=np.int64), np.empty((0, k), dtype=np.float64)
        h = mix64(rows.astype(_U64) ^ self._s)
        a = (h % _U64(v)).astype(np.int64)
        b = (mix64(h ^ _SALT_B) % _U64(v - 1)).astype(np.int64) + 1
        g = np.gcd(b, v)
        while np.any(g != 1):
            b = np.where(g != 1, b % (v - 1) + 1, b)
            g = np.gcd(b, v)
        i = np.arange(k, dtype=np.int64)
        cols = (a[:, None] + i[None, :] * b[:, None]) % v
        jit_bits = mix64(h[:, None] ^ (_SALT_JIT * (i.astype(_U64)[None, :] + _U64(1)))) >> _U64(11)
        jitter = jit_bits.astype(np.float64) * (1.0 / (1 << 53))
        logits = self.log_v + self._ladder[None, :] + PREF_JITTER * jitter
        if k > EOS_SLOT and k < v:
            eos_rows = (mix64(h ^ _SALT_EOS) % _U64(EOS_ROW_PERIOD)) == _U64(0)
            sel = eos_rows & ~np.any(cols == self.eos, axis=1)
            cols[sel, EOS_SLOT] = self.eos
        order = np.argsort(cols, axis=1, kind="stable")
        return np.take_along_axis(cols, order, axis=1), np.take_along_axis(logits, order, axis=1)



def untrained_layout(n: int, k: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """How ``n`` untrained rows lie flat (see :class:`emulator.compute.weights.RowSet`): offsets, each
    column's row, tail size and tail logit (0)."""
    return (np.arange(0, (n + 1) * k, k, dtype=np.int64), np.arange(n, dtype=np.int64).repeat(k),
            np.full(n, v - k, dtype=np.int64), np.zeros(n, dtype=np.float64))


def normalise(logits: np.ndarray, offsets: np.ndarray, seg: np.ndarray, tail_n: np.ndarray,
              tail_logit: np.ndarray, all_tails: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exact normalisation of rows laid out flat (see :class:`emulator.compute.weights.RowSet`: explicit
    logits ``logits[offsets[r]:offsets[r+1]]`` plus ``tail_n[r]`` columns of logit ``tail_logit[r]``): each
    row's largest logit ``m`` and ``s``, the sum of ``exp(logit - m)`` over its columns (``log Z = m + log(s)``:
    :func:`log_partition`), the probability ``exp(logit - m) / s`` of each explicit column and that of one
    tail column per row (0 for a row without tail columns). ``all_tails``: every row has tail columns (else a
    row without leaves the tail out of its max and sum). One exponential per column; rows are computed
    independently, so a row's values do not depend on the other rows passed."""
    seg_max = np.maximum.reduceat(logits, offsets[:-1])
    if all_tails:  # the masks below would select everything
        m = np.maximum(seg_max, tail_logit)
    else:
        has_tail = tail_n > 0
        m = np.where(has_tail, np.maximum(seg_max, tail_logit), seg_max)
    n = logits.size
    e = exp(np.concatenate((logits - m[seg], tail_logit - m)))
    explicit, tail = e[:n], e[n:]
    if not all_tails:
        tail = np.where(has_tail, tail, 0.0)
    s = np.add.reduceat(explicit, offsets[:-1]) + tail_n * tail
    return m, s, explicit / s[seg], tail / s


def log_partition(m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``log Z`` of rows from their :func:`normalise` max and sum."""
    out: np.ndarray = m + log(s)
    return out


ROW_CACHE_ROWS = 1 << 15     # rows remembered per base model (~200 bytes each with their normalisation)
ROW_CACHE_BATCH = 4096       # larger batches are computed directly: the vectorised cost is amortised


class _RowCache:
    """Rows already computed, in preallocated tables (preferred tokens, their logits, and the row's
    normalisation while untrained); full, it stops remembering new rows."""

    def __init__(self, k: int) -> None:
        self.slots: dict[int, int] = {}
        self.tables: tuple[np.ndarray, ...] = _tables(0, k)
        self.lock = threading.Lock()

    def get(self, rows: np.ndarray, compute: Any, count: int) -> tuple[np.ndarray, ...] | None:
        """The first ``count`` (2 or 5) tables' entries for ``rows`` (``compute`` gives all five for new rows),
        or None when the cache is full and does not hold them all."""
        keys = rows.tolist()
        slots = self.slots
        found = [slots.get(r) for r in keys]
        if None in found:
            missing = sorted({r for r, slot in zip(keys, found) if slot is None})
            computed = compute(np.asarray(missing, dtype=np.int64))
            with self.lock:
                self._remember(missing, computed)
                found = [slots.get(r) for r in keys]
            if None in found:  # the cache is full
                return None
        index = np.asarray(found, dtype=np.intp)
        t = self.tables  # (one snapshot: a concurrent grow swaps in new tables)
        # Rows of the (n, k) tables by take(axis=0), a quarter of what indexing a 2-D array with an index array
        # costs (the same rows, copied); the 1-D tables by indexing, which is the cheaper of the two there.
        if count == 2:  # (spelled out: a generator here cost more than the two lookups)
            return t[0].take(index, axis=0), t[1].take(index, axis=0)
        return t[0].take(index, axis=0), t[1].take(index, axis=0), t[2][index], t[3].take(index, axis=0), t[4][index]

    def _remember(self, rows: list[int], computed: tuple[np.ndarray, ...]) -> None:
        new = [i for i, r in enumerate(rows) if r not in self.slots]
        n = len(self.slots)
        if not new or n + len(new) > ROW_CACHE_ROWS:
            return
        tables = self.tables
        if n + len(new) > len(tables[0]):
            size = min(ROW_CACHE_ROWS, max(256, 2 * (n + len(new))))
            grown = _tables(size, tables[0].shape[1])
            for g, t in zip(grown, tables):
                g[:n] = t[:n]
            self.tables = tables = grown  # readers keep the old tables until done
        for offset, i in enumerate(new):
            for t, c in zip(tables, computed):
                t[n + offset] = c[i]
            self.slots[rows[i]] = n + offset  # published after the row is written


def _tables(size: int, k: int) -> tuple[np.ndarray, ...]:
    """Empty row-cache tables: cols, logits, logz, probabilities, tail probability."""
    return (np.empty((size, k), dtype=np.int64), np.empty((size, k), dtype=np.float64), np.empty(size),
            np.empty((size, k)), np.empty(size))


def base_model(seed: int, vocab_size: int, eos: int, bases: BaseModels | None = None) -> BaseModel:
    """The base model of a (seed, vocabulary, end token): the runtime's shared one, or (without ``bases``:
    tools and tests) a new one."""
    key = (int(seed), int(vocab_size), int(eos))
    if bases is None:
        return BaseModel(*key)
    model: BaseModel | None = bases.get(key)
    if model is None:
        model = BaseModel(*key)
        bases.add(key, model)
    return model


__all__ = ["BaseModel", "base_model", "hash_tokens", "log_partition", "mix64", "normalise", "seed_to_u64",
           "untrained_layout"]
