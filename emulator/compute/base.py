"""The analytic base model: a seeded bigram table over the full vocabulary that is never stored.

Emulates the frozen pretrained weights a session starts from. Row ``p`` of the table (the logits
of the token following token ``p``) is flat, logit 0, except for ``k = min(8, V)`` *preferred*
next tokens whose logits are ``log(V) + PREF_LADDER[i] + 0.5 * u`` with ``u`` a seeded uniform.
The preferred tokens of a row are an arithmetic progression ``a + i*b (mod V)`` with ``a``, ``b``
hashed from (seed, p) and ``gcd(b, V) = 1``, so they are distinct and computable from the row id
alone: no array proportional to the vocabulary is ever built. In one row out of four (seeded) the
end token takes preferred slot 3, so generation ends by itself from time to time.

A real base model has context-dependent, non-sparse logits; this one only looks at the previous
token and concentrates ~96% of each row's mass on eight tokens. That is enough for sampling to
look like text-shaped token streams and for training effects to be measurable.

Rows are computed with a couple of dozen numpy operations, whose fixed cost dominates for the few
rows of a typical batch; so each base model remembers the rows it computed (up to
:data:`ROW_CACHE_ROWS`), and :func:`base_model` hands out one instance per (seed, vocabulary, end
token), which every session on the same base model shares. A remembered row is the very array the
vectorised computation produced (every row is computed independently), so results are bit-identical.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulator.compute.spec import EOS_ROW_PERIOD, EOS_SLOT, NUM_PREFERRED, PREF_JITTER, PREF_LADDER

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
    return x ^ (x >> _U64(31))


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", min(NUM_PREFERRED, self.vocab_size))
        object.__setattr__(self, "log_v", math.log(self.vocab_size))
        object.__setattr__(self, "_s", mix64(np.array([seed_to_u64(self.seed)], dtype=_U64)))
        object.__setattr__(self, "_ladder", np.asarray(PREF_LADDER[: self.k], dtype=np.float64))
        object.__setattr__(self, "_rows", _RowCache(self.k))

    def describe(self) -> dict[str, object]:
        return {"seed": int(self.seed), "vocab_size": int(self.vocab_size), "eos_token_id": int(self.eos)}

    def prefs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Preferred tokens and their logits for each row: two ``(len(rows), k)`` arrays, sorted by token."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0 or rows.size > ROW_CACHE_BATCH:
            return self._compute(rows)
        return self._rows.get(rows, self._compute)

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

    def dense_row(self, row: int) -> np.ndarray:
        """The full logit row (O(V)); for tests and small-vocabulary reference computations only."""
        cols, logits = self.prefs(np.array([row]))
        out = np.zeros(self.vocab_size, dtype=np.float64)
        out[cols[0]] = logits[0]
        return out


ROW_CACHE_ROWS = 1 << 15     # rows remembered per base model (2 x 8 x 8 bytes each, plus the index)
ROW_CACHE_BATCH = 4096       # larger batches are computed directly: the vectorised cost is amortised


class _RowCache:
    """Rows already computed, in two preallocated tables; full, it stops remembering new rows."""

    def __init__(self, k: int) -> None:
        self.slots: dict[int, int] = {}
        self.cols = np.empty((0, k), dtype=np.int64)
        self.logits = np.empty((0, k), dtype=np.float64)
        self.lock = threading.Lock()

    def get(self, rows: np.ndarray, compute: Any) -> tuple[np.ndarray, np.ndarray]:
        keys = rows.tolist()
        slots = self.slots
        found = [slots.get(r) for r in keys]
        if None in found:
            missing = sorted({r for r, slot in zip(keys, found) if slot is None})
            cols, logits = compute(np.asarray(missing, dtype=np.int64))
            with self.lock:
                self._remember(missing, cols, logits)
                found = [slots.get(r) for r in keys]
            if None in found:  # the cache is full: answer from a fresh computation
                return compute(rows)
        index = np.asarray(found, dtype=np.intp)
        return self.cols[index], self.logits[index]

    def _remember(self, rows: list[int], cols: np.ndarray, logits: np.ndarray) -> None:
        new = [i for i, r in enumerate(rows) if r not in self.slots]
        n = len(self.slots)
        if not new or n + len(new) > ROW_CACHE_ROWS:
            return
        if n + len(new) > len(self.cols):
            size = min(ROW_CACHE_ROWS, max(256, 2 * (n + len(new))))
            grown_cols = np.empty((size, cols.shape[1]), dtype=np.int64)
            grown_logits = np.empty((size, cols.shape[1]), dtype=np.float64)
            grown_cols[:n], grown_logits[:n] = self.cols[:n], self.logits[:n]
            self.cols, self.logits = grown_cols, grown_logits  # readers keep the old tables until done
        for offset, i in enumerate(new):
            self.cols[n + offset] = cols[i]
            self.logits[n + offset] = logits[i]
            self.slots[rows[i]] = n + offset  # published after the row is written


@functools.lru_cache(maxsize=64)
def base_model(seed: int, vocab_size: int, eos: int) -> BaseModel:
    """The shared base model of a (seed, vocabulary, end token): sessions on one base model share rows."""
    return BaseModel(int(seed), int(vocab_size), int(eos))


__all__ = ["BaseModel", "base_model", "hash_tokens", "mix64", "seed_to_u64"]
