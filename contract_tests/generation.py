"""The Schemathesis schema the generated tests use: the contract, our configuration, one case hook.

Configuration (Schemathesis 4 ``SchemathesisConfig``): ``--max-examples`` cases per operation in the
fuzzing phase (plus the examples and coverage phases), no example database (runs are reproducible
with ``--seed``), no shrinking unless ``--shrink``, and the expected statuses explained in
:mod:`contract_tests.checks`.

The ``map_case`` hook steers *positive* cases of the create operations towards requests that can
succeed, so the stateless tests and the state machine reach past the first 400: ``base_model`` is one
the target lists in ``supported-models``, a session's ``lora_config.rank`` is a small rank, and
references the generator cannot know (``base_weights_ref``, ``resume_from_checkpoint_id``) are
dropped. Negative cases are never touched.
"""

from __future__ import annotations

import functools
from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig

from contract_tests import checks, spec
from contract_tests.plugin import SETTINGS
from contract_tests.target import PREFERRED_MODEL

SECRET_HEADERS = ("authorization", "proxy-authorization", "x-emulator-admin-token", "cookie", "set-cookie")


def build_config(max_examples: int) -> SchemathesisConfig:
    data: dict[str, Any] = {
        # The suite sends the target's token itself; generated Authorization values would turn a negative case
        # "without auth" into a valid request once our header is added.
        "generation": {"max-examples": max_examples, "database": "none", "no-shrink": not SETTINGS.shrink,
                       "with-security-parameters": False},
        "checks": {
            "positive_data_acceptance": {"expected-statuses": checks.POSITIVE_EXPECTED},
            "negative_data_rejection": {"expected-statuses": checks.NEGATIVE_EXPECTED},
        },
        "phases": {"coverage": {"enabled": SETTINGS.coverage},
                   "stateful": {"max-steps": 10, "generation": {"mode": "positive"}}},
        "suppress-health-check": ["all"],
        # Only the credentials are hidden from Schemathesis' reproductions: its default markers ("token", "key")
        # also hide the request's own fields (`tokens`, `Idempotency-Key`), and its curl would then send
        # another request than the one that failed. The plugin shows that curl with the token put back as
        # $CONTRACT_TOKEN (contract_tests.plugin.runnable_curls).
        "output": {"sanitization": {"keys-to-sanitize": list(SECRET_HEADERS),
                                    "sensitive-markers": ["authorization", "admin-token"]}},
    }
    if SETTINGS.seed is not None:
        data["seed"] = SETTINGS.seed
    return SchemathesisConfig.from_dict(data)


@functools.cache
def build_schema() -> Any:
    """The schema of every generated test (built once per run; cloned by each ``parametrize``)."""
    config = build_config(SETTINGS.max_examples)
    loaded = schemathesis.openapi.from_path(str(spec.spec_path()), config=config)
    loaded.hook(map_case)
    return loaded


def is_positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    if meta is None:
        return True
    try:
        return bool(meta.generation.mode.is_positive)
    except AttributeError:
        return True


def map_case(context: Any, case: Any) -> Any:
    operation = context.operation
    op_id = getattr(operation, "definition", None)
    op_id = op_id.raw.get("operationId") if op_id is not None and hasattr(op_id, "raw") else None
    if op_id is None:
        op_id = spec.label_to_operation_id().get(operation.label) if operation is not None else None
    if not is_positive(case) or not isinstance(case.body, dict):
        return case
    if op_id in ("createModelResources", "estimateModelResourcesCost"):
        from contract_tests import plugin

        # Coverage cases are built at collection, before the target is probed: use the documented starter model.
        case.body["base_model"] = plugin._TARGET.base_model if plugin._TARGET is not None else PREFERRED_MODEL
        case.body.pop("base_weights_ref", None)
    elif op_id == "createSession":
        case.body.pop("resume_from_checkpoint_id", None)
        case.body.pop("load_optimizer", None)
        lora = case.body.get("lora_config")
        if isinstance(lora, dict) and isinstance(lora.get("rank"), int):
            lora["rank"] = abs(lora["rank"]) % 16 + 1
    return case
