"""The state as JSON: the whole document (export, import, fixtures, ``--state-file``) and one tenant's change.

The document holds everything a restored emulator needs to continue exactly where it stopped. An imported one
is checked completely (schema, references, models) before anything changes; a failure is refused with the first
problem's path. A session model's change is the calls that made it, replayed by :class:`TenantReplay`.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict
from types import MappingProxyType
from typing import Any

import msgspec
import orjson
from jsonschema import Draft7Validator

from emulator import compute
from emulator.clock import MAX_TIME, parse_rfc3339
from emulator.jsontypes import Json
from emulator.store import records
from emulator.store.blobs import BlobStore
from emulator.store.memory import Store
from emulator.store.tenant import Entry, Tenant, TimelineEvent

STATE_FORMAT = "together-rl-emulator/state"
STATE_VERSION = 4
RECORD_TYPES: MappingProxyType[str, type[records.Record]] = MappingProxyType({"resources": records.ModelResource, "sessions": records.Session,
                                 "operations": records.Operation, "checkpoints": records.Checkpoint,
                                 "payloads": records.Payload, "shaping_jobs": records.ShapingJob,
                                 "files": records.File, "actions": records.ScheduledAction})
BLOB_TABLES = ("files", "payloads")   # the records that name uploaded bytes (emulator.store.blobs)


class StateError(ValueError):
    pass


# --- export -----------------------------------------------------------------------------------------

def _model(model: Any) -> dict[str, Json]:
    return {"spec": asdict(model.spec), "state": model.to_state()}


def _weights(pair: tuple[int, Any]) -> dict[str, Json]:
    return {"version": pair[0], "weights": pair[1].to_state()}


def export_tenant(tenant: Tenant, *, inline_bytes: bool = False) -> dict[str, Json]:
    """``inline_bytes``: uploaded bytes in the document (a self-contained export), not named (a journal)."""
    out: dict[str, Json] = {"epoch": tenant.epoch, "seed": tenant.ids.seed, "ids_counter": tenant.ids.counter}
    for table in tenant.tables():
        if inline_bytes and table.name in BLOB_TABLES:
            out[table.name] = [_inline(r) for r in table.ordered()]
        else:
            out[table.name] = [records.to_dict(r) for r in table.ordered()]
    out["idempotency"] = [[*k, v] for k, v in tenant.idempotency.items()]
    out["timeline"] = [list(e) for e in tenant.timeline.entries()]
    out["timeline_seq"] = tenant.timeline.seq
    out["registry"] = {k: msgspec.to_builtins(v) for k, v in tenant.registry.items()}
    out["gpu_queue_tail"] = dict(tenant.gpu_queue_tail)
    models = tenant.models
    out["models"] = {sid: _model(model) for sid, model in models.live.items()}
    out["published"] = {sid: _weights(pair) for sid, pair in models.published.items()}
    out["staged"] = {sid: _weights(pair) for sid, pair in models.staged.items()}
    return out


def _inline(record: Any) -> dict[str, Json]:
    row = records.to_dict(record)
    row.pop("blob", None)
    blob = record.blob
    # (the form documents had before bytes went to the blob directory: every version since reads it)
    row["data"] = None if blob is None else {"__bytes__": blob.read().decode("latin-1")}
    return row


def export_state(store: Store, clock: dict[str, Json], *, inline_bytes: bool = False) -> dict[str, Json]:
    """The whole store; the caller settles every tenant first, so what is due has happened. ``inline_bytes``:
    see :func:`export_tenant`."""
    tenants = {project: export_tenant(tenant, inline_bytes=inline_bytes) for project in store.projects()
               if (tenant := store.get(project)) is not None}
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "seed": store.seed, "clock": clock,
            "secret": store.presigner.secret, "tenants": tenants}


# --- one tenant's change, for a journal line --------------------------------------------------------

class TenantMemo:
    """What a journal already holds of one tenant, so that its next line carries only what changed.

    A record is remembered by the hash of its JSON, or as ``None`` once written final (no hash is kept: a
    change to it is still noted, and written); models by identity and version (a
    model the journal holds notes its calls from there: ``SessionModel.track_changes``); published and
    staged weights by identity (they are replaced, never edited); small scalars by value.
    """

    __slots__ = ("models", "published", "records", "scalars", "staged")

    def __init__(self) -> None:
        self.records: dict[str, dict[str, int | None]] = {name: {} for name in RECORD_TYPES}
        self.models: dict[str, tuple[Any, int]] = {}
        self.published: dict[str, tuple[int, Any]] = {}
        self.staged: dict[str, tuple[int, Any]] = {}
        self.scalars: dict[str, Json] = {}


def memo_of(tenant: Tenant) -> TenantMemo:
    """What a journal holds of ``tenant`` when it holds all of it (just loaded, or just written whole): a
    record touched later is written only if it really changed, even right after a restart."""
    memo = TenantMemo()
    for table in tenant.tables():
        seen = memo.records[table.name]
        for record in table.values():
            seen[record.id] = None if table.final(record) else hash(orjson.dumps(records.to_dict(record)))
    memo.models = {sid: (model, model.version) for sid, model in tenant.models.live.items()}
    for model in tenant.models.live.values():
        model.track_changes()  # from here on, a line carries the calls that change it, not the model
    memo.published = dict(tenant.models.published)
    memo.staged = dict(tenant.models.staged)
    memo.scalars = {"seed": tenant.ids.seed, "ids_counter": tenant.ids.counter, "timeline_seq": tenant.timeline.seq,
                    "gpu_queue_tail": dict(tenant.gpu_queue_tail)}
    return memo


def tenant_change(tenant: Tenant, memo: TenantMemo) -> dict[str, Json]:
    """What changed in ``tenant`` since its journal last wrote it (its parts' change logs, checked against
    ``memo``), and update the memo; empty when nothing did. :func:`apply_change` replays it."""
    change: dict[str, Json] = {}
    upsert: dict[str, list[Any]] = {}
    removed: dict[str, list[str]] = {}
    for table in tenant.tables():
        touched, gone = table.drain()
        seen = memo.records[table.name]
        rows = []
        for obj_id in sorted(touched):  # (added or changed: a record notes its own changes)
            known = seen.get(obj_id, -1)  # -1: never written (CPython never gives -1 as a hash); None: final
            record = table.get(obj_id)
            if record is None:
                continue
            blob = orjson.dumps(records.to_dict(record))
            digest = hash(blob)
            if known == digest:
                continue
            seen[obj_id] = None if table.final(record) else digest
            rows.append(orjson.Fragment(blob))
        if rows:
            upsert[table.name] = rows
        if gone:
            removed[table.name] = sorted(gone)
            for obj_id in gone:
                seen.pop(obj_id, None)
    if upsert:
        change["upsert"] = upsert
    if removed:
        change["removed"] = removed
    added, done = tenant.timeline.drain()
    if added or done:
        change["timeline"] = {"add": [list(e) for e in added], "done": done}
    keys, dropped_keys = tenant.idempotency.drain()
    if keys or dropped_keys:
        change["idempotency"] = {"add": [[*k, v] for k, v in sorted(keys.items())],
                                 "drop": [list(k) for k in sorted(dropped_keys)]}
    registered, _unregistered = tenant.registry.drain()  # (the registry only grows)
    if registered:
        change["registry"] = {k: msgspec.to_builtins(v) for k, v in registered.items()}
    models_touched, weights_touched = tenant.models.drain()
    models: dict[str, Json] = {}
    model_calls: dict[str, Json] = {}
    passed: dict[str, dict[int, tuple[int, Any]]] = {}  # per session: id(weights) -> (step, weights) on the way
    for sid in sorted(models_touched):
        model = tenant.models.live.get(sid)
        entry = memo.models.get(sid)
        if model is None or (entry is not None and entry[0] is model and entry[1] == model.version):
            continue
        changes = model.changes_since(entry[1]) if entry is not None and entry[0] is model else None
        if changes is None:
            models[sid] = _model(model)
            model.track_changes()
        else:
            model_calls[sid] = changes[0]
            passed[sid] = {id(w): (step, w) for step, w in changes[1]}
        memo.models[sid] = (model, model.version)
    if models:
        change["models"] = models
    if model_calls:
        change["model_calls"] = model_calls
    for part, kept, memo_part in (("published", tenant.models.published, memo.published),
                                  ("staged", tenant.models.staged, memo.staged)):
        out: dict[str, Json] = {}
        for sid in sorted(weights_touched):
            pair = kept.get(sid)
            if pair is None:
                if sid in memo_part:
                    del memo_part[sid]
                    out[sid] = None
            elif memo_part.get(sid) is not pair:
                out[sid] = _weights_named(tenant, memo, sid, pair, passed.get(sid), part)
                memo_part[sid] = pair
        if out:
            change[part] = out
    for key, value in (("seed", tenant.ids.seed), ("ids_counter", tenant.ids.counter),
                       ("timeline_seq", tenant.timeline.seq), ("gpu_queue_tail", tenant.gpu_queue_tail)):
        if memo.scalars.get(key) != value:
            memo.scalars[key] = copy.copy(value)
            change[key] = value
    return change


def _weights_named(tenant: Tenant, memo: TenantMemo, sid: str, pair: tuple[int, Any],
                   passed: dict[int, tuple[int, Any]] | None, part: str) -> dict[str, Json]:
    """A published or staged entry for a journal line: weights are snapshots of the session's model, so the
    line names the model's step when the journal holds the model at that step (now, or on the way through
    this line's calls), or the staged entry it came from; only weights of nothing the journal holds are
    written whole."""
    version, weights = pair
    model = tenant.models.live.get(sid)
    if model is not None and memo.models.get(sid) == (model, model.version) and weights is model.weights():
        return {"version": version, "step": model.step}
    if passed is not None and id(weights) in passed:
        return {"version": version, "step": passed[id(weights)][0]}
    staged = memo.staged.get(sid)
    if part == "published" and staged is not None and staged[1] is weights:
        return {"version": version, "staged": True}
    return _weights(pair)


class TenantReplay:
    """A tenant document being rebuilt from journal lines: tables and timeline keyed by id while lines
    apply (so a change costs what it holds), turned back into a document by :meth:`document`. A session
    model that lines change by their calls is rebuilt once and replayed (:meth:`SessionModel.replay`)."""

    def __init__(self, data: dict[str, Any], bases: compute.BaseModels | None = None) -> None:
        self.data = data
        self.tables = {name: {row["id"]: row for row in data.get(name, [])} for name in RECORD_TYPES}
        self.timeline = {e[1]: e for e in data.get("timeline", [])}
        self.idempotency = {tuple(e[:3]): e[3] for e in data.get("idempotency", [])}
        self.bases = bases
        self.models: dict[str, compute.SessionModel] = {}  # the models replayed, by session
        self.differ: list[tuple[str, int]] = []  # (session, step) whose replayed weights differ from the noted
        self.work = 0                           # trained entries stepped by the optim steps replayed

    def apply(self, change: dict[str, Any]) -> None:
        for name, rows in change.get("upsert", {}).items():
            table = self.tables[name]
            for row in rows:
                table[row["id"]] = row
        for name, ids in change.get("removed", {}).items():
            for obj_id in ids:
                self.tables[name].pop(obj_id, None)
        timeline = change.get("timeline")
        if timeline is not None:
            for entry in timeline["add"]:
                self.timeline[entry[1]] = entry
            for seq in timeline["done"]:
                if self.timeline.pop(seq, None) is None:
                    raise KeyError(f"timeline entry {seq} is done but was never scheduled")
        keys = change.get("idempotency")
        if keys is not None:
            for a, b, c, v in keys["add"]:
                self.idempotency[(a, b, c)] = v
            for a, b, c in keys["drop"]:
                self.idempotency.pop((a, b, c), None)
        data = self.data
        data.setdefault("registry", {}).update(change.get("registry", {}))
        for sid, entry in change.get("models", {}).items():
            data.setdefault("models", {})[sid] = entry
            self.models.pop(sid, None)
        passed: dict[str, dict[int, Any]] = {}
        for sid, calls in change.get("model_calls", {}).items():
            model = self._model(sid)
            try:
                passed[sid], differ = model.replay(calls)
            except compute.ComputeError as exc:
                raise ValueError(f"session {sid}'s model does not replay: {exc.message}") from exc
            self.differ += [(sid, step) for step in differ]
            self.work += (len(passed[sid]) - 1) * model.weights().num_entries
        staged_before = dict(data.get("staged") or {})
        for part in ("published", "staged"):
            kept = data.setdefault(part, {})
            for sid, entry in change.get(part, {}).items():
                if entry is None:
                    kept.pop(sid, None)
                elif "weights" in entry:
                    kept[sid] = entry
                elif entry.get("staged"):
                    kept[sid] = {**staged_before[sid], "version": entry["version"]}
                else:
                    kept[sid] = {"version": entry["version"], "weights": self._weights_at(sid, entry["step"], passed)}
        for key in ("seed", "ids_counter", "timeline_seq", "gpu_queue_tail", "epoch"):
            if key in change:
                data[key] = change[key]

    def _model(self, sid: str) -> Any:
        model = self.models.get(sid)
        if model is None:
            entry = self.data["models"][sid]
            model = self.models[sid] = compute.SessionModel.from_state(compute.ModelSpec(**entry["spec"]),
                                                                       entry["state"], bases=self.bases)
        return model

    def _weights_at(self, sid: str, step: int, passed: dict[str, dict[int, Any]]) -> Any:
        """The weights of session ``sid``'s model at ``step``, as the journal holds it at this line: a
        :class:`~emulator.compute.Weights` (written out by :meth:`document`) or the state's own JSON."""
        if sid in passed and step in passed[sid]:
            return passed[sid][step]
        model = self.models.get(sid)
        if model is not None and model.step == step:
            return model.weights()
        state = self.data["models"][sid]["state"]
        if model is None and state.get("step") == step:
            return state["weights"]
        raise ValueError(f"session {sid}'s weights of step {step} are named, but its model is at step "
                         f"{model.step if model is not None else state.get('step')}")

    def document(self) -> dict[str, Any]:
        data = self.data
        for name, rows in self.tables.items():
            data[name] = list(rows.values())
        data["timeline"] = sorted(self.timeline.values())
        data["idempotency"] = [[*k, v] for k, v in self.idempotency.items()]
        for sid, model in self.models.items():
            data["models"][sid] = {**data["models"][sid], "state": model.to_state()}
        for part in ("published", "staged"):
            for entry in (data.get(part) or {}).values():
                if not isinstance(entry["weights"], dict):
                    entry["weights"] = entry["weights"].to_state()
        return data


