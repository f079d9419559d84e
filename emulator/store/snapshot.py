"""Export and import the whole state as one JSON document (the fixture and ``--state-file`` format).

The document holds every tenant's records, list order, idempotency keys, pending timeline events,
id counters, the model registry, each session's simulated model (its spec, weights and optimizer),
presigned URL grants and the clock, so a restored emulator continues exactly where it stopped.

An imported document is checked completely before anything in the store changes: a JSON Schema built
from the record classes (types, required fields, status enums, time bounds), then the references
between records (a session's resource exists, a queued operation exists, ...), then the models. A
document that fails any check is refused with the first problem's path, and the store stays as it was.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import MISSING, asdict, fields
from typing import Any

import orjson
from jsonschema import Draft7Validator

from emulator import compute
from emulator.clock import MAX_TIME
from emulator.store import records
from emulator.store.memory import OrderedIndex, Store, TenantState
from emulator.store.presigned import KINDS as GRANT_KINDS

STATE_FORMAT = "together-rl-emulator/state"
STATE_VERSION = 2

TABLES = (("resources", records.ModelResource, "resource_index"), ("sessions", records.Session, "session_index"),
          ("operations", records.Operation, None), ("checkpoints", records.Checkpoint, "checkpoint_index"),
          ("payloads", records.Payload, None), ("shaping_jobs", records.ShapingJob, "shaping_index"))


class StateError(ValueError):
    pass


# --- export -----------------------------------------------------------------------------------------

def export_tenant(state: TenantState) -> dict[str, Any]:
    out: dict[str, Any] = {"ids_counter": state.ids.counter}
    for table, _cls, index in TABLES:
        items = getattr(state, table)
        order = getattr(state, index).ids() if index else list(items)
        out[table] = [records.to_dict(items[i]) for i in order]
    out["idempotency"] = [[*k, v] for k, v in state.idempotency.items()]
    out["timeline"] = [[at, event, obj_id] for at, _seq, event, obj_id in sorted(state.timeline)]
    out["registry"] = state.registry
    out["gpu_queue_tail"] = state.gpu_queue_tail
    out["models"] = {sid: {"spec": asdict(model.spec), "state": model.to_state()} for sid, model in state.models.items()}
    out["published"] = {key: {"version": version, "weights": weights.to_state()}
                        for key, (version, weights) in state.published.items()}
    return out


class TenantMemo:
    """What a journal already holds of one tenant, so the next line carries only what changed.

    Records are remembered by the hash of their JSON (or as final: an operation that finished, a
    checkpoint, a payload whose data was released never change again), models by identity and version, published
    weights by identity (they are replaced, never edited), idempotency keys by count (only added).
    """

    __slots__ = ("records", "models", "published", "idempotency")

    def __init__(self) -> None:
        self.records: dict[str, dict[str, int | None]] = {table: {} for table, _cls, _index in TABLES}
        self.models: dict[str, tuple[Any, int]] = {}
        self.published: dict[str, Any] = {}
        self.idempotency = 0


FINISHED_OPERATIONS = frozenset({records.OperationStatus.COMPLETED.value, records.OperationStatus.FAILED.value})
_FINAL: dict[str, Any] = {
    "operations": lambda r: r.status in FINISHED_OPERATIONS,
    "checkpoints": lambda r: True,
    "payloads": lambda r: r.released_by is not None,  # uploaded bytes stay until an operation has read them
}


def export_tenant_changes(state: TenantState, memo: TenantMemo) -> dict[str, Any]:
    """What changed in the tenant since ``memo`` (all of it for a new memo), and update the memo.
    :func:`apply_tenant_changes` applies the result to a tenant document."""
    upsert: dict[str, list[Any]] = {}
    state.journaled = True
    reopened, state.reopened = state.reopened, set()
    for table, _cls, index in TABLES:
        items = getattr(state, table)
        seen = memo.records[table]
        final = _FINAL.get(table)
        out = []
        for obj_id in (getattr(state, index).ids() if index else list(items)):
            known = seen.get(obj_id, -1)  # -1: never written (CPython never gives -1 as a hash)
            if known is None and obj_id not in reopened:  # written when it could no longer change
                continue
            record = items[obj_id]
            blob = orjson.dumps(records.to_dict(record))
            digest = hash(blob)
            if known == digest:
                continue
            seen[obj_id] = None if final is not None and final(record) else digest
            out.append(orjson.Fragment(blob))
        if out:
            upsert[table] = out
    models = {}
    for sid, model in state.models.items():
        entry = memo.models.get(sid)
        if entry is None or entry[0] is not model or entry[1] != model.version:
            models[sid] = {"spec": asdict(model.spec), "state": model.to_state()}
            memo.models[sid] = (model, model.version)
    published = {}
    for key, pair in state.published.items():
        if memo.published.get(key) is not pair:
            published[key] = {"version": pair[0], "weights": pair[1].to_state()}
            memo.published[key] = pair
    dropped = [key for key in memo.published if key not in state.published]
    for key in dropped:
        del memo.published[key]
    keys = list(state.idempotency.items())[memo.idempotency:]
    memo.idempotency += len(keys)
    return {"upsert": upsert, "models": models, "published": published, "published_dropped": dropped,
            "idempotency": [[*k, v] for k, v in keys], "ids_counter": state.ids.counter,
            "timeline": [[at, event, obj_id] for at, _seq, event, obj_id in sorted(state.timeline)],
            "registry": state.registry, "gpu_queue_tail": state.gpu_queue_tail}


def apply_tenant_changes(tenant: dict[str, Any], changes: dict[str, Any],
                         positions: dict[str, dict[str, int]]) -> None:
    """Apply :func:`export_tenant_changes` to a tenant document; ``positions`` (table -> id -> index,
    kept by the caller for this tenant document) finds the records to replace."""
    for table, rows in changes["upsert"].items():
        listed = tenant.setdefault(table, [])
        where = positions.get(table)
        if where is None:
            where = positions[table] = {row["id"]: i for i, row in enumerate(listed)}
        for row in rows:
            at = where.get(row["id"])
            if at is None:
                where[row["id"]] = len(listed)
                listed.append(row)
            else:
                listed[at] = row
    tenant.setdefault("models", {}).update(changes["models"])
    published = tenant.setdefault("published", {})
    published.update(changes["published"])
    for key in changes["published_dropped"]:
        published.pop(key, None)
    tenant.setdefault("idempotency", []).extend(changes["idempotency"])
    for key in ("ids_counter", "timeline", "registry", "gpu_queue_tail"):
        tenant[key] = changes[key]


def export_state(store: Store, clock: dict[str, Any]) -> dict[str, Any]:
    """The whole store; the caller settles every tenant first, so what is due has happened."""
    tenants = {}
    for project in store.projects():
        with store.transaction(project, write=False) as state:
            tenants[project] = export_tenant(state)
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "seed": store.seed, "clock": clock,
            "presigned": store.presigned.export(), "tenants": tenants}


# --- the schema -------------------------------------------------------------------------------------

_TIME = {"type": "number", "minimum": 0, "maximum": MAX_TIME}
_SCALARS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"}, "int": {"type": "integer"}, "float": _TIME, "bool": {"type": "boolean"},
    "dict[str, Any]": {"type": "object"},
    "dict[str, int]": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "list[str]": {"type": "array", "items": {"type": "string"}},
    "list[dict[str, Any]]": {"type": "array", "items": {"type": "object"}},
    "bytes": {"type": "object", "required": ["__bytes__"], "additionalProperties": False,
              "properties": {"__bytes__": {"type": "string"}}},
}
_ENUMS: dict[type, dict[str, list[str]]] = {
    records.ModelResource: {"status": [s.value for s in records.ResourceStatus]},
    records.Session: {"status": [s.value for s in records.SessionStatus]},
    records.Operation: {"status": [s.value for s in records.OperationStatus], "kind": list(records.OPERATION_KINDS)},
    records.Checkpoint: {"type": list(records.CHECKPOINT_TYPES)},
    records.ShapingJob: {"status": [s.value for s in records.ShapingStatus]},
}


def _field_schema(annotation: str) -> dict[str, Any]:
    parts = [p.strip() for p in annotation.split("|")]
    base = [p for p in parts if p != "None"]
    if len(base) != 1 or base[0] not in _SCALARS:
        raise TypeError(f"no state schema for the annotation {annotation!r}")
    schema = _SCALARS[base[0]]
    return {"anyOf": [schema, {"type": "null"}]} if "None" in parts else schema


def _record_schema(cls: type) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    for f in fields(cls):
        props[f.name] = _field_schema(str(f.type))
        if f.name in _ENUMS.get(cls, {}):
            props[f.name] = {"enum": _ENUMS[cls][f.name]}
        if f.default is MISSING and f.default_factory is MISSING:
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _state_schema(events: Collection[str]) -> dict[str, Any]:
    string = {"type": "string"}
    tenant_props: dict[str, Any] = {table: {"type": "array", "items": _record_schema(cls)} for table, cls, _ in TABLES}
    tenant_props.update({
        "ids_counter": {"type": "integer", "minimum": 0},
        "idempotency": {"type": "array", "items": {"type": "array", "items": string, "minItems": 4, "maxItems": 4}},
        "timeline": {"type": "array", "items": {"type": "array", "minItems": 3, "maxItems": 3,
                                                 "items": [_TIME, {"enum": sorted(events)}, string]}},
        "registry": {"type": "object", "additionalProperties": {"type": "object"}},
        "gpu_queue_tail": {"type": "object", "additionalProperties": _TIME},
        "models": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["spec", "state"], "properties": {"spec": {"type": "object"},
                                                                           "state": {"type": "object"}}}},
        "published": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["version", "weights"],
            "properties": {"version": {"type": "integer", "minimum": 0}, "weights": {"type": "object"}}}},
    })
    grant = {"type": "object", "required": ["project", "kind", "object_id", "expires_at"],
             "additionalProperties": False,
             "properties": {"project": string, "kind": {"enum": list(GRANT_KINDS)}, "object_id": string,
                            "expires_at": _TIME, "variant": {"type": ["string", "null"]}, "used": {"type": "boolean"}}}
    return {
        "type": "object",
        "required": ["format", "version", "tenants"],
        "properties": {
            "format": {"const": STATE_FORMAT},
            "version": {"const": STATE_VERSION},
            "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
            "clock": {"type": "object", "properties": {"now": {"type": "string", "format": "date-time"}}},
            "presigned": {"type": "object", "additionalProperties": grant},
            "tenants": {"type": "object", "additionalProperties": {
                "type": "object", "properties": tenant_props, "additionalProperties": False}},
        },
    }


_VALIDATORS: dict[frozenset[str], Draft7Validator] = {}


def _validator(events: Collection[str]) -> Draft7Validator:
    key = frozenset(events)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = Draft7Validator(_state_schema(events), format_checker=Draft7Validator.FORMAT_CHECKER)
    return _VALIDATORS[key]


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def check(doc: Any, events: Collection[str]) -> None:
    """Raise :class:`StateError` naming the first problem of ``doc`` (schema first, so the messages for
    the common mistakes, a wrong format or version, are the plain ones)."""
    if not isinstance(doc, dict):
        raise StateError("a state document is a JSON object")
    if doc.get("format") != STATE_FORMAT:
        raise StateError(f"not an emulator state document (format must be {STATE_FORMAT!r})")
    if doc.get("version") != STATE_VERSION:
        raise StateError(f"state version {doc.get('version')!r} is not supported (this emulator reads "
                         f"version {STATE_VERSION})")
    error = next(iter(sorted(_validator(events).iter_errors(doc), key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        raise StateError(f"{_where(error.absolute_path)}: {_short(error.message)}")


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."


# --- import -----------------------------------------------------------------------------------------

def import_state(store: Store, doc: Any, events: Collection[str]) -> None:
    """Replace the store's content with ``doc``; on any problem nothing changes (:class:`StateError`)."""
    check(doc, events)
    built = {project: build_tenant(store, project, data) for project, data in doc["tenants"].items()}
    store.reset(None, seed=int(doc.get("seed", store.seed)))
    for state in built.values():
        store.put(state)
    store.presigned.load(doc.get("presigned") or {})


