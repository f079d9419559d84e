"""Routed-experts keys: a mixture-of-experts sample's expert routing, replayed in training.

Emulates docs/api-surface.md A.3.1 / A.3.5 and the SDK's docstrings (``OperationSampleParams.
return_routed_experts``, ``SampledSequence.routed_experts_key``, ``Sample.routed_experts_key``): on a
mixture-of-experts model (:attr:`emulator.domain.catalog.CatalogModel.moe`) a sample with
``return_routed_experts`` gives every sequence an opaque ``routed_experts_key``; a forward-backward or
custom-forward-backward sample that sends it back replays that routing. "The selections must cover the
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

from typing import Any

from emulator.compute import INVALID_INPUT, ComputeError
from emulator.domain.catalog import BY_NAME
from emulator.domain.context import Ctx
from emulator.ids import derive
from emulator.store.records import Operation, Session


def _tokens(model_input: Any) -> int:
    chunks = model_input.get("chunks") if isinstance(model_input, dict) else None
    return sum(len((c.get("encoded_text") or {}).get("tokens") or []) for c in chunks or () if isinstance(c, dict))


def issue(ctx: Ctx, s: Session, op: Operation, output: dict[str, Any]) -> None:
    """Give every sampled sequence of ``output`` a key, when ``op`` asked for them on an MoE model."""
    if not (op.body.get("return_routed_experts") and BY_NAME[s.base_model].moe):
        return
    keys = s.routed_experts if s.routed_experts is not None else {}
    for i, (model_input, result) in enumerate(zip(op.body.get("model_inputs") or [], output["results"])):
        prompt = _tokens(model_input)
        for j, seq in enumerate(result["sequences"]):
            completion = len(seq["tokens"])
            digest = derive(ctx.seed, "routed-experts", op.id, i, j).hex()[:32]
            key = f"routing/session/{digest}.{prompt + completion}"
            seq["routed_experts_key"] = key
            keys[key] = prompt + max(completion - 1, 0)
    keep = ctx.limits.routed_experts_keys_per_session
    for old in list(keys)[: max(len(keys) - keep, 0)]:
        del keys[old]
    s.routed_experts = keys or None


def check(s: Session, samples: Any) -> None:
    """Refuse (``INVALID_INPUT``) training samples whose key this session does not hold or that it does not
    cover; on a dense model keys are ignored."""
    if not BY_NAME[s.base_model].moe or not isinstance(samples, list):
        return
    keys = s.routed_experts or {}
    for i, sample in enumerate(samples):
        key = sample.get("routed_experts_key") if isinstance(sample, dict) else None
        if key is None:
            continue
        covered = keys.get(key)
        if covered is None:
            raise ComputeError(INVALID_INPUT, f"samples[{i}].routed_experts_key {key!r} is not available: it was "
                               "not returned by a sample of this session, or has expired (a session keeps its "
                               "newest keys only)")
        length = _tokens(sample.get("model_input"))
        if length > covered + 1:
            raise ComputeError(INVALID_INPUT, f"samples[{i}].routed_experts_key covers {covered} tokens; it must "
                               f"cover the whole sample ({length} tokens) or all but its last token")
