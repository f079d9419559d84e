"""Resume and checkpoint rules (docs/api-surface.md A.2.1, A.5, C.2, C.4).

- ``resume_from_checkpoint_id`` restores the checkpoint's weights (the same loss on the same batch) and continues
  its adapter (rank, alpha, dropout; a seed given on resume is "ignored when resuming"); from a
  training checkpoint ``step`` and the optimizer continue (``load_optimizer`` omitted or true: the next step
  trains exactly as the original session's next step did), or start at 0 with
  ``load_optimizer=false``, which means "weights only, fresh optimizer": training then goes exactly as it
  goes from an inference checkpoint of the same weights, which carries no optimizer state.
- ``load_optimizer=true`` with an inference checkpoint is refused (400); with a training one it is fine.
- A checkpoint resumes only on its own base model ("a full-weight training checkpoint needs the original
  base model"; a LoRA adapter needs compatible base weights [inferred: another base model is not]) and
  training mode [inferred: an adapter is not full weights]; unknown checkpoints are 404.
- Checkpoints are registered in the model registry (the session's summary and ``GET /v1/rl/checkpoints/{id}``
  agree): training checkpoints as one artifact, inference checkpoints as an ``adapter`` (LoRA on the base
  weights) or a ``model`` (full weights, or LoRA on custom base weights), and download as the MERGED model or
  (LoRA only) the ADAPTER alone, two different sets of files; models listed in
  :data:`contract_tests.capabilities.UNREGISTERED_CHECKPOINT_MODELS` register nothing.
- ``base_weights_ref`` takes a full-weight model of the project's registry (``together://<id>``); an adapter,
  a model of another base model or an unknown model is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contract_tests import capabilities as caps
from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.client import RL, Api, verify
from contract_tests.lifecycle import R
from contract_tests.target import Target


@pytest.fixture(scope="module")
def trained(target: Target) -> Iterator[dict[str, Any]]:
    """A LoRA session trained two steps, with a training and an inference checkpoint of the same weights and
    the loss of the probe batch under them."""
    if not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target")
    api = Api(target)
    r = api.ready_resource()
    s = api.running_session(r["id"], lora_config={"rank": 8, "alpha": 32, "dropout": 0.1, "seed": 59})
    step = flows.train(api, s["id"], steps=2, learning_rate=1e-3)
    out = {"resource": r, "session": s, "step": step,
           "training": flows.checkpoint(api, s["id"], "training-checkpoint"),
           "inference": flows.checkpoint(api, s["id"], "inference-checkpoint"),
           "loss": flows.probe_loss(api, s["id"])}
    out["continued"] = _after_one_step(api, s["id"])[0]  # where one more step takes the original session
    api.stop_session(s["id"])
    yield out
    api.stop_resource(r["id"], force=True)


def _resume(api: Api, rid: str, ckpt: dict[str, Any], **body: Any) -> dict[str, Any]:
    s = api.running_session(rid, resume_from_checkpoint_id=ckpt["id"], **body)
    verify("createSession", "resume", s.get("resume_from_checkpoint_id") == ckpt["id"],
           f"a resumed session shows resume_from_checkpoint_id {s.get('resume_from_checkpoint_id')!r}, not {ckpt['id']}")
    return s


def _after_one_step(api: Api, sid: str) -> tuple[float, int]:
    step = flows.train(api, sid, learning_rate=1e-3)
    return flows.probe_loss(api, sid), step


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_resume_restores_weights_step_and_optimizer(api: Api, trained: dict[str, Any]) -> None:
    r = api.ready_resource()
    saved = lc.as_int64(trained["training"]["step"], "checkpoint step")
    verify("getTrainingCheckpoint", "checkpoint_step", saved == trained["step"],
           f"a training checkpoint after {trained['step']} steps says step {saved}")
    for load in (None, True):
        extra = {} if load is None else {"load_optimizer": load}
        # The tinker path resumes with the checkpoint's rank; a seed is "ignored when resuming".
        s = _resume(api, r["id"], trained["training"], lora_config={"rank": 8, "seed": 123}, **extra)
        lora = s.get("lora_config") or {}
        verify("createSession", "resume_lora", (lora.get("rank"), lora.get("alpha"), lora.get("dropout"))
               == (8, 32, 0.1) and str(lora.get("seed")) != "123",
               f"a session resumed from a checkpoint of a rank-8, alpha-32, dropout-0.1 adapter, given lora_config "
               f"{{rank: 8, seed: 123}}, shows {lora}: it continues the checkpoint's adapter and ignores the seed")
        verify("createSession", "resume_step", lc.as_int64(s["step"], "step") == saved,
               f"resuming from a training checkpoint at step {saved} with load_optimizer={load} starts at step "
               f"{s['step']}; the step continues")
        verify("getForwardBackward", "resume_weights", flows.same_number(flows.probe_loss(api, s["id"]), trained["loss"]),
               f"a session resumed from checkpoint {trained['training']['id']} does not have its weights: the probe "
               f"batch's loss differs from the one at save time ({trained['loss']})")
        continued, _ = _after_one_step(api, s["id"])
        verify("getForwardBackward", "resume_optimizer", flows.same_number(continued, trained["continued"]),
               f"a session resumed with its optimizer (load_optimizer={load}) must train on as the original would: "
               f"one more step gives loss {continued}, the original session's next step gave {trained['continued']}")
        api.stop_session(s["id"])
    # A lora_config sent with a resume "must keep the checkpoint's rank, alpha and train_unembed": dropout may change,
    # and the session shows the dropout it trains with.
    changed = _resume(api, r["id"], trained["training"], lora_config={"dropout": 0.25})
    lora = changed.get("lora_config") or {}
    verify("createSession", "resume_lora", (lora.get("rank"), lora.get("alpha"), lora.get("dropout")) == (8, 32, 0.25),
           f"a session resumed from a checkpoint of a rank-8, alpha-32, dropout-0.1 adapter, given lora_config "
           f"{{dropout: 0.25}}, shows {lora}: it keeps the rank and alpha and takes the dropout it was given")
    api.stop_session(changed["id"])
    fresh = _resume(api, r["id"], trained["training"], load_optimizer=False)
    verify("createSession", "resume_step", lc.as_int64(fresh["step"], "step") == 0,
           f"load_optimizer=false means weights only, step 0; the session starts at step {fresh['step']}")
    verify("getForwardBackward", "resume_weights", flows.same_number(flows.probe_loss(api, fresh["id"]),
                                                                     trained["loss"]),
           "a session resumed with load_optimizer=false does not have the checkpoint's weights")
    weights_only = _resume(api, r["id"], trained["inference"])
    verify("getForwardBackward", "resume_weights", flows.same_number(flows.probe_loss(api, weights_only["id"]),
                                                                     trained["loss"]),
           "a session resumed from an inference checkpoint does not have its weights")
    a_loss, a_step = _after_one_step(api, fresh["id"])
    b_loss, b_step = _after_one_step(api, weights_only["id"])
    verify("getOptimStep", "resume_fresh_optimizer", a_step == 1,
           f"the first optim-step after resuming with load_optimizer=false reports step {a_step}, not 1")
    verify("getForwardBackward", "resume_fresh_optimizer", flows.same_number(a_loss, b_loss),
           f"load_optimizer=false must start a fresh optimizer: one identical step from the training checkpoint "
           f"(loss {a_loss}) and from an inference checkpoint of the same weights (loss {b_loss}) differ, so "
           "optimizer state was loaded")
    api.stop_resource(r["id"], force=True)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_resume_rules_refuse_what_cannot_resume(api: Api, trained: dict[str, Any]) -> None:
    r = api.ready_resource()
    rid = r["id"]
    api.expect(api.create_session(rid, resume_from_checkpoint_id=trained["inference"]["id"], load_optimizer=True),
               (400,), "load_optimizer=true with an inference checkpoint (no optimizer state)", "resume_refused")
    api.expect(api.create_session(rid, resume_from_checkpoint_id="00000000-0000-4000-8000-00000000c4e0"), (404, 400),
               "resuming from an unknown checkpoint", "resume_refused")
    verify("listSessions", "refusal_changes_nothing",
           not (api.list_sessions(model_resources_id=rid, limit=100).ok().get("data") or []),
           "a refused resume left a session on the resource")
    ok = api.create_session(rid, resume_from_checkpoint_id=trained["training"]["id"], load_optimizer=True)
    api.expect(ok, (200,), "load_optimizer=true with a training checkpoint", "resume")
    api.stop_resource(rid, force=True)
    others = [m for m in flows.models(api) if m.base_model != api.target.base_model and m.lora]
    if others:
        other = api.ready_resource(base_model=others[0].base_model)
        for kind in ("training", "inference"):
            api.expect(api.create_session(other["id"], resume_from_checkpoint_id=trained[kind]["id"]), (400,),
                       f"resuming a {kind} checkpoint of {api.target.base_model} on {others[0].base_model}",
                       "resume_refused")
        api.stop_resource(other["id"], force=True)
    if flows.model(api, api.target.base_model).full:
        full = api.ready_resource(lora_enabled=False)
        api.expect(api.create_session(full["id"], resume_from_checkpoint_id=trained["training"]["id"]), (400,),
                   "resuming a LoRA checkpoint on a full-weight resource", "resume_refused")
        api.stop_resource(full["id"], force=True)


def _registered(api: Api, sid: str, kind: str, want: str | None) -> dict[str, Any]:
    """Checks a checkpoint's registration; ``want``: the inference artifact expected (adapter/model), None for
    training. Returns the checkpoint as GET shows it."""
    summary = flows.checkpoint(api, sid, kind)
    full = flows.get_checkpoint(api, summary["id"])
    session = api.get_session(sid).ok()
    field = "training_checkpoints" if kind == "training-checkpoint" else "inference_checkpoints"
    listed = next((c for c in session[field] if c["id"] == summary["id"]), None)
    verify("getSession", "checkpoint_registered", listed is not None and listed.get("registration")
           == summary.get("registration"), f"session {sid} lists checkpoint {summary['id']} as {listed}, the operation "
           f"answered {summary}")
    base_model = session["base_model"]
    if base_model in caps.UNREGISTERED_CHECKPOINT_MODELS:
        verify("getCheckpoint", "checkpoint_registration", not summary.get("registration"),
               f"{base_model} checkpoints are not uploaded to the registry, yet {summary['id']} has a registration")
        return full
    reg = summary.get("registration")
    if want is None:
        ok = isinstance(reg, dict) and bool(reg.get("id")) and bool(reg.get("revision_id"))
        shown = full.get("training_registration")
    else:
        ok = isinstance(reg, dict) and set(reg) == {want} and bool(reg[want].get("id"))
        shown = full.get("inference_registration")
    verify("getCheckpoint", "checkpoint_registration", ok,
           f"a {kind} of a {'LoRA' if session.get('lora_config') else 'full-weight'} session on {base_model} must be "
           f"registered{'' if want is None else ' as ' + repr(want)}; its registration is {reg!r}")
    verify("getCheckpoint", "checkpoint_registration", shown == reg,
           f"GET /v1/rl/checkpoints/{summary['id']} shows registration {shown!r}, the session {reg!r}")
    return full


def _files(api: Api, cid: str, variant: str) -> list[str]:
    body = api.call("downloadCheckpoint", "GET", f"{RL}/checkpoints/{cid}/download", params={"variant": variant}).ok()
    return sorted(f["filename"] for f in body.get("data") or [])


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_checkpoints_are_registered_by_kind(api: Api) -> None:
    lora = api.ready_resource()
    s = api.running_session(lora["id"], lora_config={"rank": 4})
    t = _registered(api, s["id"], "training-checkpoint", None)
    verify("getCheckpoint", "checkpoint_lora_rank", t.get("lora_rank") == 4,
           f"a LoRA rank-4 session's checkpoint shows lora_rank {t.get('lora_rank')!r}")
    adapter = _registered(api, s["id"], "inference-checkpoint", "adapter")
    merged_files = _files(api, adapter["id"], "CHECKPOINT_VARIANT_MERGED")
    adapter_files = _files(api, adapter["id"], "CHECKPOINT_VARIANT_ADAPTER")
    verify("downloadCheckpoint", "checkpoint_files", bool(merged_files) and bool(adapter_files)
           and merged_files != adapter_files,
           f"a LoRA inference checkpoint downloads as the MERGED model ({merged_files}) and as the ADAPTER alone "
           f"({adapter_files}): two different sets of files")
    api.stop_resource(lora["id"], force=True)
    if not flows.model(api, api.target.base_model).full:
        return
    full = api.ready_resource(lora_enabled=False)
    s = api.running_session(full["id"])
    verify("getSession", "lora_config_only_with_lora", "lora_config" not in s,
           f"a full-weight session shows a lora_config: {s.get('lora_config')}")
    t = _registered(api, s["id"], "training-checkpoint", None)
    verify("getCheckpoint", "checkpoint_lora_rank", "lora_rank" not in t,
           f"a full-weight checkpoint shows lora_rank {t.get('lora_rank')!r}")
    merged = _registered(api, s["id"], "inference-checkpoint", "model")
    verify("downloadCheckpoint", "checkpoint_files", bool(_files(api, merged["id"], "CHECKPOINT_VARIANT_MERGED")),
           f"a full-weight inference checkpoint {merged['id']} has no MERGED files")
    api.expect(api.call("downloadCheckpoint", "GET", f"{RL}/checkpoints/{merged['id']}/download",
                        params={"variant": "CHECKPOINT_VARIANT_ADAPTER"}), (400,),
               "CHECKPOINT_VARIANT_ADAPTER of a full-weight checkpoint (adapters exist for LoRA sessions only)",
               "checkpoint_files")
    api.stop_resource(full["id"], force=True)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_base_weights_ref_takes_a_full_weight_model_of_the_project(api: Api, trained: dict[str, Any]) -> None:
    base = api.target.base_model
    if not flows.model(api, base).full or base in caps.UNREGISTERED_CHECKPOINT_MODELS:
        pytest.skip(f"{base} offers no full-weight training or registers no checkpoints: no full model to reference")
    full = api.ready_resource(lora_enabled=False)
    s = api.running_session(full["id"])
    flows.train(api, s["id"])
    model = flows.checkpoint(api, s["id"], "inference-checkpoint")["registration"]["model"]["id"]
    api.stop_resource(full["id"], force=True)
    ref = f"together://{model}"
    custom = api.create_resource(base_weights_ref=ref)
    verify("createModelResources", "base_weights_ref", model in str(custom.get("base_weights_ref")),
           f"a resource created with base_weights_ref {ref} shows {custom.get('base_weights_ref')!r}")
    custom = api.wait(lambda: api.get_resource(custom["id"]).ok(), lambda o: o["status"] != R + "PENDING"
                      and o["status"] != R + "CREATING", f"resource {custom['id']}", "getModelResources", bound=3600)
    verify("getModelResources", "base_weights_ref", custom["status"] == R + "READY",
           f"a resource on the project's own full-weight model ended {custom['status']}")
    on_custom = api.running_session(custom["id"])
    _registered(api, on_custom["id"], "inference-checkpoint", "model")  # LoRA on custom base weights: merged
    api.stop_resource(custom["id"], force=True)
    adapter = (trained["inference"].get("registration") or {}).get("adapter") or {}
    bad = [("together://ml_NotInThisProject0000000", "a model outside the project's registry")]
    if adapter.get("id"):
        bad.append((f"together://{adapter['id']}", "a LoRA adapter (not full weights)"))
    others = [m for m in flows.models(api) if m.base_model != base]
    for ref_, rule in bad:
        api.expect(api.call("createModelResources", "POST", f"{RL}/model-resources",
                            json={"base_model": base, "base_weights_ref": ref_}), (400,),
                   f"base_weights_ref naming {rule}", "invalid_input_refused")
    if others:
        api.expect(api.call("createModelResources", "POST", f"{RL}/model-resources",
                            json={"base_model": others[0].base_model, "base_weights_ref": ref}), (400,),
                   f"base_weights_ref to a {base} model on a {others[0].base_model} resource", "invalid_input_refused")
