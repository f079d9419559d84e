"""Whether a tenant built from a state document is one the emulator could have produced.

After the state schema (:mod:`emulator.store.snapshot`), every imported tenant is held to the rules that
produced it (catalog, limits, queues, bodies and outputs by the spec's schemas, loadable models); a document
that breaks one is refused with its path before anything changes, so an accepted import serves every read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from connexion.json_schema import Draft4RequestValidator, Draft4ResponseValidator, resolve_refs
from jsonschema import Draft4Validator

from emulator import compute, rules, spec
from emulator.clock import MAX_TIME
from emulator.compute.types import Wire, encode
from emulator.domain import shaping
from emulator.domain.catalog import BY_NAME, GPU_TYPE
from emulator.domain.kind import Kind
from emulator.domain.kinds import KINDS
from emulator.domain.session_models import checkpoint_spec
from emulator.store import Tenant, TimelineEvent
from emulator.store.records import (
    CheckpointType,
    Operation,
    OperationStatus,
    ResourceStatus,
    Session,
    SessionStatus,
    ShapingStatus,
)
from emulator.store.snapshot import StateError

OPS = "/v1/rl/training-sessions/{session_id}/operations/"
UNFINISHED = frozenset({OperationStatus.PENDING, OperationStatus.RUNNING})
REGISTRY_KINDS = frozenset({"adapter", "model", "training"})


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
        for name, kind in KINDS.items():
            post = paths[OPS + name]["post"]
            body = ((post.get("requestBody") or {}).get("content") or {}).get("application/json")
            # (an endpoint without a body schema reads none: what was sent is kept, any object)
            self.bodies[name] = Draft4RequestValidator(body["schema"] if body else {"type": "object"})
            if kind.output_schema is not None:  # stored otherwise than the API shows it
                self.outputs[name] = Draft4Validator(kind.output_schema())
            else:
                got = paths[OPS + name + "/{operation_id}"]["get"]["responses"]["200"]
                output = got["content"]["application/json"]["schema"]["properties"]["output"]
                self.outputs[name] = Draft4ResponseValidator(output)
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
        self.error = Draft4Validator(_object({"code": {"type": "string"}, "message": {"type": "string"},
                                              "occurred_at": {**number, "minimum": 0, "maximum": MAX_TIME}},
                                             required=("code", "message")))


def _object(props: dict[str, Any], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": list(props if required is None else required)}


def _sent(op: Operation) -> Any:
    """An operation's body as the API reads it (its kind's request, typed when the document was read)."""
    return encode(op.body) if isinstance(op.body, Wire) else op.body


class _Check:
    def __init__(self, tenant: Tenant, v: _Validators) -> None:
        self.t = tenant
        self.v = v
        self.where = f"tenants.{tenant.project}"

    def fail(self, what: str) -> StateError:
        return StateError(f"{self.where}: {what}")

    def valid(self, validator: Any, value: Any, what: str) -> None:
        if isinstance(value, (msgspec.Struct, tuple)):  # a typed value: checked as the JSON it is written as
            value = msgspec.json.decode(msgspec.json.encode(value))
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
        if err.code not in self.v.error_codes[family]:
            raise self.fail(f"{what}.error.code {err.code!r} is not an error code of the API")

    def resources(self) -> None:
        for r in self.t.resources.values():
            what = f"model resource {r.id}"
            model = self.model(r.base_model, what)
            if r.gpu_type != GPU_TYPE:
                raise self.fail(f"{what}: gpu_type {r.gpu_type!r} is not offered")
            if not r.lora_enabled and model.full_max_batch_size is None:
                raise self.fail(f"{what}: {r.base_model} does not support full-weight training")
            timeouts = rules.INACTIVE_TIMEOUT
            if not timeouts.low <= r.inactive_timeout <= timeouts.high:
                raise self.fail(f"{what}: inactive_timeout {r.inactive_timeout} is not within "
                                f"{timeouts.low}-{timeouts.high}")
            if not 0 <= r.queue_extra <= 10_000:
                raise self.fail(f"{what}: queue_extra {r.queue_extra} is not within 0-10000")
            self.valid(self.v.optimizer, r.optimizer_config, f"{what}.optimizer_config")
            if r.status == ResourceStatus.PENDING and r.queue_exit_at is None:
                raise self.fail(f"{what} is PENDING with no queue_exit_at")
            self.error(r.error, "resource", what)

    def sessions(self) -> None:
        for s in self.t.sessions.values():
            what = f"session {s.id}"
            r = self.t.resources.peek(s.model_resources_id)
            model = self.model(s.base_model, what)
            if s.base_model != r.base_model:
                raise self.fail(f"{what}: base_model {s.base_model} is not its resource's {r.base_model}")
            if (s.lora_config is None) == r.lora_enabled:
                raise self.fail(f"{what}: lora_config must be set exactly on a LoRA resource's sessions")
            if s.lora_config is not None:
                self.valid(self.v.lora, s.lora_config, f"{what}.lora_config")
                if s.lora_config.rank > model.lora_max_rank:
                    raise self.fail(f"{what}.lora_config.rank exceeds {model.base_model}'s {model.lora_max_rank}")
            if s.display_name is not None and len(s.display_name) > rules.DISPLAY_NAME_MAX_LENGTH:
                raise self.fail(f"{what}.display_name is longer than {rules.DISPLAY_NAME_MAX_LENGTH} characters")
            if s.metadata is not None:
                self.valid(self.v.metadata, s.metadata, f"{what}.metadata")
            self.error(s.error, "session", what)
            for name in ("inference_checkpoint_ids", "training_checkpoint_ids"):
                ids = getattr(s, name) or []
                if len(set(ids)) != len(ids):
                    raise self.fail(f"{what} lists a checkpoint twice in {name}")
            self.queue(s, what)

    def queue(self, s: Session, what: str) -> None:
        """Its unfinished operations (its queue, in submission order): only the first may run, and it finishes
        (its completion is in the timeline); only a RUNNING session has any."""
        queued = self.t.queues.get(s.id) or []
        for i, op_id in enumerate(queued):
            op = self.t.operations.peek(op_id)
            allowed = UNFINISHED if i == 0 else {OperationStatus.PENDING}
            if op.status not in allowed:
                raise self.fail(f"{what}'s queue names operation {op_id}, which is {op.status} at position {i}")
        if queued and s.status != SessionStatus.RUNNING:
            raise self.fail(f"{what} is {s.status} with operations queued")
        if queued and self.t.operations.peek(queued[0]).status == OperationStatus.RUNNING and not any(
                event == TimelineEvent.OPERATION_COMPLETE and obj_id == queued[0]
                for _at, _seq, event, obj_id in self.t.timeline.heap):
            raise self.fail(f"{what}: its running operation {queued[0]} never completes (no timeline event)")

    def operations(self) -> None:
        for op in self.t.operations.values():
            what = f"operation {op.id}"
            kind = KINDS.get(op.kind)
            if kind is None:
                raise self.fail(f"{what}: kind {op.kind!r} is not an operation kind ({', '.join(KINDS)})")
            if op.status in UNFINISHED:
                self.valid(self.v.bodies[kind.name], _sent(op), f"{what}.body")
            elif op.body is not None and kind.shows_samples:
                self.valid(self.v.bodies[kind.name], _sent(op), f"{what}.body")  # (the dashboard shows its prompts)
            self.output(op, kind, what)
            if op.error is not None:
                self.error(op.error, "operation", what)

    def output(self, op: Operation, kind: Kind[Any], what: str) -> None:
        if op.output is None:
            return
        if op.status != OperationStatus.COMPLETED:
            raise self.fail(f"{what} is {op.status} and has an output")
        self.valid(self.v.outputs[kind.name], op.output, f"{what}.output")
        problem = kind.check_output(self.t, op.output) if kind.check_output is not None else None
        if problem is not None:
            raise self.fail(f"{what}.output {problem}")

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
            if job.results is not None and not (job.results.model_object_id and job.results.model_revision_id):
                raise self.fail(f"{what}.results must name the model it made (model_object_id, model_revision_id)")
            if not 0 <= job.phase <= len(shaping.PHASES):
                raise self.fail(f"{what}: phase {job.phase} is not within 0-{len(shaping.PHASES)}")
            self.model(job.params.configuration.base_model_name, f"{what}.params.configuration")

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
