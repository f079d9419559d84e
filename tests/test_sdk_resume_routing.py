"""End-to-end through the official SDK: resuming a checkpoint without a lora_config (issue 10), through
the native clients and the tinker-compatible ones, and MoE routed-experts keys (issue 15)."""

from __future__ import annotations

import pytest

from tests.helpers import sdk_sample, sdk_train_and_checkpoint

pytestmark = pytest.mark.sdk

SDK_KEY = KEY = "resume-routing-key"


def test_create_session_resume_without_lora_config_through_the_sdk(sdk_env: str) -> None:
    from together import BadRequestError, Together
    from together.post_training import LossConfig, ModelResourcesClient

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.1)
    ckpt, trained = sdk_train_and_checkpoint(resources, {"rank": 16, "alpha": 32, "seed": 59}, [9, 8, 7, 6])
    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    # The SDK omits lora_config when the caller gives none: the session inherits the checkpoint's.
    resumed = resources.create_session(resume_from_checkpoint_id=ckpt.id, interval=0.1)
    client = Together(_strict_response_validation=True)
    info = client.post_training.sessions.retrieve(resumed.session_id)
    assert info.lora_config is not None
    assert (info.lora_config.rank, info.lora_config.alpha, str(info.lora_config.seed)) == (16, 32, "59")
    assert str(info.step) == "3"
    assert resumed.trainer.forward(samples=[sdk_sample([9, 8, 7, 6])], loss=loss).loss == trained
    resumed.stop()
    with pytest.raises(BadRequestError, match="differs from the checkpoint's rank 16"):
        resources.create_session(resume_from_checkpoint_id=ckpt.id, lora_config={"rank": 8}, interval=0.1)
    resources.stop()


def test_tinker_create_training_client_from_state_resumes(sdk_env: str) -> None:
    import numpy as np
    from together import Together
    from together.post_training import tinker

    tokens = [9, 8, 7, 6, 5]
    datum = tinker.types.Datum(model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
                               loss_fn_inputs={"target_tokens": np.asarray(tokens[1:], dtype=np.int64),
                                               "weights": np.ones(len(tokens) - 1, dtype=np.float32)})
    service = tinker.ServiceClient(base_url=sdk_env, api_key=KEY)
    trainer = service.create_lora_training_client("Qwen/Qwen3.5-4B", rank=16, seed=59)
    try:
        for _ in range(3):
            trainer.forward_backward([datum], "cross_entropy").result()
            trainer.optim_step(tinker.types.AdamParams(learning_rate=1e-4)).result()
        trained = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]
        path = trainer.save_state("step-3").result().path
    finally:
        trainer.close()
    for resume in (service.create_training_client_from_state, service.create_training_client_from_state_with_optimizer):
        resumed = resume(path)
        try:
            assert resumed.forward([datum], "cross_entropy").result().metrics["loss:sum"] == trained
            info = Together().post_training.sessions.retrieve(resumed._session.session_id)
            assert info.resume_from_checkpoint_id == path
            assert info.lora_config is not None and info.lora_config.rank == 16 and str(info.lora_config.seed) == "59"
        finally:
            resumed.close()


def test_routed_experts_key_round_trip_through_the_sdk(sdk_env: str) -> None:
    from together.post_training import Gradient, LossConfig, ModelInput, ModelResourcesClient, SamplingParams
    from together.post_training._operations import OperationFailedError

    resources = ModelResourcesClient.create(base_model="MiniMaxAI/MiniMax-M3", interval=0.1)
    session = resources.create_session(interval=0.1)
    prompt = [1, 2, 3, 4, 5]
    result = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]), num_samples=1,
                                      sampling_params=SamplingParams(max_tokens=4), return_routed_experts=True)
    seq = result.sequences[0]
    assert seq.routed_experts_key and seq.routed_experts_key.startswith("routing/session/")
    tokens = prompt + [int(t) for t in seq.tokens]
    fb = session.trainer.forward_backward(samples=[sdk_sample(tokens, seq.routed_experts_key)],
                                          loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    assert fb.loss > 0
    with pytest.raises(OperationFailedError, match="TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"):
        session.trainer.custom_forward_backward(
            samples=[sdk_sample(tokens, "routing/session/" + "0" * 32 + ".9")],
            gradients=[Gradient(data=[0.1] * (len(tokens) - 1), dtype="D_TYPE_FLOAT32")])
    session.stop()
    resources.stop()
