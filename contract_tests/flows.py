"""Flows shared by the semantic checks (updates, shaping, resume, capabilities, MoE and payloads, the
realistic timing profile): small request sequences whose every answer goes through :class:`Api`.

Also the tenants of the realistic checks (:func:`realistic_api`): a new tenant with its own manual clock and
the ``realistic`` timing profile, on the target itself when it takes any token and scopes time to a tenant
(the emulator's control plane), else on a second emulator started with ``--profile realistic --clock
manual`` (the suite starts it when it started the main emulator itself, with the same ``--emulator-arg``
arguments; ``--realistic-base-url`` names one that runs elsewhere). Against any other target those checks
are skipped.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import requests

from contract_tests import lifecycle as lc
from contract_tests.capabilities import Model, supported_models
from contract_tests.client import KIND_OPERATION_IDS, RL, Api, Reply, ce_sample, record, verify
from contract_tests.lifecycle import OP, ContractViolation
from contract_tests.report import RESULTS
from contract_tests.target import EmulatorProcess, Target, TargetError

SHAPING = "/v1/shaping"
REALISTIC_ARGS = ["--profile", "realistic", "--clock", "manual"]
REALISTIC_CHECKS = "the realistic-profile checks (test_realistic.py, the realistic case of test_shaping.py)"
SHAPING_DONE = lc.TERMINAL["shaping job"]
# QuantizationEvent.type of a job's steps, in the order of the pipeline they name (docs/api-surface.md B: "an
# adapter is merged into its base and then quantized"; [inferred]: one event per step).
SHAPING_PIPELINE = ("QUANTIZATION_JOB_START", "QUANTIZATION_MODEL_DOWNLOAD_COMPLETE", "QUANTIZATION_MERGE_COMPLETE",
                    "QUANTIZATION_QUANTIZE_PROCESS_START", "QUANTIZATION_QUANTIZE_PROCESS_COMPLETE",
                    "QUANTIZATION_MODEL_UPLOAD_COMPLETE", "QUANTIZATION_JOB_COMPLETE")

_REALISTIC: dict[str, Any] = {}


# --- targets -----------------------------------------------------------------------------------------

def realistic_target(target: Target) -> Target:
    """The emulator on the realistic profile (started once per run), or a skip saying why there is none."""
    from contract_tests.plugin import SETTINGS

    if "target" in _REALISTIC:
        return _REALISTIC["target"]  # type: ignore[no-any-return]
    if "error" in _REALISTIC:
        raise _REALISTIC["error"]
    url = getattr(SETTINGS, "realistic_base_url", None)
    if not url and not target.launched:
        pytest.skip(RESULTS.skipped_checks(
            REALISTIC_CHECKS, "they need an emulator on the realistic timing profile with a manual clock, which the "
            "suite starts only when it starts the main emulator itself; pass --realistic-base-url URL to name one",
            "--realistic-base-url"))
    try:
        if url:
            real = Target(url.rstrip("/"), target.token, admin_token=target.admin_token)
        else:
            proc = EmulatorProcess([*SETTINGS.emulator_args, *REALISTIC_ARGS])
            _REALISTIC["process"] = proc  # stopped at exit (EmulatorProcess registers it)
            real = Target(proc.start(), target.token, launched=True)
        real.op_timeout = target.op_timeout
        real.probe(True)
    except (TargetError, requests.RequestException) as exc:
        _REALISTIC["error"] = TargetError(f"the realistic-profile emulator is unusable: {exc}")
        raise _REALISTIC["error"] from exc
    if not real.control_plane:
        pytest.skip("the realistic-profile target has no /_emulator control plane")
    _REALISTIC["target"] = real
    return real


def realistic_api(target: Target) -> Api:
    """A client of a new tenant on the realistic profile whose time moves only when the suite moves it.

    Where the target takes any token and can give a tenant its own clock and timing profile (the emulator's
    tenant-scoped control plane), that tenant lives on the target itself; otherwise on the emulator of
    :func:`realistic_target` (started on the realistic profile with a manual clock). Its tenants are reset by
    :func:`forget_tenants`."""
    host = target if target.open_tokens and target.control_plane else realistic_target(target)
    api = _scoped_tenant(host)
    if api is None and host is target:
        host = realistic_target(target)
        api = _scoped_tenant(host)
    if api is None:  # an emulator without tenant-scoped time: its global clock (ours alone) is manual already
        api = Api(_tenant_view(host, f"contract-{uuid.uuid4().hex[:16]}", []))
    return api


def _tenant_view(host: Target, token: str, clocks: list[str]) -> Target:
    view = Target(host.base_url, token, admin_token=host.admin_token, launched=host.launched)
    view.control_plane, view.open_tokens, view.allow_create = host.control_plane, host.open_tokens, True
    view.base_model, view.op_timeout, view.tenant_clocks = host.base_model, host.op_timeout, clocks
    return view


def _scoped_tenant(host: Target) -> Api | None:
    """A new tenant of ``host`` with its own manual clock and realistic profile, or None when ``host`` cannot
    scope them to a tenant."""
    token = f"contract-{uuid.uuid4().hex[:16]}"
    headers = {**host.admin_headers(), "X-Emulator-Tenant": token}
    try:
        clock = host.http.post(f"{host.base_url}/_emulator/clock", json={"mode": "manual"}, headers=headers,
                               timeout=30)
        if clock.status_code != 200 or clock.json().get("scope") != "tenant":
            return None
        profile = host.http.post(f"{host.base_url}/_emulator/profile", json={"profile": "realistic"},
                                 headers=headers, timeout=30)
        if profile.status_code != 200:
            return None
    except (requests.RequestException, ValueError, AttributeError):
        return None
    _REALISTIC.setdefault("tenants", []).append((host, token))
    view = _tenant_view(host, token, [token])
    return Api(view, token=token)


def forget_tenants() -> None:
    """Reset the tenants :func:`realistic_api` made (their state, clock and profile go)."""
    for host, token in _REALISTIC.pop("tenants", []):
        try:
            host.http.post(f"{host.base_url}/_emulator/reset", json={},
                           headers={**host.admin_headers(), "X-Emulator-Tenant": token}, timeout=30)
        except requests.RequestException:
            pass


def clock_now(target: Target) -> datetime:
    """The target's virtual time, as its first tenant with a clock of its own reads it (else the global one)."""
    headers = dict(target.admin_headers())
    if target.tenant_clocks:
        headers["X-Emulator-Tenant"] = target.tenant_clocks[0]
    resp = target.http.get(f"{target.base_url}/_emulator/clock", headers=headers, timeout=30)
    if resp.status_code != 200:
        raise TargetError(f"GET /_emulator/clock answered {resp.status_code}: {resp.text[:200]}")
    return lc.parse_time(resp.json()["now"], "the emulator clock")


