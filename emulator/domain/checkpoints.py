"""Checkpoints: list, get, download (presigned file URLs served by the emulator itself).

Emulates docs/api-surface.md A.5 and C.4: checkpoints outlive their session; only inference checkpoints
download; the ADAPTER variant exists only for LoRA checkpoints. Differs [inferred]: the UNSPECIFIED variant
reads as MERGED; the files are the simulated model's tiny weights, in real safetensors format.
"""

from __future__ import annotations

from emulator import compute
from emulator.domain.common import lookup, page
from emulator.domain.session_models import checkpoint_model, checkpoint_spec
from emulator.errors import FailedPrecondition
from emulator.store import Tenant
from emulator.store.records import Checkpoint, CheckpointType

ADAPTER = "CHECKPOINT_VARIANT_ADAPTER"
MERGED = "CHECKPOINT_VARIANT_MERGED"


def get(tenant: Tenant, checkpoint_id: str) -> Checkpoint:
    return lookup(tenant.checkpoints, checkpoint_id, "checkpoint", "id")


def list_(tenant: Tenant, *, session_id: str | None, type_: str | None, base_model: str | None,
          after: str | None, limit: int) -> tuple[list[Checkpoint], bool]:
    def keep(c: Checkpoint) -> bool:
        return ((session_id is None or c.session_id == session_id) and (type_ is None or c.type == type_)
                and (base_model is None or c.base_model == base_model))

    no_filter = session_id is None and type_ is None and base_model is None
    return page(tenant.checkpoints, after, limit, None if no_filter else keep)


def files(tenant: Tenant, checkpoint_id: str, variant: str) -> tuple[Checkpoint, str, list[tuple[str, bytes]]]:
    """The checkpoint's files for ``variant`` (generated once, then cached)."""
    ckpt = get(tenant, checkpoint_id)
    if ckpt.type != CheckpointType.INFERENCE:
        raise FailedPrecondition(f"checkpoint {ckpt.id} is a training checkpoint; only inference checkpoints can "
                                 "be downloaded", param="id")
    if variant not in (ADAPTER, MERGED):
        variant = MERGED
    if variant == ADAPTER and ckpt.lora_rank is None:
        raise FailedPrecondition(f"checkpoint {ckpt.id} is full-weight; CHECKPOINT_VARIANT_ADAPTER exists only for "
                                 "LoRA checkpoints", param="variant")
    key = (ckpt.id, variant)
    cached = tenant.models.files.get(key)
    if cached is None:
        model = compute.SessionModel.from_state(checkpoint_spec(ckpt), checkpoint_model(ckpt),
                                                load_optimizer=False, bases=tenant.models.bases)
        cached = model.export_files(variant)
        tenant.models.files[key] = cached
    return ckpt, variant, cached
