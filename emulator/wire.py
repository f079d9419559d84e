"""Shared pieces of the wire format, for ``api/render.py`` and the operation kinds' renders: what a record
shows as the API's JSON (int64 as strings, RFC 3339 times) where more than one answer shows it."""

from __future__ import annotations

from typing import Any, Protocol

from emulator.clock import rfc3339


class CheckpointLike(Protocol):
    id: str
    created_at: float
    step: int
    registration: Any


def checkpoint_summary(ckpt: CheckpointLike) -> dict[str, Any]:
    """A checkpoint as sessions and checkpoint operations show it (InferenceCheckpoint / TrainingCheckpoint)."""
    out: dict[str, Any] = {"id": ckpt.id, "created_at": rfc3339(ckpt.created_at), "step": str(ckpt.step)}
    if ckpt.registration is not None:
        out["registration"] = ckpt.registration
    return out
