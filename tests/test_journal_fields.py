"""Every journaled field survives a restart, whichever write path changed it (issue 38, item 4).

A record changes only through its tracked fields (``Record.__setattr__`` notes it for the unit of work), so a
change the journal does not see cannot happen. This drives every write the API offers (the vendor API, the
files and payload uploads, fault effects, scheduled actions, the clock) over one ``--state-file``, restarts
from the file after each step, and compares the exported state with the running one; it also holds that the
walk changed every field of every record kind (a field it never touched would go untested). Derived state
(queues, counts, the GPU queue) is never written and is rebuilt on load: the comparison covers it through the
answers it shapes (a session's operations still run in order after a restart).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.store import records
from emulator.store.snapshot import RECORD_TYPES
from tests.conftest import make_client
from tests.helpers import RL, advance, assert_error, ce_sample

TOKEN = "fields-key"
MOE = "MiniMaxAI/MiniMax-M3"
FB = {"samples": [ce_sample([1, 2, 3], [4, 5])], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
CONVERSATION = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'


def _export(runtime: Runtime) -> dict[str, Any]:
    """The state document as JSON reads it (the clock aside: it is the same virtual time)."""
    doc = runtime.export_state()
    doc.pop("clock")
    return dict(orjson.loads(orjson.dumps(doc)))


class Walk:
    """The API over a state file, with a restart check after each step and the fields each step changed."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "state.jsonl"
        limits = tmp_path / "limits.json"
        limits.write_text('{"finished_operations_per_session": 3, "operation_outputs_mib_per_tenant": 1}')
        self.config = Config(clock="manual", profile="realistic", state_file=str(self.path),
                             limits_file=str(limits))
        self.runtime = Runtime(self.config)
        self.client = make_client(self.runtime, token=TOKEN)
        self.seen: dict[str, dict[str, dict[str, Any]]] = {}     # table -> id -> the record as last exported
        self.changed: dict[str, set[str]] = {name: set() for name in RECORD_TYPES}
        self.steps = 0

    def step(self, action: Callable[[], Any]) -> Any:
        result = action()
        held = _export(self.runtime)
        restarted = Runtime(self.config)
        again = _export(restarted)
        assert again == held, f"step {self.steps}: the state file does not restore what is held: {_diff(again, held)}"
        self.steps += 1
        for tenant in held["tenants"].values():
            for name in RECORD_TYPES:
                known = self.seen.setdefault(name, {})
                for row in tenant.get(name, []):
                    before = known.get(row["id"])
                    defaults = _defaults(RECORD_TYPES[name])
                    for key, value in row.items():
                        if (before is None and value != defaults.get(key, _REQUIRED)) or \
                                (before is not None and before.get(key) != value):
                            # (an export carries uploaded bytes inline, as "data", where a record names its blob)
                            self.changed[name].add("blob" if key == "data" else key)
                    known[row["id"]] = row
        return result

    def post(self, path: str, body: Any = None, status: int = 200, **kw: Any) -> Any:
        resp = self.client.post(path, json=body, **kw)
        assert resp.status_code == status, resp.text
        return resp.json()


_REQUIRED = object()


def _diff(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two exports differ (the first few paths)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in _diff(a.get(k), b.get(k), f"{where}.{k}")][:5]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{where}[{i}]")][:5]
    return [] if a == b else [f"{where}: {str(a)[:120]} != {str(b)[:120]}"]


def _defaults(cls: type[records.Record]) -> dict[str, Any]:
    out = {}
    for f in msgspec.structs.fields(cls):
        if not f.required:
            out[f.name] = msgspec.to_builtins(f.default() if f.default_factory is not msgspec.NODEFAULT
                                              else f.default)
    return out


