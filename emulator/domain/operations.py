"""Asynchronous training operations: submit, get, the per-session queue and their execution.

Emulates docs/api-surface.md A.3, C.3, C.4: PENDING -> RUNNING -> COMPLETED | FAILED, one at a time per session,
``Idempotency-Key`` per (session, kind); each kind is its module's. Differs [inferred]: a submit to a session not
RUNNING is an operation already FAILED (``SESSION_NOT_ACTIVE``); old outputs and operations are released (404).
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

import orjson

from emulator.bounds import depth_message, json_too_deep, later
from emulator.compute import INTERNAL_ERROR, INVALID_INPUT, ComputeError
from emulator.compute.types import encode
from emulator.domain import model_resources
from emulator.domain.cascade import SESSION_NOT_ACTIVE
from emulator.domain.common import release_inputs, transition
from emulator.domain.context import Ctx
from emulator.domain.kind import Kind, R
from emulator.domain.kinds import KINDS
from emulator.domain.payloads import released_message
from emulator.errors import Conflict, Invalid, NotFound, shorten
from emulator.jsontypes import JsonObject
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    TERMINAL,
    Malformed,
    Operation,
    OperationStatus,
    Session,
    SessionStatus,
    error_detail,
)

Op = OperationStatus
TERMINAL_OPERATION = TERMINAL[OperationStatus]


def body_hash(body: JsonObject) -> str:
    """What an Idempotency-Key compares: the inline body as sent (its JSON, keys sorted)."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def submit(tenant: Tenant, ctx: Ctx, session_id: str, kind: Kind[R], request: R, digest: str,
           idempotency_key: str) -> tuple[Operation, bool]:
    """Submit ``request`` (the inline body read as the kind's request; ``digest``: :func:`body_hash` of it as
    sent). Returns (operation, replayed)."""
    s = tenant.sessions.get(session_id)
    if s is None:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    key = (s.id, kind.name, idempotency_key)
    existing_id = tenant.idempotency.get(key)
    if existing_id is not None:
        existing = tenant.operations[existing_id]
        if existing.body_hash != digest:
            raise Conflict(
                f"Idempotency-Key {idempotency_key!r} was already used for a different {kind.name} request on this "
                "session; use a new key for a changed body", param="Idempotency-Key")
        _check_output_kept(existing)
        return existing, True
    r = tenant.resources[s.model_resources_id]
    if kind.admit is not None:
        kind.admit(tenant, s)
    effective, payload_id = _resolve_payload(tenant, s, kind, request)
    if kind.check is not None and not isinstance(effective, Malformed):
        # Before any operation exists: schema validation does not reach an uploaded payload's body, and cannot
        # tie one field to another or a bound to the model.
        effective = kind.check(ctx, s, effective)
    now = ctx.now
    op = Operation(id=tenant.ids.uuid("operation"), session_id=s.id, kind=kind.name, status=Op.PENDING._value_,
                   created_at=now, updated_at=now, body=effective, body_hash=digest,
                   idempotency_key=idempotency_key, payload_id=payload_id)
    tenant.operations.add(op)
    tenant.idempotency.put(key, op.id)
    tenant.log(now, "operation", op.id, None, op.status, op_kind=op.kind)
    if s.status != SessionStatus.RUNNING:
        op.error = error_detail(SESSION_NOT_ACTIVE, f"training session {s.id} is {s.status}, not RUNNING", now)
        transition(tenant, op, Op.FAILED, now)
        release_inputs(tenant, op)
        _retire(tenant, ctx, op)
        return op, False
    queue = tenant.queues.setdefault(s.id, [])
    queue.append(op.id)
    tenant.inflight[r.id] = tenant.inflight.get(r.id, 0) + 1
    model_resources.touch(tenant, r, now)
    if len(queue) == 1:
        tenant.timeline.schedule(now, TimelineEvent.OPERATION_START, op.id)
    return op, False


