"""Every error leaves in ErrorData with the right status; no input gives a 500."""

from __future__ import annotations

from starlette.testclient import TestClient

from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error


def test_missing_auth_is_401(runtime: Runtime) -> None:
    with make_client(runtime, token=None) as anon:
        err = assert_error(anon.get(f"{RL}/model-resources"), 401)
        assert err["type"] == "authentication_error"
        assert_error(anon.post(f"{RL}/model-resources", json={}), 401)  # auth before validation


def test_malformed_auth_is_401(client: TestClient) -> None:
    assert_error(client.get(f"{RL}/model-resources", headers={"Authorization": "Basic abc"}), 401)
    assert_error(client.get(f"{RL}/model-resources", headers={"Authorization": "Bearer "}), 401)


def test_malformed_json_is_400(client: TestClient) -> None:
    resp = client.post(f"{RL}/model-resources", content=b"{not json", headers={"Content-Type": "application/json"})
    assert_error(resp, 400)


def test_schema_violation_is_400(client: TestClient) -> None:
    assert_error(client.post(f"{RL}/model-resources", json={"lora_enabled": True}), 400)
    assert_error(client.post(f"{RL}/model-resources", json={"base_model": 5}), 400)


def test_unknown_path_is_404_and_wrong_method_405(client: TestClient) -> None:
    assert_error(client.get("/v1/rl/nothing-here"), 404)
    assert_error(client.delete(f"{RL}/model-resources"), 405)


def test_health_and_docs(client: TestClient) -> None:
    assert client.get("/_emulator/health").json() == {"status": "ok"}
    assert client.get("/docs/").status_code == 200
    assert client.get("/openapi.json").json()["openapi"].startswith("3.0")


def test_control_plane_needs_admin_token_off_loopback() -> None:
    import pytest

    from emulator.config import Config, ConfigError

    with pytest.raises(ConfigError, match="admin-token"):
        Config(host="0.0.0.0")
    guarded = Runtime(Config(host="0.0.0.0", admin_token="s3cret", clock="manual"))
    with make_client(guarded) as c:
        assert_error(c.get("/_emulator/clock"), 401)
        assert c.get("/_emulator/clock", headers={"X-Emulator-Admin-Token": "s3cret"}).status_code == 200
        assert c.get(f"{RL}/supported-models").status_code == 200  # the vendor API is unaffected


def test_oversized_body_is_413(runtime: Runtime) -> None:
    from emulator.config import Config

    small = Runtime(Config(clock="manual", max_body_bytes=2048))
    with make_client(small) as c:
        resp = c.post(f"{RL}/model-resources", content=b'{"base_model": "' + b"x" * 4096 + b'"}',
                      headers={"Content-Type": "application/json"})
        assert_error(resp, 413)


def test_oversized_upload_to_presigned_url_is_413() -> None:
    from emulator.config import Config

    small = Runtime(Config(clock="manual", max_body_bytes=2048))
    with make_client(small) as c:
        r = c.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
        c.get(f"{RL}/model-resources/{r['id']}")
        s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
        up = c.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()
        assert_error(c.put(up["upload_url"], content=b"x" * 4096), 413)


def _fb_body(**tensor: object) -> dict:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2]}}]},
                         "loss_fn_inputs": {"target_tokens": {"data": [2, 3], "dtype": "int64", **tensor}}}]}


def test_a_huge_integer_is_refused_by_its_bound_not_as_a_float(client: TestClient) -> None:
    """orjson reads an integer beyond 64 bits as a float: 2**70 must be refused for its size (issue 30), never
    as "not of type 'integer'"; int32 fields are bounded, so 2**40 is refused too."""
    url = f"{RL}/training-sessions/no-such-session/operations/forward-backward"  # validation comes first
    where = "samples[0].loss_fn_inputs.target_tokens"
    for field, value, words in (("shape", 2**70, "greater than the maximum of 2147483647"),
                                ("shape", 2**40, "greater than the maximum of 2147483647"),
                                ("sparse_col_indices", -(10**30), "less than the minimum of -2147483648")):
        resp = client.post(url, json=_fb_body(**{field: [value]}), headers={"Idempotency-Key": f"k-{field}-{value}"})
        err = assert_error(resp, 400)
        assert err["param"] == f"{where}.{field}[0]" and words in err["message"], err
        assert "type" not in err["message"], err
    resp = client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", "inactive_timeout": 2**64})
    assert "greater than the maximum of 86400" in assert_error(resp, 400)["message"]
    # where the schema puts no type (an unknown field) a huge number is accepted and ignored, as before
    resp = client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", "extra": 10**30})
    assert resp.status_code == 200, resp.text


def test_an_empty_status_filter_is_an_empty_list_that_filters_nothing(client: TestClient) -> None:
    """`status=` is how form style writes an empty array (the SDK sends it for `status=[]`)."""
    r = client.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
    assert [x["id"] for x in client.get(f"{RL}/model-resources?status=").json()["data"]] == [r["id"]]
    assert client.get(f"{RL}/training-sessions?status=").json()["data"] == []
    err = assert_error(client.get(f"{RL}/model-resources?status=MODEL_RESOURCES_STATUS_READY,"), 400)
    assert err["param"] == "status"  # an empty item in a list is no status
    # the SDK's own encoding of the comma; a status with a final newline (which Python's `$` would let through
    # the spec's pattern) or the protobuf zero value is no status
    both = "MODEL_RESOURCES_STATUS_PENDING%2CMODEL_RESOURCES_STATUS_READY"
    assert [x["id"] for x in client.get(f"{RL}/model-resources?status={both}").json()["data"]] == [r["id"]]
    for bad in ("model-resources?status=MODEL_RESOURCES_STATUS_PENDING%0A",
                "training-sessions?status=TRAINING_SESSION_STATUS_UNSPECIFIED",
                "training-sessions?status=TRAINING_SESSION_STATUS_RUNNING%0A"):
        assert assert_error(client.get(f"{RL}/{bad}"), 400)["param"] == "status", bad


def test_validate_responses_refuses_an_answer_that_breaks_the_spec(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """connexion's response validation wraps the dispatch step when asked (--validate-responses), and only then."""
    from emulator.config import Config
    from emulator.http import dispatch

    real = dispatch.handler_for
    monkeypatch.setattr(dispatch, "handler_for", lambda op: (lambda req: (200, {"id": 5})) if op == "getModelResources"
                        else real(op))
    for validate, status in ((True, 500), (False, 200)):
        with make_client(Runtime(Config(clock="manual", validate_responses=validate))) as c:
            resp = c.get(f"{RL}/model-resources/mr-1")
            assert resp.status_code == status, (validate, resp.text)
            if validate:
                error = resp.json()["error"]
                assert error["type"] == "server_error" and "does not conform to specification" in error["message"]
