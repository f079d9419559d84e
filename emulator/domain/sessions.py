"""Training sessions: create, list, get, update, stop, and their lifecycle.

Emulates docs/api-surface.md A.2, C.2: CREATING -> RUNNING -> STOPPING -> STOPPED, EXPIRED or ERROR; caps per
resource (429). Differs [inferred]: a session created on a resource not yet READY stays CREATING; stopping an
inactive session answers it unchanged (200), an active one fails its unfinished operations (SESSION_NOT_ACTIVE).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import orjson

from emulator import defaults, rules
from emulator.bounds import int64, later
from emulator.compute.types import Int64, Wire
from emulator.domain import cascade, model_resources
from emulator.domain.catalog import BY_NAME
from emulator.domain.common import lookup, page, page_ids, transition
from emulator.domain.context import Ctx
from emulator.errors import Capacity, FailedPrecondition, Invalid, NotFound
from emulator.jsontypes import Json, JsonObject
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    Checkpoint,
    LoraConfig,
    ModelResource,
    ResourceStatus,
    Session,
    SessionStatus,
)

S = SessionStatus
LoraValues = dict[str, int | float | str | None]   # a LoRA config's fields as a request or a checkpoint gives them
DEFAULT_LORA = defaults.LORA
LORA_KEYS = ("rank", "alpha", "dropout", "train_unembed", "seed")
_DEFAULT = msgspec.convert(dict(DEFAULT_LORA), LoraConfig)  # (the usual create's: interned like any other)
# (plain strings, what records store: a create reads them without an enum class's attribute lookups)
_ATTACHABLE = frozenset({ResourceStatus.PENDING._value_, ResourceStatus.CREATING._value_, ResourceStatus.READY._value_})
_READY = ResourceStatus.READY._value_
_CREATING = S.CREATING._value_


class LoraRequest(Wire, frozen=True):
    """A create's ``lora_config`` (unknown keys are ignored: the schema allows them)."""

    rank: int | None = None
    alpha: int | float | None = None
    dropout: int | float | None = None
    train_unembed: bool | None = None
    seed: Int64 | None = None


class CreateRequest(Wire, frozen=True):
    model_resources_id: str
    lora_config: LoraRequest | None = None
    display_name: str | None = None
    metadata: JsonObject | None = None
    resume_from_checkpoint_id: str | None = None
    load_optimizer: bool | None = None


class UpdateRequest(Wire, frozen=True):
    display_name: str | None = None
    metadata: JsonObject | None = None


def _lora_config(tenant: Tenant, ctx: Ctx, r: ModelResource, request: LoraRequest | None,
                 ckpt: Checkpoint | None) -> LoraConfig | None:
    given: LoraValues = {} if request is None else {
        k: v for k in LORA_KEYS if (v := getattr(request, k)) is not None}
    if not given and ckpt is None and r.lora_enabled:  # the usual create: the default config, interned once
        interned = tenant.lora_configs.get(_DEFAULT)
        if interned is not None and interned.rank <= BY_NAME[r.base_model].lora_max_rank:
            return interned
    if "seed" in given and (ckpt is not None or not r.lora_enabled):
        # The SDK: the seed is "Ignored when LoRA is disabled or the session resumes from a checkpoint".
        ctx.ignored("lora_config.seed", "LoRA is disabled on this model resource" if not r.lora_enabled
                    else "the session resumes from a checkpoint, whose adapter (and seed) it continues")
        given = {k: v for k, v in given.items() if k != "seed"}
    if not r.lora_enabled:
        if given:
            raise Invalid("lora_config is only valid on a LoRA-enabled model resource", param="lora_config")
        return None
    cfg: LoraValues
    if ckpt is not None:
        cfg = _resumed_lora(ckpt, given)
    else:
        cfg = {**DEFAULT_LORA, **given}
    rank = int(cfg["rank"] or 0)
    max_rank = BY_NAME[r.base_model].lora_max_rank
    if not rules.LORA_RANK.low <= rank <= max_rank:
        raise Invalid(f"lora_config.rank must be between {rules.LORA_RANK.low} and {max_rank} for {r.base_model}",
                             param="lora_config.rank")
    cfg["rank"] = rank
    if "seed" in cfg:
        cfg["seed"] = int64(cfg["seed"], "lora_config.seed")
    # Sessions mostly share a handful of configs: keep one value per distinct config.
    value = msgspec.convert(cfg, LoraConfig)
    return tenant.lora_configs.setdefault(value, value)


