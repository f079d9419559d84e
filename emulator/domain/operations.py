"""Asynchronous training operations: submit, get, the per-session queue and their execution.

Emulates docs/api-surface.md A.3, C.3 and C.4. A submit answers ``PENDING``; operations of one session
run one after another in submission order (``PENDING`` -> ``RUNNING`` -> ``COMPLETED | FAILED``),
each taking the timing profile's duration, which grows with the tokens in the batch. When one
finishes, the simulated model (:mod:`emulator.compute`) produces its output. ``Idempotency-Key``
is scoped to (session, kind): the same key and body return the original operation; the same key
with another body is refused (400, ``idempotency_key_reused``). An offloaded request (``payload_id``) runs
on its inline body merged with the uploaded payload, the payload winning for the fields it holds; the
key compares the inline body as sent (with its ``payload_id``), so a retry needs no payload, and the
operation keeps the merged body it ran on.

Weights versions (C.4): optim-step sets ``step = trainer_step + 1``; weights-sync SYNCHRONOUS makes
the trained weights the generator's at once, BACKGROUND_PUBLISH and PIPELINE mark them pending and
the next sample applies them. Samples always use the applied version.

Differences from the real API [inferred]: submitting to a session that is not RUNNING answers an
operation that is already FAILED with ``SESSION_NOT_ACTIVE``; sampling on a resource with zero
generator replicas is refused with 400; PIPELINE behaves like BACKGROUND_PUBLISH (a sample never
switches versions mid-sequence, so there is always one policy segment).

Documented drops (``Ctx.ignored``: dropped with an ``X-Emulator-Warning``; 400 under ``--strict``): a
forward-backward's ``loss.*_params`` of another loss type (the SDK: "only valid when type is" its loss,
and "the server would otherwise drop it silently"), a sample's ``return_routed_experts`` on a dense model.

Output retention [emulator choice; the real retention is undocumented]: an operation's output is kept
for a GET however late, except large ones (4 KiB of JSON or more: samples, per-token logprobs), of
which a tenant keeps the newest ``operation_outputs_mib_per_tenant`` MiB (:mod:`emulator.domain.limits`,
default 256); beyond that the oldest is released, and its operation answers 404 ``output_released``.
A sample's prompts count with its output and go with it (the dashboard shows only recent samples).
A sampling loop would otherwise grow the process by its prompts and samples for ever.

Operation retention [emulator choice]: a session keeps its newest ``finished_operations_per_session``
finished operations (default 1,000); older ones are forgotten, with their ``Idempotency-Key`` and the
uploaded payload they read (the journal writes the removals). A GET of one answers 404
``operation_not_retained`` (on a session that has forgotten any); a retry with a forgotten key starts a
new operation (a retry that late would follow a thousand newer operations of the same session). Without
the bound a shared, long-running emulator grew by ~1.7 KB per operation for ever.

Bounds checked at submit, before the operation exists (400): a sample's ``max_tokens`` at most the
model's context length, ``num_samples`` at most what the model could ever generate, an int64 ``seed``;
an uploaded payload nests at most as deep as a request body may. Every scheduled time stays within
year 9999 (:func:`emulator.bounds.later`), and a duration is computed whatever the body holds.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any

import orjson

from emulator import defaults
from emulator.bounds import depth_message, int64, json_too_deep, later
from emulator.compute import INTERNAL_ERROR, ComputeError
from emulator.compute.spec import DEFAULT_MAX_TOKENS, MAX_SAMPLE_TOKENS
from emulator.domain import model_resources, routed_experts
from emulator.domain.cascade import SESSION_NOT_ACTIVE
from emulator.domain.catalog import BY_NAME
from emulator.domain.common import release_inputs, transition
from emulator.domain.context import Ctx
from emulator.domain.payloads import released_message
from emulator.domain.session_models import model_spec, session_model
from emulator.errors import Conflict, FailedPrecondition, Invalid, NotFound, shorten
from emulator.ids import derive_int
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    TERMINAL,
    Checkpoint,
    CheckpointType,
    Operation,
    OperationKind,
    OperationStatus,
    Session,
    SessionStatus,
    error_detail,
)

Op = OperationStatus
K = OperationKind
TERMINAL_OPERATION = TERMINAL[OperationStatus]

# The LossConfig field each loss type reads (IMPORTANCE_SAMPLING reads none), docs/api-surface.md A.3.1.
LOSS_PARAMS: Mapping[str, str] = MappingProxyType({
    "cross_entropy_params": "LOSS_TYPE_CROSS_ENTROPY", "grpo_params": "LOSS_TYPE_GRPO", "ppo_params": "LOSS_TYPE_PPO",
    "cispo_params": "LOSS_TYPE_CISPO", "dro_params": "LOSS_TYPE_DRO", "dppo_params": "LOSS_TYPE_DPPO"})


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def submit(tenant: Tenant, ctx: Ctx, session_id: str, kind: OperationKind, body: dict[str, Any],
           idempotency_key: str) -> tuple[Operation, bool]:
    """Returns (operation, replayed)."""
    s = tenant.sessions.get(session_id)
    if s is None:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    digest = body_hash(body)
    key = (s.id, kind._value_, idempotency_key)
    existing_id = tenant.idempotency.get(key)
    if existing_id is not None:
        existing = tenant.operations[existing_id]
        if existing.body_hash != digest:
            raise Conflict(
                f"Idempotency-Key {idempotency_key!r} was already used for a different {kind} request on this "
                "session; use a new key for a changed body", param="Idempotency-Key")
        _check_output_kept(existing)
        return existing, True
    r = tenant.resources[s.model_resources_id]
    if kind is K.SAMPLE and r.num_generator_replicas == 0 and s.status == SessionStatus.RUNNING:
        raise FailedPrecondition(f"model resource {r.id} has no generator replicas (num_generator_replicas=0); "
                                 "it cannot sample", param="session_id")
    effective, payload_id = _resolve_payload(tenant, s, body)
    effective = _check_request(ctx, s, kind, effective)
    now = ctx.now
    op = Operation(id=tenant.ids.uuid("operation"), session_id=s.id, kind=kind._value_, status=Op.PENDING._value_,
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
    if s.queue is None:
        s.queue = []
    s.queue.append(op.id)
    r.inflight_ops += 1
    model_resources.touch(tenant, r, now)
    if len(s.queue) == 1:
        tenant.timeline.schedule(now, TimelineEvent.OPERATION_START, op.id)
    return op, False


def _resolve_payload(tenant: Tenant, s: Session, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The body to run, with the id of the uploaded payload it read. A request naming one runs on the inline
    body and the payload merged, the payload winning for the fields it holds: the SDK uploads only
    ``{"loss", "samples"}`` of a forward-backward and keeps ``forward_only`` and ``return_loss_fn_outputs``
    inline (``_submit_forward_backward``), and its shrunk inline stand-ins of the uploaded fields must not run."""
    payload_id = body.get("payload_id")
    if not payload_id:
        return body, None
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
    inline = {k: v for k, v in body.items() if k != "payload_id"}
    uploaded.pop("payload_id", None)
    return {**inline, **uploaded}, payload.id


