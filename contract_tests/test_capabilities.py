"""Per-model capabilities: what ``GET /v1/rl/supported-models`` promises, and the session caps, hold.

Docs/api-surface.md A.6, C.2, D.2. For every model the target offers, ``trainer_config.full`` absent means
no full-weight training: ``lora_enabled=false`` is refused by create and by estimate-cost; present, a
full-weight resource is created. For the default model and the models the tables of
:mod:`contract_tests.capabilities` name (a READY resource is billed, so not every model):

- a LoRA resource holds as many concurrent sessions as :func:`contract_tests.capabilities.lora_session_cap`
  says (5 by default, documented; fewer for the models the table names) and answers 429 beyond; a stopped
  session frees its slot;
- ``lora_config.rank`` up to ``trainer_config.lora.max_rank`` is accepted and shown with its alpha and seed
  (an int64 string), one more is refused, and so is 0;
- a forward-backward of ``max_batch_size`` samples runs, one more sample is refused (a 400, or a FAILED
  operation), for LoRA and full-weight sessions alike; a sample over ``max_seq_length`` tokens is refused;
- a sample call whose prompt plus ``max_tokens`` exceeds ``generator_config.context_length`` is refused;
  without ``sampling_params`` and ``num_samples`` the ``sampling_defaults`` apply (``n`` completions of at
  most ``max_tokens`` tokens, exactly that many when they stop for length; greedy when ``temperature`` is 0);
- ``compute_config.gpu_type`` takes the model's ``default_gpu_type``; with ``num_generator_replicas: 0`` a
  resource trains but cannot sample;
- LoRA ``alpha`` and a loss's params object take effect: the same step with another alpha, or other
  ``dppo_params`` deltas, trains differently.
"""

from __future__ import annotations

from typing import Any

import pytest

from contract_tests import capabilities as caps
from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.capabilities import Model
from contract_tests.client import RL, Api, ce_sample, verify
from contract_tests.lifecycle import R

pytestmark = [pytest.mark.real_safe, pytest.mark.creates_resources]


def _create(api: Api, model: Model, lora_enabled: bool) -> Any:
    return api.call("createModelResources", "POST", f"{RL}/model-resources",
                    json={"base_model": model.base_model, "lora_enabled": lora_enabled})


def test_training_modes_follow_supported_models(api: Api) -> None:
    for model in flows.models(api):
        verify("getSupportedModels", "supported_models", model.lora is not None,
               f"{model.base_model}: every model supports LoRA (docs), but trainer_config.lora is absent")
        reply = _create(api, model, lora_enabled=False)
        estimate = api.call("estimateModelResourcesCost", "POST", f"{RL}/model-resources/estimate-cost",
                            json={"base_model": model.base_model, "lora_enabled": False})
        if model.full is None:
            api.expect(reply, (400,), f"{model.base_model} has no trainer_config.full: lora_enabled=false",
                       "training_mode")
            api.expect(estimate, (400,), f"estimate-cost of {model.base_model} with lora_enabled=false (no "
                       "full-weight training)", "training_mode")
        else:
            api.expect(reply, (200,), f"{model.base_model} offers full-weight training: lora_enabled=false",
                       "training_mode")
            api.expect(estimate, (200,), f"estimate-cost of {model.base_model} with lora_enabled=false", "training_mode")
            verify("createModelResources", "create_echo", reply.body.get("lora_enabled") is False,
                   f"a full-weight resource shows lora_enabled={reply.body.get('lora_enabled')!r}")
            api.stop_resource(reply.body["id"])
        lora = _create(api, model, lora_enabled=True)
        api.expect(lora, (200,), f"{model.base_model} with lora_enabled=true", "training_mode")
        verify("createModelResources", "create_echo", lora.body.get("lora_enabled") is True
               and lora.body.get("base_model") == model.base_model,
               f"a LoRA resource of {model.base_model} shows {lora.body.get('base_model')} "
               f"lora_enabled={lora.body.get('lora_enabled')!r}")
        api.stop_resource(lora.body["id"])


def _default_and_named(api: Api, named: Any) -> list[Model]:
    """The default model and the models a table names (each READY resource is billed: not every model)."""
    return [m for m in flows.models(api) if m.base_model == api.target.base_model or m.base_model in named]