def test_every_journaled_field_survives_a_restart_whichever_path_changed_it(tmp_path: Path) -> None:
    w = Walk(tmp_path)
    c = w.client
    ops = f"{RL}/training-sessions/{{}}/operations/{{}}"
    # Resources: a create with everything, a queue position held by a fault, then READY.
    w.step(lambda: w.post("/_emulator/faults", {"name": "queue", "match": {"operation_id": "createModelResources"},
                                                "trigger": {"first_n": 1}, "effect": {"queue_position": 2}}))
    r = w.step(lambda: w.post(f"{RL}/model-resources", {
        "base_model": "Qwen/Qwen3.5-4B", "lora_enabled": True, "inactive_timeout": 86400,
        "compute_config": {"num_generator_replicas": 2}, "optimizer_config": {"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_MATCH_ADAM"}}}))
    moe = w.step(lambda: w.post(f"{RL}/model-resources", {"base_model": MOE}))
    w.step(lambda: advance(c, 400))
    w.step(lambda: w.post(f"{RL}/model-resources/{r['id']}/extend-expiry", {"seconds": 3600}))
    # Sessions: a create with a LoRA config, metadata and a name; a rename; metadata merged.
    s = w.step(lambda: w.post(f"{RL}/training-sessions", {
        "model_resources_id": r["id"], "lora_config": {"rank": 8, "seed": 3}, "metadata": {"team": "rl"},
        "display_name": "first"}))
    sm = w.step(lambda: w.post(f"{RL}/training-sessions", {"model_resources_id": moe["id"]}))
    w.step(lambda: advance(c, 60))
    w.step(lambda: c.patch(f"{RL}/training-sessions/{s['id']}", json={"display_name": "renamed",
                                                                       "metadata": {"tags": {"a": "b"}}}))
    sid = s["id"]
    # Operations of every kind, run through; a payload uploaded and read; idempotency keys.
    for kind, body in (("forward-backward", FB), ("optim-step", {"adam_params": {"learning_rate": 1e-3}}),
                       ("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"}),
                       ("sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                                   "sampling_params": {"max_tokens": 3}}),
                       ("custom-forward-backward", {"samples": [ce_sample([1, 2, 3], [4, 5])],
                                                    "gradients": [{"data": [0.1, -0.1, 0.2, 0.0]}]}),
                       ("inference-checkpoint", {}), ("training-checkpoint", {})):
        w.step(lambda kind=kind, body=body: w.post(ops.format(sid, kind), body,
                                                   headers={"Idempotency-Key": kind}))
        w.step(lambda: advance(c, 60))
    up = w.step(lambda: w.post(f"{RL}/training-sessions/{sid}/payloads/upload-url"))
    w.step(lambda: c.put(up["upload_url"].replace("http://testserver", ""), content=msgspec.json.encode(FB),
                         headers={"Authorization": ""}).raise_for_status())
    w.step(lambda: w.post(ops.format(sid, "forward-backward"), {**FB, "payload_id": up["payload_id"]},
                          headers={"Idempotency-Key": "offloaded"}))
    w.step(lambda: advance(c, 60))
    # Routed-experts keys on the MoE session; a large sample output released past the 1 MiB budget.
    w.step(lambda: w.post(ops.format(sm["id"], "sample"), {
        "model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}], "sampling_params": {"max_tokens": 2},
        "return_routed_experts": True}, headers={"Idempotency-Key": "moe"}))
    big = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}] * 4, "num_samples": 64,
           "sampling_params": {"max_tokens": 256, "temperature": 1.0}}
    for i in range(3):
        w.step(lambda i=i: w.post(ops.format(sm["id"], "sample"), big, headers={"Idempotency-Key": f"big{i}"}))
        w.step(lambda: advance(c, 1400))
    # Fault effects: an operation that fails, a session and a resource in ERROR.
    w.step(lambda: w.post("/_emulator/faults", {"name": "fails", "match": {"operation_id": "createOptimStep"},
                                                "trigger": {"first_n": 1},
                                                "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}}))
    w.step(lambda: w.post(ops.format(sid, "optim-step"), {}, headers={"Idempotency-Key": "fails"}))
    w.step(lambda: advance(c, 60))
    # Shaping: a job on the registered inference checkpoint, with a calibration file, run and one cancelled.
    ckpts = c.get(f"{RL}/checkpoints").json()["data"]
    inference = next(x for x in ckpts if x["type"] == "CHECKPOINT_TYPE_INFERENCE")
    model_id = next(iter(inference["inference_registration"].values()))["id"]
    started = w.step(lambda: c.post("/v1/files", files={"purpose": (None, "calibration"),
                                                        "file_name": (None, "chat.jsonl"),
                                                        "checksum": (None, "abc")}, follow_redirects=False))
    file_id = started.headers["x-together-file-id"]
    w.step(lambda: c.put(started.headers["location"], content=CONVERSATION, headers={"Authorization": ""})
           .raise_for_status())
    w.step(lambda: w.post(f"/v1/files/{file_id}/preprocess"))
    job = w.step(lambda: w.post("/v1/shaping/prepare-for-fp4-inference",
                                {"inputs": {"model_object_id": model_id, "calibration_file_id": file_id}}))
    other = w.step(lambda: w.post("/v1/shaping/prepare-for-fp4-inference", {"inputs": {"model_object_id": model_id}}))
    w.step(lambda: w.post(f"/v1/shaping/{other['id']}/cancel"))
    w.step(lambda: advance(c, 4 * 300))
    assert c.get(f"/v1/shaping/{job['id']}").json()["status"] == "completed"
    # Scheduled actions (the control plane's), a stop, an expiry, the session and resource faults.
    w.step(lambda: w.post("/_emulator/clock/actions", {"action": "expire_session", "id": sm["id"], "delay": 5},
                          headers={"X-Emulator-Tenant": TOKEN}))
    w.step(lambda: advance(c, 10))
    w.step(lambda: w.post("/_emulator/faults", {"name": "sess", "match": {"operation_id": "createSession"},
                                                "trigger": {"first_n": 1},
                                                "effect": {"session_error": "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED"}}))
    w.step(lambda: w.post(f"{RL}/training-sessions", {"model_resources_id": r["id"]}))
    w.step(lambda: w.post(f"{RL}/training-sessions/{sid}/stop"))
    w.step(lambda: advance(c, 60))
    w.step(lambda: w.post("/_emulator/faults", {"name": "res", "match": {"operation_id": "createSession"},
                                                "trigger": {"first_n": 1},
                                                "effect": {"resource_error": "MODEL_RESOURCES_ERROR_CODE_RESOURCE_UNAVAILABLE"}}))
    w.step(lambda: w.post(f"{RL}/training-sessions", {"model_resources_id": moe["id"]}))
    w.step(lambda: w.post(f"{RL}/model-resources/{r['id']}/stop", params={"force": "true"}))
    w.step(lambda: advance(c, 60))
    # A resource built on registered weights (the shaping job's), and a resumed session (checkpoint, optimizer).
    quantized = c.get(f"/v1/shaping/{job['id']}").json()["results"]["model_object_id"]
    built = w.step(lambda: w.post(f"{RL}/model-resources", {"base_model": "Qwen/Qwen3.5-4B",
                                                            "base_weights_ref": f"together://{quantized}"}))
    training = next(x for x in c.get(f"{RL}/checkpoints").json()["data"] if x["type"] == "CHECKPOINT_TYPE_TRAINING")
    w.step(lambda: advance(c, 3600))
    w.step(lambda: w.post(f"{RL}/training-sessions", {"model_resources_id": built["id"],
                                                      "resume_from_checkpoint_id": training["id"],
                                                      "load_optimizer": True}))
    w.step(lambda: c.delete(f"/v1/files/{file_id}").raise_for_status())
    assert_error(c.get(f"/v1/files/{file_id}"), 404)
    c.close()
    never = {name: sorted({f.name for f in msgspec.structs.fields(cls)} - w.changed[name])
             for name, cls in RECORD_TYPES.items()}
    # What no API write can change once a record exists is set when it is made (created_by, ids...): every
    # field either held a value other than its default when its record appeared, or changed later.
    assert {name: fields for name, fields in never.items() if fields} == {}, never
