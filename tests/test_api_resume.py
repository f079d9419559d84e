"""Resuming from checkpoints restores the model (weights, optimizer, step) through the API."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import (
    RL,
    assert_error,
    ce_sample,
    create_session,
    get_session,
    ready_resource,
    run_op,
    running_session,
)

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


LORA = {"rank": 16, "alpha": 32, "dropout": 0.1, "seed": 59, "train_unembed": False}
INHERITED = {"rank": 16, "alpha": 32, "dropout": 0.1, "seed": "59", "train_unembed": False}


def _trained_checkpoint(client: TestClient, lora: dict | None = None) -> tuple[dict, float]:
    s = running_session(client, lora_config=lora or LORA)
    _train(client, s["id"], 2)
    return run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"], _loss(client, s["id"])


def _resume(client: TestClient, ckpt_id: str, **body: object) -> Any:
    return client.post(f"{RL}/training-sessions", json={"model_resources_id": ready_resource(client)["id"],
                                                        "resume_from_checkpoint_id": ckpt_id, **body})


def test_create_session_resume_inherits_the_checkpoint_lora_config(client: TestClient) -> None:
    ckpt, trained = _trained_checkpoint(client)
    resumed = _resume(client, ckpt["id"])
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["lora_config"] == INHERITED
    assert get_session(client, resumed.json()["id"])["lora_config"] == INHERITED
    assert _loss(client, resumed.json()["id"]) == trained


def test_create_session_resume_compares_an_explicit_lora_config(client: TestClient) -> None:
    ckpt, _ = _trained_checkpoint(client)
    for given, param, message in (
            ({"rank": 8}, "lora_config.rank", "lora_config.rank 8 differs from the checkpoint's rank 16"),
            ({"alpha": 16}, "lora_config.alpha", "lora_config.alpha 16 differs from the checkpoint's alpha 32"),
            ({"rank": 16, "train_unembed": True}, "lora_config.train_unembed",
             "lora_config.train_unembed true differs from the checkpoint's train_unembed false")):
        err = assert_error(_resume(client, ckpt["id"], lora_config=given), 400)
        assert err["param"] == param and message in err["message"], err
    same = _resume(client, ckpt["id"], lora_config={"rank": 16, "alpha": 32, "train_unembed": False})
    assert same.status_code == 200 and same.json()["lora_config"] == INHERITED


def test_create_session_resume_may_change_dropout(client: TestClient) -> None:
    ckpt, _ = _trained_checkpoint(client)
    resumed = _resume(client, ckpt["id"], lora_config={"dropout": 0.0})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["lora_config"] == {**INHERITED, "dropout": 0.0}


def test_create_session_resume_ignores_a_given_seed(client: TestClient) -> None:
    ckpt, _ = _trained_checkpoint(client)
    resumed = _resume(client, ckpt["id"], lora_config={"rank": 16, "seed": 7})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["lora_config"]["seed"] == "59"
    unseeded, _ = _trained_checkpoint(client, {"rank": 16})
    resumed = _resume(client, unseeded["id"], lora_config={"seed": 7})
    assert resumed.status_code == 200, resumed.text
    assert "seed" not in resumed.json()["lora_config"]


def test_create_session_resume_inherits_from_an_imported_checkpoint(client: TestClient) -> None:
    ckpt, trained = _trained_checkpoint(client)
    doc = client.get("/_emulator/state").json()
    with make_client(Runtime(Config(clock="manual", validate_responses=True))) as restored:
        assert restored.put("/_emulator/state", json=doc).status_code == 200
        resumed = _resume(restored, ckpt["id"])
        assert resumed.status_code == 200 and resumed.json()["lora_config"] == INHERITED
        # A state exported before checkpoints stored their LoRA config: rank, alpha and train_unembed
        # come from the checkpoint's model spec, dropout is the default.
        for tenant in doc["tenants"].values():
            for c in tenant["checkpoints"]:
                c.pop("lora_config", None)
        assert restored.put("/_emulator/state", json=doc).status_code == 200
        resumed = _resume(restored, ckpt["id"])
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["lora_config"] == {"rank": 16, "alpha": 32, "dropout": 0.0, "train_unembed": False}
        get_session(restored, resumed.json()["id"])
        assert _loss(restored, resumed.json()["id"]) == trained
