"""Stateless property tests: every operation of ``openapi.yaml``, Schemathesis-generated requests.

One pytest item per operation (``test_stateless[POST /v1/rl/model-resources]``). Each generated
request is sent with the target's token and judged by every check of
:func:`contract_tests.checks.stateless_checks`, one at a time so the report shows which check failed
for which operation. Operations that create or change resources are also marked ``creates_resources``
(at collection, see ``plugin.pytest_collection_modifyitems``).
"""

from __future__ import annotations

from typing import Any

import pytest

from contract_tests import checks, spec
from contract_tests.generation import build_schema, is_positive
from contract_tests.plugin import SETTINGS
from contract_tests.report import RESULTS
from contract_tests.target import Target

pytestmark = [pytest.mark.real_safe]

schema = build_schema()
LABELS = spec.label_to_operation_id()


@schema.parametrize()
def test_stateless(case: Any, target: Target) -> None:
    operation_id = LABELS.get(case.operation.label, case.operation.label)
    transport = {"base_url": target.base_url, "headers": dict(target.auth)}
    response = case.call(base_url=target.base_url, headers=dict(target.auth))
    if case.method.upper() != case.operation.method.upper():
        # The coverage phase also probes methods the path does not declare. The contract says nothing about
        # them and RFC 9110 allows 405 or 501 (a gateway may not know the method at all): only require a refusal.
        ok = 400 <= response.status_code < 500 or response.status_code == 501
        RESULTS.record(operation_id, "undeclared_method_refused", ok,
                       None if ok else f"{case.method} {case.formatted_path} answered {response.status_code}")
        assert ok, f"undeclared method {case.method} {case.formatted_path} answered {response.status_code}"
        return
    if target.open_tokens and is_positive(case):
        checks.probe_missing_auth(case, target.base_url, operation_id)
    checks.validate_each(case, response, checks.stateless_checks(strict_auth=not target.open_tokens,
                                                                 coverage=SETTINGS.coverage),
                         operation_id, transport)
