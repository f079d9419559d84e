"""End-to-end: the official SDK (together==3.1.1) against a live emulator on a free loopback port."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.testing import serve_in_thread

pytestmark = pytest.mark.sdk


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Runtime]]:
    with serve_in_thread(Config(validate_responses=True)) as (url, runtime):
        yield url, runtime


@pytest.fixture
def sdk_env(server: tuple[str, Runtime], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TOGETHER_BASE_URL", server[0])
    monkeypatch.setenv("TOGETHER_API_KEY", f"sdk-key-{os.getpid()}")
    return server[0]


def _sample(prompt: list[int], response: list[int]) -> object:
    from together.post_training import Sample

    tokens = prompt + response
    return Sample(
        model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
        loss_fn_inputs={
            "target_tokens": {"data": tokens[1:], "dtype": "int64"},
            "weights": {"data": [0.0] * (len(prompt) - 1) + [1.0] * len(response), "dtype": "float32"},
        },
    )


def test_sdk_high_level_loop(sdk_env: str, tmp_path: Path) -> None:
    from together import Together
    from together.post_training import (
        AdamParams,
        LossConfig,
        ModelInput,
        ModelResourcesClient,
        SamplingParams,
        download_checkpoint,
    )

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", lora_enabled=True,
                                            compute_config={"num_generator_replicas": 1}, interval=0.1,
                                            ready_timeout=30)
    session = resources.create_session(lora_config={"rank": 8}, interval=0.1, timeout=30)
    sample = _sample([1, 2, 3, 4], [5, 6, 7])
    first = session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    assert isinstance(first.loss, float) and first.loss > 0
    opt = session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
    assert str(opt.step) == "1"
    ws = session.trainer.weights_sync()
    assert str(ws.weights_version) == "1"
    res = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": [1, 2, 3, 4]}}]),
                                   num_samples=2, sampling_params=SamplingParams(max_tokens=8, temperature=1.0))
    assert len(res.sequences) == 2
    assert all(seq.stop_reason in ("STOP_REASON_LENGTH", "STOP_REASON_STOP") for seq in res.sequences)
    logprobs = session.generator.compute_logprobs(ModelInput(chunks=[{"encoded_text": {"tokens": [1, 2, 3, 4]}}]))
    assert len(logprobs) == 4
    ickpt = session.create_inference_checkpoint()
    tckpt = session.create_training_checkpoint()
    assert str(ickpt.step) == "1" and str(tckpt.step) == "1"
    client = Together(_strict_response_validation=True)
    listed = client.post_training.checkpoints.list(session_id=session.session_id)
    assert {c.id for c in listed.data} == {ickpt.id, tckpt.id}
    paths = download_checkpoint(client, ickpt.id, variant="CHECKPOINT_VARIANT_ADAPTER", output_dir=str(tmp_path))
    assert paths and all(Path(p).stat().st_size > 0 for p in paths)
    session.stop()
    resources.stop()
    r = client.post_training.model_resources.retrieve(resources.model_resources_id)
    assert r.status in ("MODEL_RESOURCES_STATUS_STOPPING", "MODEL_RESOURCES_STATUS_STOPPED")


def test_sdk_low_level_strict(sdk_env: str) -> None:
    from together import BadRequestError, NotFoundError, Together

    c = Together(_strict_response_validation=True)
    r = c.post_training.model_resources.create(base_model="Qwen/Qwen3.8-27B", lora_enabled=True)
    r = c.post_training.model_resources.retrieve(r.id)
    assert r.status == "MODEL_RESOURCES_STATUS_READY"
    s = c.post_training.sessions.create(model_resources_id=r.id, lora_config={"rank": 8})
    s = c.post_training.sessions.retrieve(s.id)
    assert s.status == "TRAINING_SESSION_STATUS_RUNNING"
    sample = {"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]},
              "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                                 "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"}}}
    op = c.post_training.operations.forward_backward(s.id, loss={"type": "LOSS_TYPE_CROSS_ENTROPY"},
                                                     samples=[sample], idempotency_key="k1")
    again = c.post_training.operations.forward_backward(s.id, loss={"type": "LOSS_TYPE_CROSS_ENTROPY"},
                                                        samples=[sample], idempotency_key="k1")
    assert again.id == op.id
    done = c.post_training.operations.retrieve_forward_backward(op.id, session_id=s.id)
    assert done.status == "TRAINING_OPERATION_STATUS_COMPLETED" and done.output is not None
    page = c.post_training.sessions.list(status=["TRAINING_SESSION_STATUS_RUNNING"], model_resources_id=r.id)
    assert [x.id for x in page.data or []] == [s.id]
    c.post_training.sessions.update(s.id, display_name="renamed")
    assert c.post_training.sessions.retrieve(s.id).display_name == "renamed"
    models = c.post_training.supported_models.get()
    assert any(m.base_model == "Qwen/Qwen3.8-27B" for m in models.data)
    with pytest.raises(BadRequestError):
        c.post_training.model_resources.stop(r.id)
    stopped = c.post_training.model_resources.stop(r.id, force=True)
    assert stopped.status == "MODEL_RESOURCES_STATUS_STOPPING"
    with pytest.raises(NotFoundError):
        c.post_training.sessions.retrieve("00000000-0000-4000-8000-000000000000")


def test_sdk_large_payload_goes_through_upload(sdk_env: str, server: tuple[str, Runtime]) -> None:
    from together.post_training import LossConfig, ModelResourcesClient

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=0.1, ready_timeout=30)
    session = resources.create_session(interval=0.1, timeout=30)
    # > 0.5 MiB of JSON makes the SDK upload the body and submit a truncated stand-in with payload_id.
    samples = [_sample(list(range(1, 200)), list(range(200, 1200))) for _ in range(40)]
    big = session.trainer.forward_backward(samples=samples, loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    assert isinstance(big.loss, float)
    runtime = server[1]
    principal = runtime.principal_for(os.environ["TOGETHER_API_KEY"])
    assert principal is not None
    with runtime.unit_of_work(principal, write=False) as (state, _ctx):
        uploaded = [p for p in state.payloads.values() if p.session_id == session.session_id]
        ops = [o for o in state.operations.values() if o.session_id == session.session_id]
        assert len(uploaded) == 1
        # The operation ran on the uploaded body (40 samples of 1,000 weighted tokens each), not the truncated
        # inline stand-in; it finished, which released both the payload's bytes and its own copy of them.
        assert ops[-1].payload_id == uploaded[0].id and ops[-1].body is None
        assert ops[-1].status == "TRAINING_OPERATION_STATUS_COMPLETED"
        assert ops[-1].output["metrics"]["loss/num_tokens"] == 40 * 1000
        assert uploaded[0].data is None and uploaded[0].released_by == ops[-1].id
    session.stop()
    resources.stop()


def test_sdk_offloaded_forward_scores_without_training(sdk_env: str, server: tuple[str, Runtime]) -> None:
    """tinker-cookbook's ``sl_loop`` shape at its real size: ``forward()`` of 48 sequences of 1,200 tokens is
    over 0.5 MiB, so the SDK uploads ``{loss, samples}`` and sends ``forward_only`` inline (issue 37). It returns
    one output per sample, and the optim-step after it leaves the model unchanged."""
    from together.post_training import AdamParams, LossConfig, ModelResourcesClient

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=0.1, ready_timeout=30)
    session = resources.create_session(interval=0.1, timeout=30)
    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    probe = [_sample([1, 2, 3], [4, 5, 6])]
    before = session.trainer.forward(samples=probe, loss=loss).loss
    batch = [_sample([1 + i, 2 + i], list(range(1000 + 1200 * i, 1000 + 1200 * i + 1198))) for i in range(48)]
    scored = session.trainer.forward(samples=batch, loss=loss)
    outputs = scored.loss_fn_outputs or []
    assert len(outputs) == 48
    assert all(len(out.tensors["logprobs"].data) == 1199 for out in outputs)
    session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-3))
    assert session.trainer.forward(samples=probe, loss=loss).loss == before
    runtime = server[1]
    principal = runtime.principal_for(os.environ["TOGETHER_API_KEY"])
    assert principal is not None
    with runtime.unit_of_work(principal, write=False) as (state, _ctx):
        [uploaded] = [p for p in state.payloads.values() if p.session_id == session.session_id]
        [read_it] = [o for o in state.operations.values() if o.payload_id == uploaded.id]
        assert read_it.output is not None and read_it.output["metrics"]["loss/num_tokens"] == 48 * 1198
    session.stop()
    resources.stop()


def test_sdk_async_pipelined_training_loop(sdk_env: str) -> None:
    """The SDK's *_async methods, pipelined as a client would: each step's forward-backward, optimizer
    step and a sample run as concurrent tasks, so requests of several operations interleave."""
    from together.post_training import (
        AdamParams,
        LossConfig,
        ModelInput,
        ModelResourcesClient,
        SamplingParams,
    )

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.05, ready_timeout=30)
    session = resources.create_session(interval=0.05, timeout=30)
    prompt, answer = [101, 102, 103, 104], [205, 206, 207, 208]
    greedy = SamplingParams(max_tokens=len(answer), temperature=0.0)
    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")

    async def loop() -> tuple[list[float], list[int], list[int]]:
        losses, steps = [], []
        for _ in range(40):
            fb = asyncio.ensure_future(session.trainer.forward_backward_async(samples=[_sample(prompt, answer)],
                                                                            loss=loss))
            opt = asyncio.ensure_future(session.trainer.optim_step_async(adam_params=AdamParams(learning_rate=1e-4)))
            drawn = asyncio.ensure_future(session.generator.sample_async(
                ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]), sampling_params=greedy))
            fb_out, opt_out, sample_out = await asyncio.gather(fb, opt, drawn)
            assert len(sample_out.sequences[0].tokens) == len(answer)
            losses.append(fb_out.loss)
            steps.append(int(opt_out.step))
        await session.trainer.weights_sync_async()
        out = await session.generator.sample_async(ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]),
                                                   sampling_params=greedy)
        return losses, steps, [int(t) for t in out.sequences[0].tokens]

    losses, steps, tokens = asyncio.run(loop())
    assert steps == list(range(1, 41))       # one step each, in order, whatever order the requests came in
    assert losses[-1] < losses[0] / 2         # the 40 batches were all trained on
    assert tokens == answer                   # and the synced weights carry them
    session.stop()
    resources.stop()
