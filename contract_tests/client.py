"""A small HTTP client for the hand-written tests: every answer is judged against the contract.

Each call names its operationId; the response is validated against what ``openapi.yaml`` documents
for that operation and status (``response_schema_conformance``), error bodies must be ``ErrorData``
(``error_envelope``), and every object read is fed to a :class:`Observer` that enforces the lifecycle
rules across reads (documented edges, terminal states, ``step``, timestamps). Every outcome lands
in the report under the operationId.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from contract_tests import lifecycle as lc
from contract_tests import spec
from contract_tests.lifecycle import ContractViolation
from contract_tests.report import RESULTS
from contract_tests.target import Target, progress

RL = "/v1/rl"
KINDS = ("forward-backward", "custom-forward-backward", "optim-step", "weights-sync", "sample",
         "inference-checkpoint", "training-checkpoint")
KIND_OPERATION_IDS = {
    "forward-backward": ("createForwardBackward", "getForwardBackward"),
    "custom-forward-backward": ("createCustomForwardBackward", "getCustomForwardBackward"),
    "optim-step": ("createOptimStep", "getOptimStep"),
    "weights-sync": ("createWeightsSync", "getWeightsSync"),
    "sample": ("createSample", "getSample"),
    "inference-checkpoint": ("createInferenceCheckpoint", "getInferenceCheckpoint"),
    "training-checkpoint": ("createTrainingCheckpoint", "getTrainingCheckpoint"),
}
_keys = itertools.count()
# The last request any client sent, as a curl command: a failing test that cannot name its own request shows
# it (contract_tests.plugin); a violation judged on an answer carries that answer's request (``curl_of``).
LAST_CURL: list[str] = []


def blame(exc: BaseException, curl: str | None) -> BaseException:
    """Tie a failure to the request whose answer it judged (the first one it is tied to stays)."""
    if curl and getattr(exc, "curl", None) is None:
        exc.curl = curl  # type: ignore[attr-defined]
    return exc


def curl_of(exc: BaseException | None) -> str | None:
    return getattr(exc, "curl", None)
PROGRESS_AFTER, PROGRESS_EVERY = 10.0, 30.0   # wall seconds before a wait first reports, then between reports


def record(operation: str | None, check: str, fn: Callable[[], Any]) -> Any:
    """Run one check, record its outcome against ``operation``, re-raise a violation."""
    try:
        out = fn()
    except ContractViolation as exc:
        RESULTS.record(operation, exc.check, False, str(exc))
        raise
    RESULTS.record(operation, check, True)
    return out


def verify(operation: str | None, check: str, condition: bool, message: str) -> None:
    def run() -> None:
        if not condition:
            raise ContractViolation(check, message)

    record(operation, check, run)


@dataclass
class Reply:
    status: int
    body: Any
    operation_id: str
    where: str
    api: Any = None
    violations: list[ContractViolation] = field(default_factory=list)
    curl: str | None = None   # the request, as a curl command

    def raise_violations(self) -> None:
        """Raise what the answer broke (schema, envelope), once the status was judged."""
        if self.api is not None:
            for v in self.violations:
                if v in self.api.pending:
                    self.api.pending.remove(v)
        if self.violations:
            raise blame(self.violations[0], self.curl)

    def ok(self) -> Any:
        """The body of a 200, or a violation naming what went wrong."""
        if self.status != 200:
            if self.api is not None:  # the status is the news; the body's own problems are already recorded
                self.api.pending[:] = [v for v in self.api.pending if v not in self.violations]
            exc = ContractViolation("expected_success", f"{self.where} answered {self.status} where the flow "
                                    f"needs a 200: {str(self.body)[:500]}")
            RESULTS.record(self.operation_id, exc.check, False, str(exc))
            raise blame(exc, self.curl)
        self.raise_violations()
        return self.body


@dataclass
class Observer:
    """Remembers what each object read as, and checks every new read against it."""

    statuses: dict[str, str] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    updated: dict[str, Any] = field(default_factory=dict)
    created: dict[str, Any] = field(default_factory=dict)

    def see(self, kind: str, obj: Any, operation_id: str) -> None:
        if not isinstance(obj, dict) or "id" not in obj:
            return
        oid = str(obj["id"])
        status = obj.get("status")
        if status is not None:
            old = self.statuses.get(oid)
            if old is None:
                record(operation_id, "status_known", lambda: lc.check_known_status(kind, oid, status))
            else:
                record(operation_id, "status_edges", lambda: lc.check_transition(kind, oid, old, status))
            self.statuses[oid] = status
        record(operation_id, "updated_at_after_created_at", lambda: lc.check_timestamps(kind, obj))
        if "updated_at" in obj:
            updated = record(operation_id, "updated_at_never_decreases", lambda: lc.check_updated_at_monotonic(
                kind, oid, self.updated.get(oid), obj["updated_at"]))
            self.updated[oid] = max(updated, self.updated.get(oid, updated))
        if "created_at" in obj:
            old_created = self.created.setdefault(oid, obj["created_at"])
            verify(operation_id, "created_at_fixed", lc.same_instant(old_created, obj["created_at"]),
                   f"{kind} {oid}: created_at changed from {old_created} to {obj['created_at']}")
        if kind == "model resource":
            record(operation_id, "queue_position", lambda: lc.check_queue_position(oid, obj))
        if kind == "shaping job":
            record(operation_id, "updated_at_moves", lambda: lc.check_updated_at_covers_events(kind, obj))
        if kind == "operation":
            record(operation_id, "failed_operation_error", lambda: lc.check_failed_operation_error(oid, obj))
        if kind == "training session" and "step" in obj:
            step = record(operation_id, "int64_strings", lambda: lc.as_int64(obj["step"], f"session {oid} step"))
            record(operation_id, "step_never_decreases",
                   lambda: lc.check_step_not_decreasing(f"session {oid} step", self.steps.get(oid), step))
            self.steps[oid] = max(step, self.steps.get(oid, step))


class Api:
    def __init__(self, target: Target, token: str | None = None, observer: Observer | None = None) -> None:
        self.target = target
        self.token = token or target.token
        self.observer = observer or Observer()
        self.http = requests.Session()
        self.pending: list[ContractViolation] = []

    # --- raw calls --------------------------------------------------------------------------------

    def call(self, operation_id: str, method: str, path: str, *, json: Any = None, params: dict | None = None,
             headers: dict[str, str] | None = None, auth: bool = True, empty_body: bool = False) -> Reply:
        hdrs = {"Accept": "application/json"}
        if auth:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if json is not None or empty_body:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        url = self.target.base_url + path
        kwargs: dict[str, Any] = {"headers": hdrs, "params": params, "timeout": 60}
        if json is not None:
            kwargs["json"] = json
        elif empty_body:
            kwargs["data"] = b""
        resp = self.http.request(method, url, **kwargs)
        sent = resp.request.url or ""
        curl = self.target.curl(method, sent or url, hdrs, json if json is not None else
                                ("" if empty_body else None))
        LAST_CURL[:] = [curl]
        where = f"{method} {path}" + (f"?{sent.split('?', 1)[1]}" if "?" in sent else "")
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        reply = Reply(resp.status_code, body, operation_id, where, api=self, curl=curl)
        failure = spec.validate_response(operation_id, resp)
        if failure:
            reply.violations.append(ContractViolation(
                "response_schema_conformance", f"{where} answered {resp.status_code} with a body that does not "
                f"match the documented schema: {failure[:1500]}"))
        if resp.status_code >= 400:
            try:
                lc.check_error_envelope(resp.status_code, body, where)
            except ContractViolation as exc:
                reply.violations.append(exc)
        for check in ("response_schema_conformance", "error_envelope"):
            if check == "error_envelope" and resp.status_code < 400:
                continue
            broken = [v for v in reply.violations if v.check == check]
            RESULTS.record(operation_id, check, not broken, str(broken[0]) if broken else None)
        for v in reply.violations:  # (raised later, maybe after other requests: they name this one)
            blame(v, curl)
        self.pending.extend(reply.violations)
        return reply

    def _see(self, curl: str | None, kind: str, obj: Any, operation_id: str) -> None:
        """The observer's checks on an object an answer carried: a failure names that answer's request."""
        try:
            self.observer.see(kind, obj, operation_id)
        except ContractViolation as exc:
            raise blame(exc, curl) from None

    def expect(self, reply: Reply, statuses: tuple[int, ...], rule: str, check: str) -> Reply:
        try:
            record(reply.operation_id, check,
                   lambda: lc.check_status_code(statuses, reply.status, reply.where, reply.body, rule, check))
        except ContractViolation as exc:
            raise blame(exc, reply.curl) from None
        reply.raise_violations()
        return reply

    def raise_pending(self) -> None:
        """Raise a violation of an answer no step of the test judged (called when the test ends)."""
        if self.pending:
            raise self.pending[0]

    # --- model resources --------------------------------------------------------------------------

    def create_resource(self, **body: Any) -> dict[str, Any]:
        payload = {"base_model": self.target.base_model, "lora_enabled": True, **body}
        reply = self.call("createModelResources", "POST", f"{RL}/model-resources", json=payload)
        obj = reply.ok()
        if isinstance(obj, dict) and "id" in obj:
            self.target.remember(self.token, str(obj["id"]))
        self._see(reply.curl, "model resource", obj, "createModelResources")
        return obj

    def get_resource(self, rid: str) -> Reply:
        reply = self.call("getModelResources", "GET", f"{RL}/model-resources/{rid}")
        if reply.status == 200:
            self._see(reply.curl, "model resource", reply.body, "getModelResources")
        return reply

    def list_resources(self, **params: Any) -> Reply:
        reply = self.call("listModelResources", "GET", f"{RL}/model-resources", params=params or None)
        if reply.status == 200 and isinstance(reply.body, dict):
            for obj in reply.body.get("data") or []:
                self._see(reply.curl, "model resource", obj, "listModelResources")
        return reply

    def stop_resource(self, rid: str, force: bool | None = None) -> Reply:
        params = None if force is None else {"force": "true" if force else "false"}
        reply = self.call("stopModelResources", "POST", f"{RL}/model-resources/{rid}/stop", params=params,
                          empty_body=True)
        if reply.status == 200:
            self._see(reply.curl, "model resource", reply.body, "stopModelResources")
        return reply

    # --- sessions ---------------------------------------------------------------------------------

    def create_session(self, rid: str, **body: Any) -> Reply:
        reply = self.call("createSession", "POST", f"{RL}/training-sessions", json={"model_resources_id": rid, **body})
        if reply.status == 200:
            self._see(reply.curl, "training session", reply.body, "createSession")
        return reply

    def get_session(self, sid: str) -> Reply:
        reply = self.call("getSession", "GET", f"{RL}/training-sessions/{sid}")
        if reply.status == 200:
            self._see(reply.curl, "training session", reply.body, "getSession")
        return reply

    def list_sessions(self, **params: Any) -> Reply:
        reply = self.call("listSessions", "GET", f"{RL}/training-sessions", params=params or None)
        if reply.status == 200 and isinstance(reply.body, dict):
            for obj in reply.body.get("data") or []:
                self._see(reply.curl, "training session", obj, "listSessions")
        return reply

    def stop_session(self, sid: str) -> Reply:
        reply = self.call("stopSession", "POST", f"{RL}/training-sessions/{sid}/stop", empty_body=True)
        if reply.status == 200:
            self._see(reply.curl, "training session", reply.body, "stopSession")
        return reply

    def list_checkpoints(self, **params: Any) -> Reply:
        reply = self.call("listCheckpoints", "GET", f"{RL}/checkpoints", params=params or None)
        if reply.status == 200 and isinstance(reply.body, dict):
            for obj in reply.body.get("data") or []:
                self._see(reply.curl, "checkpoint", obj, "listCheckpoints")
        return reply

    # --- operations -------------------------------------------------------------------------------

    def submit(self, sid: str, kind: str, body: dict[str, Any] | None = None, key: str | None = None) -> Reply:
        create_id, _ = KIND_OPERATION_IDS[kind]
        key = key or f"contract-{uuid.uuid4().hex}-{next(_keys)}"
        reply = self.call(create_id, "POST", f"{RL}/training-sessions/{sid}/operations/{kind}", json=body,
                          headers={"Idempotency-Key": key}, empty_body=body is None)
        if reply.status == 200:
            self._see(reply.curl, "operation", reply.body, create_id)
        return reply

    def get_op(self, sid: str, kind: str, op_id: str) -> Reply:
        _, get_id = KIND_OPERATION_IDS[kind]
        reply = self.call(get_id, "GET", f"{RL}/training-sessions/{sid}/operations/{kind}/{op_id}")
        if reply.status == 200:
            self._see(reply.curl, "operation", reply.body, get_id)
        return reply

    # --- waiting ----------------------------------------------------------------------------------

    def wait(self, fetch: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], what: str,
             operation_id: str, bound: float | None = None, step: float = 15.0, goal: str = "settle"
             ) -> dict[str, Any]:
        """Poll until ``done``; with a control plane advance the target's clock between polls.

        The bound is in virtual seconds when the clock can be advanced, else in wall-clock seconds. A wait
        that lasts reports on the terminal ("waiting for model resource X to be READY: 120 s").
        """
        bound = self.target.op_timeout if bound is None else bound
        spent = 0.0
        started = time.monotonic()
        report_at = started + PROGRESS_AFTER
        obj = fetch()
        while not done(obj):
            elapsed = spent if self.target.control_plane else time.monotonic() - started
            if time.monotonic() >= report_at:
                report_at = time.monotonic() + PROGRESS_EVERY
                unit = "virtual s" if self.target.control_plane else "s"
                progress(f"waiting for {what} to {goal}: {elapsed:.0f} {unit} of {bound:.0f} "
                         f"(status {obj.get('status') if isinstance(obj, dict) else '?'})")
            if elapsed >= bound:
                raise ContractViolation("terminal_within_bound", f"{what} did not settle within {bound:.0f} s "
                                        f"(last read: {str(obj)[:400]})")
            if self.target.control_plane:
                self.target.advance(step)
                spent += step
            else:
                time.sleep(1.0)
            obj = fetch()
        RESULTS.record(operation_id, "terminal_within_bound", True)
        return obj

    def ready_resource(self, **body: Any) -> dict[str, Any]:
        r = self.create_resource(**body)
        return self.wait(lambda: self.get_resource(r["id"]).ok(),
                         lambda o: o.get("status") in (lc.R + "READY", lc.R + "ERROR", lc.R + "STOPPED"),
                         f"model resource {r['id']}", "getModelResources", bound=max(self.target.op_timeout, 3600),
                         goal="be READY")

    def running_session(self, rid: str, **body: Any) -> dict[str, Any]:
        s = self.create_session(rid, **body).ok()
        return self.wait(lambda: self.get_session(s["id"]).ok(),
                         lambda o: o.get("status") != lc.S + "CREATING" and o.get("status") != lc.S + "UNSPECIFIED",
                         f"training session {s['id']}", "getSession", bound=max(self.target.op_timeout, 3600),
                         goal="be RUNNING")

    def run_op(self, sid: str, kind: str, body: dict[str, Any] | None = None, key: str | None = None
               ) -> dict[str, Any]:
        op = self.submit(sid, kind, body, key).ok()
        _, get_id = KIND_OPERATION_IDS[kind]
        return self.wait(lambda: self.get_op(sid, kind, op["id"]).ok(),
                         lambda o: o.get("status") in lc.OPERATION_DONE, f"{kind} operation {op['id']}", get_id,
                         goal="finish")


def walk(api: Api, list_fn: Any, operation_id: str, limit: int, max_pages: int = 200, **params: Any
         ) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Follow ``meta.next_cursor`` from the first page to the last; returns the ids page by page."""
    pages: list[list[str]] = []
    items: list[dict[str, Any]] = []
    after = None
    for _ in range(max_pages):
        query = dict(params, limit=limit)
        if after:
            query["after"] = after
        body = list_fn(**query).ok()
        data = body.get("data") or []
        verify(operation_id, "page_size", len(data) <= limit,
               f"a page of {operation_id} holds {len(data)} items, more than limit={limit}")
        seen = {i for page in pages for i in page}
        pages.append([d["id"] for d in data])
        items.extend(data)
        if seen & set(pages[-1]):  # fail at the first repeat instead of walking in circles
            record(operation_id, "pagination_exactly_once", lambda: lc.check_walk_once(operation_id, pages))
        meta = body.get("meta") or {}
        if not meta.get("has_more"):
            verify(operation_id, "next_cursor_empty_at_end", not meta.get("next_cursor"),
                   f"{operation_id}: has_more is false but next_cursor is {meta.get('next_cursor')!r}")
            return pages, items
        after = meta.get("next_cursor")
        verify(operation_id, "next_cursor_when_has_more", bool(after),
               f"{operation_id}: has_more is true but next_cursor is empty")
    def never_ends() -> None:
        raise ContractViolation("pagination_exactly_once", f"pagination never ends: {operation_id} still had more "
                                f"after {max_pages} pages of {limit}")

    record(operation_id, "pagination_exactly_once", never_ends)
    raise AssertionError("unreachable")


