"""Schemathesis checks the generated tests run, one at a time so each lands in its own report column.

Built-in checks (``schemathesis.checks`` / ``schemathesis.specs.openapi.checks``):

* ``not_a_server_error``: no 5xx.
* ``status_code_conformance``: the status is documented for the operation.
* ``content_type_conformance``: the Content-Type is documented.
* ``response_schema_conformance``: the body matches the documented schema for that status
  (``ErrorData`` for every error).
* ``negative_data_rejection``: requests that violate the schema are refused with a 4xx.
* ``positive_data_acceptance``: schema-valid requests are not refused as malformed.
* ``missing_required_header``: a request without a required header (``Idempotency-Key``) is refused.
* ``ignored_auth``: an operation that declares bearer auth refuses requests without it (and, unless
  the target is an emulator that accepts any token by design, with an invalid one).

Not run: ``unsupported_method`` (it wants 405 for any undeclared method, but RFC 9110 lets a server or
its gateway answer 501 to a method it does not recognise, and the contract documents no undeclared
methods), ``response_headers_conformance`` (no response headers are documented).

Our own: ``error_envelope`` (every non-2xx body is ``ErrorData``, judged by hand, independent of
the response schema) and ``auth_required`` (used instead of ``ignored_auth`` against open-token
emulators: a request without ``Authorization`` must be a 401 with ``ErrorData``).
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.core.failures import Failure, FailureGroup

from contract_tests import lifecycle as lc
from contract_tests.report import RESULTS

# Why the expected statuses of the two data checks differ from Schemathesis' defaults (the contract
# decides what a conforming server answers, not the generator):
#
# * positive_data_acceptance accepts 2xx, 400, 404 and 429. Generated IDs name nothing, so 404 is
#   the right answer; schema-valid bodies can still fail documented preconditions or semantic rules
#   that a JSON schema cannot express (a base_model not in supported-models, a LoRA rank above the
#   model's max_rank, stopping an already stopped resource, extending a non-READY one, an
#   Idempotency-Key reused with another body): the contract answers those with 400; the per-resource
#   session cap is a documented 429. 302 is the Files API upload's documented success (a redirect to
#   where the bytes go; status_code_conformance keeps any other operation from answering it). 401/403
#   are NOT accepted: every generated request carries a valid token. 5xx is never accepted.
# * negative_data_rejection accepts 400, 401, 404, 405, 413, 415, 422 and 429: a malformed request
#   must be refused with a client error; a negated path parameter legitimately misses every route (404).
POSITIVE_EXPECTED = ["2xx", "302", "400", "404", "429"]
NEGATIVE_EXPECTED = ["400", "401", "404", "405", "413", "415", "422", "429"]


@schemathesis.check
def error_envelope(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every non-2xx answer carries ``{"error": {"message", "type", "param"?, "code"?}}``."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except Exception:  # noqa: BLE001 - any undecodable body is simply not ErrorData
        body = response.text
    lc.check_error_envelope(response.status_code, body, f"{case.method} {case.formatted_path}")
    return None


def probe_missing_auth(case: Any, base_url: str, operation_id: str) -> None:
    """``auth_required``: the same request without ``Authorization`` answers 401/403 with ``ErrorData``.

    Used instead of Schemathesis' ``ignored_auth`` against emulators that accept any token by design
    (there an *invalid* token is a new tenant, not an error); probed once per operation.
    """
    if operation_id in _AUTH_PROBED:
        return
    _AUTH_PROBED.add(operation_id)
    import requests

    kwargs = case.as_transport_kwargs(base_url=base_url)
    kwargs["headers"] = {k: v for k, v in (kwargs.get("headers") or {}).items() if k.lower() != "authorization"}
    kwargs.pop("auth", None)
    kwargs["timeout"] = 30
    where = f"{case.method} {case.formatted_path}"
    try:
        probe = requests.request(**kwargs)
        if probe.status_code not in (401, 403):
            raise lc.ContractViolation("auth_required", f"missing auth accepted: {where} without Authorization "
                                       f"answered {probe.status_code}, expected 401")
        try:
            body = probe.json()
        except ValueError:
            body = probe.text
        lc.check_error_envelope(probe.status_code, body, f"{where} without auth")
    except lc.ContractViolation as exc:
        RESULTS.record(operation_id, "auth_required", False, str(exc))
        raise
    RESULTS.record(operation_id, "auth_required", True)


_AUTH_PROBED: set[str] = set()


def builtin(name: str) -> Any:
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    return CHECKS.get_one(name)


def stateless_checks(strict_auth: bool, coverage: bool) -> list[Any]:
    names = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
             "response_schema_conformance", "negative_data_rejection", "positive_data_acceptance",
             "missing_required_header"]
    if strict_auth:
        names.append("ignored_auth")
    checks = [builtin(n) for n in names]
    checks.append(error_envelope)
    return checks


def check_name(check: Any) -> str:
    return getattr(check, "__name__", str(check))


def validate_each(case: Any, response: Any, checks: list[Any], operation_id: str, transport_kwargs: dict[str, Any]
                  ) -> None:
    """Run every check separately, record each outcome, then raise all failures together."""
    failures: list[Failure] = []
    messages: list[str] = []
    for check in checks:
        name = check_name(check)
        try:
            case.validate_response(response, checks=[check], headers=transport_kwargs.get("headers"),
                                   transport_kwargs=transport_kwargs)
        except FailureGroup as exc:
            RESULTS.record(operation_id, name, False, f"{case.method} {case.formatted_path} -> "
                           f"{response.status_code}: " + "; ".join(_text(f) for f in exc.exceptions))
            failures.extend(exc.exceptions)
            messages.append(str(exc))
        except Failure as exc:
            RESULTS.record(operation_id, name, False, f"{case.method} {case.formatted_path} -> "
                           f"{response.status_code}: {_text(exc)}")
            failures.append(exc)
            messages.append(_text(exc))
        else:
            RESULTS.record(operation_id, name, True)
    if failures:
        raise FailureGroup(failures, "\n".join(messages))


def _text(failure: Any) -> str:
    title = getattr(failure, "title", "") or type(failure).__name__
    message = getattr(failure, "message", "") or str(failure)
    return f"{title}: {message}"
