"""Parsing and validation of the operation bodies the simulated model computes on.

Emulates the trainer's input checks (docs/api-surface.md A.3.1-A.3.5); each failure is ``INVALID_INPUT`` before
anything is computed. int64 values may be JSON numbers or numeric strings. Unknown tensor keys are checked for
length and finiteness and otherwise ignored (an open map on the wire; the SDK forwards unknown keys).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import msgspec
import numpy as np

from emulator.compute.errors import invalid
from emulator.compute.types import Gradient, ModelInput, Number, Sample, TensorData

INPUT_DTYPES: MappingProxyType[str, frozenset[str]] = MappingProxyType({
    "target_tokens": frozenset({"int64"}),
    "logprobs": frozenset({"float32"}),
    "advantages": frozenset({"float32"}),
    "reference_logprobs": frozenset({"float32"}),
    "weights": frozenset({"int64", "float32"}),
    "mask": frozenset({"int64", "float32"}),
})

GRADIENT_DTYPES = frozenset({None, "D_TYPE_UNSPECIFIED", "D_TYPE_FLOAT32", "D_TYPE_BFLOAT16", "float32"})
_F32_MAX = float(np.finfo(np.float32).max)


MAX_STATE_COUNT = 2**53  # steps and counters of an imported state: far past any run, still exact as a float


def state_int(value: Any, what: str, lo: int = 0, hi: int = MAX_STATE_COUNT) -> int:
    """An integer of an imported state document, which ``to_state`` wrote as a JSON integer: anything else
    (a float, a string, a boolean, a value out of range) is a malformed state, refused before it is used
    (a step of 1e308 became an integer that no JSON encoder takes, so the next export failed)."""
    if type(value) is not int or not lo <= value <= hi:
        raise invalid(f"malformed {what}: expected an integer from {lo} to {hi}, got {str(value)[:40]}")
    return value


def parse_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise invalid(f"{where}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise invalid(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise invalid(f"{where}: expected an integer, got {value!r}") from None
    raise invalid(f"{where}: expected an integer, got {type(value).__name__}")


def parse_float(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise invalid(f"{where}: expected a number, got a boolean")
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise invalid(f"{where}: expected a number, got {value!r}") from None
    else:
        raise invalid(f"{where}: expected a number, got {type(value).__name__}")
    if not math.isfinite(out):
        raise invalid(f"{where}: non-finite value {value!r} (mask the position with weight 0 instead)")
    return out


def _float32_array(data: Sequence[Number], where: str) -> np.ndarray:
    """Finite numbers as the trainer sees them: float32 on the wire, so float32-rounded (as float64)."""
    if len(data) <= 64:  # a short list of plain numbers in float32 range: checked here, not by numpy's abs and max
        for x in data:
            if not ((type(x) is float or type(x) is int) and -_F32_MAX <= x <= _F32_MAX):  # (NaN fails too)
                break
        else:
            return np.array(data, dtype=np.float64).astype(np.float32).astype(np.float64)
    try:
        if set(map(type, data)) <= _PLAIN_NUMBERS:
            arr = np.asarray(data, dtype=np.float64)
        else:
            arr = np.asarray([parse_float(x, where) for x in data], dtype=np.float64)
    except OverflowError:
        raise invalid(f"{where}: value out of range") from None
    if arr.size and not np.abs(arr).max() <= _F32_MAX:  # non-finite or beyond float32 (rare): which one?
        if not np.isfinite(arr).all():
            bad = int(np.nonzero(~np.isfinite(arr))[0][0])
            raise invalid(f"{where}[{bad}]: non-finite value (mask the position with weight 0 instead)")
        with np.errstate(over="ignore"):
            arr32 = arr.astype(np.float32)
        if not np.isfinite(arr32).all():
            raise invalid(f"{where}: value out of float32 range")
        return arr32.astype(np.float64)
    return arr.astype(np.float32).astype(np.float64)


# Types taken as they are. (``set(map(type, data))`` iterates in C: it checks a long list in ~60% of the
# time of ``all(type(x) is int for x in data)``; parsing is about a quarter of a 64 x 128-token step.)
_PLAIN_INTS = frozenset({int})
_PLAIN_NUMBERS = frozenset({int, float})


def _int_array(data: Sequence[Number], where: str) -> np.ndarray:
    if set(map(type, data)) <= _PLAIN_INTS:
        try:
            return np.asarray(data, dtype=np.int64)
        except OverflowError:
            raise invalid(f"{where}: integer out of int64 range") from None
    out = [parse_int(x, f"{where}[{i}]") for i, x in enumerate(data)]
    try:
        return np.asarray(out, dtype=np.int64)
    except OverflowError:
        raise invalid(f"{where}: integer out of int64 range") from None


def parse_tokens(model_input: ModelInput, where: str, vocab_size: int) -> np.ndarray:
    """The concatenated ``encoded_text`` tokens of a ``ModelInput``, range-checked."""
    parts: list[np.ndarray] = []
    for ci, chunk in enumerate(model_input.chunks):
        if chunk.encoded_text is None:
            raise invalid(f"{where}.chunks[{ci}]: only encoded_text chunks are supported")
        parts.append(_int_array(chunk.encoded_text.tokens, f"{where}.chunks[{ci}].encoded_text.tokens"))
    arr = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    check_token_range(arr, where, vocab_size)
    return arr


def check_token_range(arr: np.ndarray, where: str, vocab_size: int) -> None:
    if arr.size <= 32:  # a short array: min/max of its list cost a third of numpy's two reductions
        vals = arr.tolist()
        if not vals or (min(vals) >= 0 and max(vals) < vocab_size):
            return
    elif arr.min() >= 0 and arr.max() < vocab_size:
        return
    i = int(np.nonzero((arr < 0) | (arr >= vocab_size))[0][0])
    raise invalid(f"{where}: token {int(arr[i])} at position {i} is outside the vocabulary [0, {vocab_size})")


def parse_tensor(name: str, tensor: TensorData, n: int, where: str) -> tuple[np.ndarray, str]:
    data, dtype = tensor.data, tensor.dtype
    if dtype not in ("int64", "float32"):
        raise invalid(f"{where}.dtype must be 'int64' or 'float32', got {dtype!r}")
    allowed = INPUT_DTYPES.get(name)
    if allowed is not None and dtype not in allowed:
        raise invalid(f"{where}.dtype must be one of {sorted(allowed)}, got {dtype!r}")
    for sparse in ("sparse_crow_indices", "sparse_col_indices"):
        if getattr(tensor, sparse):
            raise invalid(f"{where}.{sparse}: sparse tensors are not supported; send dense 1-D data")
    shape = tensor.shape
    if shape is not None and list(shape) != [len(data)]:
        raise invalid(f"{where}.shape must be [len(data)] = [{len(data)}] (1-D tensors only), got {list(shape)!r}")
    if len(data) != n:
        raise invalid(f"{where} has {len(data)} values but the sample's model_input has {n} tokens; every "
                      "loss_fn_inputs tensor needs one value per model_input token")
    if dtype == "int64":
        return _int_array(data, f"{where}.data"), dtype
    return _float32_array(data, f"{where}.data"), dtype


class Batch(msgspec.Struct, frozen=True, eq=False):
    """A batch of samples flattened: sample ``i`` owns positions ``offsets[i]:offsets[i+1]``."""

    prevs: np.ndarray
    targets: np.ndarray
    offsets: np.ndarray
    tensors: dict[str, np.ndarray]

    @property
    def num_samples(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def sample_id(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_samples, dtype=np.int64), np.diff(self.offsets))

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def parse_samples(samples: Sequence[Sample], *, vocab_size: int, max_batch_size: int, max_seq_length: int,
                  required: tuple[str, ...], label: str = "samples") -> Batch:
    if not samples:
        raise invalid(f"{label} must be a non-empty list")
    if len(samples) > max_batch_size:
        raise invalid(f"batch of {len(samples)} samples exceeds the model's max_batch_size {max_batch_size}")
    prevs: list[np.ndarray] = []
    parsed: list[dict[str, np.ndarray]] = []
    lengths: list[int] = []
    for si, sample in enumerate(samples):
        where = f"{label}[{si}]"
        tokens = parse_tokens(sample.model_input, f"{where}.model_input", vocab_size)
        n = int(tokens.size)
        if n == 0:
            raise invalid(f"{where}.model_input has no tokens")
        if n > max_seq_length:
            raise invalid(f"{where} has {n} tokens, over the model's max_seq_length {max_seq_length}")
        lfi = sample.loss_fn_inputs
        if "weights" in lfi and "mask" in lfi:
            raise invalid(f"{where}.loss_fn_inputs cannot contain both weights and mask")
        missing = [k for k in required if k not in lfi]
        if missing:
            raise invalid(f"{where}.loss_fn_inputs is missing required {missing}")
        known: dict[str, np.ndarray] = {}
        for key, tensor in lfi.items():
            arr, _ = parse_tensor(str(key), tensor, n, f"{where}.loss_fn_inputs[{key!r}]")
            if key in INPUT_DTYPES:
                known[key] = arr
        parsed.append(known)
        prevs.append(tokens)
        lengths.append(n)
    tensors = _batch_tensors(parsed, lengths)
    if "weights" in tensors and "mask" in tensors:
        raise invalid("samples mix weights and mask; use one of them for the whole batch")
    if "target_tokens" in tensors:
        check_token_range(tensors["target_tokens"], f"{label} target_tokens", vocab_size)
    offsets = np.array([0, *itertools.accumulate(lengths)], dtype=np.int64)
    targets = tensors["target_tokens"] if "target_tokens" in tensors else np.zeros(int(offsets[-1]), dtype=np.int64)
    return Batch(prevs[0] if len(prevs) == 1 else np.concatenate(prevs), targets, offsets, tensors)


def _batch_tensors(parsed: list[dict[str, np.ndarray]], lengths: list[int]) -> dict[str, np.ndarray]:
    if len(parsed) == 1:  # one sample: its tensors are the batch's (nothing to concatenate or fill in)
        return {key: parsed[0][key] for key in INPUT_DTYPES if key in parsed[0]}
    tensors: dict[str, np.ndarray] = {}
    for key in INPUT_DTYPES:
        have = [key in p for p in parsed]
        if not any(have):
            continue
        if not all(have):
            if key in ("weights", "mask"):
                # weights on some samples and nothing on others: the others count every position
                for p, n in zip(parsed, lengths):
                    p.setdefault(key, np.ones(n, dtype=np.float64))
            else:
                raise invalid(f"loss_fn_inputs[{key!r}] is given for some samples but not all")
        tensors[key] = np.concatenate([p[key] for p in parsed])
    return tensors


def parse_gradients(gradients: Sequence[Gradient], batch: Batch) -> np.ndarray:
    if len(gradients) != batch.num_samples:
        raise invalid(f"got {len(gradients)} gradients for {batch.num_samples} samples; send one per sample")
    out = []
    lengths = batch.lengths()
    for i, grad in enumerate(gradients):
        where = f"gradients[{i}]"
        if grad.dtype not in GRADIENT_DTYPES:
            raise invalid(f"{where}.dtype must be D_TYPE_FLOAT32 (or omitted), got {grad.dtype!r}")
        if len(grad.data) != int(lengths[i]):
            raise invalid(f"{where} has {len(grad.data)} values but sample {i} has "
                          f"{int(lengths[i])} tokens")
        out.append(_float32_array(grad.data, f"{where}.data"))
    return np.concatenate(out)


def number_param(value: float | None, key: str, default: float | None, where: str) -> float | None:
    """A loss parameter: ``default`` when unset, else finite."""
    if value is None:
        return default
    return parse_float(value, f"{where}.{key}")


__all__ = [
    "INPUT_DTYPES",
    "Batch",
    "check_token_range",
    "number_param",
    "parse_float",
    "parse_gradients",
    "parse_int",
    "parse_samples",
    "parse_tokens",
]
