"""The numeric limits of the vendor spec that the emulator also enforces in Python, read from the spec.

Request validation refuses a body that breaks them; the domain enforces them again where validation does not
reach (an uploaded payload, a state import, a body the emulator builds). Stated once, in ``openapi.yaml``;
``tests/test_rules.py`` holds that no other module states one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator import spec


@dataclass(frozen=True, slots=True)
class Bounds:
    """A number's bounds (inclusive; None: none), and the spec schema and field they are read from."""

    schema: str
    field: str
    minimum: float | None
    maximum: float | None

    @property
    def low(self) -> int:
        assert self.minimum is not None
        return int(self.minimum)

    @property
    def high(self) -> int:
        assert self.maximum is not None
        return int(self.maximum)


def _read() -> tuple[int, Bounds, Bounds, Bounds, Bounds, Bounds, Bounds, Bounds, Bounds, Bounds]:
    schemas: Any = spec.load_spec(spec.VENDOR)["components"]["schemas"]

    def bounds(schema: str, field: str) -> Bounds:
        prop = schemas[schema]["properties"][field]
        return Bounds(schema, field, prop.get("minimum"), prop.get("maximum"))

    return (int(schemas["SessionUpdateParams"]["properties"]["display_name"]["maxLength"]),
            bounds("ModelResourceCreateParams", "inactive_timeout"),
            bounds("ModelResourceExtendExpiryParams", "seconds"),
            bounds("ComputeConfigParam", "num_generator_replicas"),
            bounds("LoraConfigParam", "rank"),
            bounds("OperationSampleParams", "num_samples"),
            bounds("OperationSampleParams", "topk_prompt_logprobs"),
            bounds("PpoLossParams", "clip_high_threshold"),
            bounds("PpoLossParams", "clip_low_threshold"),
            bounds("DppoLossParams", "delta_low"))


(DISPLAY_NAME_MAX_LENGTH,   # a session's display name (create and update alike)
 INACTIVE_TIMEOUT,          # a model resource's inactivity timeout, seconds (create and estimate alike)
 EXTEND_SECONDS,            # what an extend-expiry adds, seconds
 GENERATOR_REPLICAS,        # generator replicas of a model resource
 LORA_RANK,                 # a LoRA adapter's rank (the catalog gives each model its own maximum)
 NUM_SAMPLES,               # a sample's completions per prompt
 TOPK_PROMPT_LOGPROBS,      # and its top-k prompt log-probs
 CLIP_HIGH,                 # the clipped losses' thresholds (PPO's and GRPO's: the spec states the same for both)
 CLIP_LOW,
 DPPO_DELTA) = _read()      # DPPO's probability-change limits (delta_low's; delta_high's are the same)

#: Every limit above, as (schema, field, keyword, value): what tests/test_rules.py checks.
ENFORCED: tuple[tuple[str, str, str, float], ...] = (
    ("SessionUpdateParams", "display_name", "maxLength", DISPLAY_NAME_MAX_LENGTH),
    *((b.schema, b.field, keyword, value) for b in (INACTIVE_TIMEOUT, EXTEND_SECONDS, GENERATOR_REPLICAS, LORA_RANK,
                                                     NUM_SAMPLES, TOPK_PROMPT_LOGPROBS, CLIP_HIGH, CLIP_LOW,
                                                     DPPO_DELTA)
      for keyword, value in (("minimum", b.minimum), ("maximum", b.maximum))
      if value is not None and abs(value) < 2**31 - 1),  # (an int32 bound is the format's, not a rule)
)

__all__ = ["CLIP_HIGH", "CLIP_LOW", "DISPLAY_NAME_MAX_LENGTH", "DPPO_DELTA", "ENFORCED", "EXTEND_SECONDS",
           "GENERATOR_REPLICAS", "INACTIVE_TIMEOUT", "LORA_RANK", "NUM_SAMPLES", "TOPK_PROMPT_LOGPROBS", "Bounds"]