def build_tenant(store: Store, project: str, data: dict[str, Any]) -> TenantState:
    """A tenant's state from its (schema-checked) document; refuses dangling references."""
    state = TenantState(project, int(store.seed), store.events)
    state.ids.counter = int(data.get("ids_counter", 0))
    for table, cls, index in TABLES:
        target = getattr(state, table)
        idx: OrderedIndex | None = getattr(state, index) if index else None
        for item in data.get(table, []):
            record = records.from_dict(cls, item)
            if record.id in target:
                raise StateError(f"tenants.{project}.{table}: the id {record.id!r} appears twice")
            target[record.id] = record
            if idx is not None:
                idx.add(record.id)
            if cls is records.ModelResource and record.status == records.ResourceStatus.PENDING.value:
                state.gpu_queue.setdefault(record.gpu_type, []).append(record.id)
    _check_references(state, project, data)
    state.idempotency = {(a, b, c): v for a, b, c, v in data.get("idempotency", [])}
    for at, event, obj_id in data.get("timeline", []):
        state.schedule(float(at), event, obj_id)
    state.registry = dict(data.get("registry") or {})
    state.gpu_queue_tail = dict(data.get("gpu_queue_tail") or {})
    try:
        for sid, entry in (data.get("models") or {}).items():
            state.models[sid] = compute.SessionModel.from_state(compute.ModelSpec(**entry["spec"]), entry["state"])
        for key, entry in (data.get("published") or {}).items():
            state.published[key] = (int(entry["version"]), compute.Weights.from_state(entry["weights"]))
    except (compute.ComputeError, TypeError, KeyError, ValueError, OverflowError) as exc:
        raise StateError(f"tenants.{project}: a session model cannot be restored: {exc}") from exc
    return state


