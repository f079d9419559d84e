"""The contract: ``openapi.yaml`` loaded once as a Schemathesis schema, plus helpers around it."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import yaml

PACKAGE_DIR = Path(__file__).resolve().parent
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

# Operations that create billable objects (GPU resources, sessions, training work, jobs) or change
# them. Against a target without a control plane (the real service) they are skipped unless
# --allow-create-resources is given; see contract_tests/__init__.py.
CREATING_OPERATIONS = frozenset({
    "createModelResources", "stopModelResources", "extendModelResourcesExpiry",
    "createSession", "updateSession", "stopSession",
    "createForwardBackward", "createCustomForwardBackward", "createOptimStep", "createWeightsSync",
    "createSample", "createInferenceCheckpoint", "createTrainingCheckpoint",
    "createPayloadUploadUrl", "createPayloadDownloadUrl",
    "createShapingJob", "cancelShapingJob",
})


def shipped(name: str) -> Path:
    """A file the suite ships from the repository's root (``openapi.yaml``, ``schemathesis.toml``): the wheel
    carries them as ``contract_tests/contract/`` (a package-dir mapping in ``pyproject.toml``); a checkout
    has no such directory and reads the root's own file. Installed packages are files, never zipped."""
    packaged = PACKAGE_DIR / "contract" / name
    return packaged if packaged.is_file() else PACKAGE_DIR.parent / name


def spec_path() -> Path:
    return Path(os.environ.get("CONTRACT_SPEC") or shipped("openapi.yaml"))


@functools.cache
def raw_spec(path: str | None = None) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(Path(path or spec_path()).read_text(), Loader=loader)


@functools.cache
def operations(path: str | None = None) -> dict[str, tuple[str, str]]:
    """operationId -> (METHOD, path template), in spec order."""
    out: dict[str, tuple[str, str]] = {}
    for template, item in raw_spec(path)["paths"].items():
        for method, op in item.items():
            if method in HTTP_METHODS:
                out[op["operationId"]] = (method.upper(), template)
    return out


@functools.cache
def label_to_operation_id(path: str | None = None) -> dict[str, str]:
    return {f"{method} {template}": op_id for op_id, (method, template) in operations(path).items()}


@functools.cache
def schema(path: str | None = None) -> Any:
    """A plain Schemathesis schema of the contract (for response validation outside generated tests). Its
    configuration is explicit: without one, Schemathesis would read a ``schemathesis.toml`` from the working
    directory up, such as the repository's own, which configures stock runs."""
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    return schemathesis.openapi.from_path(str(path or spec_path()), config=SchemathesisConfig.from_dict({}))


def validate_response(operation_id: str, response: Any) -> str | None:
    """Validate a ``requests`` response against what ``operation_id`` documents; None or the failure text."""
    from schemathesis import Response
    from schemathesis.core.failures import Failure, FailureGroup

    loaded = schema()
    operation = loaded.find_operation_by_id(operation_id)
    try:
        loaded.validate_response(operation, Response.from_any(response))
    except FailureGroup as exc:
        return "\n".join(_failure_text(f) for f in exc.exceptions)
    except Failure as exc:
        return _failure_text(exc)
    return None


def _failure_text(failure: Any) -> str:
    title = getattr(failure, "title", "") or type(failure).__name__
    message = getattr(failure, "message", "") or str(failure)
    return f"{title}: {message}"
