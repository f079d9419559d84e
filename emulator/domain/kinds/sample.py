"""``sample``: completions of each prompt from the sampler's weights, log-probs, routed-experts keys on request.

Refused at submit (400) [inferred]: no generator replicas, ``max_tokens`` past the context length, too large a
``num_samples``, a seed outside int64. ``return_routed_experts`` on a dense model is dropped with a warning
(400 under ``--strict``): "ignored for other models" (the SDK).
"""

from __future__ import annotations

import msgspec
import orjson

from emulator import defaults
from emulator.bounds import int64
from emulator.compute.spec import DEFAULT_MAX_TOKENS, MAX_SAMPLE_TOKENS
from emulator.compute.types import ModelInput, SamplingParams
from emulator.domain import routed_experts
from emulator.domain.catalog import BY_NAME
from emulator.domain.context import Ctx
from emulator.domain.durations import Timing, TimingParam
from emulator.domain.kind import Kind
from emulator.domain.session_models import session_model
from emulator.errors import FailedPrecondition, Invalid
from emulator.ids import derive_int
from emulator.jsontypes import JsonObject
from emulator.store import Tenant
from emulator.store.records import Operation, OperationRequest, Session, SessionStatus

SECONDS_PER_TOKEN = TimingParam("sample_seconds_per_token", instant=0.0, realistic=0.02,
                                doc="per generated token and sample")


def _admit(tenant: Tenant, s: Session) -> None:
    r = tenant.resources[s.model_resources_id]
    if r.num_generator_replicas == 0 and s.status == SessionStatus.RUNNING:
        raise FailedPrecondition(f"model resource {r.id} has no generator replicas (num_generator_replicas=0); "
                                 "it cannot sample", param="session_id")


class Request(OperationRequest, frozen=True, kw_only=True):
    model_inputs: tuple[ModelInput, ...]
    num_samples: int | None = None
    sampling_params: SamplingParams | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int | None = None
    return_routed_experts: bool | None = None


def _check(ctx: Ctx, s: Session, request: Request) -> Request:
    _check_bounds(request, s)
    if request.return_routed_experts and not BY_NAME[s.base_model].moe:
        ctx.ignored("return_routed_experts", f"{s.base_model} is not a mixture-of-experts model")
        return msgspec.structs.replace(request, return_routed_experts=None)
    return request


def _check_bounds(request: Request, s: Session) -> None:
    """Request-derived sizes, bounded where they enter: the duration grows with them (the model would refuse
    the request when run anyway)."""
    num_samples = request.num_samples
    if num_samples is not None and num_samples > MAX_SAMPLE_TOKENS:
        raise Invalid(f"num_samples: {num_samples} is more than the {MAX_SAMPLE_TOKENS} tokens one sample request "
                      "may generate", param="num_samples")
    params = request.sampling_params
    if params is None:
        return
    context = BY_NAME[s.base_model].context_length
    max_tokens = params.max_tokens
    if max_tokens is not None and max_tokens > context:
        raise Invalid(f"sampling_params.max_tokens: {max_tokens} is more than {s.base_model}'s context length of "
                      f"{context} tokens", param="sampling_params.max_tokens")
    if params.seed is not None:
        int64(params.seed, "sampling_params.seed")


def _seconds(timing: Timing, request: Request) -> float:
    params = request.sampling_params
    generated = ((params and params.max_tokens or DEFAULT_MAX_TOKENS)
                 * (request.num_samples or defaults.NUM_SAMPLES))
    # More than the model ever generates in one request fails when run; it takes no longer than the most.
    generated = min(generated * len(request.model_inputs), MAX_SAMPLE_TOKENS)
    return generated * timing.seconds(SECONDS_PER_TOKEN)


def _execute(tenant: Tenant, ctx: Ctx, s: Session, request: Request, op: Operation, at: float) -> JsonObject:
    model = session_model(tenant, ctx.seed, s)
    staged = tenant.models.apply_staged(s.id)
    if staged is not None:
        s.applied_weights_version = staged[0]
        s.pending_publish = False
        s.updated_at = max(s.updated_at, at)
    version, weights = tenant.models.published[s.id]
    output: JsonObject = model.sample(weights, request.model_inputs, num_samples=request.num_samples or defaults.NUM_SAMPLES,
                          sampling_params=request.sampling_params, prompt_logprobs=bool(request.prompt_logprobs),
                          topk_prompt_logprobs=request.topk_prompt_logprobs or 0,
                          seed=derive_int(ctx.seed, op.id), version=version)
    if request.return_routed_experts:
        output = routed_experts.issue(ctx, s, op.id, request.model_inputs, output)
    return output


def _output_size(op: Operation) -> int:
    kept = 0 if op.body is None else len(msgspec.json.encode(op.body))  # its prompts go with it
    return len(orjson.dumps(op.output)) + kept


KIND = Kind(
    name="sample", create="createSample", get="getSample", request=Request, timing=(SECONDS_PER_TOKEN,),
    seconds=_seconds,
    execute=_execute, admit=_admit, check=_check, output_size=_output_size, shows_samples=True, lane=4)
