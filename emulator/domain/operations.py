"""Asynchronous training operations: submit, get, the per-session queue and their execution.

Emulates docs/api-surface.md A.3, C.3 and C.4. A submit answers ``PENDING``; operations of one session
run one after another in submission order (``PENDING`` -> ``RUNNING`` -> ``COMPLETED | FAILED``),
each taking the timing profile's duration, which grows with the tokens in the batch. When one
finishes, the simulated model (:mod:`emulator.compute`) produces its output. ``Idempotency-Key``
is scoped to (session, kind): the same key and body return the original operation; the same key
with another body is refused (400, ``idempotency_key_reused``).

Weights versions (C.4): optim-step sets ``step = trainer_step + 1``; weights-sync SYNCHRONOUS makes
the trained weights the generator's at once, BACKGROUND_PUBLISH and PIPELINE mark them pending and
the next sample applies them. Samples always use the applied version.

Differences from the real API [inferred]: submitting to a session that is not RUNNING answers an
operation that is already FAILED with ``SESSION_NOT_ACTIVE``; sampling on a resource with zero
generator replicas is refused with 400; PIPELINE behaves like BACKGROUND_PUBLISH (a sample never
switches versions mid-sequence, so there is always one policy segment); a forward-backward whose
``loss`` carries the ``*_params`` object of another loss type is refused with 400 (the SDK documents
each as "only valid when type is" its loss and refuses it client-side; the real server may drop it).

Output retention [emulator choice; the real retention is undocumented]: an operation's output is kept
for a GET however late, except large ones (4 KiB of JSON or more: samples, per-token logprobs), of
which a tenant keeps the newest ``operation_outputs_mib_per_tenant`` MiB (:mod:`emulator.domain.limits`,
default 256); beyond that the oldest is released, and its operation answers 404 ``output_released``.
A sample's prompts count with its output and go with it (the dashboard shows only recent samples).
A sampling loop would otherwise grow the process by its prompts and samples for ever.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import asdict
from typing import Any

import orjson

from emulator import compute
from emulator.compute import INTERNAL_ERROR, ComputeError
from emulator.domain import checkpoints, model_resources, routed_experts
from emulator.domain.cascade import SESSION_NOT_ACTIVE
from emulator.domain.catalog import BY_NAME
from emulator.domain.common import release_inputs, transition
from emulator.domain.context import Ctx
from emulator.domain.lifecycle import OperationStatus, SessionStatus
from emulator.domain.payloads import released_message
from emulator.domain.session_models import model_spec, session_model
from emulator.errors import FailedPrecondition, IdempotencyKeyReused, InvalidRequest, NotFound, shorten
from emulator.ids import derive_int
from emulator.store import TenantState
from emulator.store.records import Checkpoint, Operation, Session

Op = OperationStatus

# The LossConfig field each loss type reads (IMPORTANCE_SAMPLING reads none), docs/api-surface.md A.3.1.
LOSS_PARAMS = {"cross_entropy_params": "LOSS_TYPE_CROSS_ENTROPY", "grpo_params": "LOSS_TYPE_GRPO",
               "ppo_params": "LOSS_TYPE_PPO", "cispo_params": "LOSS_TYPE_CISPO", "dro_params": "LOSS_TYPE_DRO",
               "dppo_params": "LOSS_TYPE_DPPO"}


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def submit(state: TenantState, ctx: Ctx, session_id: str, kind: str, body: dict[str, Any],
           idempotency_key: str) -> tuple[Operation, bool]:
    """Returns (operation, replayed)."""
    s = state.sessions.get(session_id)
    if s is None:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    digest = body_hash(body)
    key = (s.id, kind, idempotency_key)
    existing_id = state.idempotency.get(key)
    if existing_id is not None:
        existing = state.operations[existing_id]
        if existing.body_hash != digest:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {idempotency_key!r} was already used for a different {kind} request on this "
                "session; use a new key for a changed body", param="Idempotency-Key")
        _check_output_kept(existing)
        return existing, True
    r = state.resources[s.model_resources_id]
    if kind == "sample" and r.num_generator_replicas == 0 and s.status == SessionStatus.RUNNING:
        raise FailedPrecondition(f"model resource {r.id} has no generator replicas (num_generator_replicas=0); "
                                 "it cannot sample", param="session_id")
    effective, payload_id = _resolve_payload(state, s, body)
    _check_request(kind, effective)
    now = ctx.now
    op = Operation(id=state.ids.uuid("operation"), session_id=s.id, kind=kind, status=Op.PENDING._value_,
                   created_at=now, updated_at=now, body=effective, body_hash=digest,
                   idempotency_key=idempotency_key, payload_id=payload_id)
    state.operations[op.id] = op
    state.idempotency[key] = op.id
    state.log(now, "operation", op.id, None, op.status, op_kind=kind)
    if s.status != SessionStatus.RUNNING:
        op.error = {"code": SESSION_NOT_ACTIVE, "message": f"training session {s.id} is {s.status}, not RUNNING"}
        transition(state, op, Op.FAILED, now)
        release_inputs(state, op)
        return op, False
    if s.queue is None:
        s.queue = []
    s.queue.append(op.id)
    r.inflight_ops += 1
    model_resources.touch(state, r, now)
    if len(s.queue) == 1:
        state.schedule(now, "operation.start", op.id)
    return op, False


def _resolve_payload(state: TenantState, s: Session, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The body to run: the uploaded payload's when the request names one, with the payload's id."""
    payload_id = body.get("payload_id")
    if not payload_id:
        return body, None
    payload = state.payloads.get(payload_id)
    if payload is None or payload.session_id != s.id:
        raise InvalidRequest(f"payload {payload_id!r} was not created for this session", param="payload_id")
    if payload.released_by is not None:
        raise InvalidRequest(released_message(payload) + "; upload the body again (a new upload URL)",
                             param="payload_id")
    if payload.data is None:
        raise InvalidRequest(f"payload {payload_id!r} has not been uploaded", param="payload_id")
    try:
        uploaded = orjson.loads(payload.data)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"payload {payload_id!r} is not valid JSON: {exc}", param="payload_id") from exc
    if not isinstance(uploaded, dict):
        raise InvalidRequest(f"payload {payload_id!r} must hold a JSON object", param="payload_id")
    uploaded.pop("payload_id", None)
    return uploaded, payload.id


