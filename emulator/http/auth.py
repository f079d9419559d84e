"""The auth step: a bearer API key on every vendor operation, the admin token on the control plane.

A missing, malformed or refused key is a 401 before any validation, as on the real service; the key maps to a
principal (:mod:`emulator.tenancy`). ``/_emulator`` needs the admin token only when ``--admin-token`` is set,
never for ``/_emulator/health``. Keys are read as UTF-8 (a key that is not is 401).
"""

from __future__ import annotations

from emulator.api.request import Principal
from emulator.errors import Invalid
from emulator.http.access_log import RECORD, note
from emulator.http.asgi import HEADERS, Scope, headers_of, text_header
from emulator.http.envelope import Unauthenticated
from emulator.tenancy import Tenancy

# Liveness answers without the admin token (as LocalStack's and WireMock's health checks do): probes and
# load balancers poll it, and it tells nothing about any tenant.
OPEN_ADMIN_OPERATIONS = frozenset({"adminHealth"})


def is_admin_operation(op: str | None) -> bool:
    return op is not None and op.startswith("admin")


def _credential(scope: Scope, name: bytes, shown: str) -> str | None:
    try:
        return text_header(scope, name, shown)
    except Invalid as exc:
        raise Unauthenticated(f"{shown}: the key is not valid UTF-8; send non-ASCII keys as UTF-8") from exc


def bearer(scope: Scope) -> str | None:
    auth = _credential(scope, b"authorization", "Authorization")
    if auth is None:
        return None
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def check_admin(scope: Scope, tenancy: Tenancy, given: str | None = None) -> None:
    """Raise 401 unless the request carries the admin token (when one is configured)."""
    if not tenancy.admin_required:
        return
    if given is None:
        given = _credential(scope, b"x-emulator-admin-token", "X-Emulator-Admin-Token") or bearer(scope)
    if not tenancy.is_admin(given):
        raise Unauthenticated("the control plane needs the admin token (X-Emulator-Admin-Token header)",
                              code="invalid_admin_token")


class Auth:
    """The auth step: the caller of a vendor operation, the admin token of a control call."""

    def __init__(self, tenancy: Tenancy) -> None:
        self.tenancy = tenancy

    def authenticate(self, scope: Scope, op: str | None) -> Principal | None:
        """The principal of a vendor operation's API key; None for a control call (once its admin token is
        checked) and for a path that names no operation."""
        if op is None:
            return None
        logged = RECORD in scope  # only with --access-log
        if logged:
            note(scope, operation_id=op)
        if op.startswith("admin"):  # (is_admin_operation, without its call)
            if op not in OPEN_ADMIN_OPERATIONS:
                check_admin(scope, self.tenancy)
            return None
        caller = self._principal(scope)
        if logged:
            note(scope, tenant=caller.project)
        return caller

    def _principal(self, scope: Scope) -> Principal:
        # (_credential's reading, inlined: every vendor request comes here)
        raw = (scope.get(HEADERS) or headers_of(scope)).get(b"authorization")
        try:
            auth = None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unauthenticated("Authorization: the key is not valid UTF-8; send non-ASCII keys as UTF-8") from exc
        if not auth:
            raise Unauthenticated("missing Authorization header; send 'Authorization: Bearer <api key>'")
        scheme, _, token = auth.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if RECORD in scope:
            note(scope, token=token)
        if not token:
            raise Unauthenticated("malformed Authorization header; expected 'Bearer <api key>'")
        found = self.tenancy.principal_for(token)
        if found is None:
            message = ("the admin token is not an API key" if self.tenancy.is_admin(token) else "invalid API key")
            raise Unauthenticated(message)
        return found
