"""What the real service accepts and ignores (documented) is accepted and ignored, with a warning the client
sees; ``--strict`` turns each such drop into a 400 (issue 23). The pairs:

* a loss's ``*_params`` object of another loss type (the SDK's LossConfig: "Only valid when `type` is ...";
  its client refuses the mix because "the server would otherwise drop it silently");
* ``lora_config.seed`` on a resumed session or on a full-weight resource ("Ignored when LoRA is disabled or
  the session resumes from a checkpoint");
* ``return_routed_experts`` on a dense model ("ignored for other models").

And one rule for one field everywhere: ``optimizer_config`` with both ``adam`` and ``muon`` is a 400 on create
and on estimate-cost alike."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from emulator.compute import losses
from emulator.config import Config
from emulator.http.access_log import AccessLog
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error, ce_sample, run_op, running_session, submit

# The LossConfig field each loss type reads (IMPORTANCE_SAMPLING reads none).
LOSS_PARAMS = {spec.params_key: name for name, spec in losses.LOSS_TYPES.items() if spec.params_key is not None}
LOSS_TYPES = ("LOSS_TYPE_CROSS_ENTROPY", "LOSS_TYPE_GRPO", "LOSS_TYPE_IMPORTANCE_SAMPLING", "LOSS_TYPE_PPO",
              "LOSS_TYPE_CISPO", "LOSS_TYPE_DRO", "LOSS_TYPE_DPPO")
# A schema-valid params object for each key (dro_params requires beta).
PARAMS = {key: {"beta": 0.05} if key == "dro_params" else {} for key in LOSS_PARAMS}
MISMATCHED = [(t, key) for t, key in itertools.product(LOSS_TYPES, LOSS_PARAMS) if LOSS_PARAMS[key] != t]
WARNING = "x-emulator-warning"

@pytest.fixture
def strict() -> Iterator[TestClient]:
    with make_client(Runtime(Config(clock="manual", validate_responses=True, strict=True))) as c:
        yield c


def _body(loss: dict) -> dict:
    return {"loss": loss, "samples": [ce_sample([1, 2, 3], [4, 5])], "forward_only": True}


def _warnings(resp) -> list[str]:  # type: ignore[no-untyped-def]
    return resp.headers.get_list(WARNING)


def test_params_of_another_loss_type_are_dropped_with_a_warning(client: TestClient) -> None:
    s = running_session(client)
    for loss_type, key in MISMATCHED:   # (one session for all 36 pairs: a session each took a minute in all)
        resp = submit(client, s["id"], "forward-backward", _body({"type": loss_type, key: PARAMS[key]}))
        assert resp.status_code == 200, resp.text
        [warning] = _warnings(resp)
        assert warning.startswith(f"loss.{key} ignored") and LOSS_PARAMS[key] in warning and loss_type in warning


def test_strict_refuses_params_of_another_loss_type(strict: TestClient) -> None:
    s = running_session(strict)
    for loss_type, key in MISMATCHED:
        resp = submit(strict, s["id"], "forward-backward", _body({"type": loss_type, key: PARAMS[key]}),
                      key=f"k-{loss_type}-{key}")
        err = assert_error(resp, 400)
        assert err["param"] == f"loss.{key}" and err["code"] == "strict_mode"
        assert LOSS_PARAMS[key] in err["message"] and loss_type in err["message"] and "--strict" in err["message"]
        # Nothing was created: the same Idempotency-Key is still free for a valid body.
        ok = submit(strict, s["id"], "forward-backward", _body({"type": "LOSS_TYPE_CROSS_ENTROPY"}),
                    key=f"k-{loss_type}-{key}")
        assert ok.status_code == 200 and not _warnings(ok), ok.text


def test_the_dropped_params_change_nothing(client: TestClient) -> None:
    """The operation runs on the body without the dropped field: the same loss as without it."""
    s = running_session(client)
    plain = run_op(client, s["id"], "forward-backward", _body({"type": "LOSS_TYPE_CROSS_ENTROPY"}))
    mixed = run_op(client, s["id"], "forward-backward",
                   _body({"type": "LOSS_TYPE_CROSS_ENTROPY", "ppo_params": {"clip_high_threshold": 9.0}}))
    assert mixed["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", mixed
    assert mixed["output"]["loss"] == plain["output"]["loss"]


def test_its_own_params_are_accepted_without_a_warning(client: TestClient) -> None:
    s = running_session(client)
    loss = {"type": "LOSS_TYPE_DPPO", "dppo_params": {"delta_low": 0.1}}
    sample = ce_sample([1, 2, 3], [4, 5])
    n = len(sample["loss_fn_inputs"]["target_tokens"]["data"])
    sample["loss_fn_inputs"].update({"logprobs": {"data": [-1.0] * n, "dtype": "float32"},
                                     "advantages": {"data": [1.0] * n, "dtype": "float32"}})
    resp = submit(client, s["id"], "forward-backward", {"loss": loss, "samples": [sample]})
    assert resp.status_code == 200 and not _warnings(resp)
    op = run_op(client, s["id"], "forward-backward", {"loss": loss, "samples": [sample]})
    assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", op


def test_an_uploaded_payload_is_checked_too(strict: TestClient) -> None:
    s = running_session(strict)
    up = strict.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()
    bad = _body({"type": "LOSS_TYPE_CROSS_ENTROPY", "ppo_params": {"clip_high_threshold": 1.2}})
    assert strict.put(up["upload_url"], content=json.dumps(bad), headers={"Authorization": ""}).status_code == 200
    stand_in = {**_body({"type": "LOSS_TYPE_CROSS_ENTROPY"}), "payload_id": up["payload_id"]}
    err = assert_error(submit(strict, s["id"], "forward-backward", stand_in), 400)
    assert err["param"] == "loss.ppo_params"


def test_warnings_reach_the_access_log_and_the_event_log() -> None:
    runtime = Runtime(Config(clock="manual", validate_responses=True))
    out = io.StringIO()
    from emulator.tools.server import build_server_app

    app = AccessLog(build_server_app(runtime), out)
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"Authorization": "Bearer log-key"}) as c:
        s = running_session(c)
        resp = submit(c, s["id"], "forward-backward", _body({"type": "LOSS_TYPE_GRPO", "dro_params": {"beta": 1.0}}))
        assert resp.status_code == 200
        events = c.get("/_emulator/events").json()["data"]
    line = next(x for x in out.getvalue().splitlines() if "createForwardBackward" in x)
    assert "warning='loss.dro_params ignored" in line
    [event] = [e for e in events if e.get("type") == "warning"]
    assert event["operation_id"] == "createForwardBackward" and event["message"].startswith("loss.dro_params")


def _resource(c: TestClient, **extra: object) -> dict:
    r = c.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_lora_seed_on_a_full_weight_resource(client: TestClient, strict: TestClient) -> None:
    for c in (client, strict):
        r = _resource(c, lora_enabled=False)
        resp = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"seed": 3}})
        if c is client:
            assert resp.status_code == 200 and "lora_config" not in resp.json(), resp.text
            assert _warnings(resp) == ["lora_config.seed ignored: LoRA is disabled on this model resource"]
        else:
            assert assert_error(resp, 400)["param"] == "lora_config.seed"
        # Any other lora_config field there is refused in both modes [inferred: undocumented].
        other = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"rank": 8}})
        assert assert_error(other, 400)["param"] == "lora_config"


def test_lora_seed_on_a_resumed_session(client: TestClient, strict: TestClient) -> None:
    for c in (client, strict):
        r = _resource(c)
        s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "lora_config": {"rank": 4, "seed": 7}})
        assert c.get(f"{RL}/training-sessions/{s.json()['id']}").json()["status"] == "TRAINING_SESSION_STATUS_RUNNING"
        op = run_op(c, s.json()["id"], "training-checkpoint", None)
        ckpt = op["output"]["checkpoint"]["id"]
        resp = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"], "resume_from_checkpoint_id": ckpt,
                                                       "lora_config": {"rank": 4, "seed": 99}})
        if c is client:
            assert resp.status_code == 200, resp.text
            assert str(resp.json()["lora_config"]["seed"]) == "7"   # the checkpoint's
            [warning] = _warnings(resp)
            assert warning.startswith("lora_config.seed ignored: the session resumes from a checkpoint")
        else:
            assert assert_error(resp, 400)["param"] == "lora_config.seed"


def test_return_routed_experts_on_a_dense_model(client: TestClient, strict: TestClient) -> None:
    body = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "return_routed_experts": True,
            "sampling_params": {"max_tokens": 2}}
    ok = submit(client, running_session(client)["id"], "sample", body)
    assert ok.status_code == 200 and _warnings(ok)[0].startswith("return_routed_experts ignored")
    err = assert_error(submit(strict, running_session(strict)["id"], "sample", body), 400)
    assert err["param"] == "return_routed_experts"


@pytest.mark.parametrize("path", ["model-resources", "model-resources/estimate-cost"])
def test_adam_and_muon_together_are_one_rule_for_create_and_estimate(client: TestClient, path: str) -> None:
    body = {"base_model": "Qwen/Qwen3.8-27B", "optimizer_config": {"adam": {}, "muon": {}}}
    err = assert_error(client.post(f"{RL}/{path}", json=body), 400)
    assert err["param"] == "optimizer_config" and "not both" in err["message"]


@pytest.mark.parametrize("body", [
    {"lora_enabled": False, "base_model": "MiniMaxAI/MiniMax-M3"},
    {"compute_config": {"gpu_type": "H100-SXM"}},
    {"compute_config": {"num_generator_replicas": -1}},
    {"inactive_timeout": 100},
    {"base_weights_ref": "ml_nope"},
])
def test_create_and_estimate_refuse_the_same_bodies(client: TestClient, body: dict) -> None:
    full = {"base_model": "Qwen/Qwen3.8-27B", **body}
    created = client.post(f"{RL}/model-resources", json=full)
    estimated = client.post(f"{RL}/model-resources/estimate-cost", json=full)
    assert created.status_code == estimated.status_code == 400, (created.text, estimated.text)
    assert created.json()["error"]["param"] == estimated.json()["error"]["param"]


def test_strict_comes_from_the_flag_or_the_environment() -> None:
    import argparse

    from emulator.config import add_server_arguments, config_from_args
    from emulator.domain.context import Principal

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    assert config_from_args(parser.parse_args([]), {}).strict is False
    assert config_from_args(parser.parse_args(["--strict"]), {}).strict is True
    assert config_from_args(parser.parse_args([]), {"EMULATOR_STRICT": "1"}).strict is True
    runtime = Runtime(config_from_args(parser.parse_args([]), {"EMULATOR_STRICT": "true"}))
    assert runtime.ctx(Principal("u", "p")).strict is True
