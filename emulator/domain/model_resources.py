"""Model resources: create, list, get, stop, extend-expiry, estimate-cost, and their lifecycle.

Emulates docs/api-surface.md A.1 and C.1: PENDING (GPU queue) -> CREATING -> READY -> STOPPING -> STOPPED;
expiry at last activity + ``inactive_timeout``. Differs: the GPU queue is per project; ``expires_at`` moves at
once with each activity (the real one about once a minute); ``base_weights_ref`` is echoed after a check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import msgspec

from emulator import defaults, rules
from emulator.bounds import later
from emulator.compute.types import Wire
from emulator.domain import cascade, gpu_queue
from emulator.domain.catalog import BY_NAME, GPU_TYPE, CatalogModel
from emulator.domain.common import lookup, page, transition
from emulator.domain.context import Ctx
from emulator.errors import FailedPrecondition, Invalid
from emulator.jsontypes import Json, JsonObject
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    AdamConfig,
    ModelResource,
    MuonConfig,
    OptimizerConfig,
    ResourceStatus,
    SessionStatus,
)

R = ResourceStatus
_READY = R.READY._value_
_set = msgspec.Struct.__setattr__
DEFAULT_INACTIVE_TIMEOUT = 3600  # the SDK's ModelResourcesClient.create docstring
DEFAULT_GENERATOR_REPLICAS = int(defaults.MODEL_RESOURCE["num_generator_replicas"])
DEFAULT_LORA_ENABLED = bool(defaults.MODEL_RESOURCE["lora_enabled"])


def catalog_model(base_model: str, param: str = "base_model") -> CatalogModel:
    model = BY_NAME.get(base_model)
    if model is None:
        raise Invalid(
            f"base_model {base_model!r} is not supported; see GET /v1/rl/supported-models "
            f"({', '.join(sorted(BY_NAME))})", param=param)
    return model


# What the SDK's types (together 3.1.1: AdamConfigParam has no field, MuonConfigParam only scaling_strategy)
# let a client set. Anything else is dropped with a warning (refused under --strict), as a protobuf JSON
# gateway discards unknown fields [inferred]; kept, it was stored and echoed in every answer, however large
# or deep.
OPTIMIZER_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType({"adam": (), "muon": ("scaling_strategy",)})
DROPPED_NAMED = 5  # fields named in the warning; a client may send thousands


def _optimizer(given: JsonObject | None) -> tuple[OptimizerConfig, list[str]]:
    """(the optimizer config as kept, the paths of the fields dropped)."""
    adam: AdamConfig | None = None
    muon: MuonConfig | None = None
    dropped: list[str] = []
    for name, config in (given or {}).items():
        if name not in OPTIMIZER_FIELDS:
            dropped.append(f"optimizer_config.{_shown(name)}")
        elif isinstance(config, Mapping):
            if name == "adam":
                adam = AdamConfig()
            else:
                strategy = config.get("scaling_strategy")
                muon = MuonConfig(scaling_strategy=None if strategy is None else str(strategy))
            dropped += [f"optimizer_config.{name}.{_shown(k)}" for k in config if k not in OPTIMIZER_FIELDS[name]]
    if adam is None and muon is None:
        adam = AdamConfig()
    return OptimizerConfig(adam=adam, muon=muon), dropped


def _shown(key: str) -> str:
    # A client's key, quoted in a warning header: short, and printable ASCII only (a header value may hold no
    # control character, and carries Latin-1 at most); anything else is escaped, as \x1e or \u043a.
    return "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in str(key)[:40])


class ComputeConfigRequest(Wire, frozen=True):
    gpu_type: str | None = None
    num_generator_replicas: int | None = None


class CreateRequest(Wire, frozen=True):
    """The body of a create, or of an estimate (its optimizer config as sent: fields the SDK's types lack are
    dropped with a warning, so they are read from it)."""

    base_model: str
    lora_enabled: bool | None = None
    compute_config: ComputeConfigRequest | None = None
    optimizer_config: JsonObject | None = None
    inactive_timeout: int | None = None
    base_weights_ref: str | None = None


class ExtendRequest(Wire, frozen=True):
    seconds: int


@dataclass(frozen=True, slots=True)
class Settings:
    """A resource's settings as a create (or an estimate) reads its body."""

    model: CatalogModel
    lora_enabled: bool
    gpu_type: str
    num_generator_replicas: int
    optimizer_config: OptimizerConfig
    inactive_timeout: int
    base_weights_ref: str | None
    dropped: tuple[str, ...]


