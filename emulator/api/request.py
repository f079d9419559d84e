"""The request object handlers receive, and the reply they return.

Handlers are thin: parse what they need from :class:`Request`, call one domain function inside
``req.tx()`` (tenant lock held, timeline settled), render, return ``(status, body[, headers])``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from emulator.domain import engine
from emulator.domain.context import Ctx, Principal
from emulator.errors import InvalidRequest
from emulator.store import TenantState
from emulator.store.memory import Transaction

if TYPE_CHECKING:
    from emulator.runtime import Runtime

Reply = tuple[int, Any] | tuple[int, Any, dict[str, str]]
READ_METHODS = frozenset({"GET", "HEAD"})


class RequestTransaction:
    """A context manager class rather than a generator: it runs on every request."""

    __slots__ = ("request", "tx")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.tx: Transaction | None = None

    def __enter__(self) -> tuple[TenantState, Ctx]:
        req = self.request
        assert req.principal is not None
        self.tx = req.runtime.store.transaction(req.principal.project, write=req.method not in READ_METHODS)
        state = self.tx.__enter__()
        ctx = req.runtime.ctx(req.principal)
        try:
            engine.settle(state, ctx)
        except BaseException:
            self.tx.__exit__(None, None, None)
            raise
        return state, ctx

    def __exit__(self, *exc: object) -> None:
        if self.tx is not None:
            self.tx.__exit__(*exc)
            self.tx = None


class Request:
    __slots__ = ("runtime", "principal", "method", "path", "query", "headers", "body", "_base_url", "operation_id")

    def __init__(self, runtime: Runtime, principal: Principal | None, operation_id: str, path: dict[str, str],
                 query: dict[str, str], headers: Mapping[str, str], body: Any, base_url: str | Callable[[], str],
                 method: str = "POST") -> None:
        self.runtime = runtime
        self.principal = principal
        self.operation_id = operation_id
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self._base_url = base_url  # or how to work it out: few handlers need it

    def tx(self) -> RequestTransaction:
        """The caller's tenant under its lock, settled to now: ``with req.tx() as (state, ctx)``. Reads (GET)
        never create a tenant and are not persisted: they only settle the timeline, which a restored
        state replays the same way."""
        assert self.principal is not None
        return RequestTransaction(self)

    @property
    def base_url(self) -> str:
        """Scheme and host the client called, for the URLs a handler hands out."""
        if callable(self._base_url):
            self._base_url = self._base_url()
        return self._base_url

    def presign(self, kind: str, object_id: str, now: float, variant: str | None = None) -> str:
        """A presigned-URL token for one of the caller's objects (see emulator.store.presigned)."""
        assert self.principal is not None
        return self.runtime.store.presigned.issue(self.principal.project, kind, object_id, now, variant=variant)

    def json(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    def query_int(self, name: str, default: int) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError as exc:
            raise InvalidRequest(f"{name}: query parameter must be an integer", param=name) from exc

    def query_set(self, name: str) -> set[str] | None:
        raw = self.query.get(name)
        if not raw:
            return None
        return {v for v in raw.split(",") if v}

    def query_bool(self, name: str) -> bool:
        return self.query.get(name, "").lower() == "true"

    def query_str(self, name: str) -> str | None:
        value = self.query.get(name)
        return value if value else None
