"""The two specs the emulator serves: the vendor contract ``openapi.yaml`` and ``admin.yaml`` (``/_emulator``).

The contract's one source is the repository root's ``openapi.yaml`` (the wheel's ``emulator/contract/openapi.yaml``
by a package-dir mapping); ``admin.yaml`` is in ``emulator/specs/``. Each is parsed once per process, the parse kept
as JSON in a user cache (``TOGETHER_EMULATOR_CACHE_DIR``: libyaml took a sixth of a start-up); callers get copies.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import orjson
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


CACHE_ENV = "TOGETHER_EMULATOR_CACHE_DIR"


def cache_dir() -> Path | None:
    """Where parsed specs are kept: ``$TOGETHER_EMULATOR_CACHE_DIR`` (empty: nowhere), else the user's cache
    (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/together-emulator``."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "together-emulator"


def _cached(path: Path) -> Any:
    """A cache file's document, or None when it is missing, unreadable, cut or changed (its first line is the
    SHA-256 of the rest): a cache never decides what is served, the spec file does."""
    try:
        raw = path.read_bytes()
        digest, _, body = raw.partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            return None
        return orjson.loads(body)
    except (OSError, ValueError):
        return None


def _keep(path: Path, parsed: dict[str, Any]) -> None:
    """Writes the cache file whole (a temporary file renamed) or not at all: a full or read-only disk, or a
    document JSON cannot hold as YAML said it, only costs the next start its parse."""
    try:
        body = orjson.dumps(parsed)
        if orjson.loads(body) != parsed:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        return


@functools.cache
def _parsed(name: str) -> dict[str, Any]:
    text = spec_text(name)
    where = cache_dir()
    path = None if where is None else where / f"{name}.{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"
    found = None if path is None else _cached(path)
    if isinstance(found, dict):
        return found
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    parsed: dict[str, Any] = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    if path is not None:
        _keep(path, parsed)
    return parsed


def load_spec(name: str) -> dict[str, Any]:
    return copy.deepcopy(_parsed(name))


def operation_ids(name: str = VENDOR) -> list[str]:
    return [op["operationId"] for item in _parsed(name)["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op]


def enum_values(schema_name: str) -> tuple[str, ...]:
    """The values of an enum schema of the vendor spec (``components.schemas.<name>``)."""
    return tuple(_parsed(VENDOR)["components"]["schemas"][schema_name]["enum"])

