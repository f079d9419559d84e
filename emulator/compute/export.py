"""Checkpoint download files: real safetensors + JSON config, and their parser.

Emulates what ``GET /v1/rl/checkpoints/{id}/download`` serves (docs/api-surface.md A.5.3) in genuine safetensors
that any reader opens. Differs: the content is the bigram model (tensor names and config are the emulator's
own), stored as float64 so reading it back reproduces the log-probs bit for bit (a real one is bf16/fp32).
"""

from __future__ import annotations

import json
import struct
from types import MappingProxyType
from typing import Any

import numpy as np

from emulator.compute.base import BaseModel, base_model
from emulator.compute.bases import BaseModels
from emulator.compute.errors import invalid
from emulator.compute.spec import (
    BASE_FORMULA,
    EOS_ROW_PERIOD,
    EOS_SLOT,
    NUM_PREFERRED,
    PREF_JITTER,
    PREF_LADDER,
    ModelSpec,
)
from emulator.compute.weights import Weights
from emulator.jsontypes import Json

ADAPTER = "CHECKPOINT_VARIANT_ADAPTER"
MERGED = "CHECKPOINT_VARIANT_MERGED"
FORMAT = "together-rl-emulator/bigram"

_DTYPES: MappingProxyType[str, np.dtype[Any]] = MappingProxyType({"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "I64": np.dtype("<i8"),
                                     "I32": np.dtype("<i4")})


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, indent=2).encode("utf-8") + b"\n"


