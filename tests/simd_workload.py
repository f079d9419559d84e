"""A representative run of the simulated model, reduced to digests: ``python -m tests.simd_workload`` prints one
JSON object (each part's SHA-256, the numpy dispatch targets this process ran with, a fingerprint of libm).

tests/test_compute_portable.py runs it with numpy's SIMD code paths switched off (``NPY_DISABLE_CPU_FEATURES``)
and glibc's non-FMA libm chosen, and requires the same digests every time. It covers the seven losses (both
GRPO ratio types, with a KL penalty), custom gradients, Adam and Muon, LoRA and full-weight sessions, sampling
(temperature 1 and 0.7, top-k/top-p, greedy) with sampled, prompt and top-k prompt log-probs, the model state,
both checkpoint exports, and the portable functions over their whole range.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from emulator.compute import ModelSpec
from emulator.compute import SessionModel as TypedModel
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

VOCAB, TOKENIZER = 248_320, 248_077


class SessionModel(TypedModel):
    """The model driven with the JSON a request carries, read as the API reads it (``decode``)."""

    def forward_backward(self, samples: Any, loss: Any, **kw: Any) -> Any:
        return self.loss_and_grad(decode(samples, tuple[Sample, ...]), decode(loss, Loss), **kw)

    def custom_forward_backward(self, samples: Any, gradients: Any) -> Any:
        return self.accumulate_gradients(decode(samples, tuple[Sample, ...]), decode(gradients, tuple[Gradient, ...]))

    def optim_step(self, adam_params: Any, muon_params: Any) -> int:
        return self.update(decode(adam_params, AdamParams | None),  # type: ignore[arg-type]
                           decode(muon_params, MuonParams | None))  # type: ignore[arg-type]

    def sample(self, weights: Any, model_inputs: Any, *, sampling_params: Any, **kw: Any) -> Any:  # type: ignore[override]
        return super().sample(weights, decode(model_inputs, tuple[ModelInput, ...]),
                              sampling_params=decode(sampling_params, SamplingParams | None), **kw)  # type: ignore[arg-type]
LOSSES: list[dict[str, Any]] = [
    {"type": "LOSS_TYPE_CROSS_ENTROPY"},
    {"type": "LOSS_TYPE_IMPORTANCE_SAMPLING"},
    {"type": "LOSS_TYPE_PPO"},
    {"type": "LOSS_TYPE_CISPO"},
    {"type": "LOSS_TYPE_DRO", "dro_params": {"beta": 0.1}},
    {"type": "LOSS_TYPE_DPPO"},
    {"type": "LOSS_TYPE_GRPO", "grpo_params": {"beta": 0.04}},
    {"type": "LOSS_TYPE_GRPO", "grpo_params": {"beta": 0.04, "ratio_type": "GRPO_LOSS_RATIO_TYPE_SEQUENCE",
                                               "agg_type": "GRPO_LOSS_AGGREGATION_TYPE_SEQUENCE_MEAN"}},
]


def _spec(**kw: Any) -> ModelSpec:
    base: dict[str, Any] = {"vocab_size": VOCAB, "max_seq_length": 4096, "max_batch_size": 64,
                            "context_length": 4096, "lora_rank": 8, "lora_alpha": 16.0, "train_unembed": True,
                            "seed": 3, "optimizer": "adam", "eos_token_id": 248_046, "end_token_ids": (248_044,),
                            "tokenizer_size": TOKENIZER}
    base.update(kw)
    return ModelSpec(**base)


def _samples(rng: np.random.Generator, lps: list[list[float]] | None, count: int = 8, length: int = 40
             ) -> list[dict[str, Any]]:
    """``count`` sequences drawn from a few hundred tokens (rows repeat, as in text); policy inputs when
    ``lps`` (the sampler's log-probs of each) is given, else cross-entropy weights."""
    out = []
    for i in range(count):
        toks = rng.integers(0, 400, length + 1).tolist()
        inputs: dict[str, Any] = {"target_tokens": {"data": toks[1:], "dtype": "int64"}}
        if lps is None:
            inputs["weights"] = {"data": [0.0] * 5 + [1.0] * (length - 5), "dtype": "float32"}
        else:
            q = lps[i] if i < len(lps) else (-rng.exponential(4.0, length)).tolist()
            inputs["logprobs"] = {"data": q, "dtype": "float32"}
            inputs["reference_logprobs"] = {"data": (np.asarray(q) - rng.exponential(0.3, length)).tolist(),
                                            "dtype": "float32"}
            inputs["advantages"] = {"data": rng.standard_normal(length).tolist(), "dtype": "float32"}
            inputs["mask"] = {"data": [0] * 3 + [1] * (length - 3), "dtype": "int64"}
        out.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]}, "loss_fn_inputs": inputs})
    return out


def _prompt(tokens: list[int]) -> dict[str, Any]:
    return {"chunks": [{"encoded_text": {"tokens": tokens}}]}