def models(api: Api) -> list[Model]:
    return supported_models(api.call("getSupportedModels", "GET", f"{RL}/supported-models").ok())


def model(api: Api, name: str) -> Model:
    found = [m for m in models(api) if m.base_model == name]
    if not found:
        pytest.skip(f"the target does not offer {name}")
    return found[0]


# --- sessions and operations -------------------------------------------------------------------------

def patch_session(api: Api, sid: str, body: dict[str, Any]) -> Reply:
    reply = api.call("updateSession", "PATCH", f"{RL}/training-sessions/{sid}", json=body)
    if reply.status == 200:
        api.observer.see("training session", reply.body, "updateSession")
    return reply


def op_ok(api: Api, sid: str, kind: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run an operation that must complete; its output."""
    op = api.run_op(sid, kind, body)
    get_id = KIND_OPERATION_IDS[kind][1]
    verify(get_id, "completed_output", op["status"] == OP + "COMPLETED" and isinstance(op.get("output"), dict),
           f"a valid {kind} operation {op['id']} ended {op['status']} ({op.get('error')}), not COMPLETED with an output")
    return op["output"]  # type: ignore[no-any-return]


def op_refused(api: Api, sid: str, kind: str, body: dict[str, Any], rule: str, check: str) -> str:
    """Submit an operation the rules refuse: a 400 at submit, or an operation that ends FAILED. Returns how."""
    reply = api.submit(sid, kind, body)
    if reply.status in (400, 404, 422):
        reply.raise_violations()
        return f"{reply.status}"
    op = reply.ok()
    get_id = KIND_OPERATION_IDS[kind][1]
    done = api.wait(lambda: api.get_op(sid, kind, op["id"]).ok(), lambda o: o["status"] in lc.OPERATION_DONE,
                    f"{kind} operation {op['id']}", get_id)
    verify(get_id, check, done["status"] == OP + "FAILED",
           f"{rule}: the {kind} operation {op['id']} ended {done['status']}, not FAILED (nor refused with a 400)")
    return f"FAILED {(done.get('error') or {}).get('code')}"


def train(api: Api, sid: str, steps: int = 1, learning_rate: float = 0.05) -> int:
    step = 0
    for _ in range(steps):
        op_ok(api, sid, "forward-backward", training_body())
        step = lc.as_int64(op_ok(api, sid, "optim-step", {"adam_params": {"learning_rate": learning_rate}})["step"],
                           "optim-step output.step")
    return step


def training_body() -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "samples": [ce_sample([11, 12, 13], [14, 15, 16]), ce_sample([21, 22], [23, 24, 25])]}


def probe_loss(api: Api, sid: str) -> float:
    """The loss of a fixed batch under the session's current weights (forward only: nothing changes)."""
    body = {**training_body(), "forward_only": True}
    body["samples"] = [ce_sample([31, 32, 33], [34, 35]), ce_sample([11, 12, 13], [14, 15, 16])]
    out = op_ok(api, sid, "forward-backward", body)
    loss = out.get("loss")
    verify("getForwardBackward", "completed_output", isinstance(loss, (int, float)) and math.isfinite(loss),
           f"a forward-only forward-backward has no finite loss: {out}")
    return float(loss)  # type: ignore[arg-type]


def same_number(a: float, b: float, rel: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-6)


def checkpoint(api: Api, sid: str, kind: str) -> dict[str, Any]:
    ckpt = op_ok(api, sid, kind).get("checkpoint")
    verify(KIND_OPERATION_IDS[kind][1], "completed_output",
           isinstance(ckpt, dict) and bool(ckpt.get("id")), f"a {kind} output has no checkpoint: {ckpt!r}")
    return ckpt  # type: ignore[return-value]


def get_checkpoint(api: Api, cid: str) -> dict[str, Any]:
    body = api.call("getCheckpoint", "GET", f"{RL}/checkpoints/{cid}").ok()
    api.observer.see("checkpoint", body, "getCheckpoint")
    return body  # type: ignore[no-any-return]


def read(fetch: Callable[[str], Reply], oid: str) -> Callable[[], dict[str, Any]]:
    """A poller of one object: ``read(api.get_session, sid)()`` is its current JSON (a 200 is required)."""
    return lambda: fetch(oid).ok()  # type: ignore[no-any-return]


def wait_until(api: Api, fetch: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], what: str,
               operation_id: str, bound: float = 3600) -> dict[str, Any]:
    return api.wait(fetch, done, what, operation_id, bound=bound)


