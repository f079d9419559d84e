"""Training behaviour, optimizer, invalid inputs, checkpoints, exports, determinism and sparsity."""

from __future__ import annotations

import itertools
import json
import struct
from typing import Any

import numpy as np
import pytest
from compute_reference import array_probe, dense_logits, pending_gradient
from test_compute_support import (
    SessionModel,
    V,
    datum,
    make_spec,
    model_input,
    random_trained_model,
    sft_datum,
)

from emulator.compute import (
    INVALID_INPUT,
    NON_FINITE_LOSS,
    RESOURCE_EXHAUSTED,
    ComputeError,
    load_files,
    weights_from_files,
)

CE = {"type": "LOSS_TYPE_CROSS_ENTROPY"}
REAL_V = 151_936


def ce_loss(model: SessionModel, seq: list[int]) -> float:
    return model.loss_and_grad([sft_datum(seq)], CE, forward_only=True)["loss"]


def train_ce(model: SessionModel, seqs: list[list[int]], steps: int, adam: dict[str, Any] | None = None,
             muon: dict[str, Any] | None = None) -> list[float]:
    losses = []
    for _ in range(steps):
        losses.append(model.loss_and_grad([sft_datum(s) for s in seqs], CE)["loss"])
        model.update(adam, muon)
    return losses


# --- learning ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec_kw", [
    # the vendor's default LoRA (rank 32, alpha 64), on which LR_SCALE is calibrated
    {"vocab_size": REAL_V, "lora_rank": 32, "lora_alpha": 64.0},
    {"vocab_size": REAL_V, "lora_rank": 8, "lora_alpha": 64.0},
    {"vocab_size": REAL_V, "lora_rank": 8, "lora_alpha": None},   # unset: the default alpha
    {"vocab_size": V, "lora_rank": 32, "lora_alpha": 64.0},
])
def test_forty_steps_at_lr_1e4_halve_the_cross_entropy(spec_kw: dict[str, Any]) -> None:
    model = SessionModel(make_spec(**spec_kw))
    rng = np.random.default_rng(0)
    seq = rng.integers(0, spec_kw["vocab_size"] - 1, 9).tolist()   # 8 predicted tokens
    start = ce_loss(model, seq)
    losses = train_ce(model, [seq], 40, {"learning_rate": 1e-4})
    end = ce_loss(model, seq)
    assert end < start / 2, (start, end)
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(losses))   # monotone on this convex problem
    assert model.step == 40


def test_full_weight_session_learns_at_full_weight_learning_rates() -> None:
    model = SessionModel(make_spec(vocab_size=REAL_V, lora_rank=None, lora_alpha=None))
    seq = [5, 77, 12345, 9, 150_000, 3, 42, 1000, 7]
    start = ce_loss(model, seq)
    train_ce(model, [seq], 40, {"learning_rate": 1e-5})
    assert ce_loss(model, seq) < start / 2


def test_muon_learns() -> None:
    model = SessionModel(make_spec(vocab_size=REAL_V, optimizer="muon"))
    seq = [5, 77, 12345, 9, 150_000, 3, 42, 1000, 7]
    start = ce_loss(model, seq)
    train_ce(model, [seq], 40, None, {"learning_rate": 0.02})
    assert ce_loss(model, seq) < start / 2