# --- the schema -------------------------------------------------------------------------------------

def _time() -> dict[str, Json]:
    return {"type": "number", "minimum": 0, "maximum": MAX_TIME}


def _type_schema(tp: Any) -> dict[str, Json]:
    """The schema of a record field's type (a fresh dict: schemas are built per validator, not shared). A
    number of a record is a time; an immutable value (a struct: an error, a LoRA config...) and free JSON are
    objects here, read by their type as the record is built (:func:`records.from_dict`) and held to the spec by
    the import check of the layers above."""
    if tp is Any:  # an operation's body: read through its kind (Store.bodies)
        return {"anyOf": [{"type": "object"}, {"type": "null"}]}
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if type(None) in typing.get_args(tp):
        inner = _type_schema(args[0]) if len(args) == 1 else {"type": "object"}  # (an operation's body)
        return {"anyOf": [inner, {"type": "null"}]}
    origin = typing.get_origin(tp)
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is not None and issubclass(origin, Mapping):
        values = args[1] if len(args) == 2 else Any
        return {"type": "object", **({"additionalProperties": {"type": "integer", "minimum": 0}} if values is int
                                     else {})}
    simple: dict[type, dict[str, Json]] = {str: {"type": "string"}, int: {"type": "integer"}, float: _time(),
                                          bool: {"type": "boolean"}}
    if tp in simple:
        return simple[tp]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return {"type": "object"}
    raise TypeError(f"no state schema for the type {tp!r}")


