"""The simulated model's cost on client-sized work, without HTTP: ``python -m bench.compute [--case NAME]
[--repeat N] [--instructions]``.

Cases (a Qwen3.5-sized LoRA session, vocabulary 248,320; tokens uniform over the tokenizer's ids, so nearly
every row of a batch is distinct: the worst case for the base model's row cache):

- ``fb-ce``: forward-backward, cross-entropy, 48 samples x 1,200 tokens, on rows trained by two steps;
- ``fb-grpo``: the same batch with GRPO (token ratios, ``beta`` 0.04 with reference log-probs);
- ``optim``: the Adam step after such a batch;
- ``sample``: 16 sequences x 200 tokens from one 64-token prompt, temperature 1, with prompt log-probs;
- ``sample-top-p``: the same with ``top_p`` 0.9 and ``top_k`` 50 (each row's distribution truncated).

Prints the CPU time per call (best of ``--repeat``); ``--instructions`` instead counts the instructions of
one call with callgrind (this script run twice, with and without the call), the same on every run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from emulator.compute import ModelSpec, SessionModel
from emulator.compute.types import AdamParams, Loss, ModelInput, Sample, SamplingParams, decode

CASES = ("fb-ce", "fb-grpo", "optim", "sample", "sample-top-p")
VOCAB, TOKENIZER = 248_320, 248_077
BATCH, LENGTH = 48, 1_200


def _tensor(data: Any, dtype: str) -> dict[str, Any]:
    return {"data": data, "dtype": dtype}


def _batch(rng: np.random.Generator, loss: str) -> tuple[Sample, ...]:
    samples = []
    for _ in range(BATCH):
        toks = rng.integers(0, TOKENIZER, LENGTH + 1).tolist()
        inputs: dict[str, Any] = {"target_tokens": _tensor(toks[1:], "int64")}
        if loss == "ce":
            inputs["weights"] = _tensor([1.0] * LENGTH, "float32")
        else:
            inputs["logprobs"] = _tensor((-rng.exponential(3.0, LENGTH)).tolist(), "float32")
            inputs["reference_logprobs"] = _tensor((-rng.exponential(3.0, LENGTH)).tolist(), "float32")
            inputs["advantages"] = _tensor(rng.standard_normal(LENGTH).tolist(), "float32")
        samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]},
                        "loss_fn_inputs": inputs})
    return decode(samples, tuple[Sample, ...])  # (typed as a request is, where it enters: not measured)


CE = Loss(type="LOSS_TYPE_CROSS_ENTROPY")
GRPO = decode({"type": "LOSS_TYPE_GRPO", "grpo_params": {"beta": 0.04}}, Loss)
ADAM = AdamParams(learning_rate=1e-4)


def setup(case: str) -> Callable[[], Any]:
    """A trained model and the call to measure (which leaves the model as it found it, but for ``optim``)."""
    spec = ModelSpec(vocab_size=VOCAB, max_seq_length=32_768, max_batch_size=64, context_length=32_768,
                     lora_rank=32, lora_alpha=16.0, train_unembed=True, seed=11, optimizer="adam",
                     eos_token_id=248_046, end_token_ids=(248_044,), tokenizer_size=TOKENIZER)
    model = SessionModel(spec)
    rng = np.random.default_rng(0)
    ce = _batch(rng, "ce")
    for _ in range(2):
        model.loss_and_grad(ce, CE)
        model.update(ADAM, None)
    if case == "fb-ce":
        return lambda: model.loss_and_grad(ce, CE, forward_only=True, return_loss_fn_outputs=True)
    if case == "fb-grpo":
        grpo = _batch(rng, "grpo")
        return lambda: model.loss_and_grad(grpo, GRPO, forward_only=True, return_loss_fn_outputs=True)
    if case == "optim":
        model.loss_and_grad(ce, CE)
        state = (model._weights, model._opt, model._acc, model.step)  # (restored after each measured step)

        def step() -> None:
            model.update(ADAM, None)
            model._weights, model._opt, model._acc, model.step = state
        return step
    params = SamplingParams(max_tokens=200, temperature=1.0)
    if case == "sample-top-p":
        params = SamplingParams(max_tokens=200, temperature=1.0, top_p=0.9, top_k=50)
    prompt = decode({"chunks": [{"encoded_text": {"tokens": rng.integers(0, TOKENIZER, 64).tolist()}}]}, ModelInput)
    weights = model.weights()
    return lambda: model.sample(weights, [prompt], num_samples=16, sampling_params=params, prompt_logprobs=True,
                                topk_prompt_logprobs=0, seed=5, version=2)


def cpu_time(case: str, repeat: int) -> float:
    call = setup(case)
    call()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        call()
        best = min(best, time.process_time() - started)
    return best


def instructions(case: str) -> int:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    counts = []
    for n in (0, 1):
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                              "bench.compute", "--case", case, "--raw", str(n)],
                             capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        found = re.search(r"Collected : (\d+)", out.stderr)
        if found is None:
            raise SystemExit(f"no instruction count from callgrind:\n{out.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return counts[1] - counts[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compute", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=CASES, action="append", help="a case to run (default: all)")
    p.add_argument("--repeat", type=int, default=5, help="measured calls per case (the best counts)")
    p.add_argument("--instructions", action="store_true", help="count instructions with callgrind (slow, exact)")
    p.add_argument("--raw", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cases = args.case or list(CASES)
    if args.raw is not None:  # under callgrind: the setup, a warm-up call, then the measured call or none
        call = setup(cases[0])
        call()
        for _ in range(args.raw):
            call()
        return 0
    for case in cases:
        if args.instructions:
            print(f"{case}: {instructions(case) / 1e6:.1f}M instructions per call", flush=True)
        else:
            print(f"{case}: {cpu_time(case, args.repeat) * 1e3:.1f} ms of CPU per call (best of {args.repeat})",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
