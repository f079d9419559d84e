"""Resuming from checkpoints restores the model (weights, optimizer, step) through the API."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.helpers import RL, assert_error, ce_sample, create_session, get_session, ready_resource, run_op, \
    running_session

FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3], [40, 41, 42])],
      "forward_only": True}
TRAIN = {**FB, "forward_only": False}


def _train(client: TestClient, sid: str, steps: int) -> None:
    for _ in range(steps):
        run_op(client, sid, "forward-backward", TRAIN)
        run_op(client, sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}})


def _loss(client: TestClient, sid: str) -> float:
    return run_op(client, sid, "forward-backward", FB)["output"]["loss"]


def test_resume_training_checkpoint_restores_weights_and_step(client: TestClient) -> None:
    s = running_session(client)
    _train(client, s["id"], 5)
    trained = _loss(client, s["id"])
    ckpt = run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"]
    r2 = ready_resource(client)
    resumed = create_session(client, r2["id"], resume_from_checkpoint_id=ckpt["id"])
    assert resumed["step"] == "5" and resumed["resume_from_checkpoint_id"] == ckpt["id"]
    get_session(client, resumed["id"])
    assert _loss(client, resumed["id"]) == trained
    # Same optimizer state: one more identical step gives the same loss on both.
    _train(client, s["id"], 1)
    _train(client, resumed["id"], 1)
    assert _loss(client, resumed["id"]) == _loss(client, s["id"])
    assert get_session(client, resumed["id"])["step"] == "6"


def test_resume_without_optimizer_starts_at_step_zero(client: TestClient) -> None:
    s = running_session(client)
    fresh = _loss(client, s["id"])
    _train(client, s["id"], 3)
    trained = _loss(client, s["id"])
    ckpt = run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"]
    resumed = create_session(client, ready_resource(client)["id"], resume_from_checkpoint_id=ckpt["id"],
                             load_optimizer=False)
    assert resumed["step"] == "0"
    get_session(client, resumed["id"])
    assert _loss(client, resumed["id"]) == trained != fresh


def test_resume_rules(client: TestClient) -> None:
    s = running_session(client)
    inference = run_op(client, s["id"], "inference-checkpoint")["output"]["checkpoint"]
    r = ready_resource(client)
    body = {"model_resources_id": r["id"], "resume_from_checkpoint_id": inference["id"], "load_optimizer": True}
    assert_error(client.post(f"{RL}/training-sessions", json=body), 400)
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"],
                                                              "resume_from_checkpoint_id": "nope"}), 404)
    other_base = ready_resource(client, base_model="Qwen/Qwen3.5-4B")
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": other_base["id"],
                                                              "resume_from_checkpoint_id": inference["id"]}), 400)
    full = ready_resource(client, lora_enabled=False)
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": full["id"],
                                                              "resume_from_checkpoint_id": inference["id"]}), 400)
