"""The two specs the emulator serves, read from the installed package (``emulator/specs/``).

``openapi.yaml`` is the vendor contract (a copy of the repository root's ``openapi.yaml``, which users
read; a test keeps the two identical) and ``admin.yaml`` the emulator's own control plane under
``/_emulator``. Both are parsed once with libyaml; callers get a deep copy they may change.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import yaml

VENDOR = "openapi.yaml"
ADMIN = "admin.yaml"
ADMIN_BASE_PATH = "/_emulator"


def spec_text(name: str) -> str:
    return resources.files("emulator").joinpath("specs", name).read_text(encoding="utf-8")


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

