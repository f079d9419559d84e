"""The simulated model responds like a real one, driven through the SDK's Trainer and Generator."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from emulator.config import Config
from emulator.tools.testing import serve_in_thread

pytestmark = pytest.mark.sdk

PROMPT = [101, 102, 103, 104]
ANSWER = [205, 206, 207, 208]


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    saved = {k: os.environ.get(k) for k in ("TOGETHER_BASE_URL", "TOGETHER_API_KEY")}
    with serve_in_thread(Config(seed=11)) as (url, _runtime):
        os.environ["TOGETHER_BASE_URL"] = url
        os.environ["TOGETHER_API_KEY"] = "learning-key"
        from together.post_training import ModelResourcesClient

        try:
            resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.1, ready_timeout=30)
            s = resources.create_session(lora_config={"rank": 16}, interval=0.1, timeout=30)
            yield s
            s.stop()
            resources.stop()
        finally:
            for key, value in saved.items():  # module-scoped, so no monkeypatch: restore by hand
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _ce(prompt: list[int], answer: list[int]) -> Any:
    from together.post_training import Sample

    tokens = prompt + answer
    return Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                  loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                  "weights": {"data": [0.0] * (len(prompt) - 1) + [1.0] * len(answer),
                                              "dtype": "float32"}})


def test_training_lowers_loss_and_greedy_reproduces_answer(session: Any) -> None:
    from together.post_training import AdamParams, LossConfig, ModelInput, SamplingParams

    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    first = session.trainer.forward_backward(samples=[_ce(PROMPT, ANSWER)], loss=loss).loss
    session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
    for _ in range(39):
        last = session.trainer.forward_backward(samples=[_ce(PROMPT, ANSWER)], loss=loss).loss
        session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
    assert last < first / 2
    session.trainer.weights_sync()
    out = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": PROMPT}}]),
                                   sampling_params=SamplingParams(max_tokens=len(ANSWER), temperature=0.0))
    assert [int(t) for t in out.sequences[0].tokens] == ANSWER


def test_sampled_logprobs_match_forward_pass(session: Any) -> None:
    from together.post_training import LossConfig, ModelInput, Sample, SamplingParams

    out = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": [7, 8]}}]),
                                   sampling_params=SamplingParams(max_tokens=6, temperature=1.0, seed=3))
    seq = out.sequences[0]
    tokens = [7, 8] + [int(t) for t in seq.tokens]
    n = len(tokens) - 1
    sample = Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                    loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                    "weights": {"data": [1.0] * n, "dtype": "float32"}})
    fwd = session.trainer.forward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    logprobs = fwd.loss_fn_outputs[0].tensors["logprobs"].data
    assert logprobs[1:] == pytest.approx(seq.logprobs, abs=1e-6)


def test_negative_advantage_lowers_likelihood_of_sample(session: Any) -> None:
    from together.post_training import AdamParams, LossConfig, ModelInput, Sample, SamplingParams

    prompt = [31, 32, 33]
    session.trainer.weights_sync()
    seq = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]),
                                   sampling_params=SamplingParams(max_tokens=5, temperature=1.0, seed=9)).sequences[0]
    completion = [int(t) for t in seq.tokens]
    tokens = prompt + completion
    n = len(tokens) - 1
    k = len(prompt) - 1

    def sample(advantage: float) -> Any:
        return Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                      loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                      "logprobs": {"data": [0.0] * k + list(seq.logprobs), "dtype": "float32"},
                                      "advantages": {"data": [0.0] * k + [advantage] * (n - k), "dtype": "float32"}})

    def completion_logprob() -> float:
        fwd = session.trainer.forward(samples=[_ce(prompt, completion)], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
        return sum(fwd.loss_fn_outputs[0].tensors["logprobs"].data)

    before = completion_logprob()
    session.trainer.forward_backward(samples=[sample(-1.0)], loss=LossConfig(type="LOSS_TYPE_IMPORTANCE_SAMPLING"))
    session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
    after = completion_logprob()
    assert after < before