_ENUMS: MappingProxyType[type, MappingProxyType[str, tuple[str, ...]]] = MappingProxyType({
    records.ModelResource: MappingProxyType({"status": tuple(s.value for s in records.ResourceStatus)}),
    records.Session: MappingProxyType({"status": tuple(s.value for s in records.SessionStatus)}),
    records.Operation: MappingProxyType({"status": tuple(s.value for s in records.OperationStatus)}),
    records.Checkpoint: MappingProxyType({"type": tuple(t.value for t in records.CheckpointType)}),
    records.ShapingJob: MappingProxyType({"status": tuple(s.value for s in records.ShapingStatus)}),
    records.File: MappingProxyType({"processing_status": tuple(records.FILE_STATUSES)}),
    records.ScheduledAction: MappingProxyType({"status": tuple(s.value for s in records.ActionStatus),
                                               "action": tuple(k.value for k in records.ActionKind)}),
})


def _record_schema(cls: type[records.Record]) -> dict[str, Json]:
    props: dict[str, Json] = {}
    required = []
    for f in msgspec.structs.fields(cls):
        props[f.name] = _type_schema(f.type)
        if f.name == "blob":  # a file name in the blob directory: nothing else may stand there
            props[f.name] = {"anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]}
        if f.name in _ENUMS.get(cls, {}):
            props[f.name] = {"enum": list(_ENUMS[cls][f.name])}
        if f.required:
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def state_schema() -> dict[str, Json]:
    string: dict[str, Json] = {"type": "string"}
    count: dict[str, Json] = {"type": "integer", "minimum": 0, "maximum": 2**53}
    weights: dict[str, Json] = {"type": "object", "required": ["version", "weights"],
                                "properties": {"version": count, "weights": {"type": "object"}}}
    tenant_props: dict[str, Json] = {name: {"type": "array", "items": _record_schema(cls)}
                                    for name, cls in RECORD_TYPES.items()}
    tenant_props.update({
        "epoch": {"type": "string", "minLength": 1},
        "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},   # a tenant seeded on its own
        "ids_counter": count,
        "idempotency": {"type": "array", "items": {"type": "array", "items": string, "minItems": 4, "maxItems": 4}},
        "timeline": {"type": "array", "items": {"type": "array", "minItems": 4, "maxItems": 4, "items": [
            _time(), count, {"enum": [e.value for e in TimelineEvent]}, string]}},
        "timeline_seq": count,
        "registry": {"type": "object", "additionalProperties": {"type": "object"}},
        "gpu_queue_tail": {"type": "object", "additionalProperties": _time()},
        "models": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["spec", "state"], "properties": {"spec": {"type": "object"},
                                                                           "state": {"type": "object"}}}},
        "published": {"type": "object", "additionalProperties": weights},
        "staged": {"type": "object", "additionalProperties": weights},
    })
    return {
        "type": "object",
        "required": ["format", "version", "tenants"],
        "properties": {
            "format": {"const": STATE_FORMAT},
            "version": {"const": STATE_VERSION},
            "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
            "clock": {"type": "object", "properties": {"now": {"type": "string", "format": "date-time"}}},
            "secret": {"type": "string", "minLength": 32, "maxLength": 256},
            "tenants": {"type": "object", "additionalProperties": {
                "type": "object", "properties": tenant_props, "additionalProperties": False}},
        },
    }