# --- valid bodies -----------------------------------------------------------------------------------

def ce_sample(prompt: list[int], response: list[int]) -> dict[str, Any]:
    tokens = prompt + response
    return {
        "model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": tokens[1:], "dtype": "int64"},
            "weights": {"data": [0.0] * (len(prompt) - 1) + [1.0] * len(response), "dtype": "float32"},
        },
    }


def forward_backward_body() -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "samples": [ce_sample([11, 12, 13], [14, 15]), ce_sample([21, 22], [23, 24, 25])]}


def custom_forward_backward_body() -> dict[str, Any]:
    samples = [ce_sample([11, 12, 13], [14, 15])]
    n = len(samples[0]["model_input"]["chunks"][0]["encoded_text"]["tokens"])
    return {"samples": samples, "gradients": [{"data": [0.1] * n, "dtype": "D_TYPE_FLOAT32"}]}


OP_BODIES: dict[str, Callable[[], dict[str, Any] | None]] = {
    "forward-backward": forward_backward_body,
    "custom-forward-backward": custom_forward_backward_body,
    "optim-step": lambda: {"adam_params": {"learning_rate": 0.0001}},
    "weights-sync": lambda: {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"},
    "sample": lambda: {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [11, 12, 13]}}]}],
                       "num_samples": 2, "sampling_params": {"max_tokens": 4, "temperature": 1.0, "seed": 7}},
    "inference-checkpoint": lambda: None,
    "training-checkpoint": lambda: None,
}
