"""Whether a tenant built from a state document is one the emulator could have produced.

A state document (``PUT /_emulator/state``, ``--state-file``) is checked against the state schema first
(:mod:`emulator.store.snapshot`: types, statuses, time and count bounds, references). That cannot tell
what the domain and the renderer rely on, so every imported tenant is also held to the rules that produced
it: base models of the catalog, LoRA settings within the model's limits, an ``inactive_timeout`` the API
accepts, a session's queue of its own unfinished operations in order, every unfinished operation's body
one its endpoint accepts (the spec's request schema, as request validation reads it), every completed
output the shape its kind answers, stored API objects (optimizer config, metadata, errors, registrations,
shaping jobs, Files API files) as the spec's schemas describe them, checkpoints whose model loads, idempotency keys naming
their own kind of operation. A document that breaks one is refused with its path, before anything changes,
so an accepted import serves every read (``tests/test_import_fuzz.py`` mutates exported states to hold it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from connexion.json_schema import Draft4RequestValidator, Draft4ResponseValidator, resolve_refs
from jsonschema import Draft4Validator

from emulator import compute, spec
from emulator.clock import MAX_TIME
from emulator.domain import shaping
from emulator.domain.catalog import BY_NAME, GPU_TYPE
from emulator.domain.session_models import checkpoint_spec
from emulator.store import Tenant
from emulator.store.records import (
    CheckpointType,
    Operation,
    OperationKind,
    OperationStatus,
    ResourceStatus,
    SessionStatus,
    ShapingStatus,
)
from emulator.store.snapshot import StateError

K = OperationKind
OPS = "/v1/rl/training-sessions/{session_id}/operations/"
UNFINISHED = frozenset({OperationStatus.PENDING, OperationStatus.RUNNING})
REGISTRY_KINDS = frozenset({"adapter", "model", "training"})
MAX_INACTIVE_TIMEOUT, MIN_INACTIVE_TIMEOUT = 86_400, 300


class Integrity:
    """The spec's validators, compiled once per runtime on the first import (imports are rare)."""

    def __init__(self) -> None:
        self._built: _Validators | None = None

    def check(self, tenant: Tenant) -> None:
        if self._built is None:
            self._built = _Validators()
        _Check(tenant, self._built).run()