def _validated_settings(tenant: Tenant, body: CreateRequest) -> Settings:
    """The settings of a create, or of the resource an estimate prices: one rule for each field, whichever
    asks (a create and an estimate of the same body answer the same 400, or neither does)."""
    model = catalog_model(body.base_model)
    lora_enabled = DEFAULT_LORA_ENABLED if body.lora_enabled is None else body.lora_enabled
    if not lora_enabled and model.full_max_batch_size is None:
        raise Invalid(f"{model.base_model} does not support full-weight training (lora_enabled=false)",
                             param="lora_enabled")
    compute = body.compute_config or ComputeConfigRequest()
    gpu_type = compute.gpu_type or GPU_TYPE
    if gpu_type != GPU_TYPE:
        raise Invalid(f"gpu_type {gpu_type!r} is not offered for post-training; use {GPU_TYPE}",
                             param="compute_config.gpu_type")
    replicas = DEFAULT_GENERATOR_REPLICAS if compute.num_generator_replicas is None else compute.num_generator_replicas
    if replicas < rules.GENERATOR_REPLICAS.low:
        raise Invalid(f"num_generator_replicas must be >= {rules.GENERATOR_REPLICAS.low}",
                      param="compute_config.num_generator_replicas")
    optimizer, dropped = _optimizer(body.optimizer_config)
    if optimizer.adam is not None and optimizer.muon is not None:
        # "set one of adam or muon" (a protobuf oneof: its JSON parser refuses a second member) [inferred]
        raise Invalid("optimizer_config takes one of adam or muon, not both", param="optimizer_config")
    timeout = DEFAULT_INACTIVE_TIMEOUT if body.inactive_timeout is None else body.inactive_timeout
    timeouts = rules.INACTIVE_TIMEOUT
    if not timeouts.low <= timeout <= timeouts.high:
        raise Invalid(f"inactive_timeout must be between {timeouts.low} and {timeouts.high} seconds",
                      param="inactive_timeout")
    ref = body.base_weights_ref
    if ref is not None:
        artifact = tenant.registry.get(ref.removeprefix("together://").split("@")[0].split("/")[0])
        if artifact is None or artifact.kind != "model":
            raise Invalid(f"base_weights_ref {ref!r} does not name a full-weight model in this project's "
                                 "model registry", param="base_weights_ref")
        if artifact.base_model != model.base_model:
            raise Invalid(f"base_weights_ref {ref!r} was trained from {artifact.base_model}, "
                                 f"not {model.base_model}", param="base_weights_ref")
    return Settings(model, lora_enabled, gpu_type, replicas, optimizer, timeout, ref, tuple(dropped))


def create(tenant: Tenant, ctx: Ctx, body: CreateRequest) -> ModelResource:
    s = _validated_settings(tenant, body)
    dropped = s.dropped
    if dropped:
        more = f" and {len(dropped) - DROPPED_NAMED} more" if len(dropped) > DROPPED_NAMED else ""
        ctx.ignored(", ".join(dropped[:DROPPED_NAMED]) + more,
                    "the SDK's optimizer types have no such field (adam: none; muon: scaling_strategy)")
    now = ctx.now
    r = ModelResource(
        id=tenant.ids.uuid("model_resources"), created_by=ctx.principal.user, base_model=s.model.base_model,
        lora_enabled=s.lora_enabled, gpu_type=s.gpu_type, num_generator_replicas=s.num_generator_replicas,
        optimizer_config=s.optimizer_config, inactive_timeout=s.inactive_timeout,
        status=R.PENDING._value_, created_at=now, updated_at=now, base_weights_ref=s.base_weights_ref)
    tenant.resources.add(r)
    tenant.log(now, "model_resources", r.id, None, r.status)
    gpu_queue.enter(tenant, ctx, r)
    return r


def get(tenant: Tenant, resource_id: str) -> ModelResource:
    return lookup(tenant.resources, resource_id, "model resource", "model_resources_id")


# What the list's `status` filter takes: every status.
FILTER_STATUSES = frozenset(s.value for s in ResourceStatus)


def list_(tenant: Tenant, ctx: Ctx, *, status: set[str] | None, created_by: str | None,
          after: str | None, limit: int) -> tuple[list[ModelResource], bool]:
    creator = ctx.principal.user if created_by == "me" else created_by

    def keep(r: ModelResource) -> bool:
        return (status is None or r.status in status) and (creator is None or r.created_by == creator)

    no_filter = status is None and creator is None
    return page(tenant.resources, after, limit, None if no_filter else keep)


queue_position = gpu_queue.position