class Checker:
    """The state schema compiled once (a runtime owns one: building it costs a few milliseconds)."""

    def __init__(self) -> None:
        self._validator: Draft7Validator | None = None

    def check(self, doc: Any) -> None:
        """Raise :class:`StateError` naming the first problem of ``doc`` (schema first, so the messages for
        the common mistakes, a wrong format or version, are the plain ones)."""
        if not isinstance(doc, dict):
            raise StateError("a state document is a JSON object")
        if doc.get("format") != STATE_FORMAT:
            raise StateError(f"not an emulator state document (format must be {STATE_FORMAT!r})")
        if doc.get("version") != STATE_VERSION:
            raise StateError(f"state version {doc.get('version')!r} is not supported (this emulator reads "
                             f"version {STATE_VERSION}, and upgrades versions 2 and 3)")
        if self._validator is None:
            self._validator = Draft7Validator(state_schema(), format_checker=Draft7Validator.FORMAT_CHECKER)
        errors = self._validator.iter_errors(doc)
        error = next(iter(sorted(errors, key=lambda e: list(e.absolute_path))), None)
        if error is not None:
            raise StateError(f"{_where(error.absolute_path)}: {_short(error.message)}")
        now = (doc.get("clock") or {}).get("now")
        if now is not None:  # (the clock's own bounds: a time it could not be set to is no state it had)
            try:
                at = parse_rfc3339(now)
            except ValueError as exc:
                raise StateError(f"clock.now: {now[:40]!r} is not an RFC 3339 time") from exc
            if not 0 <= at <= MAX_TIME:
                raise StateError(f"clock.now: {now[:40]!r} is outside what the clock can show (1970-01-01 to "
                                 "9999-01-01)")


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."


