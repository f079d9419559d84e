"""The Files API as the SDK's ``client.files`` uses it, and the shaping job's calibration file (issue 23).

The upload is the SDK's own three steps: ``uploadFile`` (a multipart form) answers 302 with the presigned
upload URL in ``Location`` and the id in ``X-Together-File-Id``; the bytes go to that URL by PUT without
credentials; ``preprocessFile`` validates them. Then the file reads back (retrieve, list, content) as
uploaded, is invisible to another tenant, and is gone after ``deleteFile``. A shaping job naming a file
that does not exist in the project is refused, as the SDK documents ("rejected unless the file exists in
the request project, ...").

Every test here creates a file, which costs nothing on the real service but lasts: they are ``real_safe``
and delete what they upload.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest
import requests

from contract_tests import lifecycle as lc
from contract_tests import spec
from contract_tests.client import Api, Reply, verify
from contract_tests.lifecycle import ContractViolation
from contract_tests.report import RESULTS

pytestmark = [pytest.mark.real_safe]

CONVERSATION = "".join(json.dumps({"messages": [{"role": "user", "content": f"contract question {i}"},
                                                {"role": "assistant", "content": "an answer"}]}) + "\n"
                       for i in range(3)).encode()


def _judged(api: Api, operation_id: str, resp: requests.Response, where: str) -> Reply:
    """A raw response judged like :meth:`Api.call` judges its own: schema, then the error envelope."""
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text
    reply = Reply(resp.status_code, body, operation_id, where, api=api)
    failure = spec.validate_response(operation_id, resp)
    if failure:
        reply.violations.append(ContractViolation("response_schema_conformance", f"{where} answered "
                                                  f"{resp.status_code} with a body that does not match the "
                                                  f"documented schema: {failure[:1500]}"))
    if resp.status_code >= 400:
        try:
            lc.check_error_envelope(resp.status_code, body, where)
        except ContractViolation as exc:
            reply.violations.append(exc)
    broken = [v for v in reply.violations if v.check == "response_schema_conformance"]
    RESULTS.record(operation_id, "response_schema_conformance", not broken, str(broken[0]) if broken else None)
    api.pending.extend(reply.violations)
    return reply


def _post_upload(api: Api, name: str, purpose: str, checksum: str) -> tuple[requests.Response, Reply]:
    form = {"purpose": purpose, "file_name": name, "file_type": "jsonl", "checksum": checksum}
    resp = api.http.post(api.target.base_url + "/v1/files", files={k: (None, v) for k, v in form.items()},
                         headers={"Authorization": f"Bearer {api.token}"}, allow_redirects=False, timeout=60)
    return resp, _judged(api, "uploadFile", resp, "POST /v1/files")


def start_upload(api: Api, content: bytes, name: str, purpose: str = "calibration",
                 checksum: str | None = None) -> requests.Response:
    # (a checksum of this run's own by default: no 409 from an old run's file)
    resp, reply = _post_upload(api, name, purpose, checksum or hashlib.md5(content + uuid.uuid4().bytes).hexdigest())
    api.expect(reply, (302,), "an upload starts with a 302 to where the bytes go", "upload_redirects")
    verify("uploadFile", "upload_redirects", bool(resp.headers.get("Location"))
           and bool(resp.headers.get("X-Together-File-Id")),
           f"POST /v1/files answered 302 without Location or X-Together-File-Id: {dict(resp.headers)}")
    return resp


def upload(api: Api, content: bytes, name: str = "contract.jsonl", purpose: str = "calibration",
           checksum: str | None = None) -> dict[str, Any]:
    started = start_upload(api, content, name, purpose, checksum)
    file_id = started.headers["X-Together-File-Id"]
    put = requests.put(started.headers["Location"], data=content, timeout=60)  # presigned: no credentials
    verify("uploadFile", "presigned_upload", put.status_code == 200,
           f"PUT to the upload URL answered {put.status_code}: {put.text[:300]}")
    done = api.call("preprocessFile", "POST", f"/v1/files/{file_id}/preprocess").ok()
    verify("preprocessFile", "file_round_trip", done.get("id") == file_id and done.get("bytes") == len(content),
           f"preprocess answered {done} for file {file_id} of {len(content)} bytes")
    return dict(done)


def test_file_upload_read_back_and_delete(api: Api) -> None:
    f = upload(api, CONVERSATION)
    fid = f["id"]
    try:
        got = api.call("retrieveFile", "GET", f"/v1/files/{fid}").ok()
        verify("retrieveFile", "file_round_trip",
               (got["id"], got["bytes"], got["filename"], got["purpose"]) == (fid, len(CONVERSATION), "contract.jsonl",
                                                                             "calibration"),
               f"the file reads back as {got}, not as uploaded")
        listed = api.call("listFiles", "GET", "/v1/files").ok()
        verify("listFiles", "file_round_trip", fid in [x["id"] for x in listed["data"]],
               f"GET /v1/files does not list the uploaded file {fid}")
        content = api.http.get(api.target.base_url + f"/v1/files/{fid}/content", timeout=60,
                               headers={"Authorization": f"Bearer {api.token}", "Accept": "application/binary"})
        _judged(api, "getFileContent", content, f"GET /v1/files/{fid}/content").ok()
        verify("getFileContent", "file_round_trip", content.content == CONVERSATION,
               f"the content of {fid} is not the uploaded bytes ({len(content.content)} bytes back)")
    finally:
        deleted = api.call("deleteFile", "DELETE", f"/v1/files/{fid}").ok()
    verify("deleteFile", "file_round_trip", deleted.get("id") == fid and deleted.get("deleted") is True,
           f"DELETE answered {deleted}")
    api.expect(api.call("retrieveFile", "GET", f"/v1/files/{fid}"), (404,), "a deleted file is not found",
               "unknown_id_404")


def test_a_second_upload_of_the_same_file_answers_409_naming_it(api: Api) -> None:
    """uploadFile: "A second upload of the same content (same checksum), name and purpose answers 409 with the
    existing file's file_id" [inferred from the SDK: "uploads are idempotent"; FileExistsError]."""
    checksum = hashlib.md5(CONVERSATION + uuid.uuid4().bytes).hexdigest()  # this run's own: no old run's file
    f = upload(api, CONVERSATION, "contract-twice.jsonl", checksum=checksum)
    try:
        _, again = _post_upload(api, "contract-twice.jsonl", "calibration", checksum)
        api.expect(again, (409,), "a second upload of the same content, name and purpose", "upload_idempotent")
        named = again.body.get("file_id") if isinstance(again.body, dict) else None
        verify("uploadFile", "upload_idempotent", named == f["id"],
               f"the 409 of a second upload names file_id {named!r}, not the existing file {f['id']}: {again.body}")
    finally:
        api.call("deleteFile", "DELETE", f"/v1/files/{f['id']}").ok()