def stop(tenant: Tenant, ctx: Ctx, resource_id: str, force: bool) -> ModelResource:
    r = get(tenant, resource_id)
    if r.status in (R.STOPPING, R.STOPPED, R.ERROR):
        raise FailedPrecondition(f"model resource {r.id} is already {r.status}; it cannot be stopped again",
                                 param="model_resources_id")
    active = cascade.active_sessions(tenant, r)
    if active and not force:
        raise FailedPrecondition(
            f"model resource {r.id} still has {len(active)} active training session(s) "
            f"({', '.join(s.id for s in active)}); stop them first or pass force=true",
            param="force")
    cascade.stop_resource(tenant, ctx, r, ctx.now)
    return r


def extend_expiry(tenant: Tenant, ctx: Ctx, resource_id: str, seconds: int) -> ModelResource:
    r = get(tenant, resource_id)
    extend = rules.EXTEND_SECONDS
    if not extend.low <= seconds <= extend.high:
        raise Invalid(f"seconds must be between {extend.low} and {extend.high}", param="seconds")
    if r.status != R.READY:
        raise FailedPrecondition(f"model resource {r.id} is {r.status}; expiry can only be extended while READY",
                                 param="model_resources_id")
    _push_expiry(tenant, r, later(ctx.now, seconds))
    return r


def estimate_cost(tenant: Tenant, body: CreateRequest) -> dict[str, Json]:
    s = _validated_settings(tenant, body)
    model, replicas = s.model, s.num_generator_replicas
    gpus = model.trainer_gpus * (1 if s.lora_enabled else 2) + replicas * model.trainer_gpus
    return {"currency": "USD", "price_per_hour": round(gpus * model.price_per_gpu_hour, 2)}


# --- activity and timers -------------------------------------------------------------------------

def touch(tenant: Tenant, r: ModelResource, at: float) -> None:
    """Activity (session start, operation submit or finish) restarts the inactivity count."""
    noted = r.last_activity != at
    if noted:  # (several in one request: noted once)
        r.last_activity = at
    if r.status == _READY:  # (twice a create: the status as stored; _push_expiry's steps inline)
        candidate = later(at, r.inactive_timeout)
        expires = r.expires_at
        if expires is None or candidate > expires:
            expires = candidate
            if noted:  # the record was just noted: msgspec's own setattr, without a second note
                _set(r, "expires_at", candidate)
            else:
                r.expires_at = candidate
        if r.id not in tenant.expiry_armed:
            tenant.expiry_armed.add(r.id)
            tenant.timeline.schedule(expires, TimelineEvent.RESOURCE_EXPIRE, r.id)


def _push_expiry(tenant: Tenant, r: ModelResource, candidate: float) -> None:
    # expires_at only ever moves later; one expiry event is outstanding at a time.
    if r.expires_at is None or candidate > r.expires_at:
        r.expires_at = candidate
    if r.id not in tenant.expiry_armed:
        tenant.expiry_armed.add(r.id)
        tenant.timeline.schedule(r.expires_at, TimelineEvent.RESOURCE_EXPIRE, r.id)


# --- timeline events -------------------------------------------------------------------------------

def on_dequeue(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    if r.status != R.PENDING or at < (r.queue_exit_at or 0):
        return  # stale event: the exit was pushed later
    if r.queue_extra > 0:
        # Fault effect "waits in the queue at position P": each phantom ahead takes one slot.
        r.queue_extra -= 1
        gpu_queue.hold(tenant, ctx, r, at)
        return
    gpu_queue.leave(tenant, r)
    transition(tenant, r, R.CREATING, at)
    tenant.timeline.schedule(later(at, ctx.timing.resource_creating_seconds), TimelineEvent.RESOURCE_READY, r.id)


def on_ready(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    if r.status != R.CREATING:
        return
    transition(tenant, r, R.READY, at)
    touch(tenant, r, at)
    for sid in tenant.sessions_of.get(r.id, ()):
        s = tenant.sessions[sid]
        if s.status == SessionStatus.CREATING:
            tenant.timeline.schedule(later(at, ctx.timing.session_creating_seconds), TimelineEvent.SESSION_RUNNING, s.id)


def on_expire(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    tenant.expiry_armed.discard(r.id)
    if r.status != R.READY or r.expires_at is None:
        return
    if r.expires_at > at:
        tenant.expiry_armed.add(r.id)
        tenant.timeline.schedule(r.expires_at, TimelineEvent.RESOURCE_EXPIRE, r.id)
        return
    if tenant.inflight.get(r.id, 0) > 0:
        # Never stops while an operation runs; the operation's finish is activity, which
        # pushes expires_at later and arms the timer again.
        return
    cascade.expire_resource(tenant, ctx, r, at)


def on_stopped(tenant: Tenant, ctx: Ctx, r: ModelResource, at: float) -> None:
    if r.status == R.STOPPING:
        transition(tenant, r, R.STOPPED, at)