# --- upgrade from older versions ----------------------------------------------------------------------

#: What documents of version 3 held that is derived (rebuilt as a tenant is built: Tenant.rebuild).
DERIVED_V3 = MappingProxyType({"resources": ("session_ids", "inflight_ops", "expiry_armed"),
                               "sessions": ("queue", "busy_until")})


def upgrade(doc: Any) -> Any:
    """An older document (version 2 or 3) as the current version (a copy); any other document unchanged."""
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT or doc.get("version") not in (2, 3):
        return doc
    doc = copy.deepcopy(doc)
    if doc["version"] == 2:
        _from_2(doc)
    for data in (doc.get("tenants") or {}).values():  # version 3 -> 4: derived fields are no longer written
        for name, keys in DERIVED_V3.items():
            for row in (data.get(name) or []) if isinstance(data, dict) else ():
                for key in keys:
                    if isinstance(row, dict):
                        row.pop(key, None)
    doc["version"] = STATE_VERSION
    return doc


def _from_2(doc: dict[str, Any]) -> None:
    doc.pop("presigned", None)  # URLs are signed now: the old grants name nothing
    for data in (doc.get("tenants") or {}).values():
        if not isinstance(data, dict):
            continue
        timeline = data.get("timeline") or []
        data["timeline"] = [[e[0], i + 1, e[1], e[2]] if isinstance(e, list) and len(e) == 3 else e
                            for i, e in enumerate(timeline)]
        data["timeline_seq"] = len(timeline)
        published = data.get("published") or {}
        data["published"] = {k: v for k, v in published.items() if not k.endswith(":pending")}
        data["staged"] = {k.removesuffix(":pending"): v for k, v in published.items() if k.endswith(":pending")}
        for op in data.get("operations") or []:
            out = op.get("output") if isinstance(op, dict) else None
            if not isinstance(out, dict):
                continue
            for key in ("step", "weights_version"):
                if isinstance(out.get(key), str) and out[key].isdigit():
                    out[key] = int(out[key])
            if isinstance(out.get("checkpoint"), dict) and "id" in out["checkpoint"]:
                op["output"] = {"checkpoint_id": out["checkpoint"]["id"]}


