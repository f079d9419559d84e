"""Export and import the whole state as one JSON document (the fixture and ``--state-file`` format).

The document holds every tenant's records, list order, idempotency keys, pending timeline events,
id counters, the model registry, presigned tokens, the clock, and each session's simulated model
(weights and optimizer) so a restored emulator continues exactly where it stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emulator.clock import parse_rfc3339, rfc3339
from emulator.domain import records
from emulator.store.memory import STATE_FORMAT, STATE_VERSION, OrderedIndex, TenantState

if TYPE_CHECKING:
    from emulator.runtime import Runtime

TABLES = (("resources", "ModelResource", "resource_index"), ("sessions", "Session", "session_index"),
          ("operations", "Operation", None), ("checkpoints", "Checkpoint", "checkpoint_index"),
          ("payloads", "Payload", None), ("shaping_jobs", "ShapingJob", "shaping_index"))


class StateError(ValueError):
    pass


def export_state(runtime: Runtime) -> dict[str, Any]:
    store = runtime.store
    runtime.settle_all()
    tenants = {}
    for project in store.projects():
        with store.transaction(project) as state:
            tenants[project] = _export_tenant(state)
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "seed": store.seed,
        "clock": runtime.clock.describe(),
        "presigned": {k: list(v) for k, v in store.presigned.items()},
        "tenants": tenants,
    }


def _export_tenant(state: TenantState) -> dict[str, Any]:
    out: dict[str, Any] = {"ids_counter": state.ids.counter}
    for table, _cls, index in TABLES:
        items = getattr(state, table)
        order = getattr(state, index).ids() if index else list(items)
        out[table] = [records.to_dict(items[i]) for i in order]
    out["idempotency"] = [[*k, v] for k, v in state.idempotency.items()]
    out["timeline"] = [[at, event, obj_id] for at, _seq, event, obj_id in sorted(state.timeline)]
    out["registry"] = state.registry
    out["gpu_queue_tail"] = state.gpu_queue_tail
    out["models"] = {sid: model.to_state() for sid, model in state.models.items()}
    out["published"] = {key: {"version": version, "weights": _weights_state(weights)}
                        for key, (version, weights) in state.published.items()}
    return out


def _weights_state(weights: Any) -> Any:
    return weights.to_state()


def import_state(runtime: Runtime, doc: dict[str, Any]) -> None:
    if doc.get("format") != STATE_FORMAT:
        raise StateError(f"not an emulator state document (format must be {STATE_FORMAT!r})")
    if doc.get("version") != STATE_VERSION:
        raise StateError(f"state version {doc.get('version')!r} is not supported (this emulator reads "
                         f"version {STATE_VERSION})")
    try:
        built = {project: _import_tenant(runtime, project, data) for project, data in doc["tenants"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"state document is malformed: {exc!r}") from exc
    store = runtime.store
    store.reset(None, seed=int(doc.get("seed", store.seed)))
    for project, state in built.items():
        store.tenant(project)
        store._tenants[project] = state  # noqa: SLF001 - the store's own module family
    store.presigned.update({k: tuple(v) for k, v in (doc.get("presigned") or {}).items()})
    clock = doc.get("clock") or {}
    if clock.get("now"):
        at = parse_rfc3339(clock["now"])
        if at > runtime.clock.now():
            runtime.clock.set_time(at)


def _import_tenant(runtime: Runtime, project: str, data: dict[str, Any]) -> TenantState:
    from emulator.compute import SessionModel, Weights
    from emulator.domain.operations import model_spec

    state = TenantState(project, runtime.store.seed, runtime.store.events)
    state.ids.counter = int(data.get("ids_counter", 0))
    for table, cls_name, index in TABLES:
        cls = records.RECORD_TYPES[cls_name]
        target = getattr(state, table)
        idx: OrderedIndex | None = getattr(state, index) if index else None
        for item in data.get(table, []):
            record = records.from_dict(cls, item)
            target[record.id] = record
            if idx is not None:
                idx.add(record.id)
            if cls_name == "ModelResource" and record.status == "MODEL_RESOURCES_STATUS_PENDING":
                state.gpu_queue.setdefault(record.gpu_type, []).append(record.id)
    state.idempotency = {(a, b, c): v for a, b, c, v in data.get("idempotency", [])}
    for at, event, obj_id in data.get("timeline", []):
        state.schedule(float(at), event, obj_id)
    state.registry = dict(data.get("registry") or {})
    state.gpu_queue_tail = dict(data.get("gpu_queue_tail") or {})
    ctx = runtime.system_ctx(project)
    for sid, model_state in (data.get("models") or {}).items():
        state.models[sid] = SessionModel.from_state(model_spec(state, ctx, state.sessions[sid]), model_state)
    for key, entry in (data.get("published") or {}).items():
        state.published[key] = (int(entry["version"]), Weights.from_state(entry["weights"]))
    return state


__all__ = ["StateError", "export_state", "import_state", "rfc3339"]