class _Validators:
    def __init__(self) -> None:
        doc = resolve_refs(spec.load_spec(spec.VENDOR))
        schemas = doc["components"]["schemas"]
        paths = doc["paths"]
        self.bodies: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        for kind in OperationKind:
            post = paths[OPS + kind.value]["post"]
            body = ((post.get("requestBody") or {}).get("content") or {}).get("application/json")
            # (an endpoint without a body schema reads none: what was sent is kept, any object)
            self.bodies[kind] = Draft4RequestValidator(body["schema"] if body else {"type": "object"})
            got = paths[OPS + kind.value + "/{operation_id}"]["get"]["responses"]["200"]
            output = got["content"]["application/json"]["schema"]["properties"]["output"]
            self.outputs[kind] = Draft4ResponseValidator(output)
        resource = schemas["ModelResources"]["properties"]
        session = schemas["Session"]["properties"]
        job = schemas["QuantizationJob"]["properties"]
        self.optimizer = Draft4ResponseValidator(resource["optimizer_config"])
        self.metadata = Draft4ResponseValidator(session["metadata"])
        self.registration = {CheckpointType.TRAINING: Draft4ResponseValidator(
                                 schemas["TrainingCheckpoint"]["properties"]["registration"]),
                             CheckpointType.INFERENCE: Draft4ResponseValidator(
                                 schemas["InferenceCheckpoint"]["properties"]["registration"])}
        self.shaping = {name: Draft4ResponseValidator(job[name]) for name in ("params", "events", "results")}
        file = schemas["FileResponse"]["properties"]
        self.file = {name: Draft4ResponseValidator(file[name]) for name in ("purpose", "FileType", "validation_report")}
        self.error_codes = {"resource": frozenset(schemas["ModelResourcesErrorCode"]["enum"]),
                            "session": frozenset(schemas["SessionErrorCode"]["enum"]),
                            "operation": frozenset(schemas["OperationErrorCode"]["enum"])}
        number = {"type": "number"}
        self.lora = Draft4Validator({"type": "object", "additionalProperties": False,
                                     "required": ["rank", "alpha", "dropout", "train_unembed"],
                                     "properties": {"rank": {"type": "integer", "minimum": 1},
                                                    "alpha": {"type": "number", "minimum": 0, "maximum": 1e6},
                                                    "dropout": {"type": "number", "minimum": 0, "maximum": 1},
                                                    "train_unembed": {"type": "boolean"},
                                                    "seed": {"type": "integer", "minimum": -(2**63),
                                                             "maximum": 2**63 - 1}}})
        self.registry = Draft4Validator({"type": "object", "required": ["kind", "revision_id", "base_model"],
                                         "properties": {"kind": {"enum": sorted(REGISTRY_KINDS)},
                                                        "revision_id": {"type": "string"},
                                                        "base_model": {"enum": sorted(BY_NAME)},
                                                        "checkpoint_id": {"type": ["string", "null"]}}})
        self.small_outputs: Mapping[str, Any] = MappingProxyType({
            K.OPTIM_STEP: Draft4Validator(_counter("step")),
            K.WEIGHTS_SYNC: Draft4Validator(_counter("weights_version")),
            K.INFERENCE_CHECKPOINT: Draft4Validator(_object({"checkpoint_id": {"type": "string"}})),
            K.TRAINING_CHECKPOINT: Draft4Validator(_object({"checkpoint_id": {"type": "string"}})),
        })
        self.error = Draft4Validator(_object({"code": {"type": "string"}, "message": {"type": "string"},
                                              "occurred_at": {**number, "minimum": 0, "maximum": MAX_TIME}},
                                             required=("code", "message")))