def test_greedy_sampling_after_training_reproduces_the_trained_continuation() -> None:
    model = SessionModel(make_spec(vocab_size=REAL_V, context_length=4096))
    seq = [101, 2024, 55555, 7, 31337, 150_001, 64, 999]
    train_ce(model, [seq], 40, {"learning_rate": 1e-4})
    before = model.sample(model.weights(), [model_input(seq[:1])], num_samples=1,
                          sampling_params={"temperature": 0, "max_tokens": 7}, prompt_logprobs=False,
                          topk_prompt_logprobs=0, seed=0, version=1)
    assert [int(t) for t in before["results"][0]["sequences"][0]["tokens"]] == seq[1:]
    fresh = SessionModel(make_spec(vocab_size=REAL_V, context_length=4096))
    untrained = fresh.sample(fresh.weights(), [model_input(seq[:1])], num_samples=1,
                             sampling_params={"temperature": 0, "max_tokens": 7}, prompt_logprobs=False,
                             topk_prompt_logprobs=0, seed=0, version=0)
    assert [int(t) for t in untrained["results"][0]["sequences"][0]["tokens"]] != seq[1:]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_importance_sampling_advantage_sign_moves_the_likelihood(sign: float) -> None:
    model = SessionModel(make_spec(vocab_size=REAL_V, context_length=4096))
    prompt = [17, 4242]
    out = model.sample(model.weights(), [model_input(prompt)], num_samples=4,
                       sampling_params={"max_tokens": 6}, prompt_logprobs=False, topk_prompt_logprobs=0,
                       seed=3, version=0)
    samples = []
    for seq in out["results"][0]["sequences"]:
        toks = [int(t) for t in seq["tokens"]]
        full = prompt + toks
        n_prompt = len(prompt) - 1
        samples.append(datum(full[:-1], full[1:],
                             logprobs=[0.0] * n_prompt + seq["logprobs"],
                             advantages=[0.0] * n_prompt + [sign] * len(toks),
                             mask=([0] * n_prompt + [1] * len(toks), "int64")))
    loss = {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}

    def sampled_logprob_sum() -> float:
        res = model.loss_and_grad(samples, loss, forward_only=True, return_loss_fn_outputs=True)
        return sum(sum(o["tensors"]["logprobs"]["data"]) for o in res["loss_fn_outputs"])

    start = sampled_logprob_sum()
    first = model.loss_and_grad(samples, loss)
    assert first["metrics"]["loss/ratio/mean"] == pytest.approx(1.0, abs=1e-5)   # on-policy
    model.update({"learning_rate": 1e-4}, None)
    for _ in range(4):
        model.loss_and_grad(samples, loss)
        model.update({"learning_rate": 1e-4}, None)
    end = sampled_logprob_sum()
    assert (end - start) * sign > 1.0, (start, end)


def test_optim_step_without_gradients_changes_nothing_on_a_fresh_model() -> None:
    model = SessionModel(make_spec())
    model.loss_and_grad([sft_datum([1, 2, 3, 4])], CE, forward_only=True)
    assert model.update(None, None) == 1
    assert model.weights().num_entries == 0 and model.nbytes() == 0


def test_gradients_are_cleared_after_a_step() -> None:
    model = SessionModel(make_spec())
    model.loss_and_grad([sft_datum([1, 2, 3, 4])], CE)
    assert model.has_pending_gradients
    model.update(None, None)
    assert not model.has_pending_gradients


def test_grad_clip_norm_zero_disables_clipping_and_unset_means_one() -> None:
    model = SessionModel(make_spec())
    batch = [sft_datum([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])]
    model.loss_and_grad(batch, CE)
    model.update({}, None)
    info = model.last_optim_info
    assert info["clip_scale"] == pytest.approx(1.0 / (info["grad_norm"] + 1e-6))
    model.loss_and_grad(batch, CE)
    model.update({"grad_clip_norm": 0}, None)
    assert model.last_optim_info["clip_scale"] == 1.0 and model.last_optim_info["grad_norm"] > 1


def test_weight_decay_and_learning_rate_are_honoured() -> None:
    def run(adam: dict[str, Any], steps: int = 1) -> np.ndarray:
        m = SessionModel(make_spec())
        for _ in range(steps):
            m.loss_and_grad([sft_datum([1, 2, 3, 4])], CE)
            m.update(adam, None)
        return m.weights().theta

    base = run({"learning_rate": 1e-4, "weight_decay": 0.0})
    assert not np.array_equal(run({"learning_rate": 1e-4, "weight_decay": 0.0}, 2),
                              run({"learning_rate": 1e-4, "weight_decay": 0.5}, 2))
    np.testing.assert_allclose(run({"learning_rate": 2e-4, "weight_decay": 0.0}), 2 * base, rtol=1e-9)
    assert np.all(run({"learning_rate": 0.0}) == 0)