def model_outputs() -> dict[str, Any]:
    """Everything the workload's models answer, by part."""
    rng = np.random.default_rng(2024)
    parts: dict[str, Any] = {}
    lora = SessionModel(_spec())
    full = SessionModel(_spec(lora_rank=None, lora_alpha=None, optimizer="muon", seed=4))
    for name, model, adam, muon in (("lora-adam", lora, {"learning_rate": 3e-4}, None),
                                    ("full-muon", full, None, {"learning_rate": 0.02})):
        out: list[Any] = []
        for step in range(6):
            out.append(model.forward_backward(_samples(rng, None), LOSSES[0], return_loss_fn_outputs=True))
            out.append(model.optim_step(adam, muon))
            out.append(model.last_optim_info)
            if step == 2:  # the model's own samples, then every policy loss on them
                sampled = model.sample(model.weights(), [_prompt([1, 2, 3])], num_samples=4,
                                       sampling_params={"max_tokens": 30, "seed": 9}, prompt_logprobs=False,
                                       topk_prompt_logprobs=0, seed=1, version=step)
                lps = [s["logprobs"] for s in sampled["results"][0]["sequences"]]
                out.append(sampled)
                for loss in LOSSES[1:]:
                    out.append(model.forward_backward(_samples(rng, [lp + [-1.0] * (40 - len(lp)) for lp in lps]),
                                                      loss, return_loss_fn_outputs=True))
                model.optim_step(adam, muon)
        model.custom_forward_backward(_samples(rng, None, 2, 12),
                                      [{"data": rng.standard_normal(12).tolist(), "dtype": "float32"}
                                       for _ in range(2)])
        out.append(model.optim_step(adam, muon))
        parts[f"{name}/training"] = out
        weights = model.weights()
        prompts = [_prompt(rng.integers(0, 400, 24).tolist()), _prompt([7, 7, 7])]
        parts[f"{name}/sample-t1"] = model.sample(weights, prompts, num_samples=4, sampling_params={"max_tokens": 40},
                                                  prompt_logprobs=True, topk_prompt_logprobs=5, seed=11, version=1)
        parts[f"{name}/sample-truncated"] = model.sample(
            weights, prompts, num_samples=4, prompt_logprobs=True, topk_prompt_logprobs=0, seed=12, version=1,
            sampling_params={"max_tokens": 40, "temperature": 0.7, "top_p": 0.9, "top_k": 50})
        parts[f"{name}/sample-greedy"] = model.sample(weights, prompts, num_samples=1, prompt_logprobs=False,
                                                      sampling_params={"max_tokens": 20, "temperature": 0.0},
                                                      topk_prompt_logprobs=3, seed=13, version=1)
        parts[f"{name}/state"] = model.to_state()
        for variant in (("CHECKPOINT_VARIANT_ADAPTER",) if model.spec.is_lora else ()) + ("CHECKPOINT_VARIANT_MERGED",):
            parts[f"{name}/export/{variant}"] = [(n, data.hex()) for n, data in model.export_files(variant)]
    return parts


def portable_outputs() -> dict[str, Any]:
    """The portable functions over their whole range: wide and model-like inputs, subnormals, limits."""
    from emulator.compute import portable

    rng = np.random.default_rng(7)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 5e-324, 2.2250738585072014e-308, 709.78, 709.79, 710.0, -745.13,
                      -745.14, -746.0, 1e300, -1e300, np.inf, -np.inf, np.nan])
    x = np.concatenate([rng.uniform(-746, 710, 50_000), -rng.exponential(5.0, 50_000), edges])
    pos = np.concatenate([np.ldexp(rng.uniform(0.5, 1.0, 50_000), rng.integers(-1074, 1024, 50_000)),
                          1 + rng.uniform(0, 1e6, 50_000), edges])
    with np.errstate(all="ignore"):
        return {"portable/exp": portable.exp(x).tobytes().hex(), "portable/log": portable.log(pos).tobytes().hex(),
                "portable/scalars": [portable.exp_float(float(v)) for v in x[::97]]
                + [portable.log_float(float(v)) for v in pos[::97]] + [portable.power_int(0.95, t) for t in range(300)]}


def digests(parts: dict[str, Any]) -> dict[str, str]:
    return {name: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
            for name, value in parts.items()}


def libm_fingerprint() -> str:
    """A digest of libm's exp and log on a few thousand values: it changes when libm takes another code path
    (glibc has FMA and non-FMA variants), which tells the test that switching one took effect."""
    values = [i / 7.0 - 300.0 for i in range(4200)]
    return hashlib.sha256(repr([(math.exp(v), math.log(abs(v) + 1e-3)) for v in values]).encode()).hexdigest()


def dispatch_targets() -> list[str]:
    """The SIMD targets numpy's dispatched functions run on in this process (numpy >= 2.0)."""
    from numpy.lib.introspect import opt_func_info

    return sorted({v["current"] for d in opt_func_info().values() for v in d.values()})


def main() -> None:
    print(json.dumps({"digests": digests({**model_outputs(), **portable_outputs()}), "targets": dispatch_targets(),
                      "libm": libm_fingerprint()}))


if __name__ == "__main__":
    main()
