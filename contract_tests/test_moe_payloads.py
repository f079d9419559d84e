"""Mixture-of-experts routed experts, and uploaded payloads and who may use them.

Routed experts (docs/api-surface.md A.3.1, A.3.5): with ``return_routed_experts`` a mixture-of-experts model
(:data:`contract_tests.capabilities.MOE_MODELS`) gives every sampled sequence a ``routed_experts_key``; any
model that gives keys gives one to every sequence. Sent back with a training sample, a key "must cover the
whole sample or all but its final token": ``(prompt + completion)[:-1]`` and ``prompt + completion`` train,
a longer sample is refused; "training fails if the key is no longer available" (an unknown key).

Payloads (A.4): the body uploaded to a session's ``upload_url`` is what the operation runs (its result is
the result of the same body sent inline, though the inline body is the SDK's truncated stand-in); a payload
belongs to the session it was created for: that session's operation runs it, another session's is refused
[inferred: the SDK only ever submits a payload to the session it got the URL from]; one not uploaded yet has no
download URL (400, as the spec says).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from contract_tests import capabilities as caps
from contract_tests import flows
from contract_tests.client import RL, Api, verify

pytestmark = [pytest.mark.real_safe, pytest.mark.creates_resources]

PROMPTS = [[11, 12, 13, 14], [21, 22]]


def _sample_body(keys: bool) -> dict[str, Any]:
    return {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": p}}]} for p in PROMPTS], "num_samples": 2,
            "return_routed_experts": keys, "sampling_params": {"max_tokens": 4, "temperature": 1.0, "seed": 5}}


def _train_sample(tokens: list[int], key: str) -> dict[str, Any]:
    n = len(tokens) - 1
    return {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
            "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                               "weights": {"data": [1.0] * n, "dtype": "float32"}},
            "routed_experts_key": key}


def _fb(sample: dict[str, Any]) -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [sample]}


def test_routed_experts_keys_cover_what_was_sampled(api: Api) -> None:
    checked = 0
    # The mixture-of-experts models of the table, and the default model (every other model is held to "all or none").
    chosen = [m for m in flows.models(api) if m.base_model in caps.MOE_MODELS or m.base_model == api.target.base_model]
    for model in chosen:
        r = api.ready_resource(base_model=model.base_model)
        sid = api.running_session(r["id"])["id"]
        out = flows.op_ok(api, sid, "sample", _sample_body(True))
        seqs = [(PROMPTS[i], seq) for i, result in enumerate(out["results"]) for seq in result["sequences"]]
        keyed = [s for s in seqs if isinstance(s[1].get("routed_experts_key"), str)]
        if model.base_model in caps.MOE_MODELS:
            verify("getSample", "routed_experts", len(keyed) == len(seqs),
                   f"{model.base_model} is a mixture-of-experts model: with return_routed_experts every sampled "
                   f"sequence carries a routed_experts_key, but {len(seqs) - len(keyed)} of {len(seqs)} have none")
        else:
            verify("getSample", "routed_experts", len(keyed) in (0, len(seqs)),
                   f"{model.base_model} gave routed_experts_key to {len(keyed)} of {len(seqs)} sequences: all or none")
        if not keyed:
            api.stop_resource(r["id"], force=True)
            continue
        checked += 1
        prompt, seq = next((k for k in keyed if k[1]["tokens"]), keyed[0])
        key = seq["routed_experts_key"]
        tokens = [*prompt, *(int(t) for t in seq["tokens"])]
        flows.op_ok(api, sid, "forward-backward", _fb(_train_sample(tokens, key)))  # (prompt + completion)[:-1]
        flows.op_ok(api, sid, "forward-backward", _fb(_train_sample([*tokens, 1], key)))  # all but the last token
        flows.op_refused(api, sid, "forward-backward", _fb(_train_sample([*tokens, 1, 2], key)),
                         f"a routed_experts_key of {len(tokens)} sampled tokens sent with a longer sample", "routed_experts")
        flows.op_refused(api, sid, "forward-backward", _fb(_train_sample(tokens, key[:-3] + "zzz")),
                         "a routed_experts_key that was never issued", "routed_experts")
        # One sampled token: the key covers the prompt and nothing the generator did not run.
        short = flows.op_ok(api, sid, "sample", {**_sample_body(True), "sampling_params": {"max_tokens": 1, "seed": 5}})
        for seq in short["results"][0]["sequences"]:
            if isinstance(seq.get("routed_experts_key"), str) and len(seq["tokens"]) == 1:
                flows.op_refused(api, sid, "forward-backward",
                                 _fb(_train_sample([*PROMPTS[0], int(seq["tokens"][0]), 1, 2], seq["routed_experts_key"])),
                                 "the routed_experts_key of a one-token completion sent with a longer sample",
                                 "routed_experts")
                break
        plain = flows.op_ok(api, sid, "sample", _sample_body(False))
        verify("getSample", "routed_experts", not any("routed_experts_key" in q for res in plain["results"]
                                                      for q in res["sequences"]),
               "sequences carry routed_experts_key although return_routed_experts was not set")
        api.stop_resource(r["id"], force=True)
    offered = {m.base_model for m in flows.models(api)} & caps.MOE_MODELS
    if offered:
        verify("getSample", "routed_experts", checked > 0, f"no model gave routed experts keys; {sorted(offered)} should")


def test_payloads_run_on_their_own_session_only(api: Api) -> None:
    r = api.ready_resource()
    mine = api.running_session(r["id"])["id"]
    theirs = api.running_session(r["id"])["id"]
    body = flows.training_body()
    body["forward_only"] = True
    body["samples"] = body["samples"] * 3  # more than the 8 numbers the inline stand-in keeps
    inline = flows.op_ok(api, mine, "forward-backward", body)

    payload = flows.upload_payload(api, mine, body)
    # Its download URL: for its own session only; it serves what was uploaded.
    url = "/v1/rl/training-sessions/{}/payloads/{}/download-url"
    api.expect(api.call("createPayloadDownloadUrl", "POST", url.format(theirs, payload), empty_body=True), (404,),
               "another session's payload has no download URL on this one", "payload_owner")
    api.expect(api.call("createPayloadDownloadUrl", "POST", url.format(mine, "00000000-0000-4000-8000-0000000000aa"),
                        empty_body=True), (404,), "an unknown payload", "unknown_id_404")
    grant = api.call("createPayloadDownloadUrl", "POST", url.format(mine, payload), empty_body=True).ok()
    fetched = requests.get(grant["download_url"], timeout=60)
    verify("createPayloadDownloadUrl", "payload_download", fetched.status_code == 200 and fetched.json() == body,
           f"the download URL of payload {payload} answered {fetched.status_code}, not the uploaded body")
    how = flows.op_refused(api, theirs, "forward-backward", {**flows.truncated(body), "payload_id": payload},
                           f"session {theirs} submitting payload {payload} of session {mine}", "payload_owner")
    verify("createForwardBackward", "payload_owner", bool(how), "another session's payload was accepted")
    uploaded = flows.op_ok(api, mine, "forward-backward", {**flows.truncated(body), "payload_id": payload})
    verify("getForwardBackward", "payload_used", flows.same_number(uploaded["loss"], inline["loss"]),
           f"an operation submitted with payload_id must run the uploaded body: its loss {uploaded['loss']} differs "
           f"from the same body sent inline ({inline['loss']})")
    api.stop_resource(r["id"], force=True)


def test_a_payload_not_uploaded_has_no_download_url(api: Api) -> None:
    """createPayloadDownloadUrl: "A payload that has not been uploaded yet ... is a 400": an upload URL was granted,
    nothing was PUT to it, so there is nothing to download (a 200 would hand out a URL that serves nothing)."""
    r = api.ready_resource()
    sid = api.running_session(r["id"])["id"]
    grant = api.call("createPayloadUploadUrl", "POST", f"{RL}/training-sessions/{sid}/payloads/upload-url",
                     empty_body=True).ok()
    reply = api.call("createPayloadDownloadUrl", "POST",
                     f"{RL}/training-sessions/{sid}/payloads/{grant['payload_id']}/download-url", empty_body=True)
    if reply.status == 200 and isinstance(reply.body, dict) and reply.body.get("download_url"):
        fetched = requests.get(reply.body["download_url"], timeout=60)
        reply.body = {**reply.body, "the URL answered": fetched.status_code}
    api.expect(reply, (400,), "a download URL for a payload not uploaded yet", "payload_download")
    api.stop_resource(r["id"], force=True)