def _object(props: dict[str, Any], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": list(props if required is None else required)}


def _counter(name: str) -> dict[str, Any]:
    return _object({name: {"type": "integer", "minimum": 0, "maximum": 2**53}})


class _Check:
    def __init__(self, tenant: Tenant, v: _Validators) -> None:
        self.t = tenant
        self.v = v
        self.where = f"tenants.{tenant.project}"

    def fail(self, what: str) -> StateError:
        return StateError(f"{self.where}: {what}")

    def valid(self, validator: Any, value: Any, what: str) -> None:
        error = next(iter(validator.iter_errors(value)), None)
        if error is not None:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise self.fail(f"{what}{path}: {str(error.message)[:200]}")

    def run(self) -> None:
        for check in (self.resources, self.sessions, self.operations, self.checkpoints, self.shaping_jobs,
                      self.files, self.registry, self.idempotency):
            check()

    def model(self, base_model: Any, what: str) -> Any:
        model = BY_NAME.get(base_model)
        if model is None:
            raise self.fail(f"{what}: base_model {base_model!r} is not a model of the catalog")
        return model

    def error(self, err: Any, family: str, what: str) -> None:
        if err is None:
            return
        self.valid(self.v.error, err, f"{what}.error")
        if err["code"] not in self.v.error_codes[family]:
            raise self.fail(f"{what}.error.code {err['code']!r} is not an error code of the API")

    def resources(self) -> None:
        for r in self.t.resources.values():
            what = f"model resource {r.id}"
            model = self.model(r.base_model, what)
            if r.gpu_type != GPU_TYPE:
                raise self.fail(f"{what}: gpu_type {r.gpu_type!r} is not offered")
            if not r.lora_enabled and model.full_max_batch_size is None:
                raise self.fail(f"{what}: {r.base_model} does not support full-weight training")
            if not MIN_INACTIVE_TIMEOUT <= r.inactive_timeout <= MAX_INACTIVE_TIMEOUT:
                raise self.fail(f"{what}: inactive_timeout {r.inactive_timeout} is not within "
                                f"{MIN_INACTIVE_TIMEOUT}-{MAX_INACTIVE_TIMEOUT}")
            if not 0 <= r.queue_extra <= 10_000:
                raise self.fail(f"{what}: queue_extra {r.queue_extra} is not within 0-10000")
            self.valid(self.v.optimizer, r.optimizer_config, f"{what}.optimizer_config")
            if r.status == ResourceStatus.PENDING and r.queue_exit_at is None:
                raise self.fail(f"{what} is PENDING with no queue_exit_at")
            self.error(r.error, "resource", what)
            if len(set(r.session_ids)) != len(r.session_ids):
                raise self.fail(f"{what} lists a session twice in session_ids")
            for sid in r.session_ids:
                if self.t.sessions.peek(sid).model_resources_id != r.id:
                    raise self.fail(f"{what} lists session {sid}, which belongs to another resource")

    def sessions(self) -> None:
        for s in self.t.sessions.values():
            what = f"session {s.id}"
            r = self.t.resources.peek(s.model_resources_id)
            if s.id not in r.session_ids:
                raise self.fail(f"{what} is not in its resource's session_ids")
            model = self.model(s.base_model, what)
            if s.base_model != r.base_model:
                raise self.fail(f"{what}: base_model {s.base_model} is not its resource's {r.base_model}")
            if (s.lora_config is None) == r.lora_enabled:
                raise self.fail(f"{what}: lora_config must be set exactly on a LoRA resource's sessions")
            if s.lora_config is not None:
                self.valid(self.v.lora, s.lora_config, f"{what}.lora_config")
                if s.lora_config["rank"] > model.lora_max_rank:
                    raise self.fail(f"{what}.lora_config.rank exceeds {model.base_model}'s {model.lora_max_rank}")
            if s.display_name is not None and len(s.display_name) > 128:
                raise self.fail(f"{what}.display_name is longer than 128 characters")
            if s.metadata is not None:
                self.valid(self.v.metadata, s.metadata, f"{what}.metadata")
            self.error(s.error, "session", what)
            for name in ("inference_checkpoint_ids", "training_checkpoint_ids"):
                ids = getattr(s, name) or []
                if len(set(ids)) != len(ids):
                    raise self.fail(f"{what} lists a checkpoint twice in {name}")
            self.queue(s, what)

    def queue(self, s: Any, what: str) -> None:
        queued = s.queue or []
        for i, op_id in enumerate(queued):
            op = self.t.operations.peek(op_id)
            if op.session_id != s.id:
                raise self.fail(f"{what}'s queue names operation {op_id} of another session")
            allowed = UNFINISHED if i == 0 else {OperationStatus.PENDING}
            if op.status not in allowed:
                raise self.fail(f"{what}'s queue names operation {op_id}, which is {op.status} at position {i}")
        if len(set(queued)) != len(queued):
            raise self.fail(f"{what}'s queue names an operation twice")
        if queued and s.status != SessionStatus.RUNNING:
            raise self.fail(f"{what} is {s.status} with operations queued")
        head_running = bool(queued) and self.t.operations.peek(queued[0]).status == OperationStatus.RUNNING
        if head_running != (s.busy_until is not None):
            raise self.fail(f"{what}: busy_until must be set exactly while its first operation runs")

    def operations(self) -> None:
        queued = {op_id for s in self.t.sessions.values() for op_id in s.queue or ()}
        for op in self.t.operations.values():
            what = f"operation {op.id}"
            kind = OperationKind(op.kind)
            if op.status in UNFINISHED:
                if op.id not in queued:
                    raise self.fail(f"{what} is {op.status} but in no session's queue")
                self.valid(self.v.bodies[kind], op.body, f"{what}.body")
            elif op.body and kind is K.SAMPLE:
                self.valid(self.v.bodies[kind], op.body, f"{what}.body")  # (the dashboard shows its prompts)
            self.output(op, kind, what)
            if op.error is not None:
                self.error(op.error, "operation", what)

    def output(self, op: Operation, kind: OperationKind, what: str) -> None:
        if op.output is None:
            return
        if op.status != OperationStatus.COMPLETED:
            raise self.fail(f"{what} is {op.status} and has an output")
        small = self.v.small_outputs.get(kind)
        if small is None:
            self.valid(self.v.outputs[kind], op.output, f"{what}.output")
            return
        self.valid(small, op.output, f"{what}.output")
        if "checkpoint_id" in op.output and op.output["checkpoint_id"] not in self.t.checkpoints:
            raise self.fail(f"{what}.output names checkpoint {op.output['checkpoint_id']!r}, which is not there")

    def checkpoints(self) -> None:
        for c in self.t.checkpoints.values():
            what = f"checkpoint {c.id}"
            model = self.model(c.base_model, what)
            if c.lora_rank is not None and not 1 <= c.lora_rank <= model.lora_max_rank:
                raise self.fail(f"{what}: lora_rank {c.lora_rank} is not within 1-{model.lora_max_rank}")
            if c.lora_config is not None:
                self.valid(self.v.lora, c.lora_config, f"{what}.lora_config")
            if c.registration is not None:
                self.valid(self.v.registration[CheckpointType(c.type)], c.registration, f"{what}.registration")
            state = c.model_state
            if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
                raise self.fail(f"{what}.model_state must hold the model (spec and model)")
            try:
                compute.SessionModel.from_state(checkpoint_spec(c), state["model"], load_optimizer=False)
            except (compute.ComputeError, TypeError, KeyError, ValueError, OverflowError) as exc:
                raise self.fail(f"{what}.model_state cannot be loaded: {exc}") from exc

    def shaping_jobs(self) -> None:
        for job in self.t.shaping_jobs.values():
            what = f"shaping job {job.id}"
            self.valid(self.v.shaping["params"], job.params, f"{what}.params")
            self.valid(self.v.shaping["events"], job.events, f"{what}.events")
            if job.results is not None:
                self.valid(self.v.shaping["results"], job.results, f"{what}.results")
            if (job.results is not None) != (job.status == ShapingStatus.COMPLETED):
                raise self.fail(f"{what} is {job.status}: a job has results exactly once it has completed")
            if job.results is not None and not all(isinstance(job.results.get(k), str) and job.results[k]
                                                   for k in ("model_object_id", "model_revision_id")):
                raise self.fail(f"{what}.results must name the model it made (model_object_id, model_revision_id)")
            if not 0 <= job.phase <= len(shaping.PHASES):
                raise self.fail(f"{what}: phase {job.phase} is not within 0-{len(shaping.PHASES)}")
            configuration = job.params.get("configuration") or {}
            self.model(configuration.get("base_model_name"), f"{what}.params.configuration")

    def files(self) -> None:
        """A file's fields are the spec's FileResponse values, its size is its bytes', a validated one was uploaded."""
        for f in self.t.files.values():
            what = f"file {f.id}"
            self.valid(self.v.file["purpose"], f.purpose, f"{what}.purpose")
            self.valid(self.v.file["FileType"], f.file_type, f"{what}.file_type")
            if f.validation_report is not None:
                self.valid(self.v.file["validation_report"], f.validation_report, f"{what}.validation_report")
            if f.blob is None and f.size != 0:  # (an uploaded file's size is its blob's: checked as it loads)
                raise self.fail(f"{what}: size {f.size} but no bytes were uploaded")
            if f.blob is None and (f.processing_status != "PENDING" or f.validation_report is not None):
                raise self.fail(f"{what}: it was never uploaded, so it cannot be {f.processing_status}")

    def registry(self) -> None:
        for key, entry in self.t.registry.items():
            self.valid(self.v.registry, entry, f"registry[{key}]")

    def idempotency(self) -> None:
        for (sid, kind, _key), op_id in self.t.idempotency.items():
            op = self.t.operations.peek(op_id)
            if op.session_id != sid or op.kind != kind:
                raise self.fail(f"an idempotency key of session {sid} for {kind} names operation {op_id}, "
                                f"a {op.kind} of session {op.session_id}")


Verifier = Callable[[Tenant], None]

__all__ = ["Integrity", "Verifier"]