def test_lora_session_caps(api: Api) -> None:
    for model in _default_and_named(api, caps.LORA_SESSION_CAPS):
        cap = caps.lora_session_cap(model.base_model)
        r = api.ready_resource(base_model=model.base_model)
        if r["status"] != R + "READY":
            continue
        sessions = [api.create_session(r["id"]).ok() for _ in range(cap)]
        over = api.create_session(r["id"])
        api.expect(over, (429,), f"a LoRA resource of {model.base_model} holds {cap} sessions (capabilities table); "
                   f"session {cap + 1} is a 429", "session_cap_429")
        api.stop_session(sessions[0]["id"]).ok()
        first = sessions[0]["id"]
        api.wait(flows.read(api.get_session, first), lambda o: o["status"] in lc.SESSION_INACTIVE,
                 f"session {first} after stop", "getSession", bound=3600)
        api.expect(api.create_session(r["id"]), (200,), f"a stopped session frees its slot on {model.base_model}",
                   "session_cap_429")
        api.stop_resource(r["id"], force=True)


def test_lora_rank_limit(api: Api) -> None:
    for model in _default_and_named(api, caps.MOE_MODELS):
        max_rank = (model.lora or {}).get("max_rank")
        if not isinstance(max_rank, int):
            continue
        r = api.ready_resource(base_model=model.base_model)
        s = api.create_session(r["id"], lora_config={"rank": max_rank, "alpha": 32, "seed": 59})
        api.expect(s, (200,), f"lora_config.rank = max_rank {max_rank} of {model.base_model}", "lora_rank")
        shown = s.body.get("lora_config") or {}
        verify("createSession", "lora_rank", (shown.get("rank"), shown.get("alpha"), str(shown.get("seed")))
               == (max_rank, 32, "59"), f"a session created with rank {max_rank}, alpha 32, seed 59 shows lora_config "
               f"{shown}")
        api.expect(api.create_session(r["id"], lora_config={"rank": max_rank + 1}), (400,),
                   f"lora_config.rank {max_rank + 1} over max_rank {max_rank} of {model.base_model}", "lora_rank")
        api.expect(api.create_session(r["id"], lora_config={"rank": 0}), (400,),
                   "lora_config.rank 0 (an adapter has rank 1 or more)", "lora_rank")
        # LoraConfigParam leaves other fields open (no additionalProperties: false): one, even an object, is
        # accepted or refused, never a server error.
        extra = api.create_session(r["id"], lora_config={"rank": 8, "contract_extra": {"nested": [1]}})
        api.expect(extra, (200, 400), "a lora_config with a field the schema leaves open (an object)",
                   "not_a_server_error")
        api.stop_resource(r["id"], force=True)


def _batch(n: int) -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "forward_only": True,
            "samples": [ce_sample([3 + i % 50], [4 + i % 50]) for i in range(n)]}


def test_batch_and_length_limits(api: Api) -> None:
    model = flows.model(api, api.target.base_model)
    modes = [(True, model.lora)] + ([(False, model.full)] if model.full else [])
    for lora_enabled, limits in modes:
        if not limits or not isinstance(limits.get("max_batch_size"), int):
            continue
        mode = "LoRA" if lora_enabled else "full-weight"
        r = api.ready_resource(lora_enabled=lora_enabled)
        sid = api.running_session(r["id"])["id"]
        top = limits["max_batch_size"]
        flows.op_ok(api, sid, "forward-backward", _batch(top))
        flows.op_refused(api, sid, "forward-backward", _batch(top + 1),
                         f"a {mode} batch of {top + 1} samples, over max_batch_size {top}", "batch_limit")
        seq = limits.get("max_seq_length")
        if isinstance(seq, int) and seq < 200_000:
            long = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "forward_only": True,
                    "samples": [ce_sample([7] * (seq + 1), [8])]}  # model_input: seq + 1 tokens
            flows.op_refused(api, sid, "forward-backward", long,
                             f"a {mode} sample of {seq + 1} tokens, over max_seq_length {seq}", "sequence_limit")
        api.stop_resource(r["id"], force=True)


