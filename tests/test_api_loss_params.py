"""A loss's ``*_params`` object is only valid with its own loss type (issue 15: the SDK's LossConfig,
"Only valid when `type` is LOSS_TYPE_DPPO"): any other pairing is a 400 before an operation exists."""

from __future__ import annotations

import itertools
import json

import pytest
from starlette.testclient import TestClient

from emulator.domain.operations import LOSS_PARAMS
from tests.helpers import RL, assert_error, ce_sample, run_op, running_session, submit

LOSS_TYPES = ("LOSS_TYPE_CROSS_ENTROPY", "LOSS_TYPE_GRPO", "LOSS_TYPE_IMPORTANCE_SAMPLING", "LOSS_TYPE_PPO",
              "LOSS_TYPE_CISPO", "LOSS_TYPE_DRO", "LOSS_TYPE_DPPO")
# A schema-valid params object for each key (dro_params requires beta).
PARAMS = {key: {"beta": 0.05} if key == "dro_params" else {} for key in LOSS_PARAMS}
MISMATCHED = [(t, key) for t, key in itertools.product(LOSS_TYPES, LOSS_PARAMS) if LOSS_PARAMS[key] != t]


def _body(loss: dict) -> dict:
    return {"loss": loss, "samples": [ce_sample([1, 2, 3], [4, 5])], "forward_only": True}


@pytest.mark.parametrize(("loss_type", "key"), MISMATCHED)
def test_create_forward_backward_refuses_params_of_another_loss_type(client: TestClient, loss_type: str,
                                                                     key: str) -> None:
    s = running_session(client)
    resp = submit(client, s["id"], "forward-backward", _body({"type": loss_type, key: PARAMS[key]}), key="k-mismatch")
    err = assert_error(resp, 400)
    assert err["param"] == f"loss.{key}"
    assert LOSS_PARAMS[key] in err["message"] and loss_type in err["message"]
    # Nothing was created: the same Idempotency-Key is still free for a valid body.
    ok = submit(client, s["id"], "forward-backward", _body({"type": "LOSS_TYPE_CROSS_ENTROPY"}), key="k-mismatch")
    assert ok.status_code == 200, ok.text


def test_create_forward_backward_accepts_its_own_params(client: TestClient) -> None:
    s = running_session(client)
    loss = {"type": "LOSS_TYPE_DPPO", "dppo_params": {"delta_low": 0.1}}
    sample = ce_sample([1, 2, 3], [4, 5])
    n = len(sample["loss_fn_inputs"]["target_tokens"]["data"])
    sample["loss_fn_inputs"].update({"logprobs": {"data": [-1.0] * n, "dtype": "float32"},
                                     "advantages": {"data": [1.0] * n, "dtype": "float32"}})
    op = run_op(client, s["id"], "forward-backward", {"loss": loss, "samples": [sample]})
    assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", op


def test_create_forward_backward_checks_an_uploaded_payload_too(client: TestClient) -> None:
    s = running_session(client)
    up = client.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()
    bad = _body({"type": "LOSS_TYPE_CROSS_ENTROPY", "ppo_params": {"clip_high_threshold": 1.2}})
    assert client.put(up["upload_url"], content=json.dumps(bad), headers={"Authorization": ""}).status_code == 200
    stand_in = {**_body({"type": "LOSS_TYPE_CROSS_ENTROPY"}), "payload_id": up["payload_id"]}
    err = assert_error(submit(client, s["id"], "forward-backward", stand_in), 400)
    assert err["param"] == "loss.ppo_params"