# (optimizer, key, the vendor's default, another value): a step that leaves the key out trains exactly as one that
# sends the default, and differently from one that sends the other value (emulator.defaults).
OPTIMIZER_DEFAULTS = [
    ("adam", "beta1", 0.9, 0.5), ("adam", "beta2", 0.95, 0.5), ("adam", "eps", 1e-8, 1e-2),
    ("adam", "weight_decay", 0.0, 0.1), ("adam", "grad_clip_norm", 1.0, 0.0),
    ("muon", "momentum", 0.95, 0.5), ("muon", "newton_schulz_steps", 5, 1), ("muon", "weight_decay", 0.0, 0.1),
    ("muon", "grad_clip_norm", 1.0, 0.0),
]


@pytest.mark.parametrize(("optimizer", "key", "default", "other"), OPTIMIZER_DEFAULTS)
def test_an_unset_optimizer_setting_is_the_vendors_default(optimizer: str, key: str, default: float,
                                                            other: float) -> None:
    def run(extra: dict[str, Any]) -> np.ndarray:
        m = SessionModel(make_spec(optimizer=optimizer))
        lr = 1e-3 if optimizer == "adam" else 0.02
        for seq in ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9]):  # steps that differ
            m.loss_and_grad([sft_datum(seq)], CE)
            params = {"learning_rate": lr, **extra}
            m.update(params if optimizer == "adam" else None, params if optimizer == "muon" else None)
        return m.weights().theta

    unset = run({})
    assert np.array_equal(unset, run({key: default}))
    assert not np.allclose(unset, run({key: other}), rtol=1e-9, atol=0)


