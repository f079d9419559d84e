"""The two specs the emulator serves: the vendor contract ``openapi.yaml`` and ``admin.yaml`` (``/_emulator``).

The contract's one source is the repository root's ``openapi.yaml``; the wheel carries it as
``emulator/contract/openapi.yaml`` (a package-dir mapping), a checkout reads the root's file; ``admin.yaml`` is
in ``emulator/specs/``. Both are parsed once with libyaml; callers get a deep copy they may change.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

VENDOR = "openapi.yaml"
ADMIN = "admin.yaml"
ADMIN_BASE_PATH = "/_emulator"


def spec_file(name: str) -> Traversable:
    if name != VENDOR:
        return resources.files("emulator").joinpath("specs", name)
    packaged = resources.files("emulator").joinpath("contract", VENDOR)
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / VENDOR  # a checkout: the repository's own file


def spec_text(name: str) -> str:
    return spec_file(name).read_text(encoding="utf-8")


@functools.cache
def _parsed(name: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(spec_text(name), Loader=loader)  # noqa: S506 - a safe loader


def load_spec(name: str) -> dict[str, Any]:
    return copy.deepcopy(_parsed(name))


def operation_ids(name: str = VENDOR) -> list[str]:
    return [op["operationId"] for item in _parsed(name)["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op]


def enum_values(schema_name: str) -> tuple[str, ...]:
    """The values of an enum schema of the vendor spec (``components.schemas.<name>``)."""
    return tuple(_parsed(VENDOR)["components"]["schemas"][schema_name]["enum"])

