"""What reading a request body into typed objects costs, by representation: ``python -m bench.typed_requests
[--instructions]``.

The bodies are ``bench.inproc``'s loop's (a resource, a session, a forward-backward of one 6-token sample, an
Adam step), parsed JSON as a handler gets it; each representation reads them into the same shapes: msgspec
Structs (``msgspec.convert``, what the emulator uses), pydantic models (``model_validate``), and frozen
dataclasses and attrs classes built by hand-written readers (neither library reads nested JSON itself).
Prints, per representation, the CPU time (best of 5) or, with ``--instructions``, the instructions (callgrind,
this script run twice, with and without the reads) of reading the four bodies once: the cost the loop adds
per loop of 8 requests (BENCHMARKS.md, "Typed requests").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs
import msgspec
import pydantic

from bench.inproc import FB, OPT, RES

BODIES: tuple[dict[str, Any], ...] = (RES, {"model_resources_id": "mr-0123456789abcdef"}, FB, OPT)
KINDS = ("msgspec", "pydantic", "dataclasses", "attrs")


# --- msgspec -------------------------------------------------------------------------------------------------
class _S(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pass


class MTensor(_S, frozen=True):
    data: tuple[int | float | str, ...]
    dtype: str
    shape: tuple[int, ...] | None = None


class MChunk(_S, frozen=True):
    encoded_text: dict[str, tuple[int | str, ...]] | None = None


class MInput(_S, frozen=True):
    chunks: tuple[MChunk, ...]


class MSample(_S, frozen=True):
    model_input: MInput
    loss_fn_inputs: dict[str, MTensor]


class MLoss(_S, frozen=True):
    type: str
    grpo_params: dict[str, float | str] | None = None


class MAdam(_S, frozen=True):
    learning_rate: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    eps: float | None = None
    weight_decay: float | None = None


class MResource(_S, frozen=True):
    base_model: str
    lora_enabled: bool = False
    gpu_type: str | None = None
    inactive_timeout: int | None = None


class MSession(_S, frozen=True):
    model_resources_id: str
    display_name: str | None = None


class MForwardBackward(_S, frozen=True):
    samples: tuple[MSample, ...]
    loss: MLoss


class MOptim(_S, frozen=True):
    adam_params: MAdam | None = None


MTYPES = (MResource, MSession, MForwardBackward, MOptim)


def read_msgspec(bodies: tuple[dict[str, Any], ...]) -> list[Any]:
    return [msgspec.convert(b, t, strict=False) for b, t in zip(bodies, MTYPES, strict=True)]


# --- pydantic ------------------------------------------------------------------------------------------------
class _P(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)


class PTensor(_P):
    data: tuple[int | float | str, ...]
    dtype: str
    shape: tuple[int, ...] | None = None


class PChunk(_P):
    encoded_text: dict[str, tuple[int | str, ...]] | None = None


class PInput(_P):
    chunks: tuple[PChunk, ...]


class PSample(_P):
    model_input: PInput
    loss_fn_inputs: dict[str, PTensor]


class PLoss(_P):
    type: str
    grpo_params: dict[str, float | str] | None = None


class PAdam(_P):
    learning_rate: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    eps: float | None = None
    weight_decay: float | None = None


class PResource(_P):
    base_model: str
    lora_enabled: bool = False
    gpu_type: str | None = None
    inactive_timeout: int | None = None


class PSession(_P):
    model_resources_id: str
    display_name: str | None = None


class PForwardBackward(_P):
    samples: tuple[PSample, ...]
    loss: PLoss


class POptim(_P):
    adam_params: PAdam | None = None


PTYPES: tuple[type[_P], ...] = (PResource, PSession, PForwardBackward, POptim)


def read_pydantic(bodies: tuple[dict[str, Any], ...]) -> list[Any]:
    return [t.model_validate(b) for b, t in zip(bodies, PTYPES, strict=True)]


# --- dataclasses and attrs, read by hand -----------------------------------------------------------------------
def _classes(make: Callable[[type], type]) -> dict[str, type]:
    """The same shapes as plain classes, made frozen by ``make`` (dataclasses or attrs)."""

    class Tensor:
        data: tuple[Any, ...]
        dtype: str
        shape: tuple[int, ...] | None = None

    class Sample:
        tokens: tuple[Any, ...]
        loss_fn_inputs: dict[str, Any]

    class Loss:
        type: str
        grpo_params: dict[str, Any] | None = None

    class Adam:
        learning_rate: float | None = None
        beta1: float | None = None
        beta2: float | None = None
        eps: float | None = None
        weight_decay: float | None = None

    class Resource:
        base_model: str
        lora_enabled: bool = False
        gpu_type: str | None = None
        inactive_timeout: int | None = None

    class Session:
        model_resources_id: str
        display_name: str | None = None

    class ForwardBackward:
        samples: tuple[Any, ...]
        loss: Any

    class Optim:
        adam_params: Any = None

    return {c.__name__: make(c) for c in (Tensor, Sample, Loss, Adam, Resource, Session, ForwardBackward, Optim)}


def _reader(c: dict[str, type]) -> Callable[[tuple[dict[str, Any], ...]], list[Any]]:
    def obj(value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be an object")
        return value

    def opt_str(value: Any, where: str) -> str | None:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{where} must be a string")
        return value

    def opt_num(value: Any, where: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} must be a number")
        return float(value)

    def tensor(value: Any) -> Any:
        v = obj(value, "tensor")
        return c["Tensor"](data=tuple(v["data"]), dtype=str(v["dtype"]),
                           shape=tuple(v["shape"]) if v.get("shape") is not None else None)

    def sample(value: Any) -> Any:
        v = obj(value, "sample")
        tokens = tuple(t for ch in obj(v["model_input"], "model_input")["chunks"]
                       for t in obj(ch, "chunk").get("encoded_text", {}).get("tokens", ()))
        return c["Sample"](tokens=tokens, loss_fn_inputs={k: tensor(t) for k, t in obj(v["loss_fn_inputs"],
                                                                                        "loss_fn_inputs").items()})

    def adam(value: Any) -> Any:
        if value is None:
            return None
        v = obj(value, "adam_params")
        return c["Adam"](**{k: opt_num(v.get(k), k) for k in ("learning_rate", "beta1", "beta2", "eps",
                                                              "weight_decay")})

    def read(bodies: tuple[dict[str, Any], ...]) -> list[Any]:
        res, ses, fb, opt = bodies
        return [c["Resource"](base_model=str(res["base_model"]), lora_enabled=bool(res.get("lora_enabled", False)),
                              gpu_type=opt_str(res.get("gpu_type"), "gpu_type"),
                              inactive_timeout=res.get("inactive_timeout")),
                c["Session"](model_resources_id=str(ses["model_resources_id"]),
                             display_name=opt_str(ses.get("display_name"), "display_name")),
                c["ForwardBackward"](samples=tuple(sample(s) for s in fb["samples"]),
                                     loss=c["Loss"](type=str(obj(fb["loss"], "loss")["type"]),
                                                    grpo_params=fb["loss"].get("grpo_params"))),
                c["Optim"](adam_params=adam(opt.get("adam_params")))]

    return read


READERS: dict[str, Callable[[tuple[dict[str, Any], ...]], list[Any]]] = {
    "msgspec": read_msgspec,
    "pydantic": read_pydantic,
    "dataclasses": _reader(_classes(lambda c: dataclasses.dataclass(frozen=True, slots=True)(c))),
    "attrs": _reader(_classes(lambda c: attrs.frozen(c))),
}


def _run(kind: str, n: int) -> None:
    read = READERS[kind]
    read(BODIES)  # (warm: a first read builds caches)
    for _ in range(n):
        read(BODIES)


def instructions(kind: str, n: int = 2000) -> float:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    counts = []
    for reads in (0, n):
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                              "bench.typed_requests", "--raw", kind, str(reads)],
                             capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        found = re.search(r"Collected : (\d+)", out.stderr)
        if found is None:
            raise SystemExit(f"no instruction count from callgrind:\n{out.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.typed_requests", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instructions", action="store_true")
    p.add_argument("--raw", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.raw:
        _run(args.raw[0], int(args.raw[1]))
        return 0
    for kind in KINDS:
        if args.instructions:
            print(f"{kind}: {instructions(kind) / 1000:.1f}k instructions to read the loop's 4 bodies")
        else:
            read = READERS[kind]
            read(BODIES)
            best = float("inf")
            for _ in range(5):
                started = time.process_time()
                for _ in range(2000):
                    read(BODIES)
                best = min(best, (time.process_time() - started) / 2000)
            print(f"{kind}: {best * 1e6:.1f} us to read the loop's 4 bodies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