def write_safetensors(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> bytes:
    header: dict[str, Json] = {}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        key = {("f", 8): "F64", ("f", 4): "F32", ("i", 8): "I64", ("i", 4): "I32"}.get(
            (arr.dtype.kind, arr.dtype.itemsize))
        if key is None:
            raise ValueError(f"unsupported dtype {arr.dtype} for {name}")
        arr = np.ascontiguousarray(arr, dtype=_DTYPES[key])
        raw = arr.tobytes()
        header[name] = {"dtype": key, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(sorted(metadata.items()))
    hb = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def read_safetensors(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    if len(data) < 8:
        raise invalid("not a safetensors file: too short")
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise invalid("not a safetensors file: header length beyond the end")
    try:
        header = json.loads(data[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise invalid(f"not a safetensors file: bad header ({exc})") from exc
    body = data[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        dt = _DTYPES.get(info.get("dtype"))
        if dt is None:
            raise invalid(f"safetensors tensor {name}: unsupported dtype {info.get('dtype')!r}")
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if not 0 <= begin <= end <= len(body) or (end - begin) != size:
            raise invalid(f"safetensors tensor {name}: byte range does not match its shape")
        out[name] = np.frombuffer(body[begin:end], dtype=dt).reshape(shape).astype(dt.newbyteorder("="))
    return out, meta


def _base_config(base: BaseModel) -> dict[str, Json]:
    return {"vocab_size": base.vocab_size, "base_seed": int(base.seed), "eos_token_id": base.eos,
            "base_formula": BASE_FORMULA, "num_preferred": NUM_PREFERRED,
            "preferred_ladder": list(PREF_LADDER),
            "preferred_jitter": PREF_JITTER, "eos_row_period": EOS_ROW_PERIOD, "eos_slot": EOS_SLOT}


def export_files(spec: ModelSpec, weights: Weights, step: int, variant: str) -> list[tuple[str, bytes]]:
    v = weights.vocab_size
    rows = weights.keys // v
    cols = weights.keys % v
    base_cfg = _base_config(weights.base)
    meta = {"format": FORMAT, "step": str(step)}
    if variant == ADAPTER:
        if spec.lora_rank is None:
            raise invalid("CHECKPOINT_VARIANT_ADAPTER exists only for LoRA sessions; "
                          "use CHECKPOINT_VARIANT_MERGED")
        tensors = {"delta.rows": rows, "delta.cols": cols, "delta.values": weights.theta,
                   "tail.rows": weights.rows, "tail.values": weights.beta}
        config = {"format": FORMAT, "peft_type": "LORA", "r": int(spec.lora_rank), "lora_alpha": spec.alpha,
                  "scaling_applied": True, "train_unembed": bool(spec.train_unembed),
                  "target_modules": ["bigram_table"] + (["lm_head"] if spec.train_unembed else []),
                  "step": step, "base_model": base_cfg}
        return [("adapter_config.json", _dumps(config)),
                ("adapter_model.safetensors", write_safetensors(tensors, {**meta, "variant": "adapter"}))]
    if variant == MERGED:
        merged = weights.base_vals + weights.theta
        tensors = {"logits.rows": rows, "logits.cols": cols, "logits.values": merged,
                   "tail.rows": weights.rows, "tail.values": weights.beta}
        config = {"format": FORMAT, "architectures": ["EmulatorBigramLM"], "model_type": "emulator-bigram",
                  "torch_dtype": "float64", "step": step, "lora_rank": spec.lora_rank,
                  "note": ("rows listed in model.safetensors are complete: explicit columns carry their "
                           "logit, every other column of the row the row's tail logit; all other rows "
                           "follow the analytic base"),
                  **base_cfg}
        return [("config.json", _dumps(config)),
                ("model.safetensors", write_safetensors(tensors, {**meta, "variant": "merged"}))]
    raise invalid(f"unknown checkpoint variant {variant!r}; expected {ADAPTER} or {MERGED}")


def load_files(files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Parse exported files: ``{"variant", "config", "tensors", "metadata"}``."""
    by_name = dict(files)
    if "adapter_config.json" in by_name and "adapter_model.safetensors" in by_name:
        variant, cfg_name, st_name = ADAPTER, "adapter_config.json", "adapter_model.safetensors"
    elif "config.json" in by_name and "model.safetensors" in by_name:
        variant, cfg_name, st_name = MERGED, "config.json", "model.safetensors"
    else:
        raise invalid(f"unrecognised checkpoint files {sorted(by_name)}")
    try:
        config = json.loads(by_name[cfg_name].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise invalid(f"{cfg_name} is not JSON: {exc}") from exc
    tensors, meta = read_safetensors(by_name[st_name])
    return {"variant": variant, "config": config, "tensors": tensors, "metadata": meta}


def weights_from_files(loaded: dict[str, Any], bases: BaseModels | None = None) -> Weights:
    """Rebuild a :class:`Weights` from :func:`load_files` output (the round-trip proof)."""
    cfg = loaded["config"]
    base_cfg = cfg["base_model"] if loaded["variant"] == ADAPTER else cfg
    ladder = list(base_cfg.get("preferred_ladder", []))
    if base_cfg.get("base_formula") != BASE_FORMULA or ladder != list(PREF_LADDER):
        raise invalid("checkpoint was written for a different base formula")
    base = base_model(int(base_cfg["base_seed"]), int(base_cfg["vocab_size"]), int(base_cfg["eos_token_id"]), bases)
    t = loaded["tensors"]
    v = base.vocab_size
    if loaded["variant"] == ADAPTER:
        rows, cols, delta = t["delta.rows"], t["delta.cols"], t["delta.values"]
        keys = rows.astype(np.int64) * v + cols.astype(np.int64)
        # base logits of the entries: preferred columns carry theirs, every other column 0
        base_vals = np.zeros(keys.size)
        urows = np.unique(rows)
        pc, pl = base.prefs(urows)
        pref_keys = (urows[:, None] * v + pc).reshape(-1)
        order = np.argsort(pref_keys)
        pos = np.searchsorted(pref_keys[order], keys)
        pos_c = np.minimum(pos, max(pref_keys.size - 1, 0))
        if pref_keys.size:
            hit = pref_keys[order][pos_c] == keys
            base_vals = np.where(hit, pl.reshape(-1)[order][pos_c], 0.0)
        w = Weights(base, keys, base_vals, delta.astype(np.float64), t["tail.rows"].astype(np.int64),
                    t["tail.values"].astype(np.float64))
    else:
        keys = t["logits.rows"].astype(np.int64) * v + t["logits.cols"].astype(np.int64)
        vals = t["logits.values"].astype(np.float64)
        w = Weights(base, keys, vals, np.zeros(keys.size), t["tail.rows"].astype(np.int64),
                    t["tail.values"].astype(np.float64))
    w.check()
    return w


__all__ = [
    "ADAPTER",
    "MERGED",
    "export_files",
    "load_files",
    "read_safetensors",
    "weights_from_files",
    "write_safetensors",
]
