"""The registry of operation kinds: every module of this package (but ``_``-prefixed helpers) declares one.

A kind's module is found here, not listed: adding a kind is its module, its endpoints in ``openapi.yaml``
and its tests (ARCHITECTURE.md, "Rules"; domain/README.md, "Operation kinds"). ``tests/test_structure.py``
adds the edges from this registry to each module when it checks that no module is in an import cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from emulator.domain.durations import PROFILE_NAMES, TimingParam
from emulator.domain.kind import Kind
from emulator.jsontypes import Json
from emulator.store.records import Malformed, OperationRequest, OperationStatus

#: The kinds' modules, by name (``emulator.domain.kinds.<module>``).
MODULES: tuple[str, ...] = tuple(sorted(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)
                                        if not m.name.startswith("_")))


def module_of(name: str) -> str:
    """The module that declares the kind ``name`` (named after it)."""
    return f"{__name__}.{name.replace('-', '_')}"


def _load(module: str) -> Kind[Any]:
    kind = getattr(importlib.import_module(module), "KIND", None)
    if not isinstance(kind, Kind):
        raise TypeError(f"{module} declares no KIND (an emulator.domain.kind.Kind)")
    if module != module_of(kind.name):
        raise TypeError(f"{module} declares the kind {kind.name!r}: a kind's module is named after it")
    return kind


#: Every operation kind, by its name (the path segment of its endpoints).
KINDS: Mapping[str, Kind[Any]] = MappingProxyType({kind.name: kind for kind in map(_load, MODULES)})


def _params() -> tuple[TimingParam, ...]:
    """Every kind's timing parameters, once each (kinds may share one: the same declaration)."""
    out: dict[str, TimingParam] = {}
    for kind in KINDS.values():
        for param in kind.timing:
            if out.setdefault(param.name, param) != param:
                raise TypeError(f"two declarations of the timing parameter {param.name!r} differ")
            for profile in PROFILE_NAMES:
                if param.default(profile) < 0:
                    raise TypeError(f"{param.name}: a duration is >= 0")
    return tuple(out.values())


TIMING_PARAMS = _params()
_UNFINISHED = frozenset({OperationStatus.PENDING, OperationStatus.RUNNING})


def decode_body(kind: str, status: str, raw: Json) -> OperationRequest | None:
    """A stored operation's body read back (a state document): its kind's request, or None (released). An
    unfinished operation needs one it can run (ValueError); a finished one that cannot be read keeps none."""
    declared = KINDS.get(kind)
    if declared is None:
        raise ValueError(f"kind {kind!r} is not an operation kind ({', '.join(KINDS)})")
    body: OperationRequest | Malformed | None = None if raw is None else declared.parse(raw)
    if isinstance(body, Malformed) or body is None:
        if status in _UNFINISHED:
            raise ValueError(f"a {status} operation needs a {kind} request to run"
                             + (f": {body.error}" if body is not None else ""))
        return None
    return body


__all__ = ["KINDS", "MODULES", "TIMING_PARAMS", "decode_body", "module_of"]
