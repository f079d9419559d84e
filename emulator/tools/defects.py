"""TEST-ONLY: deliberate contract defects, so the contract suite can prove that it fails.

Switched on only with ``serve --defect NAME`` (repeatable) or ``EMULATOR_DEFECTS=a,b``: :class:`DefectsApp` then
wraps the app and rewrites requests and responses as a buggy implementation would. No production module knows
them; ``tests/test_contract_selftest.py`` requires the suite to catch every one.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlencode

import orjson

from emulator.config import ConfigError
from emulator.http.asgi import ASGIApp, Message, Receive, Scope, Send

DEFECTS: MappingProxyType[str, str] = MappingProxyType({
    "unknown_id_200": "GET of an unknown model resource, session, operation, checkpoint or shaping job answers "
                      "200 with a stub body instead of 404",
    "ignore_list_filter": "GET /v1/rl/training-sessions ignores its status filter",
    "pagination_repeats": "the next page of a list repeats the last item of the previous page (off-by-one cursor)",
    "status_backwards": "a READY model resource reads back as CREATING on a later GET, and a COMPLETED operation "
                        "as RUNNING",
    "step_decreases": "an optimizer step lowers the session step after the first step",
    "stop_ignores_force": "stopping a model resource ignores force=true and refuses while sessions are active",
    "error_not_envelope": "error bodies are {\"detail\": ...} instead of ErrorData",
    "missing_required_field": "training sessions are rendered without the required policy_state",
    "ignore_idempotency": "a repeated Idempotency-Key submits a new operation instead of returning the original",
    "shaping_updated_at_frozen": "a shaping job's updated_at stays where it was when the job started running, "
                                 "while it stays running and gains events",
    "dppo_params_dropped": "an operation's LOSS_TYPE_DPPO loss runs without its dppo_params (the default "
                           "deltas instead of the ones sent)",
    "preprocess_error_key": "preprocessing an invalid file reports why under validation_report.reason instead of "
                            "the documented validation_report.error",
    "payload_download_before_upload": "a download URL for a payload not uploaded yet answers 200 with a URL that "
                                      "404s, instead of 400",
    "failed_operation_without_error": "an operation that ends FAILED reads without its error (nothing says why)",
})

RL = "/v1/rl"
LISTS = frozenset({f"{RL}/training-sessions", f"{RL}/model-resources", f"{RL}/checkpoints"})
SESSION = re.compile(rf"^{RL}/training-sessions(/[^/]+(/stop)?)?$")
RESOURCE = re.compile(rf"^{RL}/model-resources/[^/]+$")
OPERATION = re.compile(rf"^{RL}/training-sessions/[^/]+/operations/([a-z-]+)(/[^/]+)?$")
STOP_RESOURCE = re.compile(rf"^{RL}/model-resources/[^/]+/stop$")
SHAPING_JOB = re.compile(r"^/v1/shaping/(shp-[^/]+)$")
PAYLOAD_DOWNLOAD = re.compile(rf"^{RL}/training-sessions/[^/]+/payloads/[^/]+/download-url$")
FILES = re.compile(r"^/v1/files(/[^/]+(/preprocess)?)?$")


def unknown(names: tuple[str, ...] | list[str]) -> list[str]:
    return [n for n in names if n not in DEFECTS]


def _shown_step(step: int) -> int:
    """The step the buggy server shows: the second optimizer step reads lower than the first."""
    return step if step <= 1 else step - 2


class DefectsApp:
    def __init__(self, app: ASGIApp, names: tuple[str, ...] | list[str]) -> None:
        if bad := unknown(names):
            raise ConfigError(f"unknown --defect {', '.join(bad)}; known: {', '.join(DEFECTS)}")
        self.app = app
        self.defects = frozenset(names)
        self._keys = itertools.count(1)
        self._reads: dict[tuple[str, str], int] = {}
        self._items: OrderedDict[str, Any] = OrderedDict()   # list items served, by id (for repeated pages)
        self._running_since: dict[str, Any] = {}             # shaping job -> the updated_at it showed on starting

    def on(self, name: str) -> bool:
        return name in self.defects

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = self._rewrite_request(scope)
        if self.on("dppo_params_dropped") and scope["method"] == "POST" and OPERATION.match(scope["path"]):
            scope, receive = await self._without_dppo_params(scope, receive)
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        if start is None:
            return
        status, body = self._rewrite_response(scope, start["status"], b"".join(chunks))
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    # --- requests -------------------------------------------------------------------------------------

    def _rewrite_request(self, scope: Scope) -> Scope:
        method, path = scope["method"], scope["path"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        changed = False
        if self.on("ignore_list_filter") and method == "GET" and path == f"{RL}/training-sessions":
            changed |= query.pop("status", None) is not None
        if self.on("stop_ignores_force") and method == "POST" and STOP_RESOURCE.match(path):
            changed |= query.pop("force", None) is not None
        scope = dict(scope)
        if changed:
            scope["query_string"] = urlencode(query).encode("latin-1")
        if self.on("ignore_idempotency") and method == "POST" and OPERATION.match(path):
            suffix = f"-defect-{next(self._keys)}".encode()
            scope["headers"] = [(k, v + suffix if k == b"idempotency-key" else v) for k, v in scope["headers"]]
        return scope

    async def _without_dppo_params(self, scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
        """The request body, read whole, with ``loss.dppo_params`` dropped (the rest as sent; a body with no
        such loss, as every kind's but the one that takes a loss, is sent as it came)."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = None
        if isinstance(payload, dict) and isinstance(payload.get("loss"), dict) and "dppo_params" in payload["loss"]:
            del payload["loss"]["dppo_params"]
            body = orjson.dumps(payload)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        return {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}, replay

    # --- responses ------------------------------------------------------------------------------------

    def _rewrite_response(self, scope: Scope, status: int, body: bytes) -> tuple[int, bytes]:
        try:
            payload = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            return status, body
        if not isinstance(payload, dict):
            return status, body
        method, path = scope["method"], scope["path"]
        error = payload.get("error") if status >= 400 else None
        if isinstance(error, dict):
            if (self.on("payload_download_before_upload") and status == 400 and method == "POST"
                    and PAYLOAD_DOWNLOAD.match(path) and "not been uploaded" in str(error.get("message"))):
                host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "127.0.0.1")
                return 200, orjson.dumps({"download_url": f"http://{host}/_files/payloads/not-uploaded-yet"})
            if (self.on("unknown_id_200") and status == 404 and method == "GET" and error.get("code") == "not_found"
                    and path.startswith("/v1/")):
                return 200, orjson.dumps({"id": path.rstrip("/").rsplit("/", 1)[-1]})
            if self.on("error_not_envelope"):
                return status, orjson.dumps({"detail": error.get("message")})
            return status, body
        if status != 200:
            return status, body
        if method == "GET" and path in LISTS:
            self._repeat_cursor_item(scope, payload)
        if SESSION.match(path):
            listed = method == "GET" and path == f"{RL}/training-sessions"
            for item in (payload.get("data") or []) if listed else [payload]:
                self._session(item)
        op = OPERATION.match(path)
        if op:
            self._operation(scope, op.group(1), payload)
        if self.on("shaping_updated_at_frozen") and method == "GET" and SHAPING_JOB.match(path):
            self._frozen_updated_at(payload)
        if self.on("preprocess_error_key") and FILES.match(path):
            for item in (payload.get("data") or []) if path == "/v1/files" else [payload]:
                report = item.get("validation_report") if isinstance(item, dict) else None
                if isinstance(report, dict) and "error" in report:
                    report["reason"] = report.pop("error")
        if self.on("status_backwards") and method == "GET" and RESOURCE.match(path):
            if payload.get("status") == "MODEL_RESOURCES_STATUS_READY" and self._second_read(scope, payload):
                payload["status"] = "MODEL_RESOURCES_STATUS_CREATING"  # a stale replica answers
                payload.pop("expires_at", None)
        return status, orjson.dumps(payload)

    def _frozen_updated_at(self, job: dict[str, Any]) -> None:
        """While a job runs, its updated_at stays at the first value it showed running."""
        if job.get("status") != "running":
            return
        first = self._running_since.setdefault(str(job.get("id")), job.get("updated_at"))
        job["updated_at"] = first

    def _second_read(self, scope: Scope, payload: dict[str, Any]) -> bool:
        token = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), "")
        key = (token, str(payload.get("id")))
        self._reads[key] = self._reads.get(key, 0) + 1
        return self._reads[key] == 2

    def _session(self, item: dict[str, Any]) -> None:
        if self.on("missing_required_field"):
            item.pop("policy_state", None)
        if self.on("step_decreases") and "step" in item:
            item["step"] = str(_shown_step(int(item["step"])))
            if isinstance(item.get("policy_state"), dict):
                item["policy_state"]["trainer_step"] = item["step"]

    def _operation(self, scope: Scope, kind: str, payload: dict[str, Any]) -> None:
        output = payload.get("output")
        # (an optimizer step's output is the only one with a step)
        if self.on("step_decreases") and isinstance(output, dict) and "step" in output:
            output["step"] = str(_shown_step(int(output["step"])))
        if self.on("failed_operation_without_error") and payload.get("status") == "TRAINING_OPERATION_STATUS_FAILED":
            payload.pop("error", None)
        if (self.on("status_backwards") and scope["method"] == "GET"
                and payload.get("status") == "TRAINING_OPERATION_STATUS_COMPLETED" and self._second_read(scope, payload)):
            payload["status"] = "TRAINING_OPERATION_STATUS_RUNNING"
            payload.pop("output", None)

    def _repeat_cursor_item(self, scope: Scope, payload: dict[str, Any]) -> None:
        """Off-by-one cursor: the page starts AT the ``after`` item instead of after it."""
        if not self.on("pagination_repeats") or not isinstance(payload.get("data"), list):
            return
        data = payload["data"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        after = query.get("after")
        if after and after in self._items:
            data.insert(0, self._items[after])
            if len(data) > int(query.get("limit") or 20):
                data.pop()
            meta = payload.get("meta")
            if isinstance(meta, dict) and meta.get("next_cursor") and data:
                meta["next_cursor"] = data[-1].get("id")
        for item in data:
            if isinstance(item, dict) and "id" in item:
                self._items[item["id"]] = item
                self._items.move_to_end(item["id"])
        while len(self._items) > 10_000:
            self._items.popitem(last=False)