def _check_request(ctx: Ctx, s: Session, kind: OperationKind, body: dict[str, Any]) -> dict[str, Any]:
    """The body to run, without the fields the real service drops (documented; each warned about, or refused
    under --strict, through :meth:`Ctx.ignored`). Checked before any operation exists: schema validation does
    not reach an uploaded payload's body, and cannot tie a params object to the loss type or a bound to the
    model."""
    if kind is K.SAMPLE:
        _check_sample_bounds(body, s)
    if kind is K.SAMPLE and body.get("return_routed_experts") and not BY_NAME[s.base_model].moe:
        # The SDK: "Only supported for mixture-of-experts models; ignored for other models."
        ctx.ignored("return_routed_experts", f"{s.base_model} is not a mixture-of-experts model")
        return {k: v for k, v in body.items() if k != "return_routed_experts"}
    loss = body.get("loss") if kind is K.FORWARD_BACKWARD else None
    if not isinstance(loss, dict):
        return body
    loss_type = loss.get("type")
    dropped = []
    for key, reads in LOSS_PARAMS.items():
        # The SDK's LossConfig: "Only valid when `type` is LOSS_TYPE_..."; its client refuses the mix, noting
        # that "the server would otherwise drop it silently". A null is an omitted field.
        if loss.get(key) is not None and loss_type != reads:
            ctx.ignored(f"loss.{key}", f"it is read only when loss.type is {reads}, not {loss_type}")
            dropped.append(key)
    if not dropped:
        return body
    return {**body, "loss": {k: v for k, v in loss.items() if k not in dropped}}


