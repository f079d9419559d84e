"""The built-in loss functions, computed exactly over the model's per-token log-probabilities.

Emulates the trainer's ``LOSS_TYPE_*`` losses (docs/api-surface.md A.3.1; formulas as documented for the
tinker-compatible losses); the formulas, metrics and defaults are in the package README ("Losses"). Policy
losses read any non-zero weight as 1; only cross-entropy honours fractional weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from emulator import defaults, rules
from emulator.compute.errors import invalid
from emulator.compute.inputs import Batch, number_param
from emulator.compute.portable import PAIRWISE_BLOCK, exp, numpy_sum
from emulator.compute.types import ClipParams, DppoParams, DroParams, GrpoParams, Loss, NoParams, Wire

AGG_TYPES = ("GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED", "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON",
             "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN", "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN")
RATIO_TYPES = ("GRPO_LOSS_RATIO_TYPE_TOKEN", "GRPO_LOSS_RATIO_TYPE_SEQUENCE")
# The clip thresholds (low, high) of each clipped loss when unset: the vendor's defaults.
DEFAULT_CLIPS = MappingProxyType({
    t: (float(d["clip_low_threshold"]), float(d["clip_high_threshold"]))
    for t, d in (("LOSS_TYPE_PPO", defaults.PPO), ("LOSS_TYPE_GRPO", defaults.GRPO),
                 ("LOSS_TYPE_CISPO", defaults.CISPO))})
DEFAULT_GRPO_BETA = float(defaults.GRPO["beta"])
DEFAULT_AGG_TYPE = str(defaults.GRPO["agg_type"])
DEFAULT_RATIO_TYPE = str(defaults.GRPO["ratio_type"])
DEFAULT_DPPO_DELTA = 0.15  # the SDK's documented default (not in the vendor's spec)


@dataclass(frozen=True)
class LossConfig:
    type: str
    clip_low: float = DEFAULT_CLIPS["LOSS_TYPE_GRPO"][0]
    clip_high: float = DEFAULT_CLIPS["LOSS_TYPE_GRPO"][1]
    beta: float = DEFAULT_GRPO_BETA
    delta_low: float = DEFAULT_DPPO_DELTA
    delta_high: float = DEFAULT_DPPO_DELTA
    agg_type: str = DEFAULT_AGG_TYPE
    ratio_type: str = DEFAULT_RATIO_TYPE

    @staticmethod
    def default(ltype: str) -> LossConfig:
        """The config of a loss of this type given no parameters."""
        lo, hi = DEFAULT_CLIPS.get(ltype, DEFAULT_CLIPS["LOSS_TYPE_GRPO"])
        return LossConfig(ltype, clip_low=lo, clip_high=hi)

    @property
    def required_inputs(self) -> tuple[str, ...]:
        req = LOSS_TYPES[self.type].required
        if self.type == "LOSS_TYPE_GRPO" and self.beta > 0:
            return (*req, "reference_logprobs")
        return req


@dataclass
class LossResult:
    loss: float
    dlp: np.ndarray
    counted: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    # dlp is finite by construction (the cross-entropy's: the negated weights, which parse_samples read as
    # finite float32 values), so the caller need not check it
    dlp_finite: bool = False


def parse_loss(loss: Loss) -> LossConfig:
    ltype = loss.type
    if ltype not in LOSS_TYPES:
        raise invalid(f"unsupported loss type {ltype!r}; expected one of {sorted(LOSS_TYPES)}")
    spec = LOSS_TYPES[ltype]
    key = spec.params_key
    params: Wire | None = getattr(loss, key) if key else None
    if params is None or params == _UNSET[type(params)]:  # no parameters: the defaults (the common case)
        default = _DEFAULT_CONFIGS.get(ltype)
        if default is not None:
            return default
    return spec.parse(ltype, params, f"loss.{key}")


def _no_params(ltype: str, params: Wire | None, where: str) -> LossConfig:
    return LossConfig(ltype)


def _clipped(ltype: str, params: Wire | None, where: str) -> LossConfig:
    clip = params if isinstance(params, ClipParams) else ClipParams()
    lo = number_param(clip.clip_low_threshold, "clip_low_threshold", DEFAULT_CLIPS[ltype][0], where)
    hi = number_param(clip.clip_high_threshold, "clip_high_threshold", DEFAULT_CLIPS[ltype][1], where)
    assert lo is not None and hi is not None
    if ltype == "LOSS_TYPE_CISPO":
        if lo < 0 or hi < lo:
            raise invalid(f"{where}: need 0 <= clip_low_threshold <= clip_high_threshold, "
                          f"got {lo} / {hi}")
    else:
        if hi < rules.CLIP_HIGH.low:
            raise invalid(f"{where}.clip_high_threshold must be >= {rules.CLIP_HIGH.low}, got {hi}")
        if lo > rules.CLIP_LOW.high or lo < 0:  # (a negative bound the spec leaves open: refused all the same)
            raise invalid(f"{where}.clip_low_threshold must be in [0, {rules.CLIP_LOW.high}], got {lo}")
    return LossConfig(ltype, clip_low=lo, clip_high=hi)


def _grpo_params(ltype: str, params: Wire | None, where: str) -> LossConfig:
    grpo = params if isinstance(params, GrpoParams) else GrpoParams()
    clips = _clipped(ltype, grpo, where)
    beta = number_param(grpo.beta, "beta", DEFAULT_GRPO_BETA, where)
    assert beta is not None
    if beta < 0:
        raise invalid(f"{where}.beta must be >= 0, got {beta}")
    agg = grpo.agg_type or DEFAULT_AGG_TYPE
    if agg not in AGG_TYPES:
        raise invalid(f"{where}.agg_type must be one of {list(AGG_TYPES)}, got {agg!r}")
    if agg == "GRPO_LOSS_AGGREGATION_TYPE_UNSPECIFIED":  # protobuf's "not set": the default
        agg = DEFAULT_AGG_TYPE
    ratio = grpo.ratio_type or DEFAULT_RATIO_TYPE
    if ratio not in RATIO_TYPES:
        raise invalid(f"{where}.ratio_type must be one of {list(RATIO_TYPES)}, got {ratio!r}")
    return LossConfig(ltype, clip_low=clips.clip_low, clip_high=clips.clip_high, beta=beta, agg_type=agg,
                      ratio_type=ratio)


def _dppo_params(ltype: str, params: Wire | None, where: str) -> LossConfig:
    dppo = params if isinstance(params, DppoParams) else DppoParams()
    dl = number_param(dppo.delta_low, "delta_low", DEFAULT_DPPO_DELTA, where)
    dh = number_param(dppo.delta_high, "delta_high", DEFAULT_DPPO_DELTA, where)
    assert dl is not None and dh is not None
    bounds = rules.DPPO_DELTA
    for name, val in (("delta_low", dl), ("delta_high", dh)):
        if not bounds.low <= val <= bounds.high:
            raise invalid(f"{where}.{name} must be in [{bounds.low}, {bounds.high}], got {val}")
    return LossConfig(ltype, delta_low=dl, delta_high=dh)


def _dro_params(ltype: str, params: Wire | None, where: str) -> LossConfig:
    dro = params if isinstance(params, DroParams) else DroParams()
    if dro.beta is None:
        raise invalid("LOSS_TYPE_DRO requires loss.dro_params.beta (it has no default)")
    beta = number_param(dro.beta, "beta", None, where)
    assert beta is not None
    if beta < 0:
        raise invalid(f"{where}.beta must be >= 0, got {beta}")
    return LossConfig(ltype, beta=beta)


def _masked(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values`` where counted, exactly 0 elsewhere (so garbage at excluded positions cannot leak in)."""
    return np.where(mask != 0, values, 0.0)


