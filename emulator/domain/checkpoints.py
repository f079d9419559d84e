"""Checkpoints: list, get, download (presigned file URLs served by the emulator itself).

Emulates docs/api-surface.md A.5 and C.4. Checkpoints outlive their session; only inference
checkpoints download; the ADAPTER variant exists only for LoRA checkpoints.

Differences from the real API [inferred]: ``CHECKPOINT_VARIANT_UNSPECIFIED`` is read as MERGED
(the server default); the files are the simulated model's weights in real safetensors format,
tiny compared with a real model.
"""

from __future__ import annotations

from typing import Any

from emulator import compute
from emulator.clock import rfc3339
from emulator.domain.common import lookup, page
from emulator.domain.session_models import checkpoint_spec
from emulator.errors import FailedPrecondition
from emulator.store import TenantState
from emulator.store.records import Checkpoint

ADAPTER = "CHECKPOINT_VARIANT_ADAPTER"
MERGED = "CHECKPOINT_VARIANT_MERGED"


def summary(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint as sessions and checkpoint operations show it (InferenceCheckpoint / TrainingCheckpoint)."""
    out: dict[str, Any] = {"id": ckpt.id, "created_at": rfc3339(ckpt.created_at), "step": str(ckpt.step)}
    if ckpt.registration is not None:
        out["registration"] = ckpt.registration
    return out


def get(state: TenantState, checkpoint_id: str) -> Checkpoint:
    return lookup(state.checkpoints, checkpoint_id, "checkpoint", "id")


def list_(state: TenantState, *, session_id: str | None, type_: str | None, base_model: str | None,
          after: str | None, limit: int) -> tuple[list[Checkpoint], bool]:
    def keep(c: Checkpoint) -> bool:
        return ((session_id is None or c.session_id == session_id) and (type_ is None or c.type == type_)
                and (base_model is None or c.base_model == base_model))

    no_filter = session_id is None and type_ is None and base_model is None
    return page(state.checkpoint_index, state.checkpoints, after, limit, None if no_filter else keep)


def files(state: TenantState, checkpoint_id: str, variant: str) -> tuple[Checkpoint, str, list[tuple[str, bytes]]]:
    """The checkpoint's files for ``variant`` (generated once, then cached)."""
    ckpt = get(state, checkpoint_id)
    if ckpt.type != "CHECKPOINT_TYPE_INFERENCE":
        raise FailedPrecondition(f"checkpoint {ckpt.id} is a training checkpoint; only inference checkpoints can "
                                 "be downloaded", param="id")
    if variant not in (ADAPTER, MERGED):
        variant = MERGED
    if variant == ADAPTER and ckpt.lora_rank is None:
        raise FailedPrecondition(f"checkpoint {ckpt.id} is full-weight; CHECKPOINT_VARIANT_ADAPTER exists only for "
                                 "LoRA checkpoints", param="variant")
    key = (ckpt.id, variant)
    cached = state.file_cache.get(key)
    if cached is None:
        model = compute.SessionModel.from_state(checkpoint_spec(ckpt), (ckpt.model_state or {})["model"],
                                                load_optimizer=False)
        cached = model.export_files(variant)
        state.file_cache[key] = cached
    return ckpt, variant, cached