def _check_request(kind: str, body: dict[str, Any]) -> None:
    """Request rules refused with 400 before any operation exists (schema validation does not reach an
    uploaded payload's body, and cannot tie a params object to the loss type)."""
    loss = body.get("loss") if kind == "forward-backward" else None
    if not isinstance(loss, dict):
        return
    loss_type = loss.get("type")
    for key, reads in LOSS_PARAMS.items():
        # The SDK's LossConfig: "Only valid when `type` is LOSS_TYPE_...". A null is an omitted field.
        if loss.get(key) is not None and loss_type != reads:
            raise InvalidRequest(f"loss.{key} is only valid when loss.type is {reads}, not {loss_type}",
                                 param=f"loss.{key}")


def get(state: TenantState, session_id: str, kind: str, operation_id: str) -> Operation:
    if session_id not in state.sessions:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    op = state.operations.get(operation_id)
    if op is None or op.session_id != session_id or op.kind != kind:
        raise NotFound(f"{kind} operation {operation_id!r} not found on session {session_id}", param="operation_id")
    _check_output_kept(op)
    return op


def _duration(ctx: Ctx, op: Operation) -> float:
    t = ctx.timing
    body = op.body
    if op.kind in ("forward-backward", "custom-forward-backward"):
        tokens = sum(_token_count(sample.get("model_input") or {}) for sample in body.get("samples") or [])
        return t.op_overhead_seconds + tokens * t.forward_backward_seconds_per_token
    if op.kind == "optim-step":
        return t.op_overhead_seconds + t.optim_step_seconds
    if op.kind == "weights-sync":
        sync = body.get("weight_sync_type", "WEIGHT_SYNC_TYPE_SYNCHRONOUS") == "WEIGHT_SYNC_TYPE_SYNCHRONOUS"
        return t.op_overhead_seconds + t.weights_sync_seconds * (1.0 if sync else 0.1)
    if op.kind == "sample":
        params = body.get("sampling_params") or {}
        generated = int(params.get("max_tokens") or 16) * int(body.get("num_samples") or 1)
        return t.op_overhead_seconds + generated * len(body.get("model_inputs") or []) * t.sample_seconds_per_token
    return t.op_overhead_seconds + t.checkpoint_seconds


def _token_count(model_input: dict[str, Any]) -> int:
    return sum(len((c.get("encoded_text") or {}).get("tokens") or []) for c in model_input.get("chunks") or [])


def on_start(state: TenantState, ctx: Ctx, op: Operation, at: float) -> None:
    if op.status != Op.PENDING:
        return
    s = state.sessions[op.session_id]
    transition(state, op, Op.RUNNING, at)
    done = at + _duration(ctx, op)
    s.busy_until = done
    state.schedule(done, "operation.complete", op.id)