def _mean(values: np.ndarray, mask: np.ndarray) -> float:
    n = float(mask.sum())
    return float(_masked(values, mask).sum() / n) if n else 0.0


def counted_mask(batch: Batch) -> np.ndarray:
    """1.0 where a policy loss counts the position (non-zero weight or mask), else 0.0."""
    for key in ("weights", "mask"):
        if key in batch.tensors:
            counted: np.ndarray = (batch.tensors[key] != 0).astype(np.float64)
            return counted
    return np.ones(batch.prevs.size, dtype=np.float64)


def compute(cfg: LossConfig, batch: Batch, lp: np.ndarray) -> LossResult:
    """Loss value, d loss / d lp per position, the counted mask and metrics. May return non-finite
    numbers; the caller checks."""
    if cfg.type == "LOSS_TYPE_CROSS_ENTROPY":
        w = batch.tensors["weights"]
        if w.dtype == np.float64 and w.size <= PAIRWISE_BLOCK:
            return _cross_entropy_small(w, lp)
    return _compute(cfg, batch, lp)


@np.errstate(all="ignore")  # as a decorator it costs half of a ``with`` block (no object built per call)
def _compute(cfg: LossConfig, batch: Batch, lp: np.ndarray) -> LossResult:
    return LOSS_TYPES[cfg.type].compute(cfg, batch, lp)


