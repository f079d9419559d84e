"""Routed-experts keys: a mixture-of-experts sample's expert routing, replayed in training.

Emulates docs/api-surface.md A.3.1 / A.3.5 and the SDK's docstrings (``OperationSampleParams.
return_routed_experts``, ``SampledSequence.routed_experts_key``, ``Sample.routed_experts_key``): on a
mixture-of-experts model (:attr:`emulator.domain.catalog.CatalogModel.moe`) a sample with
``return_routed_experts`` gives every sequence an opaque ``routed_experts_key``; a training sample (of
either kind that trains on a batch) that sends it back replays that routing. "The selections must cover the
entire training sample or all but its final token. Training fails if the key is no longer available."
On a dense model ``return_routed_experts`` is ignored (documented) and so is a sample's key [inferred:
there is no routing to replay].

The emulator's choices [inferred; the real ones are not published]:

- A key looks like the documented example, ``routing/session/<32 hex>.<n>``: the hex part derived from
  the seed and the sample operation, ``n`` the sequence's prompt plus completion tokens (the SDK's
  example has ``.22`` for a 20-token prompt and 2 sampled tokens).
- It covers every position the generator ran: the prompt and every sampled token but the last, which
  is never fed back. So ``(prompt + completion)[:-1]``, the usual training input, is covered whole, and
  ``prompt + completion`` all but its last token; a longer training input is refused.
- Keys belong to the session that sampled them and live as long as it does, bounded: a session keeps
  its newest ``routed_experts_keys_per_session`` keys (:mod:`emulator.domain.limits`, default 1024);
  older ones expire first in, first out. Weight changes do not expire a key (replaying the sampler's
  routing after the policy moved on is what the feature is for).
- An unknown, expired or too-short key fails the training operation with ``INVALID_INPUT`` (the
  documented failure names no code) before anything is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emulator.compute import INVALID_INPUT, ComputeError
from emulator.compute.types import ModelInput, Sample
from emulator.domain.catalog import BY_NAME
from emulator.domain.context import Ctx
from emulator.ids import derive
from emulator.jsontypes import Json, JsonObject
from emulator.store.records import Session


def _tokens(model_input: ModelInput) -> int:
    return sum(len(c.encoded_text.tokens) for c in model_input.chunks if c.encoded_text is not None)


def issue(ctx: Ctx, s: Session, op_id: str, model_inputs: Sequence[ModelInput], output: JsonObject) -> JsonObject:
    """``output`` with a key for every sampled sequence, on an MoE model (the sample asked for them)."""
    if not BY_NAME[s.base_model].moe:
        return output
    keys = dict(s.routed_experts or {})
    results: list[Json] = []
    for i, (model_input, result) in enumerate(zip(model_inputs, _objects(output.get("results")))):
        prompt = _tokens(model_input)
        sequences: list[Json] = []
        for j, seq in enumerate(_objects(result.get("sequences"))):
            completion = len(_objects(seq.get("tokens")))
            digest = derive(ctx.seed, "routed-experts", op_id, i, j).hex()[:32]
            key = f"routing/session/{digest}.{prompt + completion}"
            sequences.append({**seq, "routed_experts_key": key})
            keys[key] = prompt + max(completion - 1, 0)
        results.append({**result, "sequences": sequences})
    keep = ctx.limits.routed_experts_keys_per_session
    for old in list(keys)[: max(len(keys) - keep, 0)]:
        del keys[old]
    s.routed_experts = keys or None
    return {**output, "results": results}


def _objects(value: Json) -> list[Any]:
    """A JSON array (of what the model returned), empty for anything else."""
    return list(value) if isinstance(value, (list, tuple)) else []


def check(s: Session, samples: Sequence[Sample]) -> None:
    """Refuse (``INVALID_INPUT``) training samples whose key this session does not hold or that it does not
    cover; on a dense model keys are ignored."""
    if not BY_NAME[s.base_model].moe:
        return
    keys = s.routed_experts or {}
    for i, sample in enumerate(samples):
        key = sample.routed_experts_key
        if key is None:
            continue
        covered = keys.get(key)
        if covered is None:
            raise ComputeError(INVALID_INPUT, f"samples[{i}].routed_experts_key {key!r} is not available: it was "
                               "not returned by a sample of this session, or has expired (a session keeps its "
                               "newest keys only)")
        length = _tokens(sample.model_input)
        if length > covered + 1:
            raise ComputeError(INVALID_INPUT, f"samples[{i}].routed_experts_key covers {covered} tokens; it must "
                               f"cover the whole sample ({length} tokens) or all but its last token")