def _check_sample_bounds(body: dict[str, Any], s: Session) -> None:
    """A sample's request-derived sizes, bounded where they enter: its duration grows with them, and an
    unbounded one scheduled its end past year 9999 (the model would refuse the request when run anyway)."""
    num_samples = _whole(body.get("num_samples"))
    if num_samples is not None and num_samples > MAX_SAMPLE_TOKENS:
        raise Invalid(f"num_samples: {num_samples} is more than the {MAX_SAMPLE_TOKENS} tokens one sample request "
                      "may generate", param="num_samples")
    params = body.get("sampling_params")
    if not isinstance(params, dict):
        return  # (absent, or not an object: the model refuses that when the operation runs)
    context = BY_NAME[s.base_model].context_length
    max_tokens = _whole(params.get("max_tokens"))
    if max_tokens is not None and max_tokens > context:
        raise Invalid(f"sampling_params.max_tokens: {max_tokens} is more than {s.base_model}'s context length of "
                      f"{context} tokens", param="sampling_params.max_tokens")
    if params.get("seed") is not None:
        int64(params["seed"], "sampling_params.seed")


def _whole(value: Any) -> int | None:
    """An integer-valued field as an int (JSON number or decimal string), None when it is anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 64:
        return int(value)
    return None


def get(tenant: Tenant, session_id: str, kind: OperationKind, operation_id: str) -> Operation:
    s = tenant.sessions.get(session_id)
    if s is None:
        raise NotFound(f"training session {session_id!r} not found", param="session_id")
    op = tenant.operations.get(operation_id)
    if op is None and s.evicted_operations:
        raise NotFound(f"{kind} operation {operation_id!r} not found on session {session_id}: it never existed, or "
                       f"it is one of the {s.evicted_operations} oldest finished operations the session no longer "
                       "keeps (a session keeps its newest finished_operations_per_session, see --limits-file)",
                       param="operation_id", code="operation_not_retained")
    if op is None or op.session_id != session_id or op.kind != kind:
        raise NotFound(f"{kind} operation {operation_id!r} not found on session {session_id}", param="operation_id")
    _check_output_kept(op)
    return op


# --- what each kind does ----------------------------------------------------------------------------

def _token_count(model_input: dict[str, Any]) -> int:
    return sum(len((c.get("encoded_text") or {}).get("tokens") or []) for c in model_input.get("chunks") or [])


def _training_seconds(ctx: Ctx, body: dict[str, Any]) -> float:
    tokens = sum(_token_count(sample.get("model_input") or {}) for sample in body.get("samples") or [])
    return tokens * ctx.timing.forward_backward_seconds_per_token


def _sync_seconds(ctx: Ctx, body: dict[str, Any]) -> float:
    sync = body.get("weight_sync_type", "WEIGHT_SYNC_TYPE_SYNCHRONOUS") == "WEIGHT_SYNC_TYPE_SYNCHRONOUS"
    return ctx.timing.weights_sync_seconds * (1.0 if sync else 0.1)


def _sample_seconds(ctx: Ctx, body: dict[str, Any]) -> float:
    params = body.get("sampling_params") or {}
    generated = (int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)
                 * int(body.get("num_samples") or defaults.NUM_SAMPLES))
    # More than the model ever generates in one request fails when run; it takes no longer than the most.
    generated = min(generated * len(body.get("model_inputs") or []), MAX_SAMPLE_TOKENS)
    return generated * ctx.timing.sample_seconds_per_token


def _forward_backward(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(tenant, ctx.seed, s)
    body = op.body
    routed_experts.check(s, body.get("samples"))
    return model.forward_backward(body["samples"], body["loss"], forward_only=bool(body.get("forward_only")),
                                  return_loss_fn_outputs=bool(body.get("return_loss_fn_outputs")))


def _custom_forward_backward(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(tenant, ctx.seed, s)
    routed_experts.check(s, op.body.get("samples"))
    return model.custom_forward_backward(op.body["samples"], op.body["gradients"])


def _optim_step(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    step = session_model(tenant, ctx.seed, s).optim_step(op.body.get("adam_params"), op.body.get("muon_params"))
    s.step = step
    s.trainer_step = step
    s.updated_at = max(s.updated_at, at)
    return {"step": step}


def _weights_sync(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(tenant, ctx.seed, s)
    sync_type = op.body.get("weight_sync_type") or "WEIGHT_SYNC_TYPE_SYNCHRONOUS"
    s.target_weights_version = s.trainer_step
    weights = model.weights()
    if sync_type == "WEIGHT_SYNC_TYPE_SYNCHRONOUS":
        tenant.models.publish(s.id, s.trainer_step, weights)
        s.applied_weights_version = s.trainer_step
        s.pending_publish = False
    else:
        tenant.models.stage(s.id, s.trainer_step, weights)
        s.pending_publish = True
    s.updated_at = max(s.updated_at, at)
    return {"weights_version": s.target_weights_version}


def _sample(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(tenant, ctx.seed, s)
    staged = tenant.models.apply_staged(s.id)
    if staged is not None:
        s.applied_weights_version = staged[0]
        s.pending_publish = False
        s.updated_at = max(s.updated_at, at)
    version, weights = tenant.models.published[s.id]
    body = op.body
    num_samples = int(body.get("num_samples") or defaults.NUM_SAMPLES)
    output = model.sample(weights, body["model_inputs"], num_samples=num_samples,
                          sampling_params=body.get("sampling_params") or {},
                          prompt_logprobs=bool(body.get("prompt_logprobs")),
                          topk_prompt_logprobs=int(body.get("topk_prompt_logprobs") or 0),
                          seed=derive_int(ctx.seed, op.id), version=version)
    routed_experts.issue(ctx, s, op, output)
    return output


def _checkpoint(tenant: Tenant, ctx: Ctx, s: Session, op: Operation, at: float) -> dict[str, Any]:
    model = session_model(tenant, ctx.seed, s)
    r = tenant.resources[s.model_resources_id]
    cat = BY_NAME[s.base_model]
    training = op.kind == K.TRAINING_CHECKPOINT
    ckpt = Checkpoint(id=tenant.ids.uuid("checkpoint"), session_id=s.id,
                      type=(CheckpointType.TRAINING if training else CheckpointType.INFERENCE)._value_,
                      base_model=s.base_model, step=s.step, created_at=at,
                      lora_rank=None if s.lora_config is None else int(s.lora_config["rank"]),
                      lora_config=None if s.lora_config is None else dict(s.lora_config),
                      model_state={"spec": asdict(model_spec(tenant, ctx.seed, s)),
                                   "model": model.to_state(include_optimizer=training)},
                      created_by=s.created_by)
    if cat.registers_checkpoints:
        artifact = {"id": tenant.ids.token("ml_"), "revision_id": tenant.ids.token("rv_")}
        if training:
            ckpt.registration = artifact
            kind_name = "training"
        else:
            merged = s.lora_config is None or r.base_weights_ref is not None
            kind_name = "model" if merged else "adapter"
            ckpt.registration = {kind_name: artifact}
        tenant.registry.put(artifact["id"], {"kind": kind_name, "revision_id": artifact["revision_id"],
                                             "base_model": s.base_model, "checkpoint_id": ckpt.id})
    tenant.checkpoints.add(ckpt)
    ids_list = "training_checkpoint_ids" if training else "inference_checkpoint_ids"
    if getattr(s, ids_list) is None:
        setattr(s, ids_list, [])
    getattr(s, ids_list).append(ckpt.id)
    s.updated_at = max(s.updated_at, at)
    tenant.log(at, "checkpoint", ckpt.id, None, ckpt.type, session_id=s.id)
    return {"checkpoint_id": ckpt.id}


def _sample_output_size(op: Operation) -> int:
    return len(orjson.dumps(op.output)) + len(orjson.dumps(op.body))  # its prompts go with it


def _per_token_output_size(op: Operation) -> int:
    out = op.output
    return len(orjson.dumps(out)) if out and out.get("loss_fn_outputs") else 0


@dataclass(frozen=True, slots=True)
class KindRules:
    """What one kind of operation does: how long it runs beyond the profile's overhead (virtual seconds, from
    its body), what it computes when it completes, and how large its output may be (None: always small, a
    step or a loss; see output retention above)."""

    seconds: Callable[[Ctx, dict[str, Any]], float]
    execute: Callable[[Tenant, Ctx, Session, Operation, float], dict[str, Any]]
    output_size: Callable[[Operation], int] | None = None


def _optim_seconds(ctx: Ctx, body: dict[str, Any]) -> float:
    return ctx.timing.optim_step_seconds


def _checkpoint_seconds(ctx: Ctx, body: dict[str, Any]) -> float:
    return ctx.timing.checkpoint_seconds


KINDS: Mapping[OperationKind, KindRules] = MappingProxyType({
    K.FORWARD_BACKWARD: KindRules(_training_seconds, _forward_backward, _per_token_output_size),
    K.CUSTOM_FORWARD_BACKWARD: KindRules(_training_seconds, _custom_forward_backward, _per_token_output_size),
    K.OPTIM_STEP: KindRules(_optim_seconds, _optim_step),
    K.WEIGHTS_SYNC: KindRules(_sync_seconds, _weights_sync),
    K.SAMPLE: KindRules(_sample_seconds, _sample, _sample_output_size),
    K.INFERENCE_CHECKPOINT: KindRules(_checkpoint_seconds, _checkpoint),
    K.TRAINING_CHECKPOINT: KindRules(_checkpoint_seconds, _checkpoint),
})


# --- the queue ------------------------------------------------------------------------------------

def _seconds(ctx: Ctx, op: Operation) -> float:
    """How long ``op`` runs beyond the overhead. This runs while the timeline settles, before the model checks
    the body, so it must not fail whatever the body holds (an uploaded payload is not schema-checked):
    anything malformed counts as nothing, and the operation fails when it runs."""
    try:
        return KINDS[op.kind].seconds(ctx, op.body)  # type: ignore[index]
    except (TypeError, ValueError, AttributeError, OverflowError):
        return 0.0


def on_start(tenant: Tenant, ctx: Ctx, op: Operation, at: float) -> None:
    if op.status != Op.PENDING:
        return
    s = tenant.sessions[op.session_id]
    transition(tenant, op, Op.RUNNING, at)
    done = later(at, ctx.timing.op_overhead_seconds + _seconds(ctx, op))
    s.busy_until = done
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
            op.output = KINDS[op.kind].execute(tenant, ctx, s, op, at)  # type: ignore[index]
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
    if s.queue and s.queue[0] == op.id:
        s.queue.pop(0)
    r.inflight_ops -= 1
    model_resources.touch(tenant, r, at)
    s.busy_until = None
    if s.queue:
        tenant.timeline.schedule(at, TimelineEvent.OPERATION_START, s.queue[0])
    if op.status == Op.COMPLETED:  # the session's queue has moved on whatever happens here
        _keep_output(tenant, ctx, op)
    _retire(tenant, ctx, op)


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
    """The JSON size of ``op``'s output (with a sample's prompts) if it may be large (a sample's, or a
    forward-backward's per-token outputs) and is, else 0. Most outputs are a loss and a few metrics:
    those are not even measured."""
    measure = KINDS[op.kind].output_size  # type: ignore[index]
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
            if old.kind == K.SAMPLE:
                old.body = {}  # its prompts: read only to show them next to the output
            tenant.operations.changed(old)  # final, yet changed: the journal must write it again


def _check_output_kept(op: Operation) -> None:
    if op.output_released:
        raise NotFound(f"the output of operation {op.id} is no longer kept: a tenant keeps only the newest "
                       "operation_outputs_mib_per_tenant MiB (see --limits-file) of large operation outputs, and "
                       "this one was among the oldest", param="operation_id", code="output_released")
