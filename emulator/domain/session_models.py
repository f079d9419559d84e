"""The simulated model behind each training session: its configuration and its lazy creation.

A session's model (:mod:`emulator.compute`) is built on its first operation, from the base model's
catalog entry, the session's LoRA config and the resource's optimizer, or restored from the
checkpoint it resumes. Checkpoints carry the spec they were saved with.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import msgspec

from emulator import compute
from emulator.compute import ModelSpec
from emulator.compute.spec import DEFAULT_LORA_ALPHA
from emulator.domain.catalog import BY_NAME
from emulator.ids import derive_int
from emulator.store import Tenant
from emulator.store.records import Checkpoint, CheckpointType, Session


def model_spec(tenant: Tenant, seed: int, s: Session) -> ModelSpec:
    r = tenant.resources[s.model_resources_id]
    lora = s.lora_config
    optimizer = "muon" if r.optimizer_config.muon is not None else "adam"
    if lora is None:
        return _spec(seed, s.base_model, None, None, True, optimizer)
    return _spec(seed, s.base_model, lora.rank, float(lora.alpha or DEFAULT_LORA_ALPHA), lora.train_unembed,
                 optimizer)


@functools.lru_cache(maxsize=256)
def _spec(seed: int, base_model: str, lora_rank: int | None, lora_alpha: float | None, train_unembed: bool,
          optimizer: str) -> ModelSpec:
    """The spec of a session (a frozen value, built once per distinct configuration: sessions mostly share a few)."""
    cat = BY_NAME[base_model]
    if lora_rank is not None:
        max_batch, max_seq = cat.lora_max_batch_size, cat.lora_max_seq_length
    else:
        max_batch, max_seq = cat.full_max_batch_size or 1, cat.full_max_seq_length or cat.lora_max_seq_length
    # The base model's weights depend on the base model (and the emulator seed) only, so every session
    # on one base model starts from the same model and checkpoints resume anywhere it is served.
    # (A real LoRA adapter starts at zero, so its seed does not change the starting model either.)
    return ModelSpec(vocab_size=cat.vocab_size, max_seq_length=max_seq, max_batch_size=max_batch,
                     context_length=cat.context_length, lora_rank=lora_rank, lora_alpha=lora_alpha,
                     train_unembed=train_unembed, seed=derive_int(seed, base_model), optimizer=optimizer,
                     eos_token_id=cat.chat_end_token_id, end_token_ids=cat.end_token_ids,
                     tokenizer=cat.tokenizer, tokenizer_size=cat.tokenizer_size)


def checkpoint_spec(ckpt: Checkpoint) -> ModelSpec:
    """The spec a checkpoint's model was saved with (KeyError, or a ValueError saying why it cannot be read)."""
    return msgspec.convert((ckpt.model_state or {})["spec"], ModelSpec)


def checkpoint_model(ckpt: Checkpoint) -> Mapping[str, Any]:
    """The model state a checkpoint saved (KeyError, or a TypeError when it is not an object)."""
    state = (ckpt.model_state or {})["model"]
    if not isinstance(state, Mapping):
        raise TypeError("a checkpoint's model state is an object")
    return state


def session_model(tenant: Tenant, seed: int, s: Session) -> compute.SessionModel:
    """The session's model, built (or restored from its resume checkpoint) on first use."""
    model = tenant.models.model(s.id)
    if model is None:
        spec = model_spec(tenant, seed, s)
        ckpt = tenant.checkpoints.get(s.resume_from_checkpoint_id) if s.resume_from_checkpoint_id else None
        if ckpt is not None and ckpt.model_state is not None:
            load_opt = ckpt.type == CheckpointType.TRAINING and s.load_optimizer is not False
            model = compute.SessionModel.from_state(spec, checkpoint_model(ckpt), load_optimizer=load_opt,
                                                    bases=tenant.models.bases)
        else:
            model = compute.SessionModel(spec, tenant.models.bases)
        tenant.models.put_model(s.id, model)
        tenant.models.publish(s.id, s.applied_weights_version, model.weights())
    return model