def on_complete(state: TenantState, ctx: Ctx, op: Operation, at: float) -> None:
    if op.status != Op.RUNNING:
        return
    s = state.sessions[op.session_id]
    r = state.resources[s.model_resources_id]
    if op.fault_code:
        op.error = {"code": op.fault_code, "message": f"operation failed ({op.fault_code}; injected fault)"}
        transition(state, op, Op.FAILED, at)
    else:
        try:
            op.output = _execute(state, ctx, s, op, at)
        except ComputeError as exc:
            op.error = {"code": exc.code, "message": exc.message}
            transition(state, op, Op.FAILED, at)
        except Exception as exc:  # noqa: BLE001 - a bug in the model must fail this operation, not wedge the queue
            # Raised out of here, it would leave the operation RUNNING at the head of its session's queue, its
            # completion event already consumed: every later operation of the session would wait forever.
            # The model swaps in its new state only at the end of a call, so a failed call leaves it as it was.
            op.output = None
            op.error = {"code": INTERNAL_ERROR, "message": shorten(
                f"internal error in the emulator while running this operation ({type(exc).__name__}: {exc}); "
                "this is a bug, please report it")}
            transition(state, op, Op.FAILED, at)
        else:
            transition(state, op, Op.COMPLETED, at)
    release_inputs(state, op)
    if s.queue and s.queue[0] == op.id:
        s.queue.pop(0)
    r.inflight_ops -= 1
    model_resources.touch(state, r, at)
    s.busy_until = None
    if s.queue:
        state.schedule(at, "operation.start", s.queue[0])
    if op.status == Op.COMPLETED:  # last: the session's queue has moved on whatever happens here
        _keep_output(state, ctx, op)


# --- output retention ----------------------------------------------------------------------------

LARGE_OUTPUT_BYTES = 4096  # smaller outputs (a loss and its metrics, a step, a checkpoint id) are always kept


def _large_output(op: Operation) -> int:
    """The JSON size of ``op``'s output (with a sample's prompts) if it may be large (a sample's, or a
    forward-backward's per-token outputs) and is, else 0. Most outputs are a loss and a few metrics:
    those are not even measured."""
    out = op.output
    if out is None:
        return 0
    if op.kind == "sample":
        size = len(orjson.dumps(out)) + len(orjson.dumps(op.body))
    elif out.get("loss_fn_outputs"):
        size = len(orjson.dumps(out))
    else:
        return 0
    return size if size >= LARGE_OUTPUT_BYTES else 0


def _kept_outputs(state: TenantState, newest: Operation) -> deque[tuple[str, int]]:
    """The tenant's kept large outputs but ``newest``'s, oldest first; built from its operations on first
    use (a new tenant has none; an imported one, those of its document, in order of completion)."""
    if state.kept_outputs is None:
        done = [op for op in state.operations.values() if op.status == Op.COMPLETED and op is not newest]
        done.sort(key=lambda op: op.updated_at)  # stable: equal times keep the order they were made in
        sized = ((op.id, _large_output(op)) for op in done)
        state.kept_outputs = deque((op_id, size) for op_id, size in sized if size)
        state.kept_output_bytes = sum(size for _, size in state.kept_outputs)
    return state.kept_outputs


def _keep_output(state: TenantState, ctx: Ctx, op: Operation) -> None:
    kept = _kept_outputs(state, op)
    size = _large_output(op)
    if not size:
        return
    kept.append((op.id, size))
    state.kept_output_bytes += size
    budget = ctx.limits.operation_outputs_mib_per_tenant << 20
    while state.kept_output_bytes > budget and len(kept) > 1:  # the newest stays, however large
        old_id, old_size = kept.popleft()
        state.kept_output_bytes -= old_size
        old = state.operations.get(old_id)
        if old is not None and old.output is not None:
            old.output = None
            old.output_released = True
            if old.kind == "sample":
                old.body = {}  # its prompts: read only to show them next to the output
            state.reopen(old_id)


def _check_output_kept(op: Operation) -> None:
    if op.output_released:
        raise NotFound(f"the output of operation {op.id} is no longer kept: a tenant keeps only the newest "
                       "operation_outputs_mib_per_tenant MiB (see --limits-file) of large operation outputs, and "
                       "this one was among the oldest", param="operation_id", code="output_released")


# --- execution -----------------------------------------------------------------------------------