def _cross_entropy_small(w: np.ndarray, lp: np.ndarray) -> LossResult:
    """:func:`_cross_entropy` of a few float64 weights, its sums in Python: the same products and the same
    additions in numpy's order (:func:`numpy_sum`). Python's float arithmetic neither warns nor raises on
    overflow, and the two numpy calls left cannot signal, so no error state is set (tests/test_compute_support.py
    compares the two)."""
    ws = w.tolist()
    loss = -numpy_sum([x * y if x != 0 else 0.0 for x, y in zip(ws, lp.tolist())])
    wsum = numpy_sum(ws)
    metrics = {"loss:sum": loss, "loss/num_tokens": float(len(ws) - ws.count(0.0)), "loss/weight_sum": wsum,
               "loss/mean": loss / wsum if wsum else 0.0}
    return LossResult(loss, -w, w != 0, metrics, dlp_finite=True)


def _cross_entropy(cfg: LossConfig, batch: Batch, lp: np.ndarray) -> LossResult:
    w = batch.tensors["weights"]
    counted = w != 0
    loss = -float(np.where(counted, w * lp, 0.0).sum())  # _masked(w * lp, w), reusing the mask
    wsum = float(w.sum())
    metrics = {"loss:sum": loss, "loss/num_tokens": float(np.count_nonzero(counted)), "loss/weight_sum": wsum,
               "loss/mean": loss / wsum if wsum else 0.0}
    return LossResult(loss, -w, counted, metrics, dlp_finite=True)


def _policy(cfg: LossConfig, batch: Batch, lp: np.ndarray) -> LossResult:
    m = counted_mask(batch)
    q = batch.tensors["logprobs"]
    adv = batch.tensors["advantages"]
    r = exp(lp - q)
    metrics: dict[str, float] = {"loss/ratio/mean": _mean(r, m), "loss/kl_sample/mean": _mean(q - lp, m)}
    if cfg.type == "LOSS_TYPE_IMPORTANCE_SAMPLING":
        per = r * adv
        dlp = -_masked(r * adv, m)
    elif cfg.type == "LOSS_TYPE_PPO":
        clipped_r = np.clip(r, cfg.clip_low, cfg.clip_high)
        high = (adv > 0) & (r > cfg.clip_high)
        low = (adv < 0) & (r < cfg.clip_low)
        per = np.minimum(r * adv, clipped_r * adv)
        dlp = -_masked(np.where(high | low, 0.0, r * adv), m)
        metrics["loss/clip/high_fraction"] = _mean(high.astype(np.float64), m)
        metrics["loss/clip/low_fraction"] = _mean(low.astype(np.float64), m)
    elif cfg.type == "LOSS_TYPE_CISPO":
        clipped_r = np.clip(r, cfg.clip_low, cfg.clip_high)
        per = clipped_r * lp * adv
        dlp = -_masked(clipped_r * adv, m)
        metrics["loss/clip/high_fraction"] = _mean((r > cfg.clip_high).astype(np.float64), m)
        metrics["loss/clip/low_fraction"] = _mean((r < cfg.clip_low).astype(np.float64), m)
    elif cfg.type == "LOSS_TYPE_DRO":
        d = lp - q
        pen = 0.5 * cfg.beta * (d * d)
        per = lp * adv - pen
        dlp = -_masked(adv - cfg.beta * d, m)
        metrics["loss/penalty/mean"] = _mean(pen, m)
    elif cfg.type == "LOSS_TYPE_DPPO":
        moved = exp(lp) - exp(q)
        high = (adv > 0) & (moved > cfg.delta_high)
        low = (adv < 0) & (-moved > cfg.delta_low)
        per = r * adv
        dlp = -_masked(np.where(high | low, 0.0, r * adv), m)
        metrics["loss/clip/high_fraction"] = _mean(high.astype(np.float64), m)
        metrics["loss/clip/low_fraction"] = _mean(low.astype(np.float64), m)
    else:  # pragma: no cover - parse_loss rejects anything else
        raise invalid(f"unsupported loss type {cfg.type!r}")
    loss = float(-_masked(per, m).sum())
    metrics = {"loss:sum": loss, "loss/num_tokens": float(m.sum()), **metrics}
    return LossResult(loss, dlp, m != 0, metrics)


