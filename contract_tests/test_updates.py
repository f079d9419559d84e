"""Updates and timestamps, round-tripped: what a PATCH keeps, what every change does to ``updated_at``, and
the documented defaults and bounds of the numbers a client sets.

- PATCH ``/v1/rl/training-sessions/{id}`` (docs/api-surface.md A.2.4): "omitted fields stay as they are, and
  an empty string clears a value (also inside ``metadata.wandb.*``)"; the answer and a later GET agree.
- ``updated_at`` moves later with every change a client can see (a PATCH, a step, a weights publish and the
  sample that applies it, each checkpoint), and never moves back (the observer checks every read).
- ``inactive_timeout`` defaults to 3600 and takes 300-86400; ``extend-expiry`` takes 60-86400 seconds and
  moves ``expires_at`` to at least now + seconds, never earlier; ``display_name`` takes 128 characters.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from contract_tests import capabilities as caps
from contract_tests import flows
from contract_tests import lifecycle as lc
from contract_tests.client import RL, Api, verify
from contract_tests.lifecycle import R
from contract_tests.target import Target

creates = [pytest.mark.real_safe, pytest.mark.creates_resources]


@pytest.fixture(scope="module")
def resource(target: Target) -> Iterator[dict[str, Any]]:
    if not target.allow_create:
        pytest.skip("creates_resources: creating billable resources is off for this target")
    api = Api(target)
    r = api.ready_resource()
    yield r
    api.stop_resource(r["id"], force=True)


def _wandb(session: dict[str, Any]) -> dict[str, Any]:
    return dict(((session.get("metadata") or {}).get("wandb") or {}))


def _cleared(value: Any) -> bool:
    return value in (None, "")


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_patch_merges_and_keeps_what_it_omits(api: Api, resource: dict[str, Any]) -> None:
    s = api.create_session(resource["id"], display_name="before",
                           metadata={"wandb": {"project": "p1", "entity": "e1"}}).ok()
    sid = s["id"]

    def patched(body: dict[str, Any], rule: str) -> dict[str, Any]:
        reply = flows.patch_session(api, sid, body)
        api.expect(reply, (200,), rule, "patch_accepted")
        again = api.get_session(sid).ok()
        verify("getSession", "patch_round_trip",
               (again.get("display_name"), again.get("metadata")) == (reply.body.get("display_name"),
                                                                     reply.body.get("metadata")),
               f"after PATCH {body} the answer shows display_name={reply.body.get('display_name')!r} metadata="
               f"{reply.body.get('metadata')} but a GET shows {again.get('display_name')!r} {again.get('metadata')}")
        return again

    after = patched({"metadata": {"wandb": {"run_name": "r1"}}}, "a PATCH of metadata only")
    verify("updateSession", "patch_merges", _wandb(after) == {"project": "p1", "entity": "e1", "run_name": "r1"},
           f"PATCH metadata.wandb.run_name must keep the other wandb fields (merge, not replace): "
           f"{after.get('metadata')}")
    verify("updateSession", "patch_keeps_omitted", after.get("display_name") == "before",
           f"a PATCH without display_name changed it to {after.get('display_name')!r}")

    after = patched({"display_name": "after"}, "a PATCH of display_name only")
    verify("updateSession", "patch_keeps_omitted",
           after.get("display_name") == "after" and _wandb(after).get("project") == "p1",
           f"PATCH display_name must set it and keep metadata: {after.get('display_name')!r} {after.get('metadata')}")

    after = patched({"metadata": {"wandb": {"entity": ""}}}, "a PATCH that clears one wandb field")
    verify("updateSession", "patch_empty_clears",
           _cleared(_wandb(after).get("entity")) and _wandb(after).get("project") == "p1"
           and _wandb(after).get("run_name") == "r1",
           f"an empty string clears that one value and keeps the rest: {after.get('metadata')}")

    after = patched({}, "an empty PATCH")
    verify("updateSession", "patch_keeps_omitted",
           after.get("display_name") == "after" and _wandb(after).get("project") == "p1",
           f"an empty PATCH changed the session: {after.get('display_name')!r} {after.get('metadata')}")

    longest = "n" * caps.DISPLAY_NAME_MAX
    after = patched({"display_name": longest}, f"a display_name of {caps.DISPLAY_NAME_MAX} characters")
    verify("updateSession", "patch_accepted", after.get("display_name") == longest,
           f"display_name of {caps.DISPLAY_NAME_MAX} characters not kept")
    api.expect(flows.patch_session(api, sid, {"display_name": "n" * (caps.DISPLAY_NAME_MAX + 1)}), (400, 422),
               f"display_name over {caps.DISPLAY_NAME_MAX} characters", "invalid_input_refused")
    verify("updateSession", "refusal_changes_nothing", api.get_session(sid).ok().get("display_name") == longest,
           "a refused PATCH changed display_name")

    after = patched({"display_name": ""}, "a PATCH that clears display_name")
    verify("updateSession", "patch_empty_clears", _cleared(after.get("display_name")),
           f"an empty display_name must clear it, not keep {after.get('display_name')!r}")
    api.stop_session(sid)


def _changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    skip = ("updated_at", "status")
    return {k: v for k, v in old.items() if k not in skip} != {k: v for k, v in new.items() if k not in skip}


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_updated_at_moves_with_every_change(api: Api, resource: dict[str, Any]) -> None:
    """Each step below changes what a session shows; after time has passed, its updated_at must be later."""
    s = api.running_session(resource["id"])
    sid = s["id"]
    verify("getSession", "updated_at_moves", lc.parse_time(s["updated_at"], "updated_at")
           >= lc.parse_time(s["created_at"], "created_at"), "updated_at before created_at")
    steps: list[tuple[str, Any]] = [
        ("PATCH display_name", lambda: flows.patch_session(api, sid, {"display_name": "moved"}).ok()),
        ("PATCH metadata", lambda: flows.patch_session(api, sid, {"metadata": {"wandb": {"group": "g"}}}).ok()),
        ("an optim-step", lambda: flows.train(api, sid)),
        ("a BACKGROUND_PUBLISH weights-sync",
         lambda: flows.op_ok(api, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"})),
        ("the sample that applies the published weights",
         lambda: flows.op_ok(api, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [5, 6]}}]}],
                                                  "sampling_params": {"max_tokens": 2, "seed": 3}})),
        ("an inference checkpoint", lambda: flows.checkpoint(api, sid, "inference-checkpoint")),
        ("a training checkpoint", lambda: flows.checkpoint(api, sid, "training-checkpoint")),
    ]
    before = api.get_session(sid).ok()
    for what, step in steps:
        api.target.pass_time(5)
        step()
        after = api.get_session(sid).ok()
        verify("getSession", "updated_at_moves", _changed(before, after),
               f"{what} changed nothing a client can see on session {sid}")
        verify("getSession", "updated_at_moves", lc.parse_time(after["updated_at"], "updated_at")
               > lc.parse_time(before["updated_at"], "updated_at"),
               f"updated_at did not move: {what} changed session {sid}, yet updated_at stayed {after['updated_at']} "
               f"(created_at {after['created_at']})")
        before = after
    ps = before["policy_state"]
    verify("getSession", "policy_state", (ps["pending_publish"], lc.as_int64(ps["applied_weights_version"], "applied"))
           == (False, lc.as_int64(ps["target_weights_version"], "target")),
           f"the sample after a BACKGROUND_PUBLISH must apply the published weights: policy_state {ps}")
    api.stop_session(sid)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_inactive_timeout_default_and_bounds(api: Api) -> None:
    made: list[str] = []
    r = api.create_resource()
    made.append(r["id"])
    verify("createModelResources", "documented_default", r.get("inactive_timeout") == caps.DEFAULT_INACTIVE_TIMEOUT,
           f"inactive_timeout defaults to {caps.DEFAULT_INACTIVE_TIMEOUT} s, not {r.get('inactive_timeout')!r}")
    low, high = caps.INACTIVE_TIMEOUT_RANGE
    for value in (low, high):
        got = api.create_resource(inactive_timeout=value)
        made.append(got["id"])
        verify("createModelResources", "bounds_accepted", got.get("inactive_timeout") == value,
               f"inactive_timeout={value} (within {low}-{high}) answered {got.get('inactive_timeout')!r}")
    for value in (low - 1, high + 1):
        reply = api.call("createModelResources", "POST", f"{RL}/model-resources",
                         json={"base_model": api.target.base_model, "inactive_timeout": value})
        api.expect(reply, (400, 422), f"inactive_timeout={value} is outside {low}-{high}", "invalid_input_refused")
    for rid in made:
        api.stop_resource(rid)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_extend_expiry_bounds(api: Api, resource: dict[str, Any]) -> None:
    rid = resource["id"]
    low, high = caps.EXTEND_EXPIRY_RANGE

    def extend(seconds: int) -> Any:
        return api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{rid}/extend-expiry",
                        json={"seconds": seconds})

    for seconds in (low - 1, high + 1):
        api.expect(extend(seconds), (400, 422), f"extend-expiry by {seconds} s is outside {low}-{high}",
                   "invalid_input_refused")
    previous = lc.parse_time(api.get_resource(rid).ok()["expires_at"], "expires_at")
    for seconds in (low, high):
        reply = api.expect(extend(seconds), (200,), f"extend-expiry by {seconds} s (within {low}-{high})",
                           "extend_expiry")
        body = reply.body
        verify("extendModelResourcesExpiry", "extend_expiry", body.get("status") == R + "READY"
               and bool(body.get("expires_at")), f"extend-expiry answered {body.get('status')} without expires_at")
        now = lc.parse_time(body["expires_at"], "expires_at")
        verify("extendModelResourcesExpiry", "expires_at_never_earlier", now >= previous,
               f"extend-expiry by {seconds} s moved expires_at earlier: {previous.isoformat()} -> {body['expires_at']}")
        previous = now
    # After the longest extension, expires_at is at least a day after the resource was last updated.
    final = api.get_resource(rid).ok()
    verify("extendModelResourcesExpiry", "extend_expiry",
           lc.parse_time(final["expires_at"], "expires_at") >= lc.parse_time(final["updated_at"], "updated_at")
           + timedelta(seconds=high - 120),
           f"extend-expiry by {high} s left expires_at at {final['expires_at']} (updated_at {final['updated_at']})")


@pytest.mark.emulator_only
@pytest.mark.creates_resources
def test_activity_restarts_the_inactivity_count(api: Api) -> None:
    """``expires_at`` = last activity + inactive_timeout: an operation restarts the count (emulator clock)."""
    r = api.ready_resource(inactive_timeout=300)
    s = api.running_session(r["id"])
    api.target.advance(200)
    flows.op_ok(api, s["id"], "forward-backward", flows.training_body())
    now = flows.clock_now(api.target)
    r = api.get_resource(r["id"]).ok()
    verify("getModelResources", "expires_at", lc.parse_time(r["expires_at"], "expires_at")
           >= now + timedelta(seconds=300 - 1),
           f"after an operation at {now.isoformat()} expires_at is {r['expires_at']}, not 300 s after it")
    api.target.advance(200)  # 400 s after the session started, 200 s after the operation
    verify("getModelResources", "expiry", api.get_resource(r["id"]).ok()["status"] == R + "READY",
           "the resource stopped although an operation 200 s ago restarted its 300 s inactivity count")
    extended = api.call("extendModelResourcesExpiry", "POST", f"{RL}/model-resources/{r['id']}/extend-expiry",
                        json={"seconds": 900}).ok()
    now = flows.clock_now(api.target)
    verify("extendModelResourcesExpiry", "extend_expiry",
           lc.parse_time(extended["expires_at"], "expires_at") >= now + timedelta(seconds=900 - 1),
           f"extend-expiry by 900 s at {now.isoformat()} left expires_at at {extended['expires_at']}")
    api.stop_resource(r["id"], force=True)


def _policy(api: Api, sid: str) -> tuple[int, int, int, bool, int]:
    s = api.get_session(sid).ok()
    ps = s["policy_state"]
    return (lc.as_int64(ps["trainer_step"], "trainer_step"), lc.as_int64(ps["target_weights_version"], "target"),
            lc.as_int64(ps["applied_weights_version"], "applied"), ps["pending_publish"], lc.as_int64(s["step"], "step"))


def _sampled_version(api: Api, sid: str) -> set[int]:
    out = flows.op_ok(api, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [7, 8, 9]}}]}],
                                          "sampling_params": {"max_tokens": 3, "seed": 1}})
    return {lc.as_int64(seg["version"], "policy_segments.version") for r in out["results"]
            for seg in r["policy_segments"]}


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_weights_sync_moves_the_policy_state(api: Api, resource: dict[str, Any]) -> None:
    """docs/api-surface.md C.4: optim-step moves trainer_step (= step); SYNCHRONOUS makes it the applied version at
    once; a deferred publish (BACKGROUND_PUBLISH, PIPELINE) promises it (target, pending_publish) and the next
    sample applies it, or a SYNCHRONOUS sync does at once; samples are drawn from the applied version, never from
    unpublished training."""
    sid = api.running_session(resource["id"])["id"]
    verify("getSession", "policy_state", _policy(api, sid) == (0, 0, 0, False, 0),
           f"a new session's policy_state and step start at 0, not published: {_policy(api, sid)}")
    step = flows.train(api, sid)
    trainer, target, applied, pending, shown = _policy(api, sid)
    verify("getSession", "policy_state", (trainer, shown, target, applied, pending) == (step, step, 0, 0, False),
           f"after one optim-step (step {step}) policy_state reads trainer {trainer} target {target} applied "
           f"{applied} pending {pending}, step {shown}")
    verify("getSample", "sample_version", _sampled_version(api, sid) == {0},
           "a sample before any weights-sync must come from version 0, not the unpublished training")
    out = flows.op_ok(api, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
    verify("getWeightsSync", "policy_state", lc.as_int64(out.get("weights_version"), "weights_version") == step
           and _policy(api, sid)[1:4] == (step, step, False),
           f"after a SYNCHRONOUS weights-sync the trained version {step} is live: output {out}, policy "
           f"{_policy(api, sid)}")
    verify("getSample", "sample_version", _sampled_version(api, sid) == {step},
           f"a sample after a SYNCHRONOUS sync must come from version {step}")
    for deferred in ("WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH", "WEIGHT_SYNC_TYPE_PIPELINE"):
        live = step
        step = flows.train(api, sid)
        out = flows.op_ok(api, sid, "weights-sync", {"weight_sync_type": deferred})
        trainer, target, applied, pending, _ = _policy(api, sid)
        verify("getWeightsSync", "policy_state", lc.as_int64(out.get("weights_version"), "weights_version") == step
               and target == step and pending == (applied != target) and applied in (live, step),
               f"after a {deferred} of version {step} (live: {live}): output {out}, policy trainer {trainer} target "
               f"{target} applied {applied} pending {pending}")
        verify("getSample", "sample_version", _sampled_version(api, sid) == {step},
               f"the sample after a {deferred} applies the published version {step}")
        verify("getSession", "policy_state", _policy(api, sid)[1:4] == (step, step, False),
               f"after that sample, version {step} is applied and nothing is pending: {_policy(api, sid)}")
    latest = flows.train(api, sid)
    verify("getSample", "sample_version", _sampled_version(api, sid) == {step},
           f"without a weights-sync, samples keep the published version {step} after another optim-step")
    # A deferred publish still pending when a SYNCHRONOUS one of a newer version completes: the newer version is live
    # ("completes once the new weights are live"; "a sampler always serves the latest published weights") and
    # nothing is pending (pending_publish: "True while a publish ... was requested but has not finished"); the
    # older deferred one never takes the generator back.
    flows.op_ok(api, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"})
    newer = flows.train(api, sid)
    flows.op_ok(api, sid, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
    verify("getSession", "policy_state", _policy(api, sid)[1:4] == (newer, newer, False),
           f"after a BACKGROUND_PUBLISH of version {latest} and then a SYNCHRONOUS weights-sync of version {newer}, "
           f"version {newer} is applied and nothing is pending: {_policy(api, sid)}")
    verify("getSample", "sample_version", _sampled_version(api, sid) == {newer},
           f"after a SYNCHRONOUS weights-sync of version {newer} (an older BACKGROUND_PUBLISH of {latest} before it) "
           f"samples come from version {newer}")
    verify("getSession", "policy_state", _policy(api, sid)[1:4] == (newer, newer, False),
           f"a sample took the applied version back from {newer}: {_policy(api, sid)}")
    api.stop_session(sid)


@pytest.mark.real_safe
@pytest.mark.creates_resources
def test_outputs_stay_readable(api: Api, resource: dict[str, Any]) -> None:
    """A COMPLETED operation keeps its output for later reads, large ones included (a few samples of many tokens,
    well within any retention a service could document)."""
    sid = api.running_session(resource["id"])["id"]
    body: dict[str, Any] = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [3, 4, 5]}}]}], "num_samples": 8,
            "prompt_logprobs": True, "sampling_params": {"max_tokens": 64, "temperature": 1.0, "seed": 11}}
    done = [api.run_op(sid, "sample", {**body, "sampling_params": {**body["sampling_params"], "seed": seed}})
            for seed in (11, 12, 13)]
    for op in done:
        again = api.get_op(sid, "sample", op["id"])
        api.expect(again, (200,), f"reading sample operation {op['id']} again after later ones", "output_kept")
        verify("getSample", "output_kept", again.body.get("output") == op.get("output"),
               f"the output of sample operation {op['id']} changed or vanished once later samples completed")
    api.stop_session(sid)
