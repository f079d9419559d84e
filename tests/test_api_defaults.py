"""The vendor's own defaults (docs/api-surface.md, section G; emulator/defaults.py) through the API.

A field a request leaves out takes the vendor's default; the stored request body stays what was sent (no
default is written into it, so the Idempotency-Key hash and the exported state are unchanged); checkpoints
and resume keep the LoRA config a session really had, whatever the default; the W&B field lengths are one
bound, the spec's, for a request and for an imported state.
"""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.domain.catalog import CATALOG
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import (
    BASE,
    RL,
    assert_error,
    ce_sample,
    create_session,
    ready_resource,
    run_op,
    running_session,
    submit,
)

DEFAULT_LORA = {"rank": 32, "alpha": 64, "dropout": 0.0, "train_unembed": True}
TRAIN = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3], [40, 41, 42])]}


@pytest.mark.parametrize("lora_config", [None, {}, {"rank": None, "alpha": None, "dropout": None,
                                                    "train_unembed": None}])
def test_create_session_without_lora_settings_takes_rank_32_alpha_64_dropout_0(
        client: TestClient, lora_config: dict[str, Any] | None) -> None:
    r = ready_resource(client)
    body = {} if lora_config is None else {"lora_config": lora_config}
    s = create_session(client, r["id"], **body)
    assert s["lora_config"] == DEFAULT_LORA
    # one field given: the others are still the defaults
    assert create_session(client, r["id"], lora_config={"rank": 8})["lora_config"] == {**DEFAULT_LORA, "rank": 8}


def test_every_catalog_model_serves_the_default_rank(client: TestClient) -> None:
    for model in CATALOG:
        assert model.lora_max_rank >= DEFAULT_LORA["rank"], model.base_model
        r = ready_resource(client, base_model=model.base_model)
        assert create_session(client, r["id"])["lora_config"]["rank"] == DEFAULT_LORA["rank"]
        client.post(f"{RL}/model-resources/{r['id']}/stop", params={"force": "true"})


def test_a_default_session_checkpoints_and_resumes_at_rank_32(client: TestClient) -> None:
    s = running_session(client)
    run_op(client, s["id"], "forward-backward", TRAIN)
    run_op(client, s["id"], "optim-step", {})
    ckpt = run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"]
    assert client.get(f"{RL}/checkpoints/{ckpt['id']}").json()["lora_rank"] == 32

    def resume(**body: Any) -> Any:
        return client.post(f"{RL}/training-sessions", json={
            "model_resources_id": ready_resource(client)["id"], "resume_from_checkpoint_id": ckpt["id"], **body})

    inherited = resume()
    assert inherited.status_code == 200 and inherited.json()["lora_config"] == DEFAULT_LORA
    # what the SDK's tinker layer sends: {rank: <the checkpoint's lora_rank>}
    assert resume(lora_config={"rank": 32}).json()["lora_config"] == DEFAULT_LORA
    err = assert_error(resume(lora_config={"rank": 8}), 400)
    assert "lora_config.rank 8 differs from the checkpoint's rank 32" in err["message"], err


def test_a_checkpoint_of_another_rank_resumes_with_its_own_config(client: TestClient) -> None:
    """A checkpoint of the emulator's former default (rank 8, alpha 16) keeps it on resume, also from a state
    exported before checkpoints stored their LoRA config (rank and alpha then come from the model spec)."""
    s = running_session(client, lora_config={"rank": 8, "alpha": 16})
    run_op(client, s["id"], "forward-backward", TRAIN)
    run_op(client, s["id"], "optim-step", {})
    ckpt = run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"]
    old = {"rank": 8, "alpha": 16, "dropout": 0.0, "train_unembed": True}
    doc = client.get("/_emulator/state").json()
    for tenant in doc["tenants"].values():
        for c in tenant["checkpoints"]:
            c.pop("lora_config", None)
    with make_client(Runtime(Config(clock="manual", validate_responses=True))) as restored:
        for c in (client, restored):
            if c is restored:
                assert restored.put("/_emulator/state", json=doc).status_code == 200
            resumed = create_session(c, ready_resource(c)["id"], resume_from_checkpoint_id=ckpt["id"])
            assert resumed["lora_config"] == old
            err = assert_error(c.post(f"{RL}/training-sessions", json={
                "model_resources_id": ready_resource(c)["id"], "resume_from_checkpoint_id": ckpt["id"],
                "lora_config": {"rank": 32}}), 400)
            assert err["param"] == "lora_config.rank"


def test_model_resource_defaults_one_generator_replica_and_lora(client: TestClient) -> None:
    resp = client.post(f"{RL}/model-resources", json={"base_model": BASE})
    assert resp.status_code == 200, resp.text
    r = resp.json()
    assert r["lora_enabled"] is True and r["compute_config"]["num_generator_replicas"] == 1