def create(tenant: Tenant, ctx: Ctx, body: CreateRequest) -> Session:
    r = tenant.resources.get(body.model_resources_id)
    if r is None:
        raise NotFound(f"model resource {body.model_resources_id!r} not found", param="model_resources_id")
    if r.status not in _ATTACHABLE:
        raise FailedPrecondition(f"model resource {r.id} is {r.status}; sessions can only attach to an active "
                                 "resource", param="model_resources_id")
    step, resume_id, load_optimizer = 0, body.resume_from_checkpoint_id, body.load_optimizer
    ckpt = None
    if resume_id:
        ckpt = tenant.checkpoints.get(resume_id)
        if ckpt is None:
            raise NotFound(f"checkpoint {resume_id!r} not found", param="resume_from_checkpoint_id")
        _check_resume(r, ckpt, load_optimizer)
        if ckpt.type == "CHECKPOINT_TYPE_TRAINING" and load_optimizer is not False:
            step = ckpt.step
    lora = _lora_config(tenant, ctx, r, body.lora_config, ckpt)
    display_name = body.display_name
    if display_name is not None:
        _check_display_name(display_name)
    cap = ctx.limits.session_cap(r.base_model, r.lora_enabled)
    if cascade.active_session_count(tenant, r) >= cap:
        raise Capacity(f"model resource {r.id} is at capacity: it holds at most {cap} concurrent "
                         f"{'LoRA' if r.lora_enabled else 'full-weight'} session(s); stop one or use another "
                         "resource", retryable=False)
    now, metadata = ctx.now, body.metadata
    s = Session(id=tenant.ids.uuid("session"), model_resources_id=r.id, created_by=ctx.principal.user,
                base_model=r.base_model, status=_CREATING, created_at=now, updated_at=now,
                lora_config=lora, display_name=display_name or None,
                metadata=(_bounded_metadata(ctx, _clean_metadata(metadata)) or None) if metadata else None,
                resume_from_checkpoint_id=resume_id or None, load_optimizer=load_optimizer, step=step,
                trainer_step=step, target_weights_version=step, applied_weights_version=step)
    tenant.sessions.add(s)
    tenant.sessions_of.setdefault(r.id, []).append(s.id)
    tenant.events.transition(now, tenant.project, "training_session", s.id, None, s.status, None)  # (Tenant.log's)
    if r.status == _READY:
        model_resources.touch(tenant, r, now)
        tenant.timeline.schedule(later(now, ctx.timing.session_creating_seconds), TimelineEvent.SESSION_RUNNING, s.id)
    return s


def _check_resume(r: ModelResource, ckpt: Checkpoint, load_optimizer: bool | None) -> None:
    if ckpt.base_model != r.base_model:
        raise Invalid(f"checkpoint {ckpt.id} was trained from {ckpt.base_model}; this resource serves "
                             f"{r.base_model}", param="resume_from_checkpoint_id")
    if (ckpt.lora_rank is None) == bool(r.lora_enabled):
        raise Invalid(f"checkpoint {ckpt.id} is a {'full-weight' if ckpt.lora_rank is None else 'LoRA'} "
                             "checkpoint and cannot resume on this resource's training mode",
                             param="resume_from_checkpoint_id")
    if ckpt.type == "CHECKPOINT_TYPE_INFERENCE" and load_optimizer:
        raise Invalid("load_optimizer is not valid with an inference checkpoint, which carries no "
                             "optimizer tenant", param="load_optimizer")


# What a resumed adapter must keep: its shape (rank, whether the output head has one) and its scale (alpha,
# baked into what the adapter learned). Dropout only acts while training, so a resume may change it.
_RESUME_FIXED = ("rank", "alpha", "train_unembed")


def _resumed_lora(ckpt: Checkpoint, given: LoraValues) -> LoraValues:
    """The checkpoint's LoRA config, which a resumed session inherits: a ``lora_config`` the caller gives is
    compared, never applied, except ``dropout``; ``seed`` is ignored (documented: "Ignored when ... the
    session resumes from a checkpoint"), so the checkpoint's seed, if it had one, stays."""
    inherited = checkpoint_lora_config(ckpt)
    for key in _RESUME_FIXED:
        if key in given and _same_type(key, given[key]) != inherited[key]:
            raise Invalid(f"lora_config.{key} {_show(given[key])} differs from the checkpoint's {key} "
                                 f"{_show(inherited[key])}; omit it to inherit the checkpoint's",
                                 param=f"lora_config.{key}")
    cfg = dict(inherited)
    if "dropout" in given:
        cfg["dropout"] = float(given["dropout"] or 0)
    return cfg


