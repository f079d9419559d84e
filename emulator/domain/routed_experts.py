"""Routed-experts keys: a mixture-of-experts sample's expert routing, replayed in training.

Emulates docs/api-surface.md A.3.1 / A.3.5 and the SDK's docstrings: on an MoE model, ``return_routed_experts``
gives each sequence a ``routed_experts_key`` a training sample may send back; on a dense model both are ignored
(the flag documented, the key [inferred]). Key format, coverage, lifetime, failures: [inferred] (README).
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
