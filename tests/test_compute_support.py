"""Shared helpers for the compute tests, plus tests of the model's building blocks.

The helpers compute reference values the slow, obvious way: a dense ``V x V`` logit table (small V)
and a full log-softmax, independent of the sparse normalisation the model uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from compute_reference import dense_logits
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.compute import ModelSpec, Weights
from emulator.compute import SessionModel as TypedModel
from emulator.compute.base import BaseModel
from emulator.compute.inputs import Batch
from emulator.compute.losses import LossConfig, _cross_entropy, _cross_entropy_small
from emulator.compute.optim import _adam, _adam_first
from emulator.compute.portable import PAIRWISE_BLOCK, numpy_sum
from emulator.compute.types import (
    AdamParams,
    Gradient,
    Loss,
    ModelInput,
    MuonParams,
    Sample,
    SamplingParams,
    decode,
)
from emulator.compute.weights import GradAccum, _backward_arrays, _backward_small, tail_tokens

V = 64


class SessionModel(TypedModel):
    """The model as the compute tests drive it: with the JSON a request carries, read as the API reads it
    (``decode``: what cannot be read is INVALID_INPUT before the model is touched)."""

    def loss_and_grad(self, samples: Any, loss: Any, **kw: Any) -> Any:  # type: ignore[override]
        return super().loss_and_grad(decode(samples, tuple[Sample, ...], "samples"), decode(loss, Loss, "loss"), **kw)

    def accumulate_gradients(self, samples: Any, gradients: Any) -> Any:  # type: ignore[override]
        return super().accumulate_gradients(decode(samples, tuple[Sample, ...], "samples"),
                                            decode(gradients, tuple[Gradient, ...], "gradients"))

    def update(self, adam_params: Any, muon_params: Any) -> int:  # type: ignore[override]
        return super().update(decode(adam_params, AdamParams | None, "adam_params"),
                              decode(muon_params, MuonParams | None, "muon_params"))

    def sample(self, weights: Any, model_inputs: Any, *, sampling_params: Any, **kw: Any) -> Any:  # type: ignore[override]
        return super().sample(weights, decode(model_inputs, tuple[ModelInput, ...], "model_inputs"),
                              sampling_params=decode(sampling_params, SamplingParams | None, "sampling_params"), **kw)


def make_spec(**kw: Any) -> ModelSpec:
    base: dict[str, Any] = {"vocab_size": V, "max_seq_length": 512, "max_batch_size": 64,
                            "context_length": 256, "lora_rank": 8, "lora_alpha": 64.0, "train_unembed": True,
                            "seed": 7, "optimizer": "adam"}
    base.update(kw)
    return ModelSpec(**base)


def model_input(tokens: list[int]) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": list(tokens)}}]}


def tensor(data: Any, dtype: str) -> dict[str, Any]:
    return {"data": list(data), "dtype": dtype}


def datum(inputs: list[int], targets: list[int], **tensors: Any) -> dict[str, Any]:
    """A sample; keyword tensors are float32 unless given as (data, dtype)."""
    lfi: dict[str, Any] = {"target_tokens": tensor(targets, "int64")}
    for key, val in tensors.items():
        lfi[key] = tensor(val[0], val[1]) if isinstance(val, tuple) else tensor(val, "float32")
    return {"model_input": model_input(inputs), "loss_fn_inputs": lfi}


def sft_datum(seq: list[int], weights: list[float] | None = None) -> dict[str, Any]:
    w = weights if weights is not None else [1.0] * (len(seq) - 1)
    return datum(seq[:-1], seq[1:], weights=w)


def dense_table(weights: Weights) -> np.ndarray:
    return dense_logits(weights, np.arange(weights.vocab_size))


def dense_logprobs(weights: Weights, prevs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    table = dense_table(weights)
    m = table.max(axis=1, keepdims=True)
    logz = (m + np.log(np.exp(table - m).sum(axis=1, keepdims=True)))[:, 0]
    return table[prevs, targets] - logz[prevs]


def random_trained_model(seed: int = 0, steps: int = 3, **spec_kw: Any) -> SessionModel:
    """A model with non-trivial weights: trained rows, moved tails, several explicit columns."""
    rng = np.random.default_rng(seed)
    model = SessionModel(make_spec(**spec_kw))
    for _ in range(steps):
        seqs = [rng.integers(0, V - 1, 12).tolist() for _ in range(4)]
        model.loss_and_grad([sft_datum(s) for s in seqs], {"type": "LOSS_TYPE_CROSS_ENTROPY"})
        model.update({"learning_rate": 3e-4}, None)
    return model


# --- tests of the building blocks ---------------------------------------------------------------------

def test_base_preferred_tokens_are_distinct_sorted_and_in_range() -> None:
    for vocab in (2, 3, 8, 9, 64, 1000, 151_936):
        base = BaseModel(seed=5, vocab_size=vocab, eos=vocab - 1)
        rows = np.arange(min(vocab, 500))
        cols, logits = base.prefs(rows)
        assert cols.shape == (rows.size, min(8, vocab))
        assert np.all((cols >= 0) & (cols < vocab))
        assert np.all(np.diff(cols, axis=1) > 0)          # sorted and distinct
        assert np.all(logits > 0)                         # above the flat tail (logit 0)


def test_base_depends_on_seed_only_through_the_seed() -> None:
    a = BaseModel(1, 1000, 999).prefs(np.arange(50))
    b = BaseModel(1, 1000, 999).prefs(np.arange(50))
    c = BaseModel(2, 1000, 999).prefs(np.arange(50))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_some_rows_prefer_the_end_token() -> None:
    base = BaseModel(3, 5000, 4999)
    cols, _ = base.prefs(np.arange(400))
    share = np.mean(np.any(cols == 4999, axis=1))
    assert 0.15 < share < 0.35


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=30), st.data())
def test_tail_tokens_is_the_rth_token_outside_the_explicit_set(explicit: set[int],
                                                                data: st.DataObject) -> None:
    vocab = 61
    complement = [t for t in range(vocab) if t not in explicit]
    if not complement:
        return
    ranks = data.draw(st.lists(st.integers(0, len(complement) - 1), min_size=1, max_size=10))
    got = tail_tokens(np.array(sorted(explicit), dtype=np.int64), np.array(ranks))
    assert got.tolist() == [complement[r] for r in ranks]


def test_sparse_normalisation_equals_dense_log_softmax() -> None:
    model = random_trained_model(seed=1, steps=4)
    w = model.weights()
    assert w.rows.size > 5 and np.any(w.beta != 0)
    prevs = np.repeat(np.arange(V), V)
    targets = np.tile(np.arange(V), V)
    got = w.token_logprobs(prevs, targets)[0]
    np.testing.assert_allclose(got, dense_logprobs(w, prevs, targets), rtol=0, atol=1e-12)
    # every row is a proper distribution
    np.testing.assert_allclose(np.exp(got.reshape(V, V)).sum(axis=1), 1.0, atol=1e-12)


def _trained(vocab: int, steps: int, seed: int) -> Weights:
    """Weights of a model trained ``steps`` times on random sequences of a ``vocab``-token vocabulary."""
    rng = np.random.default_rng(seed)
    model = SessionModel(make_spec(vocab_size=vocab, lora_rank=1 if seed % 2 else None))
    for _ in range(steps):
        seqs = [rng.integers(0, vocab, 12).tolist() for _ in range(3)]
        model.loss_and_grad([sft_datum(s) for s in seqs], {"type": "LOSS_TYPE_CROSS_ENTROPY"})
        model.update({"learning_rate": 3e-3}, None)
    return model.weights()


def _bits(*arrays: np.ndarray) -> list[tuple[str, tuple[int, ...], bytes]]:
    return [(a.dtype.str, a.shape, a.tobytes()) for a in arrays]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_few_position_paths_give_the_bits_of_the_array_paths(data: Any) -> None:
    """A short batch's log-probs and backward pass are computed in Python (``RowSet.small_logprobs``,
    ``_backward_small``), a long one's in numpy calls: the same numbers, to the bit (-0.0 and cancelling sums
    included), on untrained and trained rows, with and without tail columns (a vocabulary of 8 has none)."""
    vocab = data.draw(st.sampled_from([8, 12, 64]))
    w = _trained(vocab, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)))
    n = data.draw(st.integers(1, 24))
    prevs = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    targets = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    grads = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, -2.25, 3.7, 1e-300, -1e-300])
    dlp = np.array(data.draw(st.lists(grads, min_size=n, max_size=n)), dtype=np.float64)
    lp, rs, ridx = w.token_logprobs(prevs, targets)
    assert _bits(lp) == _bits(rs.logit_of(ridx, targets) - rs.logz[ridx])
    small, arrays = _backward_small(rs, ridx, targets, dlp), _backward_arrays(rs, ridx, targets, dlp)
    assert _bits(small.keys, small.vals, small.rows, small.tail) == _bits(arrays.keys, arrays.vals, arrays.rows,
                                                                          arrays.tail)


def test_fresh_model_holds_no_arrays() -> None:
    model = SessionModel(make_spec(vocab_size=200_000, lora_rank=None))
    assert model.nbytes() == 0
    assert model.weights().num_entries == 0


_FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.1, 1e-300, -1e-300, 1e300, -1e300, 3.0e38]),
                    st.floats(-1e6, 1e6), st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(_FLOATS, max_size=PAIRWISE_BLOCK))
def test_numpy_sum_adds_in_numpys_order(xs: list[float]) -> None:
    """``numpy_sum`` is ``np.add.reduce`` of a short float64 array to the bit (-0.0, cancelling and overflowing
    sums included). If a numpy release sums in another order, this fails and the Python paths that use it
    (the optimizer's gradient norm, the cross-entropy loss) must follow or go."""
    with np.errstate(all="ignore"):
        expected = np.add.reduce(np.array(xs, dtype=np.float64))
    assert _bits(np.array([numpy_sum(xs)])) == _bits(np.array([expected]))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_short_gradient_norm_and_cross_entropy_give_the_bits_of_numpy(data: Any) -> None:
    """The optimizer's gradient norm of a short accumulator (``GradAccum.dense_norm_sq``) and the cross-entropy
    loss of a short batch (``_cross_entropy_small``) are computed in Python: the same numbers as the numpy
    code they stand in for, to the bit."""
    vocab = data.draw(st.sampled_from([8, 12, 64]))
    rows = sorted(set(data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12))))
    keys = sorted({r * vocab + c for r in rows
                   for c in data.draw(st.lists(st.integers(0, vocab - 1), max_size=min(vocab, 12)))})
    vals = data.draw(st.lists(_FLOATS, min_size=len(keys), max_size=len(keys)))
    tail = data.draw(st.lists(_FLOATS, min_size=len(rows), max_size=len(rows)))
    acc = GradAccum(np.array(keys, dtype=np.int64), np.array(vals, dtype=np.float64), np.array(rows, dtype=np.int64),
                    np.array(tail, dtype=np.float64))
    tail_cols = vocab - acc.row_counts(vocab)
    with np.errstate(all="ignore"):
        expected = float((acc.vals * acc.vals).sum() + (tail_cols * acc.tail * acc.tail).sum())
    assert _bits(np.array([acc.dense_norm_sq(vocab)])) == _bits(np.array([expected]))

    n = data.draw(st.integers(1, PAIRWISE_BLOCK))
    w32 = st.sampled_from([0.0, -0.0, 1.0, 0.5, 3.0e38, 1e-30]) | st.floats(width=32, allow_nan=False,
                                                                            allow_infinity=False)
    w = np.array(data.draw(st.lists(w32, min_size=n, max_size=n)), dtype=np.float64)
    lp = np.array(data.draw(st.lists(st.sampled_from([0.0, -0.5, -1e300]) | st.floats(-800.0, 0.0), min_size=n,
                                     max_size=n)), dtype=np.float64)
    batch = Batch(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.array([0, n], dtype=np.int64),
                  {"weights": w})
    cfg = LossConfig("LOSS_TYPE_CROSS_ENTROPY")
    with np.errstate(all="ignore"):
        arrays = _cross_entropy(cfg, batch, lp)
    small = _cross_entropy_small(w, lp)
    assert _bits(small.dlp, small.counted) == _bits(arrays.dlp, arrays.counted)
    assert _bits(np.array([small.loss, *small.metrics.values()])) == _bits(np.array([arrays.loss,
                                                                                    *arrays.metrics.values()]))
    assert list(small.metrics) == list(arrays.metrics)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_first_adam_step_gives_the_bits_of_adam_on_zeros(data: Any) -> None:
    """A session's first Adam step (``_adam_first``) is ``_adam`` of parameters and moments that are zeros, to
    the bit: signed zeros, non-finite gradients and overflowing hyperparameters included."""
    g = np.array(data.draw(st.lists(_FLOATS | st.sampled_from([np.inf, -np.inf, np.nan]), max_size=40)),
                 dtype=np.float64)
    unit = st.sampled_from([0.0, 0.5, 0.9, 0.999, 1 - 2**-53]) | st.floats(0.0, 1.0, exclude_max=True)
    big = st.sampled_from([0.0, 1e-8, 1.0, 1e300]) | st.floats(0.0, 1e308)
    hp = {"beta1": data.draw(unit), "beta2": data.draw(unit), "learning_rate": data.draw(big),
          "weight_decay": data.draw(big), "eps": data.draw(st.sampled_from([1e-8, 1e-300, 1.0, 1e300]))}
    t = data.draw(st.integers(1, 3))
    mult = data.draw(st.sampled_from([0.5, 1.0, 4.0]))
    z = np.zeros(g.size)
    with np.errstate(all="ignore"):
        expected = _adam(z, z, z, g, t, hp, mult)
        got = _adam_first(g, t, hp, mult)
    assert _bits(*got) == _bits(*expected)