def _check_references(state: TenantState, project: str, data: dict[str, Any]) -> None:
    where = f"tenants.{project}"

    def need(table: dict[str, Any], obj_id: Any, what: str) -> None:
        if obj_id not in table:
            raise StateError(f"{where}: {what} names {obj_id!r}, which is not in the document")

    for r in state.resources.values():
        for sid in r.session_ids:
            need(state.sessions, sid, f"model resource {r.id}'s session_ids")
    for s in state.sessions.values():
        need(state.resources, s.model_resources_id, f"session {s.id}'s model_resources_id")
        for op_id in s.queue or ():
            need(state.operations, op_id, f"session {s.id}'s queue")
        for cid in (s.inference_checkpoint_ids or []) + (s.training_checkpoint_ids or []):
            need(state.checkpoints, cid, f"session {s.id}'s checkpoints")
    for op in state.operations.values():
        need(state.sessions, op.session_id, f"operation {op.id}'s session_id")
        if op.payload_id is not None:
            need(state.payloads, op.payload_id, f"operation {op.id}'s payload_id")
        if op.output_released and op.output is not None:
            raise StateError(f"{where}: operation {op.id} has an output and output_released; a released one has none")
    for p in state.payloads.values():
        need(state.sessions, p.session_id, f"payload {p.id}'s session_id")
        if p.released_by is not None:
            need(state.operations, p.released_by, f"payload {p.id}'s released_by")
            if p.data is not None:
                raise StateError(f"{where}: payload {p.id} has data and released_by; a released payload has none")
    for sid in data.get("models") or {}:
        need(state.sessions, sid, "models")
    for key in data.get("published") or {}:
        need(state.sessions, key.removesuffix(":pending"), "published")
    for _a, _b, _c, op_id in data.get("idempotency", []):
        need(state.operations, op_id, "an idempotency entry")
    tables: dict[str, dict[str, Any]] = {"resource": state.resources, "session": state.sessions, "operation": state.operations,
              "shaping": state.shaping_jobs}
    for _at, event, obj_id in data.get("timeline", []):
        need(tables[event.split(".")[0]], obj_id, f"the timeline event {event}")


__all__ = ["STATE_FORMAT", "STATE_VERSION", "StateError", "TenantMemo", "apply_tenant_changes", "build_tenant", "check",
           "export_state", "export_tenant", "export_tenant_changes", "import_state"]