def _grpo(cfg: LossConfig, batch: Batch, lp: np.ndarray) -> LossResult:
    m = counted_mask(batch)
    q = batch.tensors["logprobs"]
    adv = batch.tensors["advantages"]
    sid = batch.sample_id
    nb = batch.num_samples
    n_i = np.bincount(sid, weights=m, minlength=nb)
    # aggregation weights c_t
    if cfg.agg_type == "GRPO_LOSS_AGGREGATION_TYPE_TOKEN_MEAN":
        total = float(m.sum())
        c = np.full(lp.size, 1.0 / total if total else 0.0)
    elif cfg.agg_type == "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN":
        b_eff = int(np.count_nonzero(n_i))
        per_sample = np.where(n_i > 0, 1.0 / (np.maximum(b_eff, 1) * np.maximum(n_i, 1.0)), 0.0)
        c = per_sample[sid]
    else:  # FIXED_HORIZON
        l_max = int(batch.lengths().max())
        c = np.full(lp.size, 1.0 / (nb * l_max))
    d = lp - q
    if cfg.ratio_type == "GRPO_LOSS_RATIO_TYPE_SEQUENCE":
        mean_d = np.bincount(sid, weights=_masked(d, m), minlength=nb) / np.maximum(n_i, 1.0)
        rho = exp(mean_d)[sid]
    else:
        rho = exp(d)
    clipped = np.clip(rho, cfg.clip_low, cfg.clip_high)
    high = (adv > 0) & (rho > cfg.clip_high)
    low = (adv < 0) & (rho < cfg.clip_low)
    surr = np.minimum(rho * adv, clipped * adv)
    unclipped_grad = np.where(high | low, 0.0, rho * adv)   # d surr / d log(rho)
    per = -surr
    dlp = np.zeros(lp.size)
    w = _masked(c, m)
    if cfg.ratio_type == "GRPO_LOSS_RATIO_TYPE_SEQUENCE":
        # d log(rho_i) / d lp_s = m_s / n_i for every position s of sample i
        summed = np.bincount(sid, weights=_masked(w * unclipped_grad, m), minlength=nb)
        per_sample = summed / np.maximum(n_i, 1.0)
        dlp = dlp - _masked(per_sample[sid], m)
    else:
        dlp = dlp - _masked(w * unclipped_grad, m)
    metrics: dict[str, float] = {}
    if "reference_logprobs" in batch.tensors:
        ref = batch.tensors["reference_logprobs"]
        e_ref = exp(ref - lp)
        k3 = e_ref - (ref - lp) - 1.0
        metrics["loss/kl_ref/mean"] = _mean(k3, m)
        if cfg.beta > 0:
            per = per + cfg.beta * k3
            dlp = dlp + _masked(w * cfg.beta * (1.0 - e_ref), m)
    loss = float(_masked(w * per, m).sum())
    metrics = {"loss:sum": loss, "loss/num_tokens": float(m.sum()), "loss/ratio/mean": _mean(rho, m),
               "loss/clip/high_fraction": _mean(high.astype(np.float64), m),
               "loss/clip/low_fraction": _mean(low.astype(np.float64), m),
               "loss/kl_sample/mean": _mean(-d, m), **metrics}
    return LossResult(loss, dlp, m != 0, metrics)


@dataclass(frozen=True)
class LossType:
    """One loss type: the ``LossConfig`` field holding its parameters (None: it has none; another type's is
    dropped with a warning by the kind that trains on a loss), the ``loss_fn_inputs`` it needs,
    how its parameters are read (with their defaults) and how it is computed."""

    params_key: str | None
    required: tuple[str, ...]
    parse: Callable[[str, Wire | None, str], LossConfig]
    compute: Callable[[LossConfig, Batch, np.ndarray], LossResult]


POLICY_REQUIRED = ("target_tokens", "logprobs", "advantages")

#: Every loss type (docs/api-surface.md A.3.1).
LOSS_TYPES: Mapping[str, LossType] = MappingProxyType({
    "LOSS_TYPE_CROSS_ENTROPY": LossType("cross_entropy_params", ("target_tokens", "weights"), _no_params,
                                        _cross_entropy),
    "LOSS_TYPE_GRPO": LossType("grpo_params", POLICY_REQUIRED, _grpo_params, _grpo),
    "LOSS_TYPE_IMPORTANCE_SAMPLING": LossType(None, POLICY_REQUIRED, _no_params, _policy),
    "LOSS_TYPE_PPO": LossType("ppo_params", POLICY_REQUIRED, _clipped, _policy),
    "LOSS_TYPE_CISPO": LossType("cispo_params", POLICY_REQUIRED, _clipped, _policy),
    "LOSS_TYPE_DPPO": LossType("dppo_params", POLICY_REQUIRED, _dppo_params, _policy),
    "LOSS_TYPE_DRO": LossType("dro_params", POLICY_REQUIRED, _dro_params, _policy),
})
# What parse_loss returns for each loss type given no parameters (DRO has a required parameter).
_DEFAULT_CONFIGS = MappingProxyType({t: LossConfig.default(t) for t in LOSS_TYPES if t != "LOSS_TYPE_DRO"})
# A parameters object that sets nothing reads as none at all.
_UNSET: Mapping[type, Wire] = MappingProxyType({cls: cls() for cls in (NoParams, ClipParams, GrpoParams, DppoParams,
                                                                      DroParams)})

__all__ = ["LOSS_TYPES", "LossConfig", "LossResult", "LossType", "compute", "counted_mask", "parse_loss"]