def test_lora_rank_limits_individually_trained_tokens_per_row() -> None:
    # one row (token 5) followed by 10 different tokens
    targets = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    batch = [datum([5] * len(targets), targets, weights=[1.0] * len(targets))]
    counts = {}
    for rank in (1, None):
        model = SessionModel(make_spec(lora_rank=rank))
        model.loss_and_grad(batch, CE)
        model.update(None, None)
        w = model.weights()
        counts[rank] = int(np.sum(w.keys // V == 5))
    k = 8
    assert counts[1] <= k + 4          # rank 1 -> at most 4 individually trained next tokens
    assert counts[None] >= k + len(targets) - 1


def test_optimizer_choice_follows_the_session_and_the_params_given() -> None:
    seq = [1, 2, 3, 4, 5]
    outs = {}
    for name, spec_opt, adam, muon in [("adam", "adam", {}, None), ("muon-session", "muon", None, None),
                                       ("muon-params", "adam", None, {"learning_rate": 0.02})]:
        m = SessionModel(make_spec(optimizer=spec_opt))
        m.loss_and_grad([sft_datum(seq)], CE)
        m.update(adam, muon)
        outs[name] = m.weights().theta
    assert not np.allclose(outs["adam"], outs["muon-session"])
    np.testing.assert_array_equal(outs["muon-session"], outs["muon-params"])


# --- invalid inputs --------------------------------------------------------------------------------

GOOD_POLICY = {"logprobs": [-1.0, -1.0, -1.0], "advantages": [1.0, -1.0, 0.5]}


def _bad_cases() -> list[tuple[str, list[Any], dict[str, Any]]]:
    ok = datum([1, 2, 3], [2, 3, 4], weights=[1.0, 1.0, 1.0])
    return [
        ("length mismatch", [datum([1, 2, 3], [2, 3], weights=[1.0, 1.0])], CE),
        ("tensors differ", [datum([1, 2, 3], [2, 3, 4], weights=[1.0, 1.0])], CE),
        ("missing weights", [datum([1, 2, 3], [2, 3, 4])], CE),
        ("missing advantages", [datum([1, 2, 3], [2, 3, 4], logprobs=[-1.0] * 3)], {"type": "LOSS_TYPE_PPO"}),
        ("grpo beta needs reference", [datum([1, 2, 3], [2, 3, 4], **GOOD_POLICY)],
         {"type": "LOSS_TYPE_GRPO", "grpo_params": {"beta": 0.1}}),
        ("dro needs beta", [datum([1, 2, 3], [2, 3, 4], **GOOD_POLICY)], {"type": "LOSS_TYPE_DRO"}),
        ("weights and mask", [datum([1, 2, 3], [2, 3, 4], weights=[1.0] * 3, mask=([1, 1, 1], "int64"),
                                    **GOOD_POLICY)], {"type": "LOSS_TYPE_PPO"}),
        ("target dtype", [datum([1, 2, 3], [2, 3, 4], weights=[1.0] * 3) | {"loss_fn_inputs": {
            "target_tokens": {"data": [2, 3, 4], "dtype": "float32"},
            "weights": {"data": [1, 1, 1], "dtype": "float32"}}}], CE),
        ("advantages dtype", [datum([1, 2, 3], [2, 3, 4], logprobs=[-1.0] * 3,
                                    advantages=([1, 1, 1], "int64"))],
         {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}),
        ("target out of vocab", [datum([1, 2, 3], [2, 3, V], weights=[1.0] * 3)], CE),
        ("input out of vocab", [datum([1, -2, 3], [2, 3, 4], weights=[1.0] * 3)], CE),
        ("nan weight", [datum([1, 2, 3], [2, 3, 4], weights=[1.0, float("nan"), 1.0])], CE),
        ("inf advantage", [datum([1, 2, 3], [2, 3, 4], logprobs=[-1.0] * 3,
                                 advantages=[1.0, float("inf"), 1.0])],
         {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}),
        ("batch too large", [ok] * 65, CE),
        ("sequence too long", [sft_datum(list(range(1, 60)) * 9)], CE),
        ("bad shape", [datum([1, 2, 3], [2, 3, 4]) | {"loss_fn_inputs": {
            "target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3, 1]},
            "weights": {"data": [1.0] * 3, "dtype": "float32"}}}], CE),
        ("sparse tensor", [datum([1, 2, 3], [2, 3, 4]) | {"loss_fn_inputs": {
            "target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
            "weights": {"data": [1.0] * 3, "dtype": "float32", "sparse_col_indices": [0, 1, 2]}}}], CE),
        ("unknown loss", [ok], {"type": "LOSS_TYPE_UNSPECIFIED"}),
        ("ppo clip high below one", [datum([1, 2, 3], [2, 3, 4], **GOOD_POLICY)],
         {"type": "LOSS_TYPE_PPO", "ppo_params": {"clip_high_threshold": 0.9}}),
        ("dppo delta out of range", [datum([1, 2, 3], [2, 3, 4], **GOOD_POLICY)],
         {"type": "LOSS_TYPE_DPPO", "dppo_params": {"delta_low": 1.5}}),
        ("empty batch", [], CE),
        ("empty sample", [datum([], [], weights=[])], CE),
        ("non-encoded chunk", [{"model_input": {"chunks": [{"image": {"data": "x"}}]},
                                "loss_fn_inputs": ok["loss_fn_inputs"]}], CE),
        ("non-integer token", [datum([1, 2.5, 3], [2, 3, 4], weights=[1.0] * 3)], CE),
    ]


@pytest.mark.parametrize("name,samples,loss", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_invalid_forward_backward_inputs_are_rejected_and_change_nothing(name: str, samples: list[Any],
                                                                          loss: dict[str, Any]) -> None:
    model = random_trained_model(seed=1)
    model.loss_and_grad([sft_datum([1, 2, 3])], CE)    # pending gradients must survive too
    before = model.to_state()
    with pytest.raises(ComputeError) as exc:
        model.loss_and_grad(samples, loss)
    assert exc.value.code == INVALID_INPUT, exc.value.message
    assert exc.value.message
    assert model.to_state() == before


def test_non_finite_loss_is_reported_and_changes_nothing() -> None:
    model = random_trained_model(seed=1)
    before = model.to_state()
    s = datum([1, 2, 3], [2, 3, 4], logprobs=[-1e30, -1.0, -1.0], advantages=[1.0, 1.0, 1.0])
    with pytest.raises(ComputeError) as exc:
        model.loss_and_grad([s], {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"})
    assert exc.value.code == NON_FINITE_LOSS
    assert model.to_state() == before
    # the same extreme value at an excluded position is harmless
    s["loss_fn_inputs"]["mask"] = {"data": [0, 1, 1], "dtype": "int64"}
    assert np.isfinite(model.loss_and_grad([s], {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"})["loss"])


@pytest.mark.parametrize("adam,muon", [({"learning_rate": 1e300, "weight_decay": 1e300}, None),
                                       ({"learning_rate": 1e308}, None),
                                       (None, {"learning_rate": 1e300, "weight_decay": 1e300})])
def test_an_overflowing_optimizer_step_is_reported_quietly_and_changes_nothing(adam: Any, muon: Any) -> None:
    # pytest turns warnings into errors here: numpy's RuntimeWarning (0 * inf on a new entry) would fail it.
    model = SessionModel(make_spec(optimizer="muon" if muon else "adam"))
    model.loss_and_grad([sft_datum([1, 2, 3])], CE)
    before = model.to_state()
    with pytest.raises(ComputeError) as exc:
        model.update(adam, muon)
    assert exc.value.code == NON_FINITE_LOSS, exc.value.message
    assert model.to_state() == before


@pytest.mark.parametrize("adam,muon", [({"learning_rate": -1}, None), ({"beta1": 1.0}, None),
                                       ({"eps": 0}, None), ({"grad_clip_norm": -1}, None),
                                       (None, {"momentum": 1.5}),
                                       (None, {"newton_schulz_steps": 2.5}), ("x", None)])
def test_invalid_optimizer_params_are_rejected_and_change_nothing(adam: Any, muon: Any) -> None:
    model = random_trained_model(seed=1)
    model.loss_and_grad([sft_datum([1, 2, 3])], CE)
    before = model.to_state()
    with pytest.raises(ComputeError) as exc:
        model.update(adam, muon)
    assert exc.value.code == INVALID_INPUT
    assert model.to_state() == before and model.step == 3


def test_invalid_custom_gradients_are_rejected() -> None:
    model = random_trained_model(seed=1)
    before = model.to_state()
    samples = [datum([1, 2, 3], [2, 3, 4])]
    for grads in ([], [{"data": [1.0, 2.0]}], [{"data": [1.0, 2.0, 3.0], "dtype": "D_TYPE_INT64"}],
                  [{"data": [1.0, float("nan"), 3.0]}]):
        with pytest.raises(ComputeError) as exc:
            model.accumulate_gradients(samples, grads)
        assert exc.value.code == INVALID_INPUT
    assert model.to_state() == before


# --- checkpoints and exports ---------------------------------------------------------------------

def _continue(model: SessionModel) -> list[float]:
    out = []
    for s in ([3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5]):
        out.append(model.loss_and_grad([sft_datum(s)], CE)["loss"])
        model.update({"learning_rate": 2e-4}, None)
    return out


def test_state_round_trip_is_exact_and_json_serialisable() -> None:
    model = random_trained_model(seed=2, steps=4)
    model.loss_and_grad([sft_datum([7, 8, 9])], CE)     # pending gradients travel too
    state = json.loads(json.dumps(model.to_state()))
    restored = SessionModel.from_state(model.spec, state)
    assert restored.step == model.step == 4
    assert restored.to_state() == model.to_state()
    assert _continue(restored) == _continue(model)
    assert restored.to_state() == model.to_state()


def test_noted_changes_replay_to_the_same_bits() -> None:
    """A journal writes a model's changes as the calls that made them (issue 39): replayed on the state the
    journal holds, they give the model the same bits, whatever the calls (forward-backward, custom gradients,
    AdamW and Muon steps), and the weights of every step on the way are there to name."""
    model = random_trained_model(seed=3, steps=2)
    held = json.loads(json.dumps(model.to_state()))
    model.track_changes()
    assert model.changes_since(model.version) == ([], [(2, model.weights())])
    model.loss_and_grad([sft_datum([1, 2, 3, 4])], CE)
    model.loss_and_grad([sft_datum([5, 6, 7])], CE, forward_only=True)   # changes nothing, notes nothing
    model.update({"learning_rate": 1e-3}, None)
    mid = model.weights()
    model.accumulate_gradients([datum([9, 10], [11, 12])], [{"data": [0.5, -0.25], "dtype": "float32"}])
    model.update(None, {"learning_rate": 0.02})
    model.loss_and_grad([sft_datum([3, 4, 5])], CE)                       # pending at the end
    calls, passed = model.changes_since(model.version - 5)  # type: ignore[misc]
    assert [next(iter(c)) for c in calls] == ["loss_and_grad", "update", "accumulate_gradients",
                                             "update", "loss_and_grad"]
    assert [step for step, _ in passed] == [2, 3, 4] and passed[1][1] is mid
    replica = SessionModel.from_state(model.spec, held)
    weights, differ = replica.replay(json.loads(json.dumps(calls)))
    assert differ == []
    assert json.dumps(replica.to_state()) == json.dumps(model.to_state())
    assert sorted(weights) == [2, 3, 4] and weights[3].to_state() == mid.to_state()
    assert model.changes_since(model.version) == ([], [(4, model.weights())])  # forgotten once handed out


def test_changes_are_noted_only_once_tracked_and_only_from_where_the_journal_is() -> None:
    model = random_trained_model(seed=3, steps=1)
    model.loss_and_grad([sft_datum([1, 2, 3])], CE)
    assert model.changes_since(0) is None                  # never tracked: the journal writes the state
    model.track_changes()
    model.update({"learning_rate": 1e-3}, None)
    assert model.changes_since(model.version - 2) is None  # not from where it was tracked
    calls = model.changes_since(model.version - 1)
    assert calls is not None and len(calls[0]) == 1


def test_a_replay_that_rounds_differently_is_reported() -> None:
    model = random_trained_model(seed=3, steps=1)
    held = json.loads(json.dumps(model.to_state()))
    model.track_changes()
    model.loss_and_grad([sft_datum([1, 2, 3])], CE)
    model.update({"learning_rate": 1e-3}, None)
    calls, _ = model.changes_since(model.version - 2)  # type: ignore[misc]
    calls[1]["update"]["check"][1] ^= 1            # as if another machine had rounded one bit otherwise
    _, differ = SessionModel.from_state(model.spec, held).replay(calls)
    assert differ == [2]
    with pytest.raises(ComputeError, match="unknown model change"):
        SessionModel.from_state(model.spec, held).replay([{"retrain": {}}])


def test_state_without_optimizer_keeps_weights_and_resets_step() -> None:
    model = random_trained_model(seed=2, steps=4)
    for state in (model.to_state(include_optimizer=False), model.to_state()):
        restored = SessionModel.from_state(model.spec, json.loads(json.dumps(state)), load_optimizer=False)
        assert restored.step == 0
        assert restored.weights().to_state() == model.weights().to_state()
        assert not restored.has_pending_gradients
        assert restored.to_state()["optimizer"]["adam_steps"] == 0


def _pending_state() -> dict[str, Any]:
    model = random_trained_model(seed=2, steps=2)
    model.loss_and_grad([sft_datum([7, 8, 9, 7, 3])], CE)
    state = json.loads(json.dumps(model.to_state()))
    assert len(state["pending_gradients"]["rows"]) >= 2 and len(state["pending_gradients"]["entry_rows"]) >= 2
    return state


def _reverse_entries(p: dict[str, Any]) -> None:
    for k in ("entry_rows", "entry_cols", "entry_grad"):
        p[k] = p[k][::-1]


def _repeat_entry(p: dict[str, Any]) -> None:
    for k in ("entry_rows", "entry_cols", "entry_grad"):
        p[k] = [p[k][0], *p[k]]


def _drop_row(p: dict[str, Any]) -> None:
    p["rows"], p["row_tail_grad"] = p["rows"][1:], p["row_tail_grad"][1:]


def _nested(p: dict[str, Any]) -> None:
    p["rows"] = [p["rows"]]


# Each breaks an invariant the accumulator's lookups rely on; imported as is, the next optimizer step
# would have used wrong gradients (or crashed) instead of the import being refused.
PENDING_BREAKAGES: dict[str, Any] = {
    "unsorted": _reverse_entries,
    "repeated": _repeat_entry,
    "column_past_the_vocabulary": lambda p: p["entry_cols"].__setitem__(0, V + 1),
    "negative_row": lambda p: p["rows"].__setitem__(0, -1),
    "misaligned": lambda p: p["entry_grad"].pop(),
    "row_of_an_entry_missing": _drop_row,
    "non_finite": lambda p: p["row_tail_grad"].__setitem__(0, float("nan")),
    "nested": _nested,
}


@pytest.mark.parametrize("breakage", sorted(PENDING_BREAKAGES))
def test_from_state_refuses_malformed_pending_gradients(breakage: str) -> None:
    state = _pending_state()
    SessionModel.from_state(make_spec(), state)  # the unbroken state is accepted
    PENDING_BREAKAGES[breakage](state["pending_gradients"])
    with pytest.raises(ComputeError, match="malformed pending gradients") as exc:
        SessionModel.from_state(make_spec(), state)
    assert exc.value.code == INVALID_INPUT


@pytest.mark.parametrize("value", [1e308, -1, 2.5, True, "3", 2**63 + 5])
@pytest.mark.parametrize("where", ["step", "optimizer.adam_steps", "optimizer.tail_adam_steps",
                                   "weights.base.vocab_size", "weights.base.eos_token_id"])
def test_from_state_refuses_a_counter_that_is_not_a_plain_integer_in_range(where: str, value: Any) -> None:
    # 1e308 was taken as a step (int(1e308)), and the next state export failed: no JSON encoder takes it.
    state = json.loads(json.dumps(random_trained_model(seed=2, steps=2).to_state()))
    *parents, key = where.split(".")
    target = state
    for name in parents:
        target = target[name]
    target[key] = value
    with pytest.raises(ComputeError, match="malformed") as exc:
        SessionModel.from_state(make_spec(), state)
    assert exc.value.code == INVALID_INPUT


def test_from_state_refuses_a_weight_column_past_the_vocabulary() -> None:
    state = json.loads(json.dumps(random_trained_model(seed=2, steps=2).to_state()))
    state["weights"]["entry_cols"][0] = V  # row r, column V would have been read as row r + 1, column 0
    with pytest.raises(ComputeError, match="outside the vocabulary") as exc:
        SessionModel.from_state(make_spec(), state)
    assert exc.value.code == INVALID_INPUT


def test_from_state_rejects_a_different_vocabulary() -> None:
    model = random_trained_model(seed=2)
    with pytest.raises(ComputeError) as exc:
        SessionModel.from_state(make_spec(vocab_size=V + 1), model.to_state())
    assert exc.value.code == INVALID_INPUT


def _parse_safetensors(blob: bytes) -> dict[str, Any]:
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    assert n % 8 == 0
    end = max(info["data_offsets"][1] for k, info in header.items() if k != "__metadata__")
    assert len(blob) == 8 + n + end
    return header


@pytest.mark.parametrize("rank,variant", [(8, "CHECKPOINT_VARIANT_ADAPTER"), (8, "CHECKPOINT_VARIANT_MERGED"),
                                          (None, "CHECKPOINT_VARIANT_MERGED")])
def test_export_round_trip_gives_the_same_logprobs(rank: int | None, variant: str) -> None:
    model = random_trained_model(seed=5, steps=4, lora_rank=rank)
    files = model.export_files(variant)
    names = [n for n, _ in files]
    assert names == (["adapter_config.json", "adapter_model.safetensors"] if variant.endswith("ADAPTER")
                     else ["config.json", "model.safetensors"])
    for name, blob in files:
        if name.endswith(".json"):
            cfg = json.loads(blob)
            assert cfg["vocab_size" if "vocab_size" in cfg else "base_model"]
        else:
            header = _parse_safetensors(blob)
            assert {info["dtype"] for k, info in header.items() if k != "__metadata__"} <= {"F64", "I64"}
    loaded = load_files(files)
    assert loaded["variant"] == variant
    w2 = weights_from_files(loaded)
    prevs = np.repeat(np.arange(V), V)
    targets = np.tile(np.arange(V), V)
    np.testing.assert_array_equal(w2.token_logprobs(prevs, targets)[0],
                                  model.weights().token_logprobs(prevs, targets)[0])
    assert model.export_files(variant) == files        # deterministic bytes


def test_adapter_export_needs_a_lora_session() -> None:
    model = random_trained_model(seed=5, lora_rank=None)
    with pytest.raises(ComputeError) as exc:
        model.export_files("CHECKPOINT_VARIANT_ADAPTER")
    assert exc.value.code == INVALID_INPUT


# --- determinism and sparsity ----------------------------------------------------------------------

def _script(model: SessionModel) -> str:
    log: list[Any] = []
    rng = np.random.default_rng(42)
    for step in range(3):
        out = model.sample(model.weights(), [model_input([1, 2]), model_input([9])], num_samples=3,
                           sampling_params={"max_tokens": 5, "temperature": 0.9, "top_p": 0.95},
                           prompt_logprobs=True, topk_prompt_logprobs=2, seed=step, version=step)
        log.append(out)
        samples = []
        for res in out["results"]:
            for seq in res["sequences"]:
                toks = [int(t) for t in seq["tokens"]]
                if len(toks) >= 2:
                    samples.append(datum(toks[:-1], toks[1:], logprobs=seq["logprobs"][1:],
                                         advantages=rng.normal(size=len(toks) - 1).tolist()))
        log.append(model.loss_and_grad(samples, {"type": "LOSS_TYPE_PPO"}, return_loss_fn_outputs=True))
        log.append(model.update({"learning_rate": 1e-4}, None))
    log.append(model.to_state())
    log.append(model.export_files("CHECKPOINT_VARIANT_MERGED")[1][1].hex())
    return json.dumps(log, sort_keys=True)


def test_same_spec_and_calls_give_bit_identical_outputs() -> None:
    assert _script(SessionModel(make_spec())) == _script(SessionModel(make_spec()))
    assert _script(SessionModel(make_spec())) != _script(SessionModel(make_spec(seed=8)))


def test_forward_backward_of_4096_tokens_touches_no_vocabulary_sized_array() -> None:
    vocab = 200_064
    model = SessionModel(make_spec(vocab_size=vocab, max_seq_length=4096, context_length=8192))
    rng = np.random.default_rng(0)
    toks = rng.integers(0, vocab, 4097).tolist()
    batch = [datum(toks[:-1], toks[1:], logprobs=[-5.0] * 4096, advantages=rng.normal(size=4096).tolist())]
    with array_probe() as probe:
        out = model.loss_and_grad(batch, {"type": "LOSS_TYPE_PPO"}, return_loss_fn_outputs=True)
        model.update(None, None)
        model.loss_and_grad(batch, {"type": "LOSS_TYPE_PPO"})
        model.update(None, None)
    assert len(out["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"]) == 4096
    assert 0 < probe.max_len <= 4096 * 10 < vocab       # O(tokens * (8 preferred + trained)), not O(V)
    assert model.weights().num_entries <= 4096 * 9
    assert model.nbytes() < 5_000_000


def test_sample_budget_is_enforced() -> None:
    model = SessionModel(make_spec(context_length=1_000_000))
    with pytest.raises(ComputeError) as exc:
        model.sample(model.weights(), [model_input([1])] * 100, num_samples=100,
                     sampling_params={"max_tokens": 500}, prompt_logprobs=False, topk_prompt_logprobs=0,
                     seed=0, version=0)
    assert exc.value.code == RESOURCE_EXHAUSTED


@pytest.mark.parametrize("rank", [None, 8])
def test_sparse_training_equals_a_dense_table_trained_with_adamw(rank: int | None) -> None:
    """The sparse parameters behave exactly like a dense V x V delta table trained by AdamW."""
    spec = make_spec(lora_rank=rank)
    model = SessionModel(spec)
    rng = np.random.default_rng(3)
    base = dense_logits(model.weights(), np.arange(V))
    delta = np.zeros((V, V))
    m = np.zeros((V, V))
    v = np.zeros((V, V))
    hp = {"learning_rate": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
          "grad_clip_norm": 1.0}
    for t in range(1, 7):
        seqs = [rng.integers(0, 20, 10).tolist() for _ in range(3)]   # rows and targets repeat across steps
        model.loss_and_grad([sft_datum(s) for s in seqs], CE)
        g = pending_gradient(model, list(range(V)))
        norm = np.sqrt((g * g).sum())
        g = g * (1.0 / (norm + 1e-6) if norm > 1.0 else 1.0)
        m = 0.9 * m + 0.1 * g
        v = 0.95 * v + 0.05 * g * g
        lr = hp["learning_rate"]
        delta = delta * (1 - lr * 0.1) - lr * spec.lr_multiplier * (m / (1 - 0.9 ** t)) / (
            np.sqrt(v / (1 - 0.95 ** t)) + 1e-8)
        model.update(hp, None)
        got = dense_logits(model.weights(), np.arange(V)) - base
        np.testing.assert_allclose(got, delta, rtol=1e-9, atol=1e-12)