def _resolve_payload(tenant: Tenant, s: Session, kind: Kind[R], request: R) -> tuple[R | Malformed, str | None]:
    """The body to run, with the id of the uploaded payload it read. A request naming one runs on the inline
    body and the payload merged, the payload winning for the fields it holds: the SDK uploads only
    ``{"loss", "samples"}`` of a training batch and keeps ``forward_only`` and ``return_loss_fn_outputs``
    inline (the SDK's ``_submit_forward_backward``), and its shrunk inline stand-ins of the uploaded fields must
    not run."""
    payload_id = request.payload_id
    if not payload_id:
        return request, None
    payload = tenant.payloads.get(payload_id)
    if payload is None or payload.session_id != s.id:
        raise Invalid(f"payload {payload_id!r} was not created for this session", param="payload_id")
    if payload.released_by is not None:
        raise Invalid(released_message(payload) + "; upload the body again (a new upload URL)",
                             param="payload_id")
    data = payload.data  # read from its blob on disk: once
    if data is None:
        raise Invalid(f"payload {payload_id!r} has not been uploaded", param="payload_id")
    try:
        uploaded = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Invalid(f"payload {payload_id!r} is not valid JSON: {exc}", param="payload_id") from exc
    if not isinstance(uploaded, dict):
        raise Invalid(f"payload {payload_id!r} must hold a JSON object", param="payload_id")
    if json_too_deep(data):
        raise Invalid(depth_message(f"payload {payload_id!r}"), param="payload_id", code="too_deep")
    inline = encode(request)
    inline.pop("payload_id", None)
    uploaded.pop("payload_id", None)
    return kind.parse({**inline, **uploaded}), payload.id


def get(tenant: Tenant, session_id: str, kind: Kind[Any], operation_id: str) -> Operation:
    s = tenant.sessions.get(session_id)
    if s is None:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    op = tenant.operations.get(operation_id)
    if op is None and s.evicted_operations:
        raise NotFound(f"{kind.name} operation {operation_id!r} not found on session {session_id}: it never existed, or "
                       f"it is one of the {s.evicted_operations} oldest finished operations the session no longer "
                       "keeps (a session keeps its newest finished_operations_per_session, see --limits-file)",
                       param="operation_id", code="operation_not_retained")
    if op is None or op.session_id != session_id or op.kind != kind.name:
        raise NotFound(f"{kind.name} operation {operation_id!r} not found on session {session_id}", param="operation_id")
    _check_output_kept(op)
    return op


# --- the queue ------------------------------------------------------------------------------------

def _seconds(ctx: Ctx, op: Operation) -> float:
    """How long ``op`` runs beyond the overhead (a malformed body counts as nothing: it fails when it runs)."""
    if op.body is None or isinstance(op.body, Malformed):
        return 0.0
    return KINDS[op.kind].seconds(ctx.timing, op.body)


def on_start(tenant: Tenant, ctx: Ctx, op: Operation, at: float) -> None:
    if op.status != Op.PENDING:
        return
    transition(tenant, op, Op.RUNNING, at)
    done = later(at, ctx.timing.op_overhead_seconds + _seconds(ctx, op))
    tenant.timeline.schedule(done, TimelineEvent.OPERATION_COMPLETE, op.id)


def on_complete(tenant: Tenant, ctx: Ctx, op: Operation, at: float) -> None:
    if op.status != Op.RUNNING:
        return
    s = tenant.sessions[op.session_id]
    r = tenant.resources[s.model_resources_id]
    if op.fault_code:
        op.error = error_detail(op.fault_code, f"operation failed ({op.fault_code}; injected fault)", at)
        transition(tenant, op, Op.FAILED, at)
    else:
        try:
            op.output = _execute(tenant, ctx, s, op, at)
        except ComputeError as exc:
            op.error = error_detail(exc.code, exc.message, at)
            transition(tenant, op, Op.FAILED, at)
        except Exception as exc:  # noqa: BLE001 - a bug in the model must fail this operation, not wedge the queue
            # Raised out of here, it would leave the operation RUNNING at the head of its session's queue, its
            # completion event already consumed: every later operation of the session would wait forever.
            # The model swaps in its new state only at the end of a call, so a failed call leaves it as it was.
            op.output = None
            op.error = error_detail(INTERNAL_ERROR, shorten(
                f"internal error in the emulator while running this operation ({type(exc).__name__}: {exc}); "
                "this is a bug, please report it"), at)
            transition(tenant, op, Op.FAILED, at)
        else:
            transition(tenant, op, Op.COMPLETED, at)
    release_inputs(tenant, op)
    queue = tenant.queues.get(s.id)
    if queue and queue[0] == op.id:
        queue.pop(0)
    tenant.inflight[r.id] -= 1
    model_resources.touch(tenant, r, at)
    if queue:
        tenant.timeline.schedule(at, TimelineEvent.OPERATION_START, queue[0])
    if op.status == Op.COMPLETED:  # the session's queue has moved on whatever happens here
        _keep_output(tenant, ctx, op)
    _retire(tenant, ctx, op)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> JsonObject:
    body = op.body
    if body is None or isinstance(body, Malformed):  # (the trainer refuses a body it cannot read)
        raise ComputeError(INVALID_INPUT, body.error if body is not None else "the operation has no request")
    return KINDS[op.kind].execute(tenant, ctx, s, body, op, at)