# --- import -----------------------------------------------------------------------------------------

def store_inline_bytes(doc: Any, blobs: BlobStore) -> Any:
    """``doc`` with the bytes that files and payloads still carry inline (``"data": {"__bytes__": ...}``, as
    documents did before uploads went to the blob directory) stored as blobs and named; a copy where it
    changes anything. What is not that shape is left for the schema to refuse."""
    tenants = doc.get("tenants") if isinstance(doc, dict) else None
    if not isinstance(tenants, dict):
        return doc
    out = None
    for project, data in tenants.items():
        if not isinstance(data, dict):
            continue
        for name in BLOB_TABLES:
            rows = data.get(name)
            if not isinstance(rows, list) or not any(isinstance(r, dict) and "data" in r for r in rows):
                continue
            converted = []
            for row in rows:
                if isinstance(row, dict) and "data" in row and "blob" not in row:
                    inline = row["data"]
                    if inline is None:
                        row = {k: v for k, v in row.items() if k != "data"}
                    elif isinstance(inline, dict) and set(inline) == {"__bytes__"} and isinstance(inline["__bytes__"], str):
                        try:
                            raw = inline["__bytes__"].encode("latin-1")
                        except UnicodeEncodeError as exc:
                            raise StateError(f"tenants.{project}.{name}: {row.get('id')!r} carries data that is not "
                                             "bytes (latin-1 text)") from exc
                        row = {k: v for k, v in row.items() if k != "data"}
                        row["blob"] = str(blobs.put(raw))
                        row.setdefault("size", len(raw))  # (a size that is not the data's is refused as it loads)
                converted.append(row)
            if out is None:
                out = {**doc, "tenants": dict(tenants)}
            out["tenants"][project] = data = {**data, name: converted}
    return doc if out is None else out


