"""Shared request builders for the emulator's own tests."""

from __future__ import annotations

import itertools
from typing import Any

from starlette.testclient import TestClient

# One builder of cross-entropy samples for both suites (re-exported for the emulator's tests).
from contract_tests.client import ce_sample as ce_sample

BASE = "Qwen/Qwen3.8-27B"
RL = "/v1/rl"
_keys = itertools.count()




def create_resource(client: TestClient, **body: Any) -> dict[str, Any]:
    payload = {"base_model": BASE, "lora_enabled": True, **body}
    resp = client.post(f"{RL}/model-resources", json=payload)
    assert resp.status_code == 200, resp.text
    return resp.json()


def get_resource(client: TestClient, rid: str) -> dict[str, Any]:
    resp = client.get(f"{RL}/model-resources/{rid}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def create_session(client: TestClient, rid: str, **body: Any) -> dict[str, Any]:
    resp = client.post(f"{RL}/training-sessions", json={"model_resources_id": rid, **body})
    assert resp.status_code == 200, resp.text
    return resp.json()


def get_session(client: TestClient, sid: str) -> dict[str, Any]:
    resp = client.get(f"{RL}/training-sessions/{sid}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def ready_resource(client: TestClient, **body: Any) -> dict[str, Any]:
    r = create_resource(client, **body)
    r = get_resource(client, r["id"])
    assert r["status"] == "MODEL_RESOURCES_STATUS_READY", r
    return r


def running_session(client: TestClient, rid: str | None = None, **body: Any) -> dict[str, Any]:
    if rid is None:
        rid = ready_resource(client)["id"]
    s = create_session(client, rid, **body)
    s = get_session(client, s["id"])
    assert s["status"] == "TRAINING_SESSION_STATUS_RUNNING", s
    return s


def submit(client: TestClient, sid: str, kind: str, body: dict[str, Any] | None = None,
           key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key or f"key-{next(_keys)}"}
    if body is None:
        return client.post(f"{RL}/training-sessions/{sid}/operations/{kind}", headers=headers)
    return client.post(f"{RL}/training-sessions/{sid}/operations/{kind}", json=body, headers=headers)


def run_op(client: TestClient, sid: str, kind: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Submit and read back once (the instant profile settles on the first GET)."""
    resp = submit(client, sid, kind, body)
    assert resp.status_code == 200, resp.text
    op = resp.json()
    got = client.get(f"{RL}/training-sessions/{sid}/operations/{kind}/{op['id']}")
    assert got.status_code == 200, got.text
    return got.json()


def advance(client: TestClient, seconds: float) -> dict[str, Any]:
    resp = client.post("/_emulator/clock/advance", json={"seconds": seconds})
    assert resp.status_code == 200, resp.text
    return resp.json()


def assert_error(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# --- the official SDK ---------------------------------------------------------------------------------

def sdk_sample(tokens: list[int], routed_experts_key: str | None = None) -> Any:
    """An SDK ``Sample`` that trains on every next token of ``tokens``."""
    from together.post_training import Sample

    sample = Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                    loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                    "weights": {"data": [1.0] * (len(tokens) - 1), "dtype": "float32"}})
    if routed_experts_key is not None:
        sample["routed_experts_key"] = routed_experts_key
    return sample


def sdk_train_and_checkpoint(resources: Any, lora_config: dict[str, Any], tokens: list[int],
                             steps: int = 3) -> tuple[Any, float]:
    """Train a new session of ``resources`` for ``steps`` steps on ``tokens``, save a training checkpoint and
    stop the session. Returns (the checkpoint, the loss the trained model gives ``tokens``)."""
    from together.post_training import AdamParams, LossConfig

    session = resources.create_session(lora_config=lora_config, interval=0.1)
    loss = LossConfig(type="LOSS_TYPE_CROSS_ENTROPY")
    for _ in range(steps):
        session.trainer.forward_backward(samples=[sdk_sample(tokens)], loss=loss)
        session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
    trained = session.trainer.forward(samples=[sdk_sample(tokens)], loss=loss).loss
    ckpt = session.create_training_checkpoint()
    session.stop()
    return ckpt, trained
