"""The Files API that the SDK's ``client.files`` uses, and the shaping job's calibration-file rules (issue 23)."""

from __future__ import annotations

import json
import os
import socket
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.domain.files import CALIBRATION_MAX_BYTES, validate_jsonl
from emulator.runtime import Runtime
from emulator.tools.testing import serve_in_thread
from tests.conftest import make_client
from tests.helpers import assert_error

SDK_KEY = f"files-key-{os.getpid()}"
CONVERSATION = "\n".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"},
                                                   {"role": "assistant", "content": "answer"}]})
                         for i in range(4)) + "\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def upload(c: TestClient, content: bytes, *, purpose: str = "calibration", name: str = "data.jsonl",
           checksum: str | None = None) -> dict[str, Any]:
    """The SDK's three steps by hand: the form (302), the PUT to the presigned URL, preprocess."""
    form = {"purpose": purpose, "file_name": name, "file_type": name.rpartition(".")[2]}
    if checksum:
        form["checksum"] = checksum
    started = c.post("/v1/files", files={k: (None, v) for k, v in form.items()}, follow_redirects=False)
    assert started.status_code == 302, started.text
    file_id = started.headers["x-together-file-id"]
    assert started.json() == {"id": file_id}
    put = c.put(started.headers["location"], content=content, headers={"Authorization": ""})
    assert put.status_code == 200, put.text
    done = c.post(f"/v1/files/{file_id}/preprocess")
    assert done.status_code == 200, done.text
    return dict(done.json())


# --- through the SDK --------------------------------------------------------------------------------------

@pytest.mark.sdk
def test_sdk_files_upload_list_retrieve_content_delete(sdk_env: str, tmp_path: Path) -> None:
    from together import NotFoundError, Together

    client = Together(_strict_response_validation=True)
    path = _write(tmp_path, "calibration.jsonl", CONVERSATION)
    f = client.files.upload(path, purpose="calibration")
    assert f.id.startswith("file-") and f.bytes == len(CONVERSATION) and f.filename == "calibration.jsonl"
    assert (f.purpose, f.file_type, f.processing_status) == ("calibration", "jsonl", "COMPLETED")
    got = client.files.retrieve(f.id)
    assert got.validation_report is not None and got.validation_report.valid
    assert (got.validation_report.dataset_format, got.validation_report.nlines) == ("CONVERSATION", 4)
    assert f.id in [x.id for x in client.files.list().data]
    assert client.files.content(f.id).read() == CONVERSATION.encode()
    # The same content, name and purpose again: the SDK is handed the existing file (the server's 409).
    assert client.files.upload(path, purpose="calibration").id == f.id
    deleted = client.files.delete(f.id)
    assert deleted.id == f.id and deleted.deleted is True
    with pytest.raises(NotFoundError):
        client.files.retrieve(f.id)


@pytest.mark.sdk
def test_sdk_shaping_job_checks_its_calibration_file(sdk_env: str, tmp_path: Path) -> None:
    from together import BadRequestError, Together
    from together.post_training import ModelResourcesClient

    client = Together()
    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=0.1, ready_timeout=30)
    session = resources.create_session(interval=0.1, timeout=30)
    model_id = session.create_inference_checkpoint().registration.adapter.id  # type: ignore[union-attr]
    session.stop()
    resources.stop()
    shaping = client.post_training.prepare_for_fp4_inference
    with pytest.raises(BadRequestError, match="does not exist in this project"):
        shaping.create(inputs={"model_object_id": model_id, "calibration_file_id": "file-nope"})
    general = client.files.upload(_write(tmp_path, "general.jsonl", '{"text": "plain"}\n'), purpose="calibration")
    with pytest.raises(BadRequestError, match="conversation dataset"):
        shaping.estimate_cost(inputs={"model_object_id": model_id, "calibration_file_id": general.id})
    good = client.files.upload(_write(tmp_path, "chat.jsonl", CONVERSATION), purpose="calibration")
    job = shaping.create(inputs={"model_object_id": model_id, "calibration_file_id": good.id})
    assert job.params is not None and job.params.inputs.calibration_file_id == good.id


