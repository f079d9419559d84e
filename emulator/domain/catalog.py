"""The emulator's catalog of base models (what ``GET /v1/rl/supported-models`` answers).

Emulates the shape of the real catalog (docs/api-surface.md A.6) with the real models' names, vocabularies
and special tokens; limits and prices are illustrative, not the real service's numbers. Qwen3.8-27B's and
MiniMax-M3's sizes, and which models are mixture-of-experts, are [inferred] (see the package README).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from emulator import defaults
from emulator.jsontypes import Json

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
    # Real special tokens. Generation ends on any of ``end_token_ids`` (the first is the chat end, the one
    # the simulated base model prefers now and then); ``vocab_size`` is the embedding size.
    end_of_text_token_id: int = 0
    chat_end_token_id: int = 0
    # The tokenizer that decodes this model's ids, by its name in :mod:`emulator.compute.tokenizers` (None:
    # no package ships it; token ``t`` reads ``" " + str(t)``).
    tokenizer: str | None = None
    # How many ids that tokenizer has; the rest of the embedding (up to ``vocab_size``) is padding.
    tokenizer_size: int | None = None

    @property
    def end_token_ids(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys((self.chat_end_token_id, self.end_of_text_token_id)))

    def to_json(self) -> dict[str, Json]:
        trainer: dict[str, Json] = {"lora": {"max_batch_size": self.lora_max_batch_size,
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
                    # the vendor's defaults of a sample (emulator.defaults); logprobs 0 is the emulator's [inferred]
                    "sampling_defaults": {"logprobs": 0, "max_tokens": defaults.SAMPLING["max_tokens"],
                                          "n": defaults.NUM_SAMPLES, "temperature": defaults.SAMPLING["temperature"]},
                },
                "trainer_config": trainer,
            }],
        }


# The Qwen3.5 family's tokenizer (see emulator/domain/README.md, catalog.py).
QWEN35_VOCAB = 248_320
QWEN35_TOKENIZER_SIZE = 248_077  # 248,044 BPE ids + 33 added tokens
QWEN35_END_OF_TEXT = 248_044   # <|endoftext|>
QWEN35_IM_END = 248_046        # <|im_end|>

CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel("Qwen/Qwen3.8-27B", vocab_size=QWEN35_VOCAB, context_length=32_768,
                 lora_max_batch_size=256, lora_max_seq_length=32_768, lora_max_rank=128,
                 full_max_batch_size=64, full_max_seq_length=16_384, max_lora_sessions=5,
                 trainer_gpus=8, price_per_gpu_hour=5.5, end_of_text_token_id=QWEN35_END_OF_TEXT,
                 chat_end_token_id=QWEN35_IM_END, tokenizer="qwen3.5",
                 tokenizer_size=QWEN35_TOKENIZER_SIZE),
    CatalogModel("Qwen/Qwen3.5-4B", vocab_size=QWEN35_VOCAB, context_length=32_768,
                 lora_max_batch_size=512, lora_max_seq_length=32_768, lora_max_rank=128,
                 full_max_batch_size=128, full_max_seq_length=32_768, max_lora_sessions=5,
                 trainer_gpus=1, price_per_gpu_hour=5.5, end_of_text_token_id=QWEN35_END_OF_TEXT,
                 chat_end_token_id=QWEN35_IM_END, tokenizer="qwen3.5",
                 tokenizer_size=QWEN35_TOKENIZER_SIZE),
    CatalogModel("MiniMaxAI/MiniMax-M3", vocab_size=200_064, context_length=65_536,
                 lora_max_batch_size=128, lora_max_seq_length=65_536, lora_max_rank=64,
                 full_max_batch_size=None, full_max_seq_length=None, max_lora_sessions=2,
                 trainer_gpus=16, price_per_gpu_hour=5.5, registers_checkpoints=False, moe=True,
                 end_of_text_token_id=200_020, chat_end_token_id=200_020, tokenizer_size=200_054),
)

BY_NAME = MappingProxyType({m.base_model: m for m in CATALOG})
