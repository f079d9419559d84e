"""Stateful tests: a Schemathesis state machine built from the OpenAPI links of ``openapi.yaml``.

The links describe the real API's data flow: ``createModelResources`` -> get/stop/extend the
resource, ``createSession`` (the resource id goes into the body) -> get/stop/update the session and
submit each operation kind -> poll that operation under its own kind; ``createPayloadUploadUrl`` ->
``createPayloadDownloadUrl``; ``createShapingJob`` -> get/cancel/events. Hypothesis chains them into
random scenarios, and every response is judged by the stateless checks plus the stateful ones
(``use_after_free``, ``ensure_resource_availability``).
"""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest

from contract_tests import checks, spec
from contract_tests.generation import build_schema
from contract_tests.plugin import SETTINGS
from contract_tests.report import RESULTS
from contract_tests.target import Target

pytestmark = [pytest.mark.real_safe, pytest.mark.creates_resources]

LABELS = spec.label_to_operation_id()
schema = build_schema()
BaseMachine = schema.as_state_machine()


class ContractMachine(BaseMachine):  # type: ignore[misc, valid-type]
    target: Target

    def get_call_kwargs(self, case: Any) -> dict[str, Any]:
        return {"base_url": self.target.base_url, "headers": dict(self.target.auth)}

    def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
        operation_id = LABELS.get(case.operation.label, case.operation.label)
        kwargs.setdefault("base_url", self.target.base_url)
        kwargs.setdefault("headers", dict(self.target.auth))
        checks.validate_each(case, response, STATEFUL_CHECKS, operation_id, kwargs)


STATEFUL_CHECKS = [checks.builtin(name) for name in (
    "not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance",
    "positive_data_acceptance", "negative_data_rejection", "use_after_free", "ensure_resource_availability",
)] + [checks.error_envelope]


def test_state_machine_follows_links(target: Target) -> None:
    ContractMachine.target = target
    examples = SETTINGS.stateful_examples or 2 * SETTINGS.max_examples
    phases = [hypothesis.Phase.explicit, hypothesis.Phase.generate]
    if SETTINGS.shrink:
        phases.append(hypothesis.Phase.shrink)
    settings = hypothesis.settings(max_examples=examples, stateful_step_count=10, deadline=None, database=None,
                                   phases=phases, suppress_health_check=list(hypothesis.HealthCheck))
    if SETTINGS.seed is not None:
        hypothesis.seed(SETTINGS.seed)(ContractMachine.TestCase)
    before = RESULTS.failure_count()
    try:
        ContractMachine.run(settings=settings)
    except Exception as exc:
        if not is_flaky_replay(exc):
            raise
        # The server's state moved on (a replayed scenario meets other objects), so Hypothesis cannot replay
        # the same steps; as Schemathesis' own runner does, judge by what the checks recorded.
        failed = RESULTS.failure_count() - before
        if failed:
            raise AssertionError(f"the state machine found {failed} contract violation(s) (see the report; the "
                                 "failing scenario could not be replayed against the stateful target)") from exc
        RESULTS.note("The state machine stopped early once: a replayed scenario drew differently against the "
                     "target's changed state (Hypothesis FlakyStrategyDefinition); no check had failed.")


def is_flaky_replay(exc: BaseException) -> bool:
    if isinstance(exc, hypothesis.errors.Flaky):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return isinstance(exc, AssertionError) and tb is not None and \
        tb.tb_frame.f_globals.get("__name__") == "hypothesis.internal.conjecture.datatree"