# --- operation retention -------------------------------------------------------------------------

def _finished(tenant: Tenant, newest: Operation) -> dict[str, deque[str]]:
    """Each session's finished operations but ``newest``, oldest first; built from the operations on first
    use (an imported tenant: those of its document, in order of their last change)."""
    if tenant.finished is None:
        done = [op for op in tenant.operations.values() if op.status in TERMINAL_OPERATION and op is not newest]
        done.sort(key=lambda op: op.updated_at)  # stable: equal times keep the order they were made in
        by_session: dict[str, deque[str]] = {}
        for op in done:
            by_session.setdefault(op.session_id, deque()).append(op.id)
        tenant.finished = by_session
    return tenant.finished


def _retire(tenant: Tenant, ctx: Ctx, op: Operation) -> None:
    """``op`` has finished: forget its session's oldest finished operations beyond the retention limit, with
    the idempotency key that names each and the uploaded payload it released (nothing else names them)."""
    done = _finished(tenant, op).setdefault(op.session_id, deque())
    done.append(op.id)
    limit = ctx.limits.finished_operations_per_session
    while len(done) > limit:
        old = tenant.operations.get(done.popleft())
        if old is None or old.status not in TERMINAL_OPERATION:
            continue
        tenant.operations.remove(old.id)
        key = (old.session_id, old.kind, old.idempotency_key)
        if tenant.idempotency.get(key) == old.id:
            tenant.idempotency.drop(key)
        payload = tenant.payloads.get(old.payload_id) if old.payload_id is not None else None
        if payload is not None and payload.released_by == old.id:
            tenant.payloads.remove(payload.id)
        s = tenant.sessions.get(old.session_id)
        if s is not None:
            s.evicted_operations += 1


# --- output retention ----------------------------------------------------------------------------

LARGE_OUTPUT_BYTES = 4096  # smaller outputs (a loss and its metrics, a step, a checkpoint id) are always kept


def _large_output(op: Operation) -> int:
    """The JSON size of ``op``'s output (with the request it keeps) if its kind says it may be large
    (``Kind.output_size``: samples, per-token outputs) and is, else 0. Most outputs are a loss and a few
    metrics: those are not even measured."""
    measure = KINDS[op.kind].output_size
    if op.output is None or measure is None:
        return 0
    size = measure(op)
    return size if size >= LARGE_OUTPUT_BYTES else 0


def _kept_outputs(tenant: Tenant, newest: Operation) -> deque[tuple[str, int]]:
    """The tenant's kept large outputs but ``newest``'s, oldest first; built from its operations on first
    use (a new tenant has none; an imported one, those of its document, in order of completion)."""
    budget = tenant.outputs
    if budget.kept is None:
        done = [op for op in tenant.operations.values() if op.status == Op.COMPLETED and op is not newest]
        done.sort(key=lambda op: op.updated_at)  # stable: equal times keep the order they were made in
        sized = ((op.id, _large_output(op)) for op in done)
        budget.kept = deque((op_id, size) for op_id, size in sized if size)
        budget.total = sum(size for _, size in budget.kept)
    return budget.kept


def _keep_output(tenant: Tenant, ctx: Ctx, op: Operation) -> None:
    kept = _kept_outputs(tenant, op)
    size = _large_output(op)
    if not size:
        return
    budget = tenant.outputs
    kept.append((op.id, size))
    budget.total += size
    limit = ctx.limits.operation_outputs_mib_per_tenant << 20
    while budget.total > limit and len(kept) > 1:  # the newest stays, however large
        old_id, old_size = kept.popleft()
        budget.total -= old_size
        old = tenant.operations.get(old_id)
        if old is not None and old.output is not None:
            old.output = None
            old.output_released = True
            old.body = None  # the request it kept (a sampler's prompts): read only to show it next to the output


def _check_output_kept(op: Operation) -> None:
    if op.output_released:
        raise NotFound(f"the output of operation {op.id} is no longer kept: a tenant keeps only the newest "
                       "operation_outputs_mib_per_tenant MiB (see --limits-file) of large operation outputs, and "
                       "this one was among the oldest", param="operation_id", code="output_released")
