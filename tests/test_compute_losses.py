"""Every loss type against an independent dense numpy reference, and finite-difference gradient checks.

The reference builds the full 64 x 64 logit table, takes a dense log-softmax and applies each loss
formula position by position. Gradients are checked by central differences of that reference w.r.t.
every logit of every row the batch touches (explicit and tail columns alike), compared with the
gradient the model accumulated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from compute_reference import pending_gradient
from test_compute_support import SessionModel, V, datum, dense_table, random_trained_model

Ref = Callable[[np.ndarray], float]


def log_softmax_rows(table: np.ndarray) -> np.ndarray:
    m = table.max(axis=1, keepdims=True)
    return table - (m + np.log(np.exp(table - m).sum(axis=1, keepdims=True)))


class Case:
    """A batch of samples with known inputs, and the reference loss as a function of the logit table."""

    def __init__(self, model: SessionModel, seed: int, lengths: tuple[int, ...] = (5, 7, 4), *,
                 mask_kind: str | None = "mask", ref_logprobs: bool = False,
                 weights_kind: str = "float32") -> None:
        rng = np.random.default_rng(seed)
        self.table0 = dense_table(model.weights())
        lsm = log_softmax_rows(self.table0)
        self.samples: list[dict[str, Any]] = []
        self.inputs: list[dict[str, np.ndarray]] = []
        for n in lengths:
            prev = rng.integers(0, 12, n)       # few distinct rows, so rows repeat across positions
            top3 = np.argsort(-self.table0[prev], axis=1)[:, :3]
            likely = top3[np.arange(n), rng.integers(0, 3, n)]
            tgt = np.where(rng.uniform(size=n) < 0.5, likely, rng.integers(0, V - 1, n))
            lp0 = lsm[prev, tgt]
            q = (lp0 + rng.uniform(-0.6, 0.6, n)).astype(np.float32).astype(np.float64)
            adv = rng.normal(size=n).astype(np.float32).astype(np.float64)
            mask = (rng.uniform(size=n) < 0.75).astype(np.float64)
            mask[0] = 1.0
            ref = (lp0 + rng.uniform(-0.5, 0.5, n)).astype(np.float32).astype(np.float64)
            kw: dict[str, Any] = {"logprobs": q.tolist(), "advantages": adv.tolist()}
            if mask_kind == "mask":
                kw["mask"] = (mask.astype(int).tolist(), "int64")
            elif mask_kind == "weights":
                kw["weights"] = ((mask * rng.choice([1.0, 2.5], n)).tolist(), weights_kind)
            if ref_logprobs:
                kw["reference_logprobs"] = ref.tolist()
            self.samples.append(datum(prev.tolist(), tgt.tolist(), **kw))
            self.inputs.append({"prev": prev, "tgt": tgt, "q": q, "adv": adv,
                                "m": mask if mask_kind else np.ones(n), "ref": ref})
        self.rows = sorted({int(p) for d in self.inputs for p in d["prev"]})

    def lps(self, table: np.ndarray) -> list[np.ndarray]:
        lsm = log_softmax_rows(table)
        return [lsm[d["prev"], d["tgt"]] for d in self.inputs]


# --- reference formulas (written out position by position) ----------------------------------------

def ref_importance_sampling(case: Case) -> Ref:
    def f(table: np.ndarray) -> float:
        total = 0.0
        for d, lp in zip(case.inputs, case.lps(table)):
            for t in range(lp.size):
                if d["m"][t]:
                    total -= np.exp(lp[t] - d["q"][t]) * d["adv"][t]
        return total
    return f


def ref_ppo(case: Case, lo: float, hi: float) -> Ref:
    def f(table: np.ndarray) -> float:
        total = 0.0
        for d, lp in zip(case.inputs, case.lps(table)):
            for t in range(lp.size):
                if d["m"][t]:
                    r = np.exp(lp[t] - d["q"][t])
                    total -= min(r * d["adv"][t], min(max(r, lo), hi) * d["adv"][t])
        return total
    return f


def ref_cispo(case: Case, lo: float, hi: float) -> Ref:
    frozen = [np.clip(np.exp(lp - d["q"]), lo, hi) for d, lp in zip(case.inputs, case.lps(case.table0))]

    def f(table: np.ndarray) -> float:   # the clipped ratio is a stop-gradient constant
        total = 0.0
        for d, lp, c in zip(case.inputs, case.lps(table), frozen):
            for t in range(lp.size):
                if d["m"][t]:
                    total -= c[t] * lp[t] * d["adv"][t]
        return total
    return f


def ref_dro(case: Case, beta: float) -> Ref:
    def f(table: np.ndarray) -> float:
        total = 0.0
        for d, lp in zip(case.inputs, case.lps(table)):
            for t in range(lp.size):
                if d["m"][t]:
                    total -= lp[t] * d["adv"][t] - 0.5 * beta * (lp[t] - d["q"][t]) ** 2
        return total
    return f


def ref_dppo(case: Case, d_low: float, d_high: float) -> Ref:
    keep = []
    for d, lp in zip(case.inputs, case.lps(case.table0)):
        moved = np.exp(lp) - np.exp(d["q"])
        keep.append(~(((d["adv"] > 0) & (moved > d_high)) | ((d["adv"] < 0) & (-moved > d_low))))
    frozen = [np.exp(lp - d["q"]) for d, lp in zip(case.inputs, case.lps(case.table0))]

    # positions outside the trust region keep their value but lose their gradient
    def f(table: np.ndarray) -> float:
        total = 0.0
        for d, lp, k, r0 in zip(case.inputs, case.lps(table), keep, frozen):
            for t in range(lp.size):
                if d["m"][t]:
                    r = np.exp(lp[t] - d["q"][t]) if k[t] else r0[t]
                    total -= r * d["adv"][t]
        return total
    return f


def ref_grpo(case: Case, lo: float, hi: float, beta: float, ratio: str, agg: str) -> Ref:
    def f(table: np.ndarray) -> float:
        lps = case.lps(table)
        per_sample = []
        for d, lp in zip(case.inputs, lps):
            idx = [t for t in range(lp.size) if d["m"][t]]
            if ratio == "SEQUENCE":
                rho_seq = np.exp(np.mean([lp[t] - d["q"][t] for t in idx])) if idx else 1.0
            losses = []
            for t in idx:
                rho = rho_seq if ratio == "SEQUENCE" else np.exp(lp[t] - d["q"][t])
                a = d["adv"][t]
                val = -min(rho * a, min(max(rho, lo), hi) * a)
                if beta > 0:
                    x = d["ref"][t] - lp[t]
                    val += beta * (np.exp(x) - x - 1)
                losses.append(val)
            per_sample.append(losses)
        if agg == "TOKEN_MEAN":
            n = sum(len(x) for x in per_sample)
            return sum(sum(x) for x in per_sample) / n
        if agg == "SEQUENCE_MEAN":
            means = [sum(x) / len(x) for x in per_sample if x]
            return sum(means) / len(means)
        horizon = max(d["prev"].size for d in case.inputs)
        return sum(sum(x) for x in per_sample) / (len(per_sample) * horizon)
    return f


def fd_check(model: SessionModel, case: Case, ref: Ref) -> None:
    grad = pending_gradient(model, case.rows)
    eps = 1e-5
    fd = np.zeros_like(grad)
    for i, p in enumerate(case.rows):
        for j in range(V):
            tp = case.table0.copy()
            tm = case.table0.copy()
            tp[p, j] += eps
            tm[p, j] -= eps
            fd[i, j] = (ref(tp) - ref(tm)) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
    assert np.any(np.abs(grad) > 1e-3)
    # rows outside the batch get nothing
    others = [p for p in range(V) if p not in case.rows][:5]
    assert np.all(pending_gradient(model, others) == 0)


def run(model: SessionModel, case: Case, loss: dict[str, Any], ref: Ref) -> dict[str, Any]:
    out = model.loss_and_grad(case.samples, loss, return_loss_fn_outputs=True)
    assert out["loss"] == pytest.approx(ref(case.table0), rel=1e-10, abs=1e-10)
    assert out["metrics"]["loss:sum"] == out["loss"]
    # loss_fn_outputs: the current policy's logprobs, zero where the loss excludes a position
    assert len(out["loss_fn_outputs"]) == len(case.samples)
    for o, d, lp in zip(out["loss_fn_outputs"], case.inputs, case.lps(case.table0)):
        t = o["tensors"]["logprobs"]
        assert t["dtype"] == "float32" and t["shape"] == [lp.size]
        np.testing.assert_allclose(t["data"], np.where(d["m"] != 0, lp, 0.0), rtol=0, atol=1e-12)
    fd_check(model, case, ref)
    return out


# --- the tests ------------------------------------------------------------------------------------

def test_cross_entropy_with_fractional_weights() -> None:
    model = random_trained_model(seed=3)
    rng = np.random.default_rng(11)
    case = Case(model, seed=5, mask_kind=None)
    weights = []
    for s, d in zip(case.samples, case.inputs):
        w = rng.choice([0.0, 0.25, 1.0, 2.0], d["prev"].size)
        w[0] = 0.5
        s["loss_fn_inputs"] = {"target_tokens": s["loss_fn_inputs"]["target_tokens"],
                               "weights": {"data": w.tolist(), "dtype": "float32"}}
        d["m"] = w
        weights.append(w)

    def ref(table: np.ndarray) -> float:
        return float(-sum((w * lp).sum() for w, lp in zip(weights, case.lps(table))))

    out = run(model, case, {"type": "LOSS_TYPE_CROSS_ENTROPY", "cross_entropy_params": {}}, ref)
    wsum = sum(w.sum() for w in weights)
    assert out["metrics"]["loss/mean"] == pytest.approx(out["loss"] / wsum)
    assert out["metrics"]["loss/num_tokens"] == sum(int((w != 0).sum()) for w in weights)


def test_cross_entropy_accepts_int64_weights_and_string_tokens() -> None:
    model = random_trained_model(seed=3)
    seq = [3, 9, 14, 2, 30]
    s = datum([str(t) for t in seq[:-1]], [str(t) for t in seq[1:]], weights=([1, 1, 0, 1], "int64"))
    out = model.loss_and_grad([s], {"type": "LOSS_TYPE_CROSS_ENTROPY"})
    lp = model.weights().token_logprobs(np.array(seq[:-1]), np.array(seq[1:]))[0]
    assert out["loss"] == pytest.approx(-(lp[0] + lp[1] + lp[3]), rel=1e-12)


def test_importance_sampling() -> None:
    model = random_trained_model(seed=4)
    case = Case(model, seed=6)
    out = run(model, case, {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}, ref_importance_sampling(case))
    ratios = np.concatenate([np.exp(lp - d["q"])[d["m"] != 0]
                             for d, lp in zip(case.inputs, case.lps(case.table0))])
    assert out["metrics"]["loss/ratio/mean"] == pytest.approx(ratios.mean(), rel=1e-10)


@pytest.mark.parametrize("params", [None, {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}])
def test_ppo(params: dict[str, float] | None) -> None:
    model = random_trained_model(seed=5)
    case = Case(model, seed=7, mask_kind="weights")
    lo, hi = (0.8, 1.2) if params is None else (params["clip_low_threshold"], params["clip_high_threshold"])
    loss: dict[str, Any] = {"type": "LOSS_TYPE_PPO"}
    if params:
        loss["ppo_params"] = params
    out = run(model, case, loss, ref_ppo(case, lo, hi))
    high = low = total = 0
    for d, lp in zip(case.inputs, case.lps(case.table0)):
        r = np.exp(lp - d["q"])
        c = d["m"] != 0
        high += int(np.sum(c & (d["adv"] > 0) & (r > hi)))
        low += int(np.sum(c & (d["adv"] < 0) & (r < lo)))
        total += int(c.sum())
    assert high + low > 0, "the case should exercise clipping"
    assert out["metrics"]["loss/clip/high_fraction"] == pytest.approx(high / total)
    assert out["metrics"]["loss/clip/low_fraction"] == pytest.approx(low / total)


def test_cispo() -> None:
    model = random_trained_model(seed=6)
    case = Case(model, seed=8)
    run(model, case, {"type": "LOSS_TYPE_CISPO", "cispo_params": {"clip_low_threshold": 0.7,
                                                                  "clip_high_threshold": 1.3}},
        ref_cispo(case, 0.7, 1.3))


def test_dro() -> None:
    model = random_trained_model(seed=7)
    case = Case(model, seed=9)
    run(model, case, {"type": "LOSS_TYPE_DRO", "dro_params": {"beta": 0.05}}, ref_dro(case, 0.05))


@pytest.mark.parametrize("deltas", [None, (0.02, 0.03)])
def test_dppo(deltas: tuple[float, float] | None) -> None:
    model = random_trained_model(seed=8)
    case = Case(model, seed=10)
    loss: dict[str, Any] = {"type": "LOSS_TYPE_DPPO"}
    d_low, d_high = (0.15, 0.15) if deltas is None else deltas
    if deltas:
        loss["dppo_params"] = {"delta_low": d_low, "delta_high": d_high}
    out = run(model, case, loss, ref_dppo(case, d_low, d_high))
    if deltas:
        assert out["metrics"]["loss/clip/high_fraction"] + out["metrics"]["loss/clip/low_fraction"] > 0


@pytest.mark.parametrize("ratio", ["TOKEN", "SEQUENCE"])
@pytest.mark.parametrize("agg", ["TOKEN_MEAN", "SEQUENCE_MEAN", "FIXED_HORIZON"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_grpo(ratio: str, agg: str, beta: float) -> None:
    model = random_trained_model(seed=9)
    case = Case(model, seed=12, ref_logprobs=True)
    params = {"clip_low_threshold": 0.85, "clip_high_threshold": 1.15, "beta": beta,
              "ratio_type": f"GRPO_LOSS_RATIO_TYPE_{ratio}", "agg_type": f"GRPO_LOSS_AGGREGATION_TYPE_{agg}"}
    out = run(model, case, {"type": "LOSS_TYPE_GRPO", "grpo_params": params},
              ref_grpo(case, 0.85, 1.15, beta, ratio, agg))
    k3 = []
    for d, lp in zip(case.inputs, case.lps(case.table0)):
        x = d["ref"] - lp
        k3.append((np.exp(x) - x - 1)[d["m"] != 0])
    assert out["metrics"]["loss/kl_ref/mean"] == pytest.approx(np.concatenate(k3).mean(), rel=1e-10)


@pytest.mark.parametrize("params", [None, {}, {"agg_type": "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED"}])
def test_grpo_defaults_are_the_vendors(params: dict[str, Any] | None) -> None:
    """Unset GRPO parameters: clip 0.8/1.2, beta 0, ratio TOKEN, aggregation FIXED_HORIZON (UNSPECIFIED too)."""
    model = random_trained_model(seed=9)
    case = Case(model, seed=13)
    expected = ref_grpo(case, 0.8, 1.2, 0.0, "TOKEN", "FIXED_HORIZON")
    # (the case tells the defaults from the other aggregations and from no clipping)
    for other in (ref_grpo(case, 0.8, 1.2, 0.0, "TOKEN", "TOKEN_MEAN"), ref_grpo(case, 0.0, 9.0, 0.0, "TOKEN",
                                                                                    "FIXED_HORIZON")):
        assert other(case.table0) != pytest.approx(expected(case.table0), rel=1e-6)
    loss: dict[str, Any] = {"type": "LOSS_TYPE_GRPO"}
    if params is not None:
        loss["grpo_params"] = params
    run(model, case, loss, expected)


@pytest.mark.parametrize("params", [None, {}])
def test_cispo_defaults_are_0_and_4(params: dict[str, Any] | None) -> None:
    model = random_trained_model(seed=6)
    case = Case(model, seed=8)
    expected = ref_cispo(case, 0.0, 4.0)
    assert ref_cispo(case, 0.8, 1.2)(case.table0) != pytest.approx(expected(case.table0), rel=1e-6)
    loss: dict[str, Any] = {"type": "LOSS_TYPE_CISPO"}
    if params is not None:
        loss["cispo_params"] = params
    run(model, case, loss, expected)


def test_policy_losses_read_any_nonzero_weight_as_one() -> None:
    model = random_trained_model(seed=2)
    case = Case(model, seed=14, mask_kind="weights")
    out_w = model.loss_and_grad(case.samples, {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}, forward_only=True)
    for s, d in zip(case.samples, case.inputs):
        s["loss_fn_inputs"]["weights"] = {"data": (d["m"] != 0).astype(float).tolist(), "dtype": "float32"}
    out_b = model.loss_and_grad(case.samples, {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}, forward_only=True)
    assert out_w["loss"] == out_b["loss"]


def test_forward_only_accumulates_nothing() -> None:
    model = random_trained_model(seed=1)
    case = Case(model, seed=15)
    before = model.to_state()
    out = model.loss_and_grad(case.samples, {"type": "LOSS_TYPE_PPO"}, forward_only=True)
    assert out["loss"] == pytest.approx(ref_ppo(case, 0.8, 1.2)(case.table0), rel=1e-10)
    assert out["loss_fn_outputs"] == []
    assert not model.has_pending_gradients
    assert model.to_state() == before


def test_gradients_accumulate_across_calls() -> None:
    a = random_trained_model(seed=1)
    b = random_trained_model(seed=1)
    case1 = Case(a, seed=16)
    case2 = Case(a, seed=17)
    loss = {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"}
    a.loss_and_grad(case1.samples, loss)
    a.loss_and_grad(case2.samples, loss)
    b.loss_and_grad(case1.samples + case2.samples, loss)
    rows = sorted(set(case1.rows) | set(case2.rows))
    np.testing.assert_allclose(pending_gradient(a, rows), pending_gradient(b, rows), rtol=1e-12, atol=1e-15)


def test_custom_forward_backward_matches_the_builtin_backward() -> None:
    a = random_trained_model(seed=2)
    b = random_trained_model(seed=2)
    case = Case(a, seed=18)
    a.loss_and_grad(case.samples, {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"})
    grads = []
    for d, lp in zip(case.inputs, case.lps(case.table0)):
        grads.append({"data": (-d["m"] * np.exp(lp - d["q"]) * d["adv"]).tolist(), "dtype": "D_TYPE_FLOAT32"})
    # the SDK's tinker path sends zero weights with real gradients: they must not be applied
    custom = [datum(d["prev"].tolist(), d["tgt"].tolist(), weights=[0.0] * d["prev"].size)
              for d in case.inputs]
    assert b.accumulate_gradients(custom, grads) == {}
    ga, gb = pending_gradient(a, case.rows), pending_gradient(b, case.rows)
    np.testing.assert_allclose(gb, ga, rtol=1e-6, atol=1e-7)   # float32 rounding of the wire gradients