def test_supported_models_show_the_default_sampling(client: TestClient) -> None:
    for model in client.get(f"{RL}/supported-models").json()["data"]:
        shown = model["compute_configs"][0]["generator_config"]["sampling_defaults"]
        assert shown == {"logprobs": 0, "max_tokens": 512, "n": 1, "temperature": 1.0}, model["base_model"]


def test_a_sample_without_max_tokens_generates_up_to_512(client: TestClient) -> None:
    s = running_session(client)
    prompt = {"chunks": [{"encoded_text": {"tokens": [5, 6]}}]}
    # Greedy never picks the end token of an untrained model (never a row's top token): it runs to the limit.
    greedy = run_op(client, s["id"], "sample", {"model_inputs": [prompt], "sampling_params": {"temperature": 0}})
    seqs = greedy["output"]["results"][0]["sequences"]
    assert len(seqs) == 1  # num_samples 1
    assert len(seqs[0]["tokens"]) == 512 and seqs[0]["stop_reason"] == "STOP_REASON_LENGTH"
    free = run_op(client, s["id"], "sample", {"model_inputs": [prompt], "num_samples": 8})
    lengths = [len(q["tokens"]) for q in free["output"]["results"][0]["sequences"]]
    assert all(n <= 512 for n in lengths) and max(lengths) > 16, lengths


def test_defaults_are_not_written_into_the_stored_body(client: TestClient) -> None:
    """Request validation fills in no `default:` of the spec: the stored body, its export and its
    Idempotency-Key hash are those of what was sent."""
    s = running_session(client)
    body = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
            "sampling_params": {"max_tokens": 3}}
    op = submit(client, s["id"], "sample", body, key="sample-1").json()
    tenant = next(iter(client.get("/_emulator/state").json()["tenants"].values()))
    stored = next(o for o in tenant["operations"] if o["id"] == op["id"])
    assert stored["body"] == body
    assert submit(client, s["id"], "sample", body, key="sample-1").json()["id"] == op["id"]
    spelled_out = {**body, "num_samples": 1, "sampling_params": {"max_tokens": 3, "temperature": 1, "top_p": 1,
                                                                 "top_k": -1}}
    err = assert_error(submit(client, s["id"], "sample", spelled_out, key="sample-1"), 400)
    assert err["code"] == "idempotency_key_reused"
    optim = {"adam_params": {"learning_rate": 1e-4}}
    op = submit(client, s["id"], "optim-step", optim, key="optim-1").json()
    tenant = next(iter(client.get("/_emulator/state").json()["tenants"].values()))
    assert next(o for o in tenant["operations"] if o["id"] == op["id"])["body"] == optim


def test_an_optim_step_without_weight_decay_uses_0(client: TestClient) -> None:
    def trained(adam: dict[str, Any]) -> float:
        s = running_session(client)
        for _ in range(3):
            run_op(client, s["id"], "forward-backward", TRAIN)
            run_op(client, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-3, **adam}})
        return run_op(client, s["id"], "forward-backward", {**TRAIN, "forward_only": True})["output"]["loss"]

    unset = trained({})
    assert unset == trained({"weight_decay": 0})
    assert unset != trained({"weight_decay": 0.5})


WANDB = {"entity": 256, "group": 256, "project": 256, "run_id": 256, "run_name": 256, "url": 2048}


@pytest.mark.parametrize(("field", "limit"), WANDB.items())
def test_wandb_fields_are_bounded_on_create_and_update(client: TestClient, field: str, limit: int) -> None:
    r = ready_resource(client)
    at_limit = create_session(client, r["id"], metadata={"wandb": {field: "x" * limit}})
    assert at_limit["metadata"]["wandb"][field] == "x" * limit
    over = client.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"],
                                                        "metadata": {"wandb": {field: "x" * (limit + 1)}}})
    assert assert_error(over, 400)["param"] == f"metadata.wandb.{field}"
    patched = client.patch(f"{RL}/training-sessions/{at_limit['id']}",
                           json={"metadata": {"wandb": {field: "y" * (limit + 1)}}})
    assert assert_error(patched, 400)["param"] == f"metadata.wandb.{field}"
    assert client.get(f"{RL}/training-sessions/{at_limit['id']}").json()["metadata"]["wandb"][field] == "x" * limit


def test_an_imported_state_is_held_to_the_same_wandb_bound(client: TestClient) -> None:
    r = ready_resource(client)
    create_session(client, r["id"], metadata={"wandb": {"run_name": "x" * 256}})
    doc = client.get("/_emulator/state").json()
    with make_client(Runtime(Config(clock="manual", validate_responses=True))) as restored:
        assert restored.put("/_emulator/state", json=doc).status_code == 200
        for tenant in doc["tenants"].values():
            for s in tenant["sessions"]:
                s["metadata"]["wandb"]["run_name"] = "x" * 257
        err = assert_error(restored.put("/_emulator/state", json=doc), 400)
        assert err["code"] == "invalid_state" and ".metadata.wandb.run_name: " in err["message"], err