def test_files_are_tenant_scoped(api: Api, second_api: Api) -> None:
    fid = upload(api, CONVERSATION, "scoped.jsonl")["id"]
    try:
        theirs = second_api.call("listFiles", "GET", "/v1/files").ok()
        verify("listFiles", "tenant_isolation", fid not in {x["id"] for x in theirs["data"]},
               f"another project lists the file {fid}")
        for op, method, path in (("retrieveFile", "GET", f"/v1/files/{fid}"),
                                 ("getFileContent", "GET", f"/v1/files/{fid}/content"),
                                 ("deleteFile", "DELETE", f"/v1/files/{fid}")):
            second_api.expect(second_api.call(op, method, path), (403, 404),
                              "another project's file is invisible", "tenant_isolation")
    finally:
        api.call("deleteFile", "DELETE", f"/v1/files/{fid}").ok()


def _rows(*rows: dict[str, Any]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


# The three dataset formats preprocessFile documents, each as a jsonl file of its rows.
FORMATS = {
    "CONVERSATION": CONVERSATION,
    "INSTRUCTION": _rows({"prompt": "contract prompt 1", "completion": "an answer"},
                         {"prompt": "contract prompt 2", "completion": "another answer"}),
    "GENERAL": _rows({"text": "contract text 1"}, {"text": "contract text 2"}, {"text": "contract text 3"},
                     {"text": "contract text 4"}),
}


def test_preprocess_reports_each_documented_dataset_format(api: Api) -> None:
    """preprocessFile: "A jsonl file passes as a CONVERSATION (rows with messages), INSTRUCTION (prompt and
    completion) or GENERAL (text) dataset", in its ``validation_report``; a file of rows with none of those
    (a prompt alone is not an instruction) does not pass, says why under ``error`` with its ``error_type``, and its
    ``processing_status`` is a finished one that is not ``COMPLETED`` [inferred: ``INVALID_FORMAT`` or ``FAILED``;
    a validation that answered its report is no longer ``PENDING``, ``QUEUED`` or ``RUNNING``]. A conversation's
    messages are objects with a ``role`` [inferred: the SDK's ``REQUIRED_COLUMNS_MESSAGE = ["role"]``, together
    3.1.1 ``lib/constants.py``; it leaves the check to the server]."""
    invalid = {"none": _rows({"question": "neither messages, prompt nor text"}),
               "prompt-only": _rows({"prompt": "a prompt without its completion"}),
               "message-not-an-object": _rows({"messages": ["a message that is not an object"]}),
               "message-without-role": _rows({"messages": [{"content": "a message without its role"}]})}
    for fmt, content in {**FORMATS, **invalid}.items():
        f = upload(api, content, f"contract-{fmt.lower()}.jsonl")
        try:
            report = f.get("validation_report") or {}
            if fmt in invalid:
                verify("preprocessFile", "dataset_format", report.get("valid") is False,
                       f"a jsonl file whose rows have no messages, prompt and completion, or text ({fmt}) "
                       f"preprocessed as {f.get('processing_status')} with validation_report {report}: it does not "
                       "pass")
                # FileValidationReport.error: "Why validation failed; only with error_type"
                verify("preprocessFile", "validation_error", isinstance(report.get("error"), str)
                       and bool(report["error"].strip()) and isinstance(report.get("error_type"), str),
                       f"the invalid {fmt} file's validation_report gives no reason under validation_report.error "
                       f"(with its error_type), where FileValidationReport documents it: {report}")
                verify("preprocessFile", "dataset_format", f.get("processing_status") in ("INVALID_FORMAT", "FAILED"),
                       f"the invalid {fmt} file was validated (validation_report {report}) yet its processing_status "
                       f"is {f.get('processing_status')!r}, not a finished status of a file that failed validation "
                       "(INVALID_FORMAT or FAILED)")
                continue
            rows, nlines = content.count(b"\n"), report.get("nlines")
            verify("preprocessFile", "dataset_format",
                   report.get("valid") is True and report.get("dataset_format") == fmt
                   and f.get("processing_status") == "COMPLETED" and (nlines is None or int(nlines) == rows),
                   f"a valid {fmt} jsonl file of {rows} rows preprocessed as {f.get('processing_status')} with "
                   f"validation_report {report}")
        finally:
            api.call("deleteFile", "DELETE", f"/v1/files/{f['id']}").ok()


def test_upload_form_is_checked(api: Api) -> None:
    resp = api.http.post(api.target.base_url + "/v1/files", files={"file_name": (None, "x.jsonl")},
                         headers={"Authorization": f"Bearer {api.token}"}, allow_redirects=False, timeout=60)
    api.expect(_judged(api, "uploadFile", resp, "POST /v1/files"), (400, 422),
               "an upload form without purpose is refused", "invalid_input_refused")


@pytest.mark.creates_resources
def test_shaping_refuses_a_calibration_file_that_does_not_exist(api: Api) -> None:
    """The documented rule, from the side that needs no model: whatever the model, a calibration file id that
    names no file of the project is refused (400); never a job."""
    body = {"inputs": {"model_object_id": "ml_" + uuid.uuid4().hex[:21],
                       "calibration_file_id": f"file-{uuid.uuid4()}"}}
    for op, path in (("createShapingJob", "/v1/shaping/prepare-for-fp4-inference"),
                     ("estimateShapingJob", "/v1/shaping/prepare-for-fp4-inference/estimate")):
        api.expect(api.call(op, "POST", path, json=body), (400, 404),
                   "a shaping job naming a calibration file that does not exist is refused",
                   "invalid_input_refused")
