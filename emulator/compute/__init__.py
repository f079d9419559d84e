"""The simulated model behind every training session (README.md here).

Emulates the real trainer and generator with a tiny deterministic bigram model per session over the base
model's full vocabulary: true losses, real AdamW/Muon steps, sampling from published weights, round-tripping
checkpoints. Differs in what it can learn (one token of context) and a few conventions (see the README).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from emulator.compute.bases import BaseModels
from emulator.compute.errors import (
    INTERNAL_ERROR,
    INVALID_INPUT,
    NON_FINITE_LOSS,
    RESOURCE_EXHAUSTED,
    ComputeError,
)
from emulator.compute.spec import ModelSpec

if TYPE_CHECKING:
    from emulator.compute.export import weights_from_files
    from emulator.compute.model import SessionModel, load_files
    from emulator.compute.sampling import decode
    from emulator.compute.weights import Weights

# The numpy-backed parts load on first use (numpy is a fifth of the server's start-up time), so callers
# import this package at module level and still pay for numpy only when a session first computes.
_LAZY = MappingProxyType({"SessionModel": "model", "load_files": "model", "Weights": "weights", "decode": "sampling",
         "weights_from_files": "export"})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BaseModels",
    "INTERNAL_ERROR",
    "INVALID_INPUT",
    "NON_FINITE_LOSS",
    "RESOURCE_EXHAUSTED",
    "ComputeError",
    "ModelSpec",
    "SessionModel",
    "Weights",
    "decode",
    "load_files",
    "weights_from_files",
]
