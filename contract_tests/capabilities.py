"""What the checks need to know about each base model: read from the API where it says, else from named tables.

``GET /v1/rl/supported-models`` tells a client each model's trainer modes (``trainer_config.lora`` /
``.full`` present when that mode is supported), its limits (``max_batch_size``, ``max_seq_length``,
``max_rank``, ``context_length``) and its sampling defaults; the checks read those from the target
(:class:`Model`). What it does not tell is kept here, in tables a reviewer can read and a user can
correct for their own target:

- :data:`DEFAULT_LORA_SESSION_CAP`: "a LoRA-enabled resource holds up to 5 concurrent sessions by
  default (fewer for some models)" (docs, multi-LoRA page); :data:`LORA_SESSION_CAPS` names the models
  that hold fewer and how many. MiniMax-M3's 2 is the emulator's catalog number ([inferred]: the docs
  do not say which models hold fewer, nor how many).
- :data:`FULL_WEIGHT_SESSION_CAP`: a full-weight resource holds 1 session (docs).
- :data:`MOE_MODELS`: mixture-of-experts models, whose samples return ``routed_experts_key`` when asked
  (MiniMax-M3: the MiniMax M series is MoE; the emulator's catalog says the same). Other models may
  return keys too; the checks then hold them to the same rules.
- :data:`UNREGISTERED_CHECKPOINT_MODELS`: models whose checkpoints are never uploaded to the model
  registry, so carry no ``registration`` (docs, checkpoints page: MiniMax-M3).
- :data:`DEFAULT_INACTIVE_TIMEOUT`, :data:`INACTIVE_TIMEOUT_RANGE`, :data:`EXTEND_EXPIRY_RANGE`,
  :data:`DISPLAY_NAME_MAX`: documented numbers (SDK docstrings, API reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_LORA_SESSION_CAP = 5
LORA_SESSION_CAPS: dict[str, int] = {"MiniMaxAI/MiniMax-M3": 2}
FULL_WEIGHT_SESSION_CAP = 1
MOE_MODELS = frozenset({"MiniMaxAI/MiniMax-M3"})
UNREGISTERED_CHECKPOINT_MODELS = frozenset({"MiniMaxAI/MiniMax-M3"})
DEFAULT_INACTIVE_TIMEOUT = 3600
INACTIVE_TIMEOUT_RANGE = (300, 86400)
EXTEND_EXPIRY_RANGE = (60, 86400)
DISPLAY_NAME_MAX = 128


def lora_session_cap(base_model: str) -> int:
    return LORA_SESSION_CAPS.get(base_model, DEFAULT_LORA_SESSION_CAP)


@dataclass(frozen=True)
class Model:
    """One entry of ``GET /v1/rl/supported-models``, as far as the checks read it."""

    base_model: str
    raw: dict[str, Any]

    def _config(self) -> dict[str, Any]:
        configs = self.raw.get("compute_configs") or [{}]
        gpu = self.raw.get("default_gpu_type")
        return next((c for c in configs if c.get("gpu_type") == gpu), configs[0]) or {}

    @property
    def lora(self) -> dict[str, Any] | None:
        return (self._config().get("trainer_config") or {}).get("lora")

    @property
    def full(self) -> dict[str, Any] | None:
        return (self._config().get("trainer_config") or {}).get("full")

    @property
    def generator(self) -> dict[str, Any] | None:
        return self._config().get("generator_config")


def supported_models(body: Any) -> list[Model]:
    data = body.get("data") if isinstance(body, dict) else None
    return [Model(m["base_model"], m) for m in data or [] if isinstance(m, dict) and isinstance(m.get("base_model"), str)]
