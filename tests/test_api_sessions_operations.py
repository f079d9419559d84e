"""Sessions, operations, checkpoints and payloads through the app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.compute import SessionModel
from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import (
    RL,
    advance,
    assert_error,
    ce_sample,
    create_resource,
    create_session,
    get_session,
    ready_resource,
    run_op,
    running_session,
    submit,
)

FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3, 4], [5, 6, 7])]}


def test_create_session_takes_defaults_from_resource(client: TestClient) -> None:
    r = ready_resource(client)
    s = create_session(client, r["id"], display_name="exp-1", lora_config={"rank": 16, "seed": 59})
    assert s["status"] == "TRAINING_SESSION_STATUS_CREATING"
    assert s["base_model"] == r["base_model"] and s["model_resources_id"] == r["id"]
    assert s["lora_config"] == {"rank": 16, "alpha": 64, "dropout": 0.0, "train_unembed": True, "seed": "59"}
    assert "seed" not in create_session(client, r["id"])["lora_config"]
    assert s["step"] == "0" and s["policy_state"]["trainer_step"] == "0"
    assert s["metadata"] == {} and s["inference_checkpoints"] == []
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_RUNNING"


def test_create_session_full_weight_has_no_lora_config(client: TestClient) -> None:
    r = ready_resource(client, lora_enabled=False)
    s = create_session(client, r["id"])
    assert "lora_config" not in s
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": ready_resource(
        client, lora_enabled=False)["id"], "lora_config": {"rank": 8}}), 400)


def test_create_session_tolerates_null_lora_fields(client: TestClient) -> None:
    r = ready_resource(client)
    s = create_session(client, r["id"], lora_config={"rank": None})
    assert s["lora_config"]["rank"] == 32


def test_create_session_display_name_limit(client: TestClient) -> None:
    r = ready_resource(client)
    assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"],
                                                              "display_name": "x" * 129}), 400)


def test_update_session_sets_and_clears(client: TestClient) -> None:
    s = running_session(client)
    resp = client.patch(f"{RL}/training-sessions/{s['id']}",
                        json={"display_name": "a", "metadata": {"wandb": {"project": "p", "run_name": "r"}}})
    body = resp.json()
    assert body["display_name"] == "a" and body["metadata"] == {"wandb": {"project": "p", "run_name": "r"}}
    body = client.patch(f"{RL}/training-sessions/{s['id']}",
                        json={"display_name": "", "metadata": {"wandb": {"project": ""}}}).json()
    assert "display_name" not in body and body["metadata"] == {"wandb": {"run_name": "r"}}


def test_list_sessions_of_one_resource_pages(client: TestClient) -> None:
    r = ready_resource(client)
    ids = [create_session(client, r["id"])["id"] for _ in range(5)]
    running_session(client)  # another resource's session stays out
    seen, after = [], None
    while True:
        params = {"model_resources_id": r["id"], "limit": 2, **({"after": after} if after else {})}
        page = client.get(f"{RL}/training-sessions", params=params).json()
        seen += [s["id"] for s in page["data"]]
        if not page["meta"]["has_more"]:
            break
        after = page["meta"]["next_cursor"]
    assert seen == list(reversed(ids))


def test_list_sessions_filters(client: TestClient) -> None:
    r1, r2 = ready_resource(client), ready_resource(client)
    a = running_session(client, r1["id"])
    b = running_session(client, r2["id"])
    client.post(f"{RL}/training-sessions/{b['id']}/stop")
    by_resource = client.get(f"{RL}/training-sessions", params={"model_resources_id": r1["id"]}).json()
    assert [s["id"] for s in by_resource["data"]] == [a["id"]]
    stopped = client.get(f"{RL}/training-sessions", params={"status": "TRAINING_SESSION_STATUS_STOPPED,"
                                                                      "TRAINING_SESSION_STATUS_ERROR"}).json()
    assert [s["id"] for s in stopped["data"]] == [b["id"]]
    mine = client.get(f"{RL}/training-sessions", params={"created_by": "me"}).json()
    assert {s["id"] for s in mine["data"]} == {a["id"], b["id"]}
    assert client.get(f"{RL}/training-sessions", params={"created_by": "someone"}).json()["data"] == []
    assert_error(client.get(f"{RL}/training-sessions", params={"after": "not-an-id"}), 400)


def test_forward_backward_completes_with_loss(client: TestClient) -> None:
    s = running_session(client)
    resp = submit(client, s["id"], "forward-backward", FB)
    assert resp.json()["status"] == "TRAINING_OPERATION_STATUS_PENDING"
    op = client.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{resp.json()['id']}").json()
    assert op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED"
    assert isinstance(op["output"]["loss"], float) and op["output"]["loss"] > 0


def test_every_operation_kind_has_output(client: TestClient) -> None:
    s = running_session(client)
    sid = s["id"]
    assert run_op(client, sid, "forward-backward", FB)["output"]["loss"] > 0
    grads = {"samples": FB["samples"], "gradients": [{"data": [0.1] * 6, "dtype": "D_TYPE_FLOAT32"}]}
    assert run_op(client, sid, "custom-forward-backward", grads)["output"] == {}
    assert run_op(client, sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}})["output"] == {"step": "1"}
    assert run_op(client, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})[
        "output"] == {"weights_version": "1"}
    sample = run_op(client, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                                            "num_samples": 2, "sampling_params": {"max_tokens": 4}})["output"]
    result = sample["results"][0]
    assert len(result["sequences"]) == 2 and result["policy_segments"] == [{"start_token": 0, "version": 1}]
    assert all(isinstance(t, str) for t in result["sequences"][0]["tokens"])
    ickpt = run_op(client, sid, "inference-checkpoint")["output"]["checkpoint"]
    tckpt = run_op(client, sid, "training-checkpoint")["output"]["checkpoint"]
    assert ickpt["step"] == "1" and "adapter" in ickpt["registration"]
    assert tckpt["step"] == "1" and set(tckpt["registration"]) == {"id", "revision_id"}
    session = get_session(client, sid)
    assert session["step"] == "1"
    assert [c["id"] for c in session["inference_checkpoints"]] == [ickpt["id"]]
    assert [c["id"] for c in session["training_checkpoints"]] == [tckpt["id"]]
    assert session["policy_state"] == {"applied_weights_version": "1", "pending_publish": False,
                                       "target_weights_version": "1", "trainer_step": "1"}


def test_a_synchronous_sync_overtakes_a_deferred_publish_still_pending(tmp_path: Path) -> None:
    """BACKGROUND_PUBLISH of version 1, an optim-step, SYNCHRONOUS of version 2: version 2 is live and stays live
    (before the fix the next sample applied the staged version 1, taking applied_weights_version back), also
    after a restart from the journal."""
    config = Config(clock="manual", state_file=str(tmp_path / "state.json"))
    SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "sampling_params": {"max_tokens": 2}}
    live = {"applied_weights_version": "2", "pending_publish": False, "target_weights_version": "2",
            "trainer_step": "2"}
    with make_client(Runtime(config)) as c:
        sid = running_session(c)["id"]
        for sync in ("WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH", "WEIGHT_SYNC_TYPE_SYNCHRONOUS"):
            run_op(c, sid, "forward-backward", FB)
            run_op(c, sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}})
            run_op(c, sid, "weights-sync", {"weight_sync_type": sync})
        assert get_session(c, sid)["policy_state"] == live
    with make_client(Runtime(config)) as c:
        [result] = run_op(c, sid, "sample", SAMPLE)["output"]["results"]
        assert result["policy_segments"] == [{"start_token": 0, "version": 2}]
        assert get_session(c, sid)["policy_state"] == live


def test_operation_get_wrong_kind_or_session_is_404(client: TestClient) -> None:
    s = running_session(client)
    op = submit(client, s["id"], "optim-step", {}).json()
    assert_error(client.get(f"{RL}/training-sessions/{s['id']}/operations/sample/{op['id']}"), 404)
    other = running_session(client)
    assert_error(client.get(f"{RL}/training-sessions/{other['id']}/operations/optim-step/{op['id']}"), 404)


def test_idempotency_key_replays_and_refuses_changed_body(client: TestClient) -> None:
    s = running_session(client)
    first = submit(client, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-4}}, key="k1").json()
    again = submit(client, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-4}}, key="k1").json()
    assert again["id"] == first["id"]
    err = assert_error(submit(client, s["id"], "optim-step", {"adam_params": {"learning_rate": 1e-3}}, key="k1"), 400)
    assert err["code"] == "idempotency_key_reused"
    assert get_session(client, s["id"])["step"] == "1"


def test_submit_without_idempotency_key_is_400(client: TestClient) -> None:
    s = running_session(client)
    assert_error(client.post(f"{RL}/training-sessions/{s['id']}/operations/optim-step", json={}), 400)


def test_operation_on_stopped_session_fails_not_active(client: TestClient) -> None:
    s = running_session(client)
    client.post(f"{RL}/training-sessions/{s['id']}/stop")
    op = submit(client, s["id"], "optim-step", {}).json()
    assert op["status"] == "TRAINING_OPERATION_STATUS_FAILED"
    assert op["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"


def test_invalid_tensors_fail_the_operation(client: TestClient) -> None:
    s = running_session(client)
    bad = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3], [4, 5])]}
    bad["samples"][0]["loss_fn_inputs"]["weights"]["data"].append(1.0)
    op = run_op(client, s["id"], "forward-backward", bad)
    assert op["status"] == "TRAINING_OPERATION_STATUS_FAILED"
    assert op["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"


def test_a_top_k_past_the_vocabulary_samples_like_any_and_past_int32_is_refused(client: TestClient) -> None:
    s = running_session(client)

    def body(k: int) -> dict[str, Any]:
        return {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "num_samples": 2,
                "sampling_params": {"max_tokens": 8, "top_k": k, "seed": 3}}

    ops = [run_op(client, s["id"], "sample", body(k)) for k in (2**31 - 1, 10**9)]
    assert all(op["status"] == "TRAINING_OPERATION_STATUS_COMPLETED" for op in ops), ops
    assert ops[0]["output"] == ops[1]["output"]
    # top_k is a 32-bit field (openapi.yaml: plain SDK ints are int32): past it the schema refuses it
    err = assert_error(submit(client, s["id"], "sample", body(2**63 + 5)), 400)
    assert err["param"] == "sampling_params.top_k" and "maximum of 2147483647" in err["message"], err
    # (an uploaded payload is not schema-checked: test_compute_sampling covers a top_k past int64 there)


def test_a_bug_in_the_model_fails_that_operation_and_the_session_goes_on(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    s = running_session(client)
    original = SessionModel.loss_and_grad

    def broken(self: SessionModel, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(SessionModel, "loss_and_grad", broken)
    op = run_op(client, s["id"], "forward-backward", FB)  # the GET that runs it is a 200
    assert op["status"] == "TRAINING_OPERATION_STATUS_FAILED", op
    assert op["error"]["code"] == "TRAINING_OPERATION_ERROR_CODE_INTERNAL_ERROR"
    assert "RuntimeError: simulated bug" in op["error"]["message"]
    monkeypatch.setattr(SessionModel, "loss_and_grad", original)
    # The queue moved on: the next operations run (before the fix they stayed PENDING behind a RUNNING one).
    assert run_op(client, s["id"], "forward-backward", FB)["status"] == "TRAINING_OPERATION_STATUS_COMPLETED"
    assert run_op(client, s["id"], "optim-step", {})["status"] == "TRAINING_OPERATION_STATUS_COMPLETED"
    assert int(get_session(client, s["id"])["step"]) == 1


def _exported_operation(client: TestClient, op_id: str) -> dict[str, Any]:
    tenant = next(iter(client.get("/_emulator/state").json()["tenants"].values()))
    return next(o for o in tenant["operations"] if o["id"] == op_id)


def test_an_unfinished_training_operation_keeps_its_samples_through_export_and_import(
        realistic_client: TestClient) -> None:
    client = realistic_client
    r = create_resource(client)
    client.post("/_emulator/clock/advance", json={"seconds": 3600})
    s = create_session(client, r["id"])
    client.post("/_emulator/clock/advance", json={"seconds": 600})
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_RUNNING"
    op = submit(client, s["id"], "forward-backward", FB).json()
    assert op["status"] in ("TRAINING_OPERATION_STATUS_PENDING", "TRAINING_OPERATION_STATUS_RUNNING"), op
    doc = client.get("/_emulator/state").json()
    assert _exported_operation(client, op["id"])["body"] == FB  # still to run: the samples are needed
    assert client.put("/_emulator/state", json=doc).status_code == 200
    client.post("/_emulator/clock/advance", json={"seconds": 600})
    got = client.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{op['id']}").json()
    assert got["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", got
    assert _exported_operation(client, op["id"])["body"] == {}


def test_a_finished_training_operation_keeps_no_copy_of_its_samples(client: TestClient) -> None:
    s = running_session(client)
    resp = submit(client, s["id"], "forward-backward", FB, key="fb-1")
    assert resp.status_code == 200, resp.text
    op_id = resp.json()["id"]
    done = client.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{op_id}").json()
    assert done["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", done
    assert _exported_operation(client, op_id)["body"] == {}  # a long loop would otherwise keep every batch
    # What the body was still counts: the same key replays the operation, a changed body is refused.
    replay = submit(client, s["id"], "forward-backward", FB, key="fb-1")
    assert replay.status_code == 200 and replay.json() == done
    changed = {**FB, "samples": FB["samples"] * 2}
    assert assert_error(submit(client, s["id"], "forward-backward", changed, key="fb-1"), 400)["code"] == \
        "idempotency_key_reused"
    # A sample keeps its prompts (the dashboard shows them).
    sample = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "num_samples": 1,
              "sampling_params": {"max_tokens": 2}}
    op = run_op(client, s["id"], "sample", sample)
    assert _exported_operation(client, op["id"])["body"]["model_inputs"] == sample["model_inputs"]


def test_checkpoints_list_get_download_and_files(client: TestClient) -> None:
    s = running_session(client)
    ick = run_op(client, s["id"], "inference-checkpoint")["output"]["checkpoint"]
    tck = run_op(client, s["id"], "training-checkpoint")["output"]["checkpoint"]
    listed = client.get(f"{RL}/checkpoints", params={"session_id": s["id"]}).json()
    assert [c["id"] for c in listed["data"]] == [tck["id"], ick["id"]]
    only_inf = client.get(f"{RL}/checkpoints", params={"type": "CHECKPOINT_TYPE_INFERENCE"}).json()
    assert [c["id"] for c in only_inf["data"]] == [ick["id"]]
    got = client.get(f"{RL}/checkpoints/{ick['id']}").json()
    assert got["type"] == "CHECKPOINT_TYPE_INFERENCE" and got["lora_rank"] == 32 and got["step"] == "0"
    assert_error(client.get(f"{RL}/checkpoints/{tck['id']}/download",
                            params={"variant": "CHECKPOINT_VARIANT_MERGED"}), 400)
    for variant in ("CHECKPOINT_VARIANT_ADAPTER", "CHECKPOINT_VARIANT_MERGED"):
        files = client.get(f"{RL}/checkpoints/{ick['id']}/download", params={"variant": variant}).json()["data"]
        assert files and all("/" not in f["filename"] for f in files)
        for f in files:
            blob = client.get(f["url"], headers={"Authorization": ""})
            assert blob.status_code == 200 and len(blob.content) == int(f["size"])


def _uploaded_payload(client: TestClient, sid: str, body: dict[str, Any]) -> str:
    up = client.post(f"{RL}/training-sessions/{sid}/payloads/upload-url").json()
    assert client.put(up["upload_url"], content=json.dumps(body), headers={"Authorization": ""}).status_code == 200
    return str(up["payload_id"])


def test_payload_upload_is_used_by_the_operation(client: TestClient) -> None:
    s = running_session(client)
    pid = _uploaded_payload(client, s["id"], FB)
    truncated = {"loss": FB["loss"], "samples": [ce_sample([1], [2])], "payload_id": pid}
    direct = run_op(client, s["id"], "forward-backward", {**FB, "forward_only": True})["output"]["loss"]
    via_payload = run_op(client, s["id"], "forward-backward", truncated)["output"]["loss"]
    assert via_payload == direct
    assert_error(client.post(f"{RL}/training-sessions/{s['id']}/payloads/nope/download-url"), 404)


def _realistic_running_session(client: TestClient) -> dict[str, Any]:
    r = create_resource(client)
    advance(client, 3600)
    s = create_session(client, r["id"])
    advance(client, 600)
    assert get_session(client, s["id"])["status"] == "TRAINING_SESSION_STATUS_RUNNING"
    return s


def _payload_ref(pid: str) -> dict[str, Any]:
    return {"loss": FB["loss"], "samples": [ce_sample([1], [2])], "payload_id": pid}


def test_payload_is_kept_until_the_operation_that_read_it_finishes(realistic_client: TestClient) -> None:
    client = realistic_client
    s = _realistic_running_session(client)
    pid = _uploaded_payload(client, s["id"], FB)
    down = client.post(f"{RL}/training-sessions/{s['id']}/payloads/{pid}/download-url").json()["download_url"]
    reader = submit(client, s["id"], "forward-backward", _payload_ref(pid), key="reader")
    assert reader.status_code == 200, reader.text
    op_id = reader.json()["id"]
    assert json.loads(client.get(down).content) == FB        # its reader has not finished: still there
    second = submit(client, s["id"], "forward-backward", _payload_ref(pid))
    assert second.status_code == 200, second.text             # ... and another call may still name it
    doc = client.get("/_emulator/state").json()               # ... and an export carries it
    assert client.put("/_emulator/state", json=doc).status_code == 200
    advance(client, 600)
    done = client.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{op_id}").json()
    assert done["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", done
    # The reader finished: the bytes are gone, and each way to them names the operation that read them.
    gone = assert_error(client.get(down), 404)
    assert op_id in gone["message"] and gone["code"] == "no_such_object"
    refused = assert_error(client.post(f"{RL}/training-sessions/{s['id']}/payloads/{pid}/download-url"), 400)
    assert op_id in refused["message"] and refused["param"] == "payload_id"
    err = assert_error(submit(client, s["id"], "forward-backward", _payload_ref(pid)), 400)
    assert op_id in err["message"] and "upload the body again" in err["message"], err
    [payload] = next(iter(client.get("/_emulator/state").json()["tenants"].values()))["payloads"]
    assert payload["data"] is None and payload["released_by"] == op_id
    # A retry of the reader with its Idempotency-Key needs no payload: it answers the operation it made.
    retry = submit(client, s["id"], "forward-backward", _payload_ref(pid), key="reader")
    assert retry.status_code == 200 and retry.json()["id"] == op_id


# --- an offloaded body runs as the same request inline (issue 37) ------------------------------------
# Above 0.5 MiB the SDK uploads part of the body and sends the rest inline with ``payload_id``: for a
# forward-backward it uploads ``{"loss", "samples"}`` only and keeps ``forward_only`` and
# ``return_loss_fn_outputs`` inline (``_submit_forward_backward``); custom-forward-backward and sample upload
# their whole body. The server merges the two, the payload winning for the fields it holds. Each test runs
# one request inline on one session and offloaded on a twin (same base model, so the same starting model)
# and compares the answers and what the request did to the weights.

PROBE = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3, 4], [5, 6, 7])],
         "forward_only": True}
STAND_IN_SAMPLES = [ce_sample([1], [2])]  # what stands inline for the uploaded samples (any valid shrunk body)


def _twins(client: TestClient) -> tuple[str, str]:
    rid = ready_resource(client)["id"]
    return running_session(client, rid)["id"], running_session(client, rid)["id"]


def _probe(client: TestClient, sid: str) -> float:
    return float(run_op(client, sid, "forward-backward", PROBE)["output"]["loss"])


def _step(client: TestClient, sid: str) -> None:
    assert run_op(client, sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}})["status"] == (
        "TRAINING_OPERATION_STATUS_COMPLETED")


@pytest.mark.parametrize("flags", [{"forward_only": True, "return_loss_fn_outputs": True}, {"forward_only": True},
                                   {"return_loss_fn_outputs": True}, {}])
def test_an_offloaded_forward_backward_keeps_its_inline_flags(client: TestClient, flags: dict[str, Any]) -> None:
    inline, offloaded = _twins(client)
    before = _probe(client, inline)
    assert _probe(client, offloaded) == before
    direct = run_op(client, inline, "forward-backward", {**FB, **flags})
    pid = _uploaded_payload(client, offloaded, FB)  # the SDK's upload: loss and samples, no flags
    via_payload = run_op(client, offloaded, "forward-backward",
                         {"loss": FB["loss"], "samples": STAND_IN_SAMPLES, **flags, "payload_id": pid})
    assert via_payload["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", via_payload
    assert via_payload["output"] == direct["output"]
    if flags.get("return_loss_fn_outputs"):
        [out] = via_payload["output"]["loss_fn_outputs"]
        assert len(out["tensors"]["logprobs"]["data"]) == 6  # the uploaded sample's, not the stand-in's
    _step(client, inline)
    _step(client, offloaded)
    after = _probe(client, offloaded)
    assert after == _probe(client, inline)
    # forward_only scores without accumulating: the optim-step after it leaves the model as it was.
    assert (after == before) is bool(flags.get("forward_only"))


def test_an_offloaded_custom_forward_backward_runs_as_inline(client: TestClient) -> None:
    inline, offloaded = _twins(client)
    body = {"samples": FB["samples"], "gradients": [{"data": [-0.5] * 6, "dtype": "D_TYPE_FLOAT32"}]}
    direct = run_op(client, inline, "custom-forward-backward", body)
    pid = _uploaded_payload(client, offloaded, body)  # the SDK uploads the whole body
    stand_in = {"samples": STAND_IN_SAMPLES, "gradients": [{"data": [0.0], "dtype": "D_TYPE_FLOAT32"}],
                "payload_id": pid}
    via_payload = run_op(client, offloaded, "custom-forward-backward", stand_in)
    assert via_payload["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", via_payload
    assert via_payload["output"] == direct["output"]
    before = _probe(client, inline)
    _step(client, inline)
    _step(client, offloaded)
    assert _probe(client, offloaded) == _probe(client, inline) != before


SAMPLE = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3, 4, 5]}}]}], "num_samples": 3,
          "sampling_params": {"max_tokens": 6, "seed": 7}, "prompt_logprobs": True, "topk_prompt_logprobs": 2}


@pytest.mark.parametrize("uploaded", ["whole body", "prompts only"])
def test_an_offloaded_sample_runs_as_inline(client: TestClient, uploaded: str) -> None:
    inline, offloaded = _twins(client)
    direct = run_op(client, inline, "sample", SAMPLE)
    # The SDK uploads the whole body; a client that uploads only the large field keeps the rest inline.
    payload = SAMPLE if uploaded == "whole body" else {"model_inputs": SAMPLE["model_inputs"]}
    pid = _uploaded_payload(client, offloaded, payload)
    stand_in = {**SAMPLE, "model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1]}}]}], "payload_id": pid}
    via_payload = run_op(client, offloaded, "sample", stand_in)
    assert via_payload["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", via_payload
    assert via_payload["output"] == direct["output"]
    assert len(direct["output"]["results"][0]["prompt_logprobs"]) == 5


def test_an_offloaded_forward_backward_retried_with_other_flags_is_another_request(client: TestClient) -> None:
    """The idempotency hash covers the inline body (flags and payload_id): a retry with the same key and body
    answers the operation it made (its payload may be released by then), other flags are another request."""
    _, sid = _twins(client)
    pid = _uploaded_payload(client, sid, FB)
    body = {"loss": FB["loss"], "samples": STAND_IN_SAMPLES, "forward_only": True, "payload_id": pid}
    first = submit(client, sid, "forward-backward", body, key="offloaded")
    assert first.status_code == 200, first.text
    assert submit(client, sid, "forward-backward", body, key="offloaded").json()["id"] == first.json()["id"]
    err = assert_error(submit(client, sid, "forward-backward", {**body, "forward_only": False}, key="offloaded"), 400)
    assert err["code"] == "idempotency_key_reused", err


def test_payload_of_an_operation_failed_by_a_stop_is_released(realistic_client: TestClient) -> None:
    client = realistic_client
    s = _realistic_running_session(client)
    pid = _uploaded_payload(client, s["id"], FB)
    reader = submit(client, s["id"], "forward-backward", _payload_ref(pid))
    assert reader.status_code == 200, reader.text
    assert client.post(f"{RL}/training-sessions/{s['id']}/stop").status_code == 200
    op = client.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{reader.json()['id']}").json()
    assert op["status"] == "TRAINING_OPERATION_STATUS_FAILED", op
    refused = assert_error(client.post(f"{RL}/training-sessions/{s['id']}/payloads/{pid}/download-url"), 400)
    assert reader.json()["id"] in refused["message"]


def test_supported_models_lists_the_catalog(client: TestClient) -> None:
    data = client.get(f"{RL}/supported-models").json()["data"]
    assert "Qwen/Qwen3.8-27B" in [m["base_model"] for m in data]
