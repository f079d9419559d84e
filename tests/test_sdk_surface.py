"""More of the SDK's surface against a live emulator: every high-level call and the low-level
resources a training loop or a tool reaches for, with strict response validation where possible."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import sdk_sample, sdk_train_and_checkpoint

pytestmark = pytest.mark.sdk

SDK_KEY = "surface-key"


def test_trainer_generator_and_resource_calls(sdk_env: str, tmp_path: Path) -> None:
    from together import Together
    from together.post_training import LossConfig, ModelInput, ModelResourcesClient, SamplingParams

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", inactive_timeout=600)  # default interval
    attached = ModelResourcesClient.attach(model_resources_id=resources.model_resources_id)
    assert attached.retrieve().status == "MODEL_RESOURCES_STATUS_READY"
    extended = resources.extend_expiry(seconds=7200)
    assert extended.expires_at is not None
    session = resources.create_session(display_name="surface", metadata={"wandb": {"project": "p"}})
    fwd = session.trainer.forward(samples=[sdk_sample([1, 2, 3, 4])], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
    assert len(fwd.loss_fn_outputs[0].tensors["logprobs"].data) == 3
    session.trainer.custom_forward_backward(samples=[sdk_sample([1, 2, 3, 4])], gradients=[{"data": [0.1, -0.2, 0.3]}])
    for loss_type, extra in (("LOSS_TYPE_PPO", {}), ("LOSS_TYPE_CISPO", {}), ("LOSS_TYPE_GRPO", {}),
                             ("LOSS_TYPE_DRO", {"dro_params": {"beta": 0.05}}), ("LOSS_TYPE_DPPO", {})):
        tokens = [5, 6, 7, 8]
        from together.post_training import Sample

        sample = Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                        loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                        "logprobs": {"data": [-1.0, -1.0, -1.0], "dtype": "float32"},
                                        "advantages": {"data": [0.5, 0.5, 0.5], "dtype": "float32"}})
        out = session.trainer.forward_backward(samples=[sample], loss=LossConfig(type=loss_type, **extra))
        assert isinstance(out.loss, float), loss_type
    session.trainer.optim_step()
    session.trainer.weights_sync(weight_sync_type="WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH")
    batch = session.generator.sample_batch([ModelInput(chunks=[{"encoded_text": {"tokens": [1, 2]}}]),
                                            ModelInput(chunks=[{"encoded_text": {"tokens": [3]}}])],
                                           num_samples=2, sampling_params=SamplingParams(max_tokens=3, top_k=5),
                                           topk_prompt_logprobs=3, prompt_logprobs=True)
    assert len(batch) == 2 and all(len(r.sequences) == 2 for r in batch)
    assert batch[0].topk_prompt_logprobs is not None and len(batch[0].topk_prompt_logprobs) == 2
    lps = session.generator.compute_logprobs_batch([ModelInput(chunks=[{"encoded_text": {"tokens": [1, 2, 3]}}])])
    assert len(lps[0]) == 3
    ickpt = session.create_inference_checkpoint()
    client = Together(_strict_response_validation=True)
    got = client.post_training.checkpoints.retrieve(ickpt.id)
    assert got.type == "CHECKPOINT_TYPE_INFERENCE" and got.session_id == session.session_id
    files = client.post_training.checkpoints.download(ickpt.id, variant="CHECKPOINT_VARIANT_MERGED")
    assert files.data and all(int(f.size) > 0 for f in files.data)
    estimate = client.post_training.model_resources.estimate_cost(base_model="Qwen/Qwen3.8-27B")
    assert estimate.currency == "USD"
    listed = client.post_training.model_resources.list(status=["MODEL_RESOURCES_STATUS_READY"], created_by="me")
    assert resources.model_resources_id in [r.id for r in listed.data]
    # Shaping: quantize the adapter the inference checkpoint registered (merged into its base first).
    model_id = got.inference_registration.adapter.id  # LoRA on base weights registers an adapter
    shaping = client.post_training.prepare_for_fp4_inference
    assert shaping.estimate_cost(inputs={"model_object_id": model_id}).allowed_to_proceed is True
    job = shaping.create(inputs={"model_object_id": model_id})
    assert job.id.startswith("shp-quant-")
    assert shaping.retrieve(job.id).status == "completed"
    assert [e.type for e in shaping.list_events(job.id).data][-1] == "QUANTIZATION_JOB_COMPLETE"
    assert job.id in [j.id for j in shaping.list().data]
    session.stop()
    resources.stop()


def test_resume_through_the_sdk(sdk_env: str) -> None:
    from together.post_training import LossConfig, ModelResourcesClient

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.1)
    ckpt, trained = sdk_train_and_checkpoint(resources, {"rank": 8}, [9, 8, 7, 6])
    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    resumed = resources.create_session(resume_from_checkpoint_id=ckpt.id, lora_config={"rank": 8}, interval=0.1)
    assert resumed.trainer.forward(samples=[sdk_sample([9, 8, 7, 6])], loss=loss).loss == trained
    resumed.stop()
    resources.stop()