def test_generator_limits_and_defaults(api: Api) -> None:
    model = flows.model(api, api.target.base_model)
    gen = model.generator or {}
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    prompt = {"chunks": [{"encoded_text": {"tokens": [11, 12, 13]}}]}
    context = gen.get("context_length")
    if isinstance(context, int):
        flows.op_refused(api, sid, "sample", {"model_inputs": [prompt], "sampling_params": {"max_tokens": context}},
                         f"3 prompt tokens + max_tokens {context} exceed context_length {context}", "context_limit")
    # Without sampling_params (and num_samples) the model's sampling_defaults apply.
    defaults = gen.get("sampling_defaults") or {}
    n = defaults.get("n") if isinstance(defaults.get("n"), int) else 1
    out = flows.op_ok(api, sid, "sample", {"model_inputs": [prompt]})
    verify("getSample", "sampling_defaults", len(out["results"][0]["sequences"]) == n,
           f"without num_samples a prompt gets sampling_defaults.n = {n} completion(s), not "
           f"{len(out['results'][0]['sequences'])}")
    out = flows.op_ok(api, sid, "sample", {"model_inputs": [prompt], "num_samples": 12})
    sequences = out["results"][0]["sequences"]
    top = defaults.get("max_tokens")
    if isinstance(top, int):
        lengths = [(len(q["tokens"]), q["stop_reason"]) for q in sequences]
        verify("getSample", "sampling_defaults", all(k <= top and (why != "STOP_REASON_LENGTH" or k == top)
                                                     for k, why in lengths),
               f"without sampling_params a completion has at most sampling_defaults.max_tokens = {top} tokens, and "
               f"one that stops for length has exactly that many: {lengths}")
    if defaults.get("temperature") == 0:
        verify("getSample", "sampling_defaults", len({tuple(q["tokens"]) for q in sequences}) == 1,
               "sampling_defaults.temperature is 0 (greedy), yet completions of one prompt differ")
    api.stop_resource(r["id"], force=True)


def test_compute_config(api: Api) -> None:
    """``compute_config.gpu_type`` takes the model's ``default_gpu_type`` (and defaults to it);
    ``num_generator_replicas: 0`` means trainer only: the resource trains but cannot sample."""
    model = flows.model(api, api.target.base_model)
    gpu = model.raw.get("default_gpu_type")
    r = api.create_resource(compute_config={"gpu_type": gpu, "num_generator_replicas": 0})
    shown = r.get("compute_config") or {}
    verify("createModelResources", "create_echo", (shown.get("gpu_type"), shown.get("num_generator_replicas"))
           == (gpu, 0), f"a resource created with gpu_type {gpu} and 0 generator replicas shows {shown}")
    default = api.create_resource()
    verify("createModelResources", "create_echo", (default.get("compute_config") or {}).get("gpu_type") in (gpu, None),
           f"without gpu_type a resource takes the model's default_gpu_type {gpu}: {default.get('compute_config')}")
    api.stop_resource(default["id"])
    r = api.wait(lambda: api.get_resource(r["id"]).ok(), lambda o: o["status"] in (R + "READY", R + "ERROR"),
                 f"resource {r['id']}", "getModelResources", bound=3600)
    sid = api.running_session(r["id"])["id"]
    flows.op_ok(api, sid, "forward-backward", flows.training_body())
    flows.op_refused(api, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}]},
                     "sampling on a resource with num_generator_replicas 0 (trainer only)", "trainer_only")
    api.stop_resource(r["id"], force=True)


def test_lora_alpha_takes_effect(api: Api) -> None:
    """``lora_config.alpha`` scales the adapter: the same training step moves two sessions that differ only in
    alpha differently (a server that ignored it would give the same loss)."""
    r = api.ready_resource()
    losses = []
    for alpha in (4, 64):
        sid = api.running_session(r["id"], lora_config={"rank": 8, "alpha": alpha})["id"]
        flows.train(api, sid, learning_rate=1e-4)
        losses.append(flows.probe_loss(api, sid))
        api.stop_session(sid)
    verify("getForwardBackward", "lora_config_applied", not flows.same_number(*losses),
           f"sessions with LoRA alpha 4 and 64 have the same loss after the same training step ({losses}): alpha "
           "is ignored")
    api.stop_resource(r["id"], force=True)


