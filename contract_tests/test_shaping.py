"""The shaping job lifecycle (``/v1/shaping``, docs/api-surface.md A.7), driven to its end.

A job made from a model the project fine-tuned (here: the one an inference checkpoint registered) must
leave ``pending``, move only along the documented statuses (the observer checks every read) and end
``completed`` with ``results`` and a ``QUANTIZATION_JOB_COMPLETE`` event; its events are in time order and
the same in ``GET /v1/shaping/{id}`` and ``/events``; it is listed. A cancel either finds the job finished
(refused, nothing changes) or moves it to ``cancel_requested`` and then ``cancelled`` for good. Requests
that name a model outside the project's registry are 400 at once; unknown jobs are 404.

On the realistic profile (emulator only: each phase takes virtual minutes) the job is seen in each status
in turn, its ``updated_at`` moves with each status and with each event it gains while it stays ``running``
(every read: never before its newest event), and a cancel while it runs ends ``cancelled`` without results.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.client import Api, verify
from contract_tests.target import Target
from contract_tests.test_files import FORMATS, upload

UNKNOWN_JOB = "shp-quant-0000000000000000"


@pytest.fixture(scope="module")
def registered(target: Target) -> Iterator[tuple[str, str]]:
    """(session id, a registry model the project fine-tuned)."""
    if not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target")
    api = Api(target)
    r = api.ready_resource()
    s = api.running_session(r["id"])
    flows.train(api, s["id"])
    yield s["id"], flows.shaping_model(api, s["id"])
    api.stop_resource(r["id"], force=True)


def _in_status(status: str, job: dict[str, Any]) -> bool:
    return bool(job["status"] == status)


def _finish(api: Api, job_id: str) -> dict[str, Any]:
    # A job takes hours, not minutes (docs: estimate's time_hours): poll in virtual 5-minute steps, up to 6 hours.
    return api.wait(partial(flows.get_shaping, api, job_id), lambda j: j["status"] in flows.SHAPING_DONE,
                    f"shaping job {job_id}", "getShapingJob", bound=6 * 3600, step=300)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_shaping_job_runs_to_completed(api: Api, registered: tuple[str, str]) -> None:
    _, model_id = registered
    job = flows.create_shaping(api, {"model_object_id": model_id}).ok()
    verify("createShapingJob", "initial_status", job["status"] in ("pending", "queued", "running", "completed"),
           f"a new shaping job starts {job['status']!r}")
    verify("createShapingJob", "shaping_job", str(job["id"]).startswith("shp-quant-"),
           f"shaping job ids start with shp-quant-, not {job['id']!r}")
    done = _finish(api, job["id"])
    verify("getShapingJob", "shaping_completes", done["status"] == "completed",
           f"a shaping job of a fine-tuned model of the project ended {done['status']!r}, not completed: "
           f"{done.get('events')}")
    events = flows.shaping_events(api, job["id"])
    verify("listShapingJobEvents", "shaping_events", events == done["events"],
           f"GET /v1/shaping/{job['id']}/events differs from the job's events: {events} vs {done['events']}")
    flows.check_shaping_job(done, events, model_id)
    again = flows.get_shaping(api, job["id"])  # terminal: the job, its events and results stay as they are
    verify("getShapingJob", "terminal_never_reverts",
           (again["events"], again.get("results"), again["updated_at"]) == (done["events"], done.get("results"),
                                                                           done["updated_at"]),
           f"a completed shaping job changed on a later read: {again}")
    listed = api.call("listShapingJobs", "GET", "/v1/shaping").ok()["data"]
    verify("listShapingJobs", "created_object_listed", job["id"] in {j.get("id") for j in listed},
           f"shaping job {job['id']} is missing from GET /v1/shaping")
    refused = flows.cancel_shaping(api, job["id"])
    api.expect(refused, (400, 409), "cancelling a completed shaping job is refused", "shaping_cancel")
    verify("cancelShapingJob", "refusal_changes_nothing", flows.get_shaping(api, job["id"])["status"] == "completed",
           "a refused cancel changed the completed job")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_shaping_cancel_ends_cancelled_or_is_refused(api: Api, registered: tuple[str, str]) -> None:
    _, model_id = registered
    job = flows.create_shaping(api, {"model_object_id": model_id}).ok()
    reply = flows.cancel_shaping(api, job["id"])
    api.expect(reply, (200, 400, 409), "cancel a shaping job just created", "shaping_cancel")
    done = _finish(api, job["id"])
    if reply.status == 200:
        verify("cancelShapingJob", "shaping_cancel", reply.body["status"] in ("cancel_requested", "cancelled"),
               f"an accepted cancel answered status {reply.body['status']!r}")
        verify("getShapingJob", "shaping_cancel", done["status"] == "cancelled",
               f"an accepted cancel must end the job cancelled, not {done['status']!r}")
    else:  # refused: the job had already finished; the cancel changed nothing
        verify("getShapingJob", "shaping_cancel", done["status"] in flows.SHAPING_DONE - {"cancelled"},
               f"a refused cancel left the job {done['status']!r}")
    flows.check_shaping_job(done, flows.shaping_events(api, job["id"]), model_id)
    api.expect(flows.cancel_shaping(api, job["id"]), (400, 409), "cancelling a finished job again is refused",
               "shaping_cancel")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_shaping_requests_are_checked(api: Api, registered: tuple[str, str]) -> None:
    _, model_id = registered
    estimate = api.call("estimateShapingJob", "POST", "/v1/shaping/prepare-for-fp4-inference/estimate",
                        json={"inputs": {"model_object_id": model_id}}).ok()
    verify("estimateShapingJob", "estimate", isinstance(estimate.get("allowed_to_proceed"), bool),
           f"an estimate of a valid job has no allowed_to_proceed: {estimate}")
    job = flows.get_shaping(api, flows.create_shaping(api, {"model_object_id": model_id}).ok()["id"])
    revision = job["params"]["configuration"].get("model_revision_id")
    if revision:  # the current revision, named explicitly, is the same model
        pinned = flows.create_shaping(api, {"model_object_id": model_id, "model_revision_id": revision})
        api.expect(pinned, (200,), "a job naming the model's current revision", "shaping_accepted")
    bad = [({"model_object_id": "ml_NotInThisProject0000000"}, "a model that is not in the project's registry"),
           ({"model_object_id": model_id, "model_revision_id": "rv_NotThisModelsRevision00"},
            "a revision that does not belong to the model"),
           ({}, "no model at all")]
    for inputs, rule in bad:
        api.expect(flows.create_shaping(api, inputs), (400, 422), f"a shaping job of {rule} is refused",
                   "invalid_input_refused")
        api.expect(api.call("estimateShapingJob", "POST", "/v1/shaping/prepare-for-fp4-inference/estimate",
                            json={"inputs": inputs}), (400, 422), f"an estimate of {rule} is refused",
                   "invalid_input_refused")
    api.expect(flows.cancel_shaping(api, UNKNOWN_JOB), (404,), "cancel of an unknown shaping job", "unknown_id_404")


CALIBRATION_MAX_BYTES = 64 * 1024 * 1024  # calibration_file_id: "at most 64 MiB"


def _conversation_of(size: int) -> bytes:
    """A conversation dataset of exactly ``size`` bytes: rows of about a MiB, the last one padded to fit."""
    def row(n: int) -> bytes:
        return json.dumps({"messages": [{"role": "user", "content": "x" * n}]}).encode() + b"\n"
    overhead = len(row(0))
    chunk = (1 << 20) - overhead
    rows, left = [], size
    while left > 2 * (1 << 20):
        rows.append(row(chunk))
        left -= chunk + overhead
    first = (left - 2 * overhead) // 2
    rows += [row(first), row(left - 2 * overhead - first)]
    out = b"".join(rows)
    assert len(out) == size, (len(out), size)
    return out


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_shaping_checks_its_calibration_file(api: Api, registered: tuple[str, str]) -> None:
    """calibration_file_id: "Conversation dataset file (file-..., purpose calibration or fine-tune, jsonl, at most
    64 MiB, rows with messages)"; the estimate refuses what createShapingJob would (400) and nothing else. Judged on
    estimates: they create nothing. A file that does not exist in the project (never did, or was deleted) is refused
    for a model the project did fine-tune too ("rejected unless the file exists in the request project", the SDK)."""
    _, model_id = registered
    largest = _conversation_of(CALIBRATION_MAX_BYTES)
    cases = ((FORMATS["CONVERSATION"], "calibration", True), (FORMATS["CONVERSATION"], "fine-tune", True),
             (FORMATS["CONVERSATION"], "eval", False), (FORMATS["INSTRUCTION"], "calibration", False),
             (largest, "calibration", True))
    for content, purpose, valid in cases:
        f = upload(api, content, "contract-calibration.jsonl", purpose)
        what = (f"a {purpose} file of {'prompt/completion' if content == FORMATS['INSTRUCTION'] else 'messages'} rows"
                + (" of exactly 64 MiB" if content is largest else ""))
        try:
            reply = api.call("estimateShapingJob", "POST", "/v1/shaping/prepare-for-fp4-inference/estimate",
                             json={"inputs": {"model_object_id": model_id, "calibration_file_id": f["id"]}})
            api.expect(reply, (200,) if valid else (400, 422),
                       f"an estimate with {what} as its calibration file is "
                       + ("accepted" if valid else "refused"), "shaping_accepted" if valid else "invalid_input_refused")
        finally:
            api.call("deleteFile", "DELETE", f"/v1/files/{f['id']}").ok()
    for missing, what in ((f["id"], "a calibration file the project deleted"),
                          (f"file-{uuid.uuid4()}", "a calibration file id that names no file")):
        reply = api.call("estimateShapingJob", "POST", "/v1/shaping/prepare-for-fp4-inference/estimate",
                         json={"inputs": {"model_object_id": model_id, "calibration_file_id": missing}})
        api.expect(reply, (400, 404), f"an estimate with {what} is refused", "invalid_input_refused")


@pytest.fixture(scope="module")
def realistic(target: Target) -> Iterator[Target]:
    yield target
    flows.forget_tenants()


@pytest.mark.emulator_only
@pytest.mark.creates_resources
def test_shaping_phases_on_the_realistic_profile(realistic: Target) -> None:
    api = flows.realistic_api(realistic)
    r = api.ready_resource()
    s = api.running_session(r["id"])
    model_id = flows.shaping_model(api, s["id"])
    job = flows.create_shaping(api, {"model_object_id": model_id}).ok()
    seen = [job["status"]]
    updated = [job["updated_at"]]
    last, reads = job, 0
    while seen[-1] not in flows.SHAPING_DONE and reads < 500:
        api.target.advance(30)
        reads += 1
        now = flows.get_shaping(api, job["id"])
        if now["status"] != seen[-1]:
            seen.append(now["status"])
            updated.append(now["updated_at"])
        elif len(now.get("events") or []) > len(last.get("events") or []):  # e.g. running, a step further
            verify("getShapingJob", "updated_at_moves",
                   lc.parse_time(now["updated_at"], "updated_at") > lc.parse_time(last["updated_at"], "updated_at"),
                   f"updated_at did not move: shaping job {job['id']} stayed {now['status']} and gained events "
                   f"{[e.get('type') for e in now['events'][len(last.get('events') or []):]]}, yet its updated_at "
                   f"is still {now['updated_at']}")
        last = now
    verify("getShapingJob", "shaping_completes", seen == ["pending", "queued", "running", "completed"],
           f"a shaping job taking minutes per phase must be seen pending, queued, running, completed in turn; "
           f"seen {seen}")
    verify("getShapingJob", "updated_at_moves", len(set(updated)) == len(updated),
           f"updated_at did not move with each status of shaping job {job['id']}: {list(zip(seen, updated))}")
    flows.check_shaping_job(flows.get_shaping(api, job["id"]), flows.shaping_events(api, job["id"]), model_id)

    # Cancelled while it waits, is queued or runs: cancel_requested, then cancelled for good, without results.
    for phase in ("pending", "queued", "running"):
        job = flows.create_shaping(api, {"model_object_id": model_id}).ok()
        if phase != "pending":
            flows.wait_until(api, partial(flows.get_shaping, api, job["id"]), partial(_in_status, phase),
                             f"shaping job {job['id']} {phase}", "getShapingJob")
        reply = flows.cancel_shaping(api, job["id"])
        api.expect(reply, (200,), f"cancel a {phase} shaping job", "shaping_cancel")
        verify("cancelShapingJob", "shaping_cancel", reply.body["status"] in ("cancel_requested", "cancelled"),
               f"cancel of a {phase} job answered {reply.body['status']!r}")
        if reply.body["status"] == "cancel_requested":
            api.expect(flows.cancel_shaping(api, job["id"]), (400, 409), "a second cancel while cancel_requested",
                       "shaping_cancel")
        done = _finish(api, job["id"])
        verify("getShapingJob", "shaping_cancel", done["status"] == "cancelled",
               f"a job cancelled while {phase} ended {done['status']!r}, not cancelled")
        api.target.advance(3600)
        later = flows.get_shaping(api, job["id"])
        verify("getShapingJob", "terminal_never_reverts",
               (later["status"], later["events"]) == ("cancelled", done["events"]),
               f"a cancelled job moved on: {later['status']} with events {[e['type'] for e in later['events']]}")
        flows.check_shaping_job(later, flows.shaping_events(api, job["id"]), model_id)
    api.stop_resource(r["id"], force=True)
