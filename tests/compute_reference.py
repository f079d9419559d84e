"""Dense reference computations of the simulated model, O(vocabulary) per row: for tests only.

The emulator never builds a full logit row (memory and time grow with what was trained, never with the
vocabulary); these helpers do, on small vocabularies, so that tests can check the sparse computations
against the plain definition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from emulator.compute.base import BaseModel
from emulator.compute.model import SessionModel
from emulator.compute.weights import ARRAY_PROBE, ArrayProbe, Weights


def dense_row(base: BaseModel, row: int) -> np.ndarray:
    """The base model's full logit row."""
    cols, logits = base.prefs(np.array([row]))
    out = np.zeros(base.vocab_size, dtype=np.float64)
    out[cols[0]] = logits[0]
    return out


def dense_logits(weights: Weights, rows: list[int] | np.ndarray) -> np.ndarray:
    """Full logit rows of a weights snapshot: the base row, the trained row's tail shift, its trained entries."""
    rows = np.asarray(rows, dtype=np.int64)
    v = weights.vocab_size
    out = np.zeros((rows.size, v), dtype=np.float64)
    trained, tidx = weights.row_index(rows)
    for i, p in enumerate(rows.tolist()):
        out[i] = dense_row(weights.base, p)
        if trained[i]:
            out[i] += weights.beta[tidx[i]]
            a = weights.keys.searchsorted(p * v)
            b = weights.keys.searchsorted((p + 1) * v)
            out[i, weights.keys[a:b] - p * v] = weights.base_vals[a:b] + weights.theta[a:b]
    return out


@contextlib.contextmanager
def array_probe() -> Iterator[ArrayProbe]:
    """Inject an :class:`ArrayProbe` into this context for the duration of the block."""
    probe = ArrayProbe()
    token = ARRAY_PROBE.set(probe)
    try:
        yield probe
    finally:
        ARRAY_PROBE.reset(token)


def pending_gradient(model: SessionModel, rows: list[int] | np.ndarray) -> np.ndarray:
    """Dense d loss / d logit rows accumulated since the model's last optim-step."""
    acc = model._acc  # the model's pending gradients (private: a test looks inside)
    rows = np.asarray(rows, dtype=np.int64)
    v = model.vocab_size
    out = np.zeros((rows.size, v), dtype=np.float64)
    for i, p in enumerate(rows.tolist()):
        out[i] = acc.value_at(p * v + np.arange(v, dtype=np.int64), v)
    return out