def import_state(store: Store, doc: Any, checker: Checker, verify: Callable[[Tenant], None] | None = None) -> None:
    """Replace the store's content with ``doc``; on any problem nothing changes (:class:`StateError`).
    ``verify`` holds each built tenant to the rules of the layers above (it raises :class:`StateError`)."""
    install(store, built_state(store, doc, checker, verify))


def built_state(store: Store, doc: Any, checker: Checker,
                verify: Callable[[Tenant], None] | None = None) -> tuple[int, list[Tenant], str | None]:
    """``doc`` checked completely and built (the seed, the tenants, the URL secret), with nothing in the store
    changed: :class:`StateError` naming the first problem. :func:`install` puts it in place."""
    doc = store_inline_bytes(upgrade(doc), store.blobs)
    checker.check(doc)
    seed = int(doc.get("seed", store.seed))
    built = [build_tenant(store, project, data, seed) for project, data in doc["tenants"].items()]
    if verify is not None:
        for tenant in built:
            verify(tenant)
    return seed, built, doc.get("secret") or None


def install(store: Store, built: tuple[int, list[Tenant], str | None]) -> None:
    seed, tenants, secret = built
    store.reset(None, seed=seed)
    for tenant in tenants:
        store.put(tenant)
    if secret:
        store.presigner = type(store.presigner)(secret)


def build_tenant(store: Store, project: str, data: dict[str, Any], seed: int | None = None) -> Tenant:
    """A tenant from its (schema-checked) document; refuses dangling references. Its seed is the document's
    own (a tenant seeded apart), else ``seed`` (the whole document's), else the store's."""
    seed = int(data.get("seed", store.seed if seed is None else seed))
    tenant = Tenant(project, seed, store.events, journaled=store.journaled, epoch=data.get("epoch"))
    tenant.ids.counter = int(data.get("ids_counter", 0))
    for name, cls in RECORD_TYPES.items():
        table = tenant.table(name)
        for item in data.get(name, []):
            if name in BLOB_TABLES and item.get("blob") is not None:
                try:
                    item = {**item, "blob": store.blobs.ref(item["blob"], item.get("size", 0))}
                except LookupError as exc:
                    raise StateError(f"tenants.{project}.{name}: {item.get('id')}: {exc}") from exc
            try:
                record = records.from_dict(cls, item, store.bodies)
            except ValueError as exc:
                raise StateError(f"tenants.{project}.{name}: {item.get('id')!r}: {exc}") from exc
            if record.id in table:
                raise StateError(f"tenants.{project}.{name}: the id {record.id!r} appears twice")
            table.add(record)
        table.drain()  # as loaded: nothing changed
    _check_references(tenant, project, data)
    tenant.idempotency.load({(a, b, c): v for a, b, c, v in data.get("idempotency", [])})
    entries: list[Entry] = [(float(at), int(seq), str(event), str(obj_id))
                            for at, seq, event, obj_id in data.get("timeline", [])]
    tenant.timeline.load(entries, int(data.get("timeline_seq", 0)))
    try:
        tenant.registry.load({k: msgspec.convert(v, records.Artifact) for k, v in (data.get("registry") or {}).items()})
    except msgspec.ValidationError as exc:
        raise StateError(f"tenants.{project}.registry: {exc}") from exc
    tenant.rebuild()
    tenant.gpu_queue_tail = dict(data.get("gpu_queue_tail") or {})
    # A document's counter may be missing or behind its ids (written by hand, or edited): an id the tenant
    # holds is never handed out again, whatever the counter says.
    tenant.ids.taken = _in_use(tenant)
    for part in ("models", "published", "staged"):
        for sid, entry in (data.get(part) or {}).items():
            _numbers_only(entry, f"tenants.{project}.{part}.{sid}")
    try:
        for sid, entry in (data.get("models") or {}).items():
            tenant.models.live[sid] = compute.SessionModel.from_state(compute.ModelSpec(**entry["spec"]),
                                                                      entry["state"], bases=tenant.models.bases)
        for part in ("published", "staged"):
            kept = getattr(tenant.models, part)
            for sid, entry in (data.get(part) or {}).items():
                kept[sid] = (int(entry["version"]), compute.Weights.from_state(entry["weights"], tenant.models.bases))
    except (compute.ComputeError, TypeError, KeyError, ValueError, OverflowError) as exc:
        raise StateError(f"tenants.{project}: a session model cannot be restored: {exc}") from exc
    return tenant