def checkpoint_lora_config(ckpt: Checkpoint) -> LoraValues:
    """The LoRA config a LoRA checkpoint was trained with. Checkpoints from states exported before it was
    stored carry only the model spec: rank, alpha and train_unembed come from there, dropout is the default."""
    if ckpt.lora_config is not None:
        return {k: v for k in LORA_KEYS if (v := getattr(ckpt.lora_config, k)) is not None}
    spec = _spec_of(ckpt)
    alpha = spec.get("lora_alpha")
    return {**DEFAULT_LORA, "rank": ckpt.lora_rank,
            "alpha": int(alpha) if isinstance(alpha, (int, float)) and alpha else DEFAULT_LORA["alpha"],
            "train_unembed": bool(spec.get("train_unembed", True))}


def _spec_of(ckpt: Checkpoint) -> JsonObject:
    state = ckpt.model_state or {}
    spec = state.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _same_type(key: str, value: Any) -> Any:
    return bool(value) if key == "train_unembed" else int(value)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_display_name(name: str) -> None:
    limit = rules.DISPLAY_NAME_MAX_LENGTH
    if len(name) > limit:
        raise Invalid(f"display_name must be at most {limit} characters", param="display_name")


def _bounded_metadata(ctx: Ctx, metadata: dict[str, Json]) -> dict[str, Json]:
    """Free-form metadata is shown in every answer and list of its session: bounded in size where it enters
    (``session_metadata_kib`` in the limits file; [inferred] the real limit is undocumented)."""
    limit = ctx.limits.session_metadata_kib << 10
    if metadata and len(orjson.dumps(metadata)) > limit:
        raise Invalid(f"metadata is larger than {limit} bytes of JSON (session_metadata_kib in the limits file)",
                      param="metadata", code="metadata_too_large")
    return metadata


def _clean_metadata(metadata: JsonObject | None) -> dict[str, Json]:
    """Drop empty strings and nulls: in updates an empty string clears a value."""
    if not metadata:
        return {}
    out: dict[str, Json] = {}
    for key, value in metadata.items():
        if isinstance(value, Mapping):
            inner = _clean_metadata(value)
            if inner:
                out[key] = inner
        elif value not in (None, ""):
            out[key] = value
    return out


def get(tenant: Tenant, session_id: str) -> Session:
    return lookup(tenant.sessions, session_id, "training session", "session_id")


# What the list's `status` filter takes: every status (UNSPECIFIED, the protobuf zero value, is none of them).
FILTER_STATUSES = frozenset(s.value for s in SessionStatus)


def list_(tenant: Tenant, ctx: Ctx, *, status: set[str] | None, model_resources_id: str | None,
          created_by: str | None, after: str | None, limit: int) -> tuple[list[Session], bool]:
    creator = ctx.principal.user if created_by == "me" else created_by

    def keep(s: Session) -> bool:
        return ((status is None or s.status in status)
                and (model_resources_id is None or s.model_resources_id == model_resources_id)
                and (creator is None or s.created_by == creator))

    if model_resources_id is not None:
        # Walk only that resource's sessions (it keeps them in creation order), not the whole project.
        return page_ids(tenant.sessions_of.get(model_resources_id, []), tenant.sessions, after, limit, keep)
    no_filter = status is None and creator is None
    return page(tenant.sessions, after, limit, None if no_filter else keep)


def update(tenant: Tenant, ctx: Ctx, session_id: str, body: UpdateRequest) -> Session:
    s = get(tenant, session_id)
    if body.display_name is not None:
        name = body.display_name
        _check_display_name(name)
        s.display_name = name or None
    if body.metadata is not None:
        merged = _merge(s.metadata or {}, body.metadata)
        s.metadata = _bounded_metadata(ctx, _clean_metadata(merged)) or None
    s.updated_at = max(ctx.now, s.updated_at)
    return s


def _merge(old: JsonObject, new: JsonObject) -> dict[str, Json]:
    out = dict(old)
    for key, value in new.items():
        old_value = out.get(key)
        if isinstance(value, Mapping) and isinstance(old_value, Mapping):
            out[key] = _merge(old_value, value)
        elif value is not None:
            out[key] = value
    return out


def stop(tenant: Tenant, ctx: Ctx, session_id: str) -> Session:
    s = get(tenant, session_id)
    cascade.stop_session(tenant, ctx, s, ctx.now)
    return s


def on_running(tenant: Tenant, ctx: Ctx, s: Session, at: float) -> None:
    if s.status != _CREATING:
        return
    r = tenant.resources[s.model_resources_id]
    if r.status != _READY:
        return
    transition(tenant, s, S.RUNNING, at)
    model_resources.touch(tenant, r, at)


def on_stopped(tenant: Tenant, ctx: Ctx, s: Session, at: float) -> None:
    if s.status == S.STOPPING:
        transition(tenant, s, S.STOPPED, at)