def _execute(state: TenantState, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(state, ctx.seed, s)
    body = op.body
    kind = op.kind
    if kind in ("forward-backward", "custom-forward-backward"):
        routed_experts.check(s, body.get("samples"))
    if kind == "forward-backward":
        return model.forward_backward(body["samples"], body["loss"], forward_only=bool(body.get("forward_only")),
                                      return_loss_fn_outputs=bool(body.get("return_loss_fn_outputs")))
    if kind == "custom-forward-backward":
        return model.custom_forward_backward(body["samples"], body["gradients"])
    if kind == "optim-step":
        step = model.optim_step(body.get("adam_params"), body.get("muon_params"))
        s.step = step
        s.trainer_step = step
        s.updated_at = max(s.updated_at, at)
        return {"step": str(step)}
    if kind == "weights-sync":
        sync_type = body.get("weight_sync_type") or "WEIGHT_SYNC_TYPE_SYNCHRONOUS"
        s.target_weights_version = s.trainer_step
        weights = model.weights()
        if sync_type == "WEIGHT_SYNC_TYPE_SYNCHRONOUS":
            state.published[s.id] = (s.trainer_step, weights)
            s.applied_weights_version = s.trainer_step
            s.pending_publish = False
        else:
            state.published[s.id + ":pending"] = (s.trainer_step, weights)
            s.pending_publish = True
        s.updated_at = max(s.updated_at, at)
        return {"weights_version": str(s.target_weights_version)}
    if kind == "sample":
        pending = state.published.pop(s.id + ":pending", None)
        if pending is not None:
            state.published[s.id] = pending
            s.applied_weights_version = pending[0]
            s.pending_publish = False
            s.updated_at = max(s.updated_at, at)
        version, weights = state.published[s.id]
        params = body.get("sampling_params") or {}
        seed = derive_int(ctx.seed, op.id)
        output = model.sample(weights, body["model_inputs"], num_samples=int(body.get("num_samples") or 1),
                              sampling_params=params, prompt_logprobs=bool(body.get("prompt_logprobs")),
                              topk_prompt_logprobs=int(body.get("topk_prompt_logprobs") or 0), seed=seed,
                              version=version)
        routed_experts.issue(ctx, s, op, output)
        return output
    if kind in ("inference-checkpoint", "training-checkpoint"):
        return {"checkpoint": _checkpoint(state, ctx, s, model, kind, at)}
    raise ComputeError(INTERNAL_ERROR, f"unknown operation kind {kind}")


def _checkpoint(state: TenantState, ctx: Ctx, s: Session, model: compute.SessionModel, kind: str, at: float
                ) -> dict[str, Any]:
    r = state.resources[s.model_resources_id]
    cat = BY_NAME[s.base_model]
    training = kind == "training-checkpoint"
    ckpt = Checkpoint(id=state.ids.uuid("checkpoint"), session_id=s.id,
                      type="CHECKPOINT_TYPE_TRAINING" if training else "CHECKPOINT_TYPE_INFERENCE",
                      base_model=s.base_model, step=s.step, created_at=at,
                      lora_rank=None if s.lora_config is None else int(s.lora_config["rank"]),
                      lora_config=None if s.lora_config is None else dict(s.lora_config),
                      model_state={"spec": asdict(model_spec(state, ctx.seed, s)),
                                   "model": model.to_state(include_optimizer=training)},
                      created_by=s.created_by)
    if cat.registers_checkpoints:
        artifact = {"id": state.ids.token("ml_"), "revision_id": state.ids.token("rv_")}
        if training:
            ckpt.registration = artifact
            kind_name = "training"
        else:
            merged = s.lora_config is None or r.base_weights_ref is not None
            kind_name = "model" if merged else "adapter"
            ckpt.registration = {kind_name: artifact}
        state.registry[artifact["id"]] = {"kind": kind_name, "revision_id": artifact["revision_id"],
                                          "base_model": s.base_model, "checkpoint_id": ckpt.id}
    state.checkpoints[ckpt.id] = ckpt
    state.checkpoint_index.add(ckpt.id)
    ids_list = "training_checkpoint_ids" if training else "inference_checkpoint_ids"
    if getattr(s, ids_list) is None:
        setattr(s, ids_list, [])
    getattr(s, ids_list).append(ckpt.id)
    s.updated_at = max(s.updated_at, at)
    state.log(at, "checkpoint", ckpt.id, None, ckpt.type, session_id=s.id)
    return checkpoints.summary(ckpt)