# Each loss type with the params object documented for it (docs/api-surface.md A.3.1; the spec's examples).
LOSS_PARAMS: dict[str, dict[str, Any]] = {
    "LOSS_TYPE_CROSS_ENTROPY": {"cross_entropy_params": {}},
    "LOSS_TYPE_IMPORTANCE_SAMPLING": {},
    "LOSS_TYPE_GRPO": {"grpo_params": {"beta": 0.1, "clip_low_threshold": 0.8, "clip_high_threshold": 1.2}},
    "LOSS_TYPE_PPO": {"ppo_params": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}},
    "LOSS_TYPE_CISPO": {"cispo_params": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}},
    "LOSS_TYPE_DRO": {"dro_params": {"beta": 0.05}},
    "LOSS_TYPE_DPPO": {"dppo_params": {"delta_low": 0.15, "delta_high": 0.15}},
}


def _policy_sample(loss_type: str) -> dict[str, Any]:
    tokens = [11, 12, 13, 14, 15]
    n = len(tokens) - 1
    inputs: dict[str, Any] = {"target_tokens": {"data": tokens[1:], "dtype": "int64"}}
    if loss_type == "LOSS_TYPE_CROSS_ENTROPY":
        inputs["weights"] = {"data": [1.0] * n, "dtype": "float32"}
    else:
        inputs["logprobs"] = {"data": [-2.0] * n, "dtype": "float32"}
        inputs["advantages"] = {"data": [0.5] * n, "dtype": "float32"}
        inputs["reference_logprobs"] = {"data": [-2.1] * n, "dtype": "float32"}
        if loss_type == "LOSS_TYPE_IMPORTANCE_SAMPLING":
            del inputs["reference_logprobs"]
    return {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]}, "loss_fn_inputs": inputs}


def test_every_loss_type_runs_with_its_params(api: Api) -> None:
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    for loss_type, params in LOSS_PARAMS.items():
        out = flows.op_ok(api, sid, "forward-backward", {"loss": {"type": loss_type, **params},
                                                         "samples": [_policy_sample(loss_type)]})
        verify("getForwardBackward", "loss_types", isinstance(out.get("loss"), (int, float)),
               f"a {loss_type} forward-backward with its own params has no numeric loss: {out}")
    api.stop_resource(r["id"], force=True)


def _dppo_sample() -> dict[str, Any]:
    """A policy sample whose sampler gave each target token probability 1 (``logprobs`` 0) with a negative
    advantage: the current policy's probability is below that by almost 1, past any ``delta_low`` short of 1."""
    tokens = [11, 12, 13, 14, 15]
    n = len(tokens) - 1
    return {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
            "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                               "logprobs": {"data": [0.0] * n, "dtype": "float32"},
                               "advantages": {"data": [-1.0] * n, "dtype": "float32"}}}


def test_dppo_params_take_effect(api: Api) -> None:
    """``dppo_params`` ("each in [0, 1], measured in probability space"; docs/api-surface.md A.3.1) decide which
    positions keep their gradient: with ``delta_low`` 0 every position of :func:`_dppo_sample` moved past the trust
    region and gives none, with 1 none did. The same step from two sessions that differ only in the deltas sent
    must leave them with different weights; a server that dropped the params would train both alike, whatever its
    defaults (neither pair sent is the default)."""
    r = api.ready_resource()
    losses = []
    for delta in (0.0, 1.0):
        sid = api.running_session(r["id"], lora_config={"seed": 7})["id"]  # the same adapter initialisation
        flows.op_ok(api, sid, "forward-backward", {
            "loss": {"type": "LOSS_TYPE_DPPO", "dppo_params": {"delta_low": delta, "delta_high": delta}},
            "samples": [_dppo_sample()]})
        flows.op_ok(api, sid, "optim-step", {"adam_params": {"learning_rate": 0.05}})
        losses.append(flows.probe_loss(api, sid))
        api.stop_session(sid)
    verify("getForwardBackward", "loss_params_applied", not flows.same_number(*losses),
           f"sessions trained by the same LOSS_TYPE_DPPO step with dppo_params deltas 0 and 1 have the same loss "
           f"afterwards ({losses}): the dppo_params are ignored")
    api.stop_resource(r["id"], force=True)