# --- shaping ------------------------------------------------------------------------------------------

def create_shaping(api: Api, inputs: dict[str, Any]) -> Reply:
    reply = api.call("createShapingJob", "POST", f"{SHAPING}/prepare-for-fp4-inference", json={"inputs": inputs})
    if reply.status == 200:
        api.observer.see("shaping job", reply.body, "createShapingJob")
    return reply


def get_shaping(api: Api, job_id: str) -> dict[str, Any]:
    body = api.call("getShapingJob", "GET", f"{SHAPING}/{job_id}").ok()
    api.observer.see("shaping job", body, "getShapingJob")
    return body  # type: ignore[no-any-return]


def cancel_shaping(api: Api, job_id: str) -> Reply:
    reply = api.call("cancelShapingJob", "POST", f"{SHAPING}/{job_id}/cancel", empty_body=True)
    if reply.status == 200:
        api.observer.see("shaping job", reply.body, "cancelShapingJob")
    return reply


def shaping_model(api: Api, sid: str) -> str:
    """A model of the project's registry produced by fine-tuning: the one an inference checkpoint registered."""
    ckpt = checkpoint(api, sid, "inference-checkpoint")
    reg = ckpt.get("registration") or {}
    artifact = reg.get("adapter") or reg.get("model")
    if not isinstance(artifact, dict) or not artifact.get("id"):
        pytest.skip("the inference checkpoint was not registered in the model registry: no model to shape")
    return str(artifact["id"])


