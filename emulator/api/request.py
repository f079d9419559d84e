"""The request object handlers receive, and the reply they return.

Handlers parse what they need from :class:`Request`, call one domain function on ``req.tenant`` with
``req.ctx`` (in the unit of work the dispatcher opened), render, return ``(status, body[, headers])``. A
handler marked :func:`stateless` reads no tenant (the catalog, a price estimate), and none is opened for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from emulator.compute.errors import ComputeError
from emulator.domain.context import Ctx, Principal
from emulator.errors import Invalid, shorten
from emulator.store import Tenant

if TYPE_CHECKING:
    from emulator.runtime import Runtime

Reply = tuple[int, Any] | tuple[int, Any, dict[str, str]]
READ_METHODS = frozenset({"GET", "HEAD"})
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def stateless(handler: F) -> F:
    """Mark a handler that needs no tenant: the dispatcher opens no unit of work for it."""
    handler.stateless = True  # type: ignore[attr-defined]
    return handler


def polls(table: str, param: str) -> Callable[[F], F]:
    """Mark a handler that reads one object a client may be waiting on (its table, and the path parameter
    naming it): the dispatcher tells the runtime before the handler runs, so an auto clock can jump to what
    the object waits for (``Runtime.polled``)."""
    def mark(handler: F) -> F:
        handler.polls = (table, param)  # type: ignore[attr-defined]
        return handler
    return mark


class Request(msgspec.Struct):
    """(A msgspec Struct, built in C: one is made per request.) ``_base_url`` is the base URL, or how to work
    it out: few handlers need it. ``tenant`` and ``ctx`` are set by the dispatcher's unit of work."""

    runtime: Runtime
    principal: Principal | None
    operation_id: str
    path: dict[str, str]
    query: dict[str, str]
    headers: Mapping[str, str]
    body: Any
    _base_url: str | Callable[[], str]
    method: str = "POST"
    tenant: Tenant = None  # type: ignore[assignment]
    ctx: Ctx = None  # type: ignore[assignment]

    @property
    def base_url(self) -> str:
        """Scheme and host the client called, for the URLs a handler hands out."""
        if callable(self._base_url):
            self._base_url = self._base_url()
        return self._base_url

    def presign(self, kind: str, object_id: str, variant: str | None = None) -> str:
        """A presigned-URL token for one of the caller's objects (see emulator.store.presigned)."""
        return self.runtime.store.presigner.issue(self.tenant.project, self.tenant.epoch, kind, object_id,
                                                  self.ctx.now, variant=variant)

    def json(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    def read(self, type_: type[T]) -> T:
        """The body as ``type_`` (request validation checked it against the spec: what the type cannot read is
        a 400 all the same, naming the field)."""
        body = self.body
        try:  # (compute.types.decode, inlined: every write reads its body here)
            return msgspec.convert(body if isinstance(body, dict) else {}, type_, strict=False)
        except msgspec.ValidationError as exc:
            raise Invalid(f"the request body: {exc}") from None
        except ComputeError as exc:  # (a type's own check)
            raise Invalid(f"the request body: {exc.message}") from None

    def query_int(self, name: str, default: int) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError as exc:
            raise Invalid(f"{name}: query parameter must be an integer", param=name) from exc

    def query_set(self, name: str, allowed: frozenset[str] | None = None) -> set[str] | None:
        """A comma-separated list (the SDK's comma format); empty or omitted: None (no filter). Each value must be
        one of ``allowed``: the spec's pattern says so too, but Python's ``$`` also matches before a final newline."""
        raw = self.query.get(name)
        if not raw:
            return None
        values = {v for v in raw.split(",") if v}
        if allowed is not None and (bad := sorted(values - allowed)):
            raise Invalid(f"{name}: {shorten(repr(bad[0]), 80)} is not one of {sorted(allowed)}", param=name)
        return values

    def query_bool(self, name: str) -> bool:
        return self.query.get(name, "").lower() == "true"

    def query_str(self, name: str) -> str | None:
        value = self.query.get(name)
        return value if value else None