def _in_use(tenant: Tenant) -> Callable[[str], bool]:
    """Whether an id the tenant's factory makes is one it holds already (a record's, a Files API file's
    ``file-`` form of it, a registry key's)."""
    tables = list(tenant.tables())
    files, registry = tenant.files, tenant.registry

    def taken(made: str) -> bool:
        return any(made in table for table in tables) or f"file-{made}" in files or made in registry

    return taken


# The model state's arrays of whole numbers (rows and columns of entries): what JSON parsing into numpy would
# otherwise take from a float (truncated) or a boolean.
_WHOLE = frozenset({"rows", "entry_rows", "entry_cols"})


def _numbers_only(value: Any, where: str, key: str = "") -> None:
    """A session model's numbers are numbers: a boolean among them (which numpy reads as 0 or 1), or a
    fraction among whole numbers, is nothing the emulator wrote."""
    if isinstance(value, dict):
        for k, v in value.items():
            _numbers_only(v, f"{where}.{k}", k)
    elif isinstance(value, list):
        whole = key in _WHOLE
        kinds = set(map(type, value))  # (at C speed: a model's arrays hold up to millions of numbers)
        if bool in kinds or (whole and kinds - {int}):
            i, v = next((i, v) for i, v in enumerate(value) if type(v) is bool or (whole and type(v) is not int))
            raise StateError(f"{where}[{i}]: {v!r} is not {'a whole number' if whole else 'a number'}")
        if dict in kinds or list in kinds:
            for i, v in enumerate(value):
                if isinstance(v, (dict, list)):
                    _numbers_only(v, f"{where}[{i}]")


def _check_references(tenant: Tenant, project: str, data: dict[str, Any]) -> None:
    where = f"tenants.{project}"

    def need(table: Any, obj_id: Any, what: str) -> None:
        if obj_id not in table:
            raise StateError(f"{where}: {what} names {obj_id!r}, which is not in the document")

    for s in tenant.sessions.values():
        need(tenant.resources, s.model_resources_id, f"session {s.id}'s model_resources_id")
        for cid in (*(s.inference_checkpoint_ids or ()), *(s.training_checkpoint_ids or ())):
            need(tenant.checkpoints, cid, f"session {s.id}'s checkpoints")
    for op in tenant.operations.values():
        need(tenant.sessions, op.session_id, f"operation {op.id}'s session_id")
        if op.payload_id is not None:
            need(tenant.payloads, op.payload_id, f"operation {op.id}'s payload_id")
        if op.output_released and op.output is not None:
            raise StateError(f"{where}: operation {op.id} has an output and output_released; a released one has none")
    for p in tenant.payloads.values():
        need(tenant.sessions, p.session_id, f"payload {p.id}'s session_id")
        if p.released_by is not None:
            need(tenant.operations, p.released_by, f"payload {p.id}'s released_by")
            if p.blob is not None:
                raise StateError(f"{where}: payload {p.id} has data and released_by; a released payload has none")
    for part in ("models", "published", "staged"):
        for sid in data.get(part) or {}:
            need(tenant.sessions, sid, part)
    for _a, _b, _c, op_id in data.get("idempotency", []):
        need(tenant.operations, op_id, "an idempotency entry")
    for _at, _seq, event, obj_id in data.get("timeline", []):
        need(tenant.table(TimelineEvent(event).table), obj_id, f"the timeline event {event}")


__all__ = ["RECORD_TYPES", "STATE_FORMAT", "STATE_VERSION", "Checker", "StateError", "TenantMemo", "TenantReplay",
           "build_tenant", "built_state", "export_state", "export_tenant", "import_state", "install", "memo_of",
           "state_schema", "store_inline_bytes", "tenant_change", "upgrade"]