def check_shaping_job(job: dict[str, Any], events: list[Any], model_id: str) -> None:
    """What a finished job must show: its input, its events in time order, results only when completed."""
    jid = job["id"]

    def run() -> None:
        inputs = (job.get("params") or {}).get("inputs") or {}
        if inputs.get("model_object_id") != model_id:
            raise ContractViolation("shaping_job", f"shaping job {jid}: params.inputs.model_object_id is "
                                    f"{inputs.get('model_object_id')!r}, not the requested {model_id}")
        created = lc.parse_time(job["created_at"], f"shaping job {jid} created_at")
        updated = lc.parse_time(job["updated_at"], f"shaping job {jid} updated_at")
        times = [lc.parse_time(e.get("created_at"), f"shaping job {jid} event") for e in events]
        if times != sorted(times) or any(t < created or t > updated for t in times):
            raise ContractViolation("shaping_events", f"shaping job {jid}: events are not in time order between "
                                    f"created_at {job['created_at']} and updated_at {job['updated_at']}: "
                                    f"{[e.get('created_at') for e in events]}")
        types = [e.get("type") for e in events]
        pipeline = [t for t in types if t in SHAPING_PIPELINE]
        if len(set(pipeline)) != len(pipeline) or pipeline != sorted(pipeline, key=SHAPING_PIPELINE.index):
            raise ContractViolation("shaping_events", f"shaping job {jid}: its steps are repeated or out of the "
                                    f"pipeline's order ({' -> '.join(SHAPING_PIPELINE)}): {types}")
        if pipeline and pipeline[0] != "QUANTIZATION_JOB_START":
            raise ContractViolation("shaping_events", f"shaping job {jid}: a job's steps begin with "
                                    f"QUANTIZATION_JOB_START: {types}")
        if job["status"] == "completed":
            if pipeline[-1:] != ["QUANTIZATION_JOB_COMPLETE"]:
                raise ContractViolation("shaping_events", f"completed shaping job {jid} does not end with a "
                                        f"QUANTIZATION_JOB_COMPLETE event: {types}")
            results = job.get("results") or {}
            if not results.get("model_object_id"):
                raise ContractViolation("shaping_job", f"completed shaping job {jid} carries no results."
                                        f"model_object_id: {job.get('results')!r}")
        elif job.get("results"):
            raise ContractViolation("shaping_job", f"shaping job {jid} ended {job['status']} but carries results "
                                    f"{job['results']}")
        if job["status"] == "cancelled" and "QUANTIZATION_JOB_COMPLETE" in types:
            raise ContractViolation("shaping_events", f"cancelled shaping job {jid} has a QUANTIZATION_JOB_COMPLETE "
                                    "event")

    record("getShapingJob", "shaping_job", run)


def shaping_events(api: Api, job_id: str) -> list[Any]:
    body = api.call("listShapingJobEvents", "GET", f"{SHAPING}/{job_id}/events").ok()
    return list(body.get("data") or [])


# --- payloads -----------------------------------------------------------------------------------------

def upload_payload(api: Api, sid: str, body: dict[str, Any]) -> str:
    """An upload URL for session ``sid``, the full body PUT to it without credentials (as the SDK does)."""
    grant = api.call("createPayloadUploadUrl", "POST", f"{RL}/training-sessions/{sid}/payloads/upload-url",
                     empty_body=True).ok()
    put = requests.put(grant["upload_url"], json=body, headers={"Content-Type": "application/json"}, timeout=60)
    verify("createPayloadUploadUrl", "payload_upload", 200 <= put.status_code < 300,
           f"PUT to the upload_url of payload {grant['payload_id']} answered {put.status_code}: {put.text[:200]}")
    return str(grant["payload_id"])


def truncated(body: dict[str, Any], keep: int = 8) -> dict[str, Any]:
    """What the SDK sends inline next to an uploaded payload: every number list cut to its first 8 entries."""
    if isinstance(body, dict):
        return {k: truncated(v, keep) for k, v in body.items() if k not in ("shape", "sparse_crow_indices",
                                                                         "sparse_col_indices")}
    if isinstance(body, list):
        if body and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in body):
            return body[:keep]  # type: ignore[return-value]
        return [truncated(x, keep) for x in body]  # type: ignore[return-value]
    return body
