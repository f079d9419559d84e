"""The vendor's own defaults: what the server uses for a field the request leaves out.

Source: the vendor's OpenAPI document behind the TypeScript SDK's mock server (together-typescript,
``scripts/mock``, snapshot of 2026-08-19; docs/api-surface.md, section G); the Python SDK 3.1.1 and the docs
leave them unstated. Stated once, here; defaults the vendor does not state stay the emulator's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: ``lora_config`` of a session created without one (or without some of its fields).
LORA: Mapping[str, int | float | bool] = MappingProxyType(
    {"rank": 32, "alpha": 64, "dropout": 0.0, "train_unembed": True})

#: ``sampling_params`` of a sample (no ``stop``, no ``seed``); ``top_k`` -1 is off.
SAMPLING: Mapping[str, int | float] = MappingProxyType(
    {"max_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": -1})
#: Completions per prompt of a sample.
NUM_SAMPLES = 1

#: ``adam_params`` of an optimizer step (and ``muon_params.adam``). The learning rate is not stated.
ADAM: Mapping[str, float] = MappingProxyType(
    {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 1.0})
#: ``muon_params`` of an optimizer step. The learning rate is not stated.
MUON: Mapping[str, float] = MappingProxyType(
    {"momentum": 0.95, "newton_schulz_steps": 5, "weight_decay": 0.0, "grad_clip_norm": 1.0})

#: The loss parameters of a training loss, by the ``loss`` key that holds them.
GRPO: Mapping[str, float | str] = MappingProxyType(
    {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2, "beta": 0.0,
     "agg_type": "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON", "ratio_type": "GRPO_LOSS_RATIO_TYPE_TOKEN"})
PPO: Mapping[str, float] = MappingProxyType({"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
CISPO: Mapping[str, float] = MappingProxyType({"clip_low_threshold": 0.0, "clip_high_threshold": 4.0})

#: A model resource's create body.
MODEL_RESOURCE: Mapping[str, int | bool] = MappingProxyType({"num_generator_replicas": 1, "lora_enabled": True})