# --- the rules, over HTTP ---------------------------------------------------------------------------------

def _shaping_model(c: TestClient) -> str:
    from tests.helpers import run_op, running_session

    s = running_session(c)
    ckpt = run_op(c, s["id"], "inference-checkpoint")["output"]["checkpoint"]
    return str(ckpt["registration"]["adapter"]["id"])


def _shape(c: TestClient, model_id: str, file_id: str) -> Any:
    return c.post("/v1/shaping/prepare-for-fp4-inference",
                  json={"inputs": {"model_object_id": model_id, "calibration_file_id": file_id}})


def test_calibration_file_rules(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    model_id = _shaping_model(client)
    param = "inputs.calibration_file_id"

    def refused(file_id: str, words: str) -> None:
        for path in ("", "/estimate"):
            err = assert_error(client.post(f"/v1/shaping/prepare-for-fp4-inference{path}",
                                           json={"inputs": {"model_object_id": model_id,
                                                            "calibration_file_id": file_id}}), 400)
            assert err["param"] == param and words in err["message"], err

    refused("file-nope", "does not exist")
    wrong_purpose = upload(client, CONVERSATION.encode(), purpose="eval", name="eval.jsonl")
    refused(wrong_purpose["id"], "purpose 'eval'")
    started = client.post("/v1/files", files={"purpose": (None, "calibration"), "file_name": (None, "late.jsonl")},
                          follow_redirects=False)
    refused(started.headers["x-together-file-id"], "has not finished uploading")
    broken = upload(client, b'{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n', name="broken.jsonl")
    assert broken["processing_status"] == "INVALID_FORMAT" and "line 2" in broken["validation_report"]["error"]
    refused(broken["id"], "line 2 is not valid JSON")
    refused(upload(client, b"", name="empty.jsonl")["id"], "no rows")
    csv = upload(client, b"a,b\n1,2\n", name="table.csv")
    assert csv["processing_status"] == "COMPLETED" and "validation_report" not in csv
    refused(csv["id"], "conversation dataset")
    # Over 64 MiB (bounded here by lowering the limit, not by sending 64 MiB).
    monkeypatch.setattr("emulator.domain.files.CALIBRATION_MAX_BYTES", len(CONVERSATION) - 1)
    big = upload(client, CONVERSATION.encode(), name="big.jsonl")
    refused(big["id"], "at most 64 MiB")
    monkeypatch.setattr("emulator.domain.files.CALIBRATION_MAX_BYTES", CALIBRATION_MAX_BYTES)
    for purpose in ("calibration", "fine-tune"):
        ok = upload(client, CONVERSATION.encode(), purpose=purpose, name=f"{purpose}.jsonl")
        assert _shape(client, model_id, ok["id"]).status_code == 200


def test_files_are_tenant_scoped_and_delete_revokes_the_upload(runtime: Runtime, client: TestClient) -> None:
    mine = upload(client, CONVERSATION.encode())
    with make_client(runtime, "someone-else") as other:
        assert other.get("/v1/files").json() == {"data": []}
        assert_error(other.get(f"/v1/files/{mine['id']}"), 404)
        assert_error(other.get(f"/v1/files/{mine['id']}/content"), 404)
        assert_error(other.delete(f"/v1/files/{mine['id']}"), 404)
    started = client.post("/v1/files", files={"purpose": (None, "calibration"), "file_name": (None, "x.jsonl")},
                          follow_redirects=False)
    file_id = started.headers["x-together-file-id"]
    assert_error(client.get(f"/v1/files/{file_id}/content"), 400)   # not uploaded yet
    assert_error(client.post(f"/v1/files/{file_id}/preprocess"), 400)
    assert client.delete(f"/v1/files/{file_id}").status_code == 200
    assert_error(client.put(started.headers["location"], content=b"{}", headers={"Authorization": ""}), 404)
    assert [f["id"] for f in client.get("/v1/files").json()["data"]] == [mine["id"]]


def test_upload_url_works_once(client: TestClient) -> None:
    started = client.post("/v1/files", files={"purpose": (None, "fine-tune"), "file_name": (None, "a.jsonl")},
                          follow_redirects=False)
    url = started.headers["location"]
    assert client.put(url, content=CONVERSATION.encode(), headers={"Authorization": ""}).status_code == 200
    assert_error(client.put(url, content=b"again", headers={"Authorization": ""}), 403)


@pytest.mark.parametrize(("form", "param"), [
    ({"file_name": "a.jsonl"}, "purpose"),
    ({"purpose": "nope", "file_name": "a.jsonl"}, "purpose"),
    ({"purpose": "calibration"}, "file_name"),
    ({"purpose": "calibration", "file_name": "a.txt"}, "file_type"),
])
def test_upload_form_is_checked(client: TestClient, form: dict[str, str], param: str) -> None:
    resp = client.post("/v1/files", files={k: (None, v) for k, v in form.items()}, follow_redirects=False)
    assert assert_error(resp, 400)["param"] == param


def test_a_body_that_is_not_a_form_is_400(client: TestClient) -> None:
    resp = client.post("/v1/files", content=b"purpose=calibration",
                       headers={"Content-Type": "multipart/form-data; boundary=xyz"})
    assert_error(resp, 400)
    resp = client.post("/v1/files", content=b"x", headers={"Content-Type": "multipart/form-data"})
    assert_error(resp, 400)


def test_files_survive_export_and_import(runtime: Runtime, client: TestClient) -> None:
    f = upload(client, CONVERSATION.encode())
    doc = client.get("/_emulator/state").json()
    fresh = Runtime(Config(clock="manual", validate_responses=True))
    with make_client(fresh) as c:
        assert c.put("/_emulator/state", json=doc).status_code == 200
        assert c.get(f"/v1/files/{f['id']}").json() == f
        assert c.get(f"/v1/files/{f['id']}/content").content == CONVERSATION.encode()


def test_validation_report_formats() -> None:
    assert validate_jsonl(b'{"prompt": "a", "completion": "b"}\n').dataset_format == "INSTRUCTION"
    assert validate_jsonl(b'{"messages": [{"role": "user", "content": "x"}], "tools": []}\n').dataset_format \
        == "CONVERSATION"
    mixed = validate_jsonl(b'{"text": "a"}\n{"prompt": "a", "completion": "b"}\n')
    assert not mixed.valid and "mix" in (mixed.error or "")
    assert "role" in (validate_jsonl(b'{"messages": [{"content": "x"}]}\n').error or "")


def test_the_spec_names_the_sdks_file_fields() -> None:
    """FileResponse of openapi.yaml against the SDK's together.types.FileResponse (aliases included)."""
    from together.types import FileDeleteResponse, FileResponse
    from together.types.file_purpose import FilePurpose

    spec = yaml.safe_load((Path(__file__).parents[1] / "openapi.yaml").read_text())["components"]["schemas"]

    def wire_fields(model: Any) -> dict[str, bool]:
        return {(info.alias or name): info.is_required() for name, info in model.model_fields.items()}

    sdk = wire_fields(FileResponse)
    assert set(spec["FileResponse"]["properties"]) == set(sdk)
    assert set(spec["FileResponse"]["required"]) == {k for k, req in sdk.items() if req}
    assert set(spec["FilePurpose"]["enum"]) == set(typing.get_args(FilePurpose))
    assert set(spec["FileDeleteResponse"]["properties"]) == set(wire_fields(FileDeleteResponse))


def test_files_survive_a_restart_with_the_state_file(tmp_path: Path) -> None:
    state_file = str(tmp_path / "state.jsonl")
    with make_client(Runtime(Config(clock="manual", state_file=state_file))) as c:
        f = upload(c, CONVERSATION.encode())
    with make_client(Runtime(Config(clock="manual", state_file=state_file))) as c:
        assert c.get(f"/v1/files/{f['id']}").json() == f
        assert c.get(f"/v1/files/{f['id']}/content").content == CONVERSATION.encode()
        assert c.delete(f"/v1/files/{f['id']}").status_code == 200
    with make_client(Runtime(Config(clock="manual", state_file=state_file))) as c:
        assert_error(c.get(f"/v1/files/{f['id']}"), 404)


def test_an_import_with_an_impossible_file_is_refused(client: TestClient) -> None:
    upload(client, CONVERSATION.encode())
    doc = client.get("/_emulator/state").json()
    (tenant,) = doc["tenants"].values()
    tenant["files"][0]["size"] += 1
    err = assert_error(client.put("/_emulator/state", json=doc), 400)
    assert "is not the size of its data" in err["message"]
    tenant["files"][0]["size"] -= 1
    tenant["files"][0]["purpose"] = "nope"
    assert "purpose" in assert_error(client.put("/_emulator/state", json=doc), 400)["message"]


# --- uploaded bytes live on disk, under a quota (issue 39, item 8) ---------------------------------------

def _start(c: TestClient, name: str = "data.jsonl") -> tuple[str, str]:
    started = c.post("/v1/files", files={"purpose": (None, "fine-tune"), "file_name": (None, name)},
                     follow_redirects=False)
    assert started.status_code == 302, started.text
    return started.headers["x-together-file-id"], started.headers["location"]


def _jsonl(size: int, seed: int = 0) -> bytes:
    row = json.dumps({"messages": [{"role": "user", "content": f"{seed} " + "x" * 80}]}).encode() + b"\n"
    return row * (size // len(row))  # (about ``size`` bytes, of whole rows)


def test_the_store_names_an_uploads_bytes_and_holds_none_of_them(tmp_path: Path) -> None:
    """Each 64 MiB upload added 64 MiB of resident memory, and a journal line of that size: the record held
    the bytes. Now the record names a blob on disk; the journal line is the record; a restart reads it back."""
    state_file = tmp_path / "state.jsonl"
    content = _jsonl(3 << 20)
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    with make_client(runtime) as c:
        file_id, url = _start(c)
        before = state_file.stat().st_size
        assert c.put(url, content=content, headers={"Authorization": ""}).status_code == 200
        line = state_file.stat().st_size - before
        assert c.post(f"/v1/files/{file_id}/preprocess").json()["validation_report"]["nlines"] == content.count(b"\n")
    (tenant,) = (runtime.store.get(p) for p in runtime.store.projects())
    record = tenant.files.peek(file_id)
    assert not any(isinstance(getattr(record, f), (bytes, bytearray)) for f in record.__slots__)
    assert len(record.blob) == 64 and record.size == len(content)
    blob_dir = Path(f"{state_file}.blobs")
    assert (blob_dir / record.blob).read_bytes() == content
    assert line < 2048, line  # the record, not its 3 MiB
    assert content[:1000] not in state_file.read_bytes()
    with make_client(Runtime(Config(clock="manual", state_file=str(state_file)))) as c:
        assert c.get(f"/v1/files/{file_id}/content").content == content
    # A blob that is gone is named at start-up (the file is never read without its bytes).
    (blob_dir / record.blob).unlink()
    with pytest.raises(ConfigError, match=f"{record.blob}.*not in {blob_dir}"):
        Runtime(Config(clock="manual", state_file=str(state_file)))


def test_an_upload_streams_to_disk_while_other_clients_are_served(tmp_path: Path) -> None:
    """Half of a 16 MiB upload is sent: its bytes are already on disk (not gathered in memory) and another
    client's requests are answered meanwhile; the rest is sent and the file is whole."""
    content = _jsonl(16 << 20, seed=1)
    with serve_in_thread(Config(clock="manual")) as (url, runtime):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {SDK_KEY}"}, timeout=60) as c:
            file_id, location = _start(c)  # type: ignore[arg-type]
            upload_path = location.split("//", 1)[1].split("/", 1)[1]
            incoming = None
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=60) as sock:
                sock.sendall(f"PUT /{upload_path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(content)}\r\n"
                             "Connection: close\r\n\r\n".encode() + content[: len(content) // 2])
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # (nothing to await: the server writes as it receives)
                    incoming = [p for p in (runtime.store.blobs.root / ".incoming").iterdir()]
                    if incoming and incoming[0].stat().st_size >= (len(content) // 2) - (2 << 20):
                        break
                    time.sleep(0.01)
                assert incoming and incoming[0].stat().st_size >= (len(content) // 2) - (2 << 20), incoming
                assert c.get("/v1/files").status_code == 200  # answered while the upload is under way
                assert c.get(f"/v1/files/{file_id}").json()["bytes"] == 0
                sock.sendall(content[len(content) // 2:])
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
            assert c.get(f"/v1/files/{file_id}").json()["bytes"] == len(content)
            got = c.get(f"/v1/files/{file_id}/content")
            assert got.content == content and got.headers["content-length"] == str(len(content))
            assert list((runtime.store.blobs.root / ".incoming").iterdir()) == []


def test_an_upload_cut_short_keeps_nothing(tmp_path: Path) -> None:
    """A body that stops arriving is answered 408 by the request deadline; what came of it is not kept as the
    file (before, the closed connection's part was stored as the whole file)."""
    with serve_in_thread(Config(clock="manual", request_timeout=0.5)) as (url, runtime):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {SDK_KEY}"}, timeout=60) as c:
            file_id, location = _start(c)  # type: ignore[arg-type]
            upload_path = location.split("//", 1)[1].split("/", 1)[1]
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30) as sock:
                sock.sendall(f"PUT /{upload_path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"
                             .encode() + CONVERSATION.encode())
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
            assert c.get(f"/v1/files/{file_id}").json()["bytes"] == 0
            assert_error(c.post(f"/v1/files/{file_id}/preprocess"), 400)
            assert [p.name for p in runtime.store.blobs.root.iterdir()] == [".incoming"]
            assert list((runtime.store.blobs.root / ".incoming").iterdir()) == []
            # The URL was not used up: the whole body goes through it.
            assert httpx.put(location, content=CONVERSATION.encode(), timeout=30).status_code == 200
            assert c.post(f"/v1/files/{file_id}/preprocess").json()["processing_status"] == "COMPLETED"


def test_a_projects_uploads_have_a_quota(tmp_path: Path) -> None:
    """``uploads_mib_per_tenant``: files and unread payloads together; past it 429 upload_quota_exceeded, from
    the declared length before any byte is read, or as a chunked body passes it. Deleting makes room."""
    from tests.helpers import RL, running_session

    limits = tmp_path / "limits.yaml"
    limits.write_text("uploads_mib_per_tenant: 1\n")
    runtime = Runtime(Config(clock="manual", limits_file=str(limits)))
    big = _jsonl(600 << 10)
    with make_client(runtime) as c:
        first = _start(c, "a.jsonl")
        assert c.put(first[1], content=big, headers={"Authorization": ""}).status_code == 200
        second = _start(c, "b.jsonl")
        refused = c.put(second[1], content=big, headers={"Authorization": ""})
        err = assert_error(refused, 429)
        assert err["code"] == "upload_quota_exceeded" and "uploads_mib_per_tenant" in err["message"], err
        assert refused.headers["x-should-retry"] == "false"

        def chunked() -> Iterator[bytes]:
            yield big[:300_000]
            yield big[300_000:]
        assert assert_error(c.put(second[1], content=chunked(), headers={"Authorization": ""}), 429)["code"] \
            == "upload_quota_exceeded"
        # A payload counts too.
        sid = running_session(c)["id"]
        payload = c.post(f"{RL}/training-sessions/{sid}/payloads/upload-url").json()
        assert_error(c.put(payload["upload_url"].replace("http://127.0.0.1:8765", ""), content=big,
                           headers={"Authorization": ""}), 429)
        assert c.get(f"/v1/files/{second[0]}").json()["bytes"] == 0
        assert c.delete(f"/v1/files/{first[0]}").status_code == 200
        assert c.put(second[1], content=big, headers={"Authorization": ""}).status_code == 200
        with make_client(runtime, "another-project") as other:  # the quota is the project's own
            third = _start(other, "c.jsonl")
            assert other.put(third[1], content=big, headers={"Authorization": ""}).status_code == 200


def test_bytes_no_record_names_are_swept_without_losing_a_restart(tmp_path: Path) -> None:
    """A deleted file's bytes and a payload's once its operation has read them are deleted from disk by the
    sweep. With a journal, a payload released by a read (settled, no line written yet) is compacted into the
    file first, so the restart does not look for bytes that are gone."""
    import orjson

    from tests.helpers import RL, ce_sample, running_session, submit

    state_file = tmp_path / "state.jsonl"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [3, 4, 5])]}
    blob_dir = Path(f"{state_file}.blobs")
    with make_client(runtime) as c:
        file_id, url = _start(c)
        assert c.put(url, content=CONVERSATION.encode(), headers={"Authorization": ""}).status_code == 200
        sid = running_session(c)["id"]
        payload = c.post(f"{RL}/training-sessions/{sid}/payloads/upload-url").json()
        assert c.put(payload["upload_url"].replace("http://127.0.0.1:8765", ""), content=orjson.dumps(body),
                     headers={"Authorization": ""}).status_code == 200
        assert len([p for p in blob_dir.iterdir() if p.is_file()]) == 2
        assert c.delete(f"/v1/files/{file_id}").status_code == 200
        op = submit(c, sid, "forward-backward", {**body, "payload_id": payload["payload_id"]}).json()
        # (instant profile: the operation ends at the next settling, here a read's, which writes no line)
        done = c.get(f"{RL}/training-sessions/{sid}/operations/forward-backward/{op['id']}").json()
        assert done["status"] == "TRAINING_OPERATION_STATUS_COMPLETED", done
    assert runtime.collect_blobs() == 0  # (the directory has not grown enough to be worth a sweep)
    assert runtime.collect_blobs(force=True) > 0
    assert [p for p in blob_dir.iterdir() if p.is_file()] == []
    restored = Runtime(Config(clock="manual", state_file=str(state_file)))
    (tenant,) = restored.export_state()["tenants"].values()
    assert [(p["data"], p["released_by"]) for p in tenant["payloads"]] == [(None, op["id"])]
    assert tenant["files"] == []


def test_a_refused_import_leaves_no_bytes_behind(tmp_path: Path) -> None:
    """Issue 39, item 2: a refused import changes nothing on disk either. Bytes a document carries inline are
    stored as it is checked; refused, they go again."""
    state_file = tmp_path / "state.jsonl"
    with make_client(Runtime(Config(clock="manual", state_file=str(state_file)))) as c:
        upload(c, CONVERSATION.encode())
        doc = c.get("/_emulator/state").json()
        blobs = Path(f"{state_file}.blobs")
        before = sorted(p.name for p in blobs.iterdir() if p.is_file())
        (tenant,) = doc["tenants"].values()
        tenant["files"][0]["data"] = {"__bytes__": CONVERSATION + "\n"}  # other bytes: another blob
        tenant["files"][0]["size"] += 1
        doc["clock"]["now"] = "9999-06-01T00:00:00Z"   # ... in a document refused
        assert "clock.now" in assert_error(c.put("/_emulator/state", json=doc), 400)["message"]
        assert sorted(p.name for p in blobs.iterdir() if p.is_file()) == before
