"""TEST-ONLY: deliberate contract defects, so the contract suite can prove that it fails.

Never enable these for anything but testing the contract suite (``contract_tests/``). They are
switched on with ``python -m emulator serve --defect NAME`` (repeatable) or
``EMULATOR_DEFECTS=a,b``; with none given (the default) nothing here runs. Each defect is a realistic
bug of an implementation of the RL API, and ``tests/test_contract_selftest.py`` requires the suite to
catch every one of them (and to pass against the healthy emulator).

Most of the logic lives here and is reached from three hooks in ``emulator/app.py``: a request hook
and a response hook in ``Dispatcher`` and an error hook in ``ErrorEnvelope``. Two defects live at the
spot they break (``ignore_idempotency`` in ``domain/operations.submit``, ``step_decreases`` in
``domain/operations._execute``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from emulator.api.request import Request
    from emulator.runtime import Runtime

DEFECTS: dict[str, str] = {
    "unknown_id_200": "GET of an unknown model resource, session, operation, checkpoint or shaping job answers "
                      "200 with a stub body instead of 404",
    "ignore_list_filter": "GET /v1/rl/training-sessions ignores its status filter",
    "pagination_repeats": "the next page of a list repeats the last item of the previous page (off-by-one cursor)",
    "status_backwards": "a READY model resource reads back as CREATING on a later GET, and a COMPLETED operation "
                        "as RUNNING",
    "step_decreases": "optim-step lowers the session step after the first step",
    "stop_ignores_force": "stopping a model resource ignores force=true and refuses while sessions are active",
    "error_not_envelope": "error bodies are {\"detail\": ...} instead of ErrorData",
    "missing_required_field": "training sessions are rendered without the required policy_state",
    "ignore_idempotency": "a repeated Idempotency-Key submits a new operation instead of returning the original",
}

LISTS = {"listSessions": "session_index", "listModelResources": "resource_index",
         "listCheckpoints": "checkpoint_index"}
SESSION_REPLIES = frozenset({"createSession", "getSession", "updateSession", "stopSession"})
OPERATION_GETS = frozenset({"getForwardBackward", "getCustomForwardBackward", "getOptimStep", "getWeightsSync",
                            "getSample", "getInferenceCheckpoint", "getTrainingCheckpoint"})


def unknown(names: tuple[str, ...] | list[str]) -> list[str]:
    return [n for n in names if n not in DEFECTS]


def _state(runtime: Runtime) -> dict[str, Any]:
    return runtime.__dict__.setdefault("_defect_state", {"reads": {}})


# --- request hook ------------------------------------------------------------------------------------

def on_request(runtime: Runtime, request: Request) -> None:
    """Rewrite the parsed request before the handler sees it."""
    defects = runtime.defects
    op = request.operation_id
    if "ignore_list_filter" in defects and op == "listSessions":
        request.query.pop("status", None)
    if "stop_ignores_force" in defects and op == "stopModelResources":
        request.query.pop("force", None)
    if "pagination_repeats" in defects and op in LISTS and request.query.get("after") and request.principal:
        # Off-by-one cursor: the page starts AT the cursor item instead of after it.
        with runtime.store.transaction(request.principal.project) as state:
            ids = getattr(state, LISTS[op]).ids()
        after = request.query["after"]
        if after in ids:
            pos = ids.index(after)
            if pos + 1 < len(ids):
                request.query["after"] = ids[pos + 1]
            else:
                request.query.pop("after")


# --- response hook -----------------------------------------------------------------------------------

def on_response(runtime: Runtime, request: Request, status: int, payload: Any) -> tuple[int, Any]:
    defects = runtime.defects
    op = request.operation_id
    if status != 200 or not isinstance(payload, dict):
        return status, payload
    if "missing_required_field" in defects:
        if op in SESSION_REPLIES:
            payload.pop("policy_state", None)
        elif op == "listSessions":
            for item in payload.get("data") or []:
                item.pop("policy_state", None)
    if "status_backwards" in defects and request.principal is not None:
        reads = _state(runtime)["reads"]
        key = (request.principal.project, payload.get("id"))
        if op == "getModelResources" and payload.get("status") == "MODEL_RESOURCES_STATUS_READY":
            reads[key] = reads.get(key, 0) + 1
            if reads[key] == 2:  # a stale replica answers the second read
                payload["status"] = "MODEL_RESOURCES_STATUS_CREATING"
                payload.pop("expires_at", None)
        elif op in OPERATION_GETS and payload.get("status") == "TRAINING_OPERATION_STATUS_COMPLETED":
            reads[key] = reads.get(key, 0) + 1
            if reads[key] == 2:
                payload["status"] = "TRAINING_OPERATION_STATUS_RUNNING"
                payload.pop("output", None)
    return status, payload


# --- error hook --------------------------------------------------------------------------------------

def on_error(runtime: Runtime, scope: dict[str, Any], exc: Exception, status: int, body: bytes
             ) -> tuple[int, bytes]:
    from emulator.errors import ApiError, NotFound

    defects = runtime.defects
    if ("unknown_id_200" in defects and isinstance(exc, NotFound) and exc.code == "not_found"
            and scope.get("method") == "GET"):
        stub_id = scope.get("path", "").rstrip("/").rsplit("/", 1)[-1]
        return 200, orjson.dumps({"id": stub_id})
    if "error_not_envelope" in defects and isinstance(exc, ApiError):
        return status, orjson.dumps({"detail": exc.message})
    return status, body
