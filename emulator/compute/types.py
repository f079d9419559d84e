"""The typed inputs the simulated model computes on, as the API's request schemas shape them.

A body is converted once where it enters (:func:`decode`), leniently as the model reads (a numeric string for a
number, an integral float for an integer; else ``INVALID_INPUT``); ranges, vocabulary, dtypes and lengths are
:mod:`emulator.compute.inputs`'s checks. Values are immutable; a field left out stays out when re-encoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec

from emulator.compute.errors import invalid
from emulator.jsontypes import Json

T = TypeVar("T")


class Wire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Base of the request types: immutable, unknown fields ignored (the wire types are open), omitted
    fields omitted again when encoded."""


def decode(value: object, type_: type[T], where: str = "") -> T:
    """``value`` (parsed JSON) as ``type_``; ``INVALID_INPUT`` naming the field when it cannot be."""
    try:
        return msgspec.convert(value, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise invalid(f"{where + ': ' if where else ''}{exc}") from None


def encode(value: Wire) -> dict[str, Json]:
    """A request as parsed JSON (the fields it was given: dicts, lists and scalars)."""
    out: dict[str, Json] = msgspec.json.decode(msgspec.json.encode(value))
    return out


Int64 = int | str                       # the API's Int64Input: a JSON integer or a decimal string
Number = int | float | str              # a tensor value as it may arrive: read by the model (inputs.parse_float)


class EncodedTextChunk(Wire, frozen=True):
    tokens: tuple[Int64, ...]


class ModelInputChunk(Wire, frozen=True):
    encoded_text: EncodedTextChunk | None = None   # the only chunk type the trainer reads


class ModelInput(Wire, frozen=True):
    chunks: tuple[ModelInputChunk, ...]


class TensorData(Wire, frozen=True):
    data: tuple[Number, ...]
    dtype: str
    shape: tuple[int, ...] | None = None
    sparse_crow_indices: tuple[int, ...] | None = None
    sparse_col_indices: tuple[int, ...] | None = None


class Sample(Wire, frozen=True):
    model_input: ModelInput
    loss_fn_inputs: Mapping[str, TensorData]
    routed_experts_key: str | None = None


class Gradient(Wire, frozen=True):
    data: tuple[Number, ...]
    dtype: str | None = None


# --- losses ----------------------------------------------------------------------------------------------

class ClipParams(Wire, frozen=True):
    """PPO's and CISPO's (and GRPO's part of them)."""

    clip_low_threshold: float | None = None
    clip_high_threshold: float | None = None


class GrpoParams(ClipParams, frozen=True):
    beta: float | None = None
    agg_type: str | None = None
    ratio_type: str | None = None


class DppoParams(Wire, frozen=True):
    delta_low: float | None = None
    delta_high: float | None = None


class DroParams(Wire, frozen=True):
    beta: float | None = None


class NoParams(Wire, frozen=True):
    """CROSS_ENTROPY's (none today)."""


class Loss(Wire, frozen=True):
    """``LossConfig``: the loss type and the parameters of each (only the type's own are read)."""

    type: str
    cross_entropy_params: NoParams | None = None
    grpo_params: GrpoParams | None = None
    ppo_params: ClipParams | None = None
    cispo_params: ClipParams | None = None
    dro_params: DroParams | None = None
    dppo_params: DppoParams | None = None


# --- optimizer -------------------------------------------------------------------------------------------

class AdamParams(Wire, frozen=True):
    learning_rate: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    eps: float | None = None
    weight_decay: float | None = None
    grad_clip_norm: float | None = None


class MuonParams(Wire, frozen=True):
    learning_rate: float | None = None
    momentum: float | None = None
    newton_schulz_steps: int | None = None
    weight_decay: float | None = None
    grad_clip_norm: float | None = None
    adam: AdamParams | None = None


# --- sampling --------------------------------------------------------------------------------------------

class SamplingParams(Wire, frozen=True):
    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] | str | None = None
    seed: Int64 | None = None


__all__ = ["AdamParams", "ClipParams", "DppoParams", "DroParams", "EncodedTextChunk", "Gradient", "GrpoParams",
           "Int64", "Loss", "ModelInput", "ModelInputChunk", "MuonParams", "NoParams", "Number", "Sample",
           "SamplingParams", "TensorData", "Wire", "decode", "encode"]
