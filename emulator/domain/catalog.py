"""The emulator's catalog of base models (what ``GET /v1/rl/supported-models`` answers).

Emulates the shape of the real catalog (docs/api-surface.md A.6). The model names follow the real
documentation (``Qwen/Qwen3.8-27B`` is the documented starter model, ``Qwen/Qwen3.5-4B`` the
generated tests' example, MiniMax-M3 the documented model whose checkpoints have no registry
upload); limits, vocabulary sizes and prices are illustrative, not the real service's numbers.

Mixture-of-experts (``moe``, which makes ``return_routed_experts`` do something): MiniMax-M3, as the
MiniMax M series is MoE. The two Qwen models are dense [inferred]: the documentation does not say, and
Qwen names its MoE checkpoints with the active parameter count (``Qwen3-30B-A3B``), which these lack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_TYPE = "B200-SXM"


@dataclass(frozen=True)
class CatalogModel:
    base_model: str
    vocab_size: int
    context_length: int
    lora_max_batch_size: int
    lora_max_seq_length: int
    lora_max_rank: int
    full_max_batch_size: int | None      # None: full-weight training not offered
    full_max_seq_length: int | None
    max_lora_sessions: int
    trainer_gpus: int
    price_per_gpu_hour: float
    registers_checkpoints: bool = True
    moe: bool = False                    # mixture-of-experts: samples can return routed-experts keys

    def to_json(self) -> dict[str, Any]:
        trainer: dict[str, Any] = {"lora": {"max_batch_size": self.lora_max_batch_size,
                                            "max_rank": self.lora_max_rank,
                                            "max_seq_length": self.lora_max_seq_length}}
        if self.full_max_batch_size is not None:
            trainer["full"] = {"max_batch_size": self.full_max_batch_size,
                               "max_seq_length": self.full_max_seq_length}
        return {
            "base_model": self.base_model,
            "default_gpu_type": GPU_TYPE,
            "compute_configs": [{
                "gpu_type": GPU_TYPE,
                "generator_config": {
                    "context_length": self.context_length,
                    "sampling_defaults": {"logprobs": 0, "max_tokens": 16, "n": 1, "temperature": 1.0},
                },
                "trainer_config": trainer,
            }],
        }


CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel("Qwen/Qwen3.8-27B", vocab_size=151_936, context_length=32_768,
                 lora_max_batch_size=256, lora_max_seq_length=32_768, lora_max_rank=128,
                 full_max_batch_size=64, full_max_seq_length=16_384, max_lora_sessions=5,
                 trainer_gpus=8, price_per_gpu_hour=5.5),
    CatalogModel("Qwen/Qwen3.5-4B", vocab_size=151_936, context_length=32_768,
                 lora_max_batch_size=512, lora_max_seq_length=32_768, lora_max_rank=128,
                 full_max_batch_size=128, full_max_seq_length=32_768, max_lora_sessions=5,
                 trainer_gpus=1, price_per_gpu_hour=5.5),
    CatalogModel("MiniMaxAI/MiniMax-M3", vocab_size=200_064, context_length=65_536,
                 lora_max_batch_size=128, lora_max_seq_length=65_536, lora_max_rank=64,
                 full_max_batch_size=None, full_max_seq_length=None, max_lora_sessions=2,
                 trainer_gpus=16, price_per_gpu_hour=5.5, registers_checkpoints=False, moe=True),
)

BY_NAME = {m.base_model: m for m in CATALOG}
