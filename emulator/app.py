"""The ASGI application, wired from the layers of :mod:`emulator.http` (nothing else lives here).

Outermost first: site guards, body size and a path switch (``EmulatorApp``), ``ErrorEnvelope``, table routing,
auth (then ``ShardGuard`` with ``--shard``), fault rules, compiled request validation, ``Dispatcher``.
connexion's default ``AsyncApp`` stack is not used: its per-request layer cost most of the throughput.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from connexion.middleware import ConnexionMiddleware
from connexion.middleware.response_validation import ResponseValidationMiddleware
from connexion.resolver import Resolver
from connexion.spec import Specification

from emulator import spec
from emulator.api import handler_for
from emulator.http.access_log import AccessLog
from emulator.http.asgi import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    declares_body,
    header,
    lifespan,
    limited_receive,
    send_error,
)
from emulator.http.auth import AuthMiddleware
from emulator.http.dispatch import Dispatcher
from emulator.http.docs import DocsApp, is_docs_path
from emulator.http.errors import ErrorEnvelope
from emulator.http.faults import FaultMiddleware
from emulator.http.files import FileServer
from emulator.http.routing import TableRoutingMiddleware
from emulator.http.shards import ShardGuard
from emulator.http.site import SiteGuard
from emulator.http.validation import FastRequestValidationMiddleware
from emulator.runtime import Runtime
from emulator.ui import Dashboard, is_dashboard_path

# connexion 3.3 (pinned by tests/test_dependency_internals.py): Specification.__init__ checks every spec
# against the OpenAPI schema through the classmethod _validate_spec, ~0.085 s of a 0.44 s start-up
# (BENCHMARKS.md, "Private internals"). Ours are packaged files that tests/test_spec.py checks with that
# same validator, so the app's own loads skip it. While a build runs, the classmethod is a gate that skips
# only in the building thread (a ContextVar) and validates as connexion does in every other; the lock
# keeps one build at a time, so the method restored is always connexion's own.
_SKIP_SPEC_CHECK: ContextVar[bool] = ContextVar("emulator_skip_spec_check", default=False)
_SPEC_CHECK_LOCK = threading.Lock()


@contextlib.contextmanager
def _packaged_specs() -> Iterator[None]:
    """Within the block, connexion does not validate the specs this thread loads."""
    with _SPEC_CHECK_LOCK:
        original = Specification.__dict__["_validate_spec"]

        def gate(cls: type[Specification], raw: dict[str, Any]) -> None:
            if not _SKIP_SPEC_CHECK.get():
                original.__func__(cls, raw)

        token = _SKIP_SPEC_CHECK.set(True)
        Specification._validate_spec = classmethod(gate)  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            Specification._validate_spec = original  # type: ignore[method-assign]
            _SKIP_SPEC_CHECK.reset(token)


def _resolver() -> Resolver:
    def resolve(operation_id: str) -> Any:
        handler = handler_for(operation_id)
        if handler is None:
            raise ImportError(f"no handler for operationId {operation_id}")
        return handler

    return Resolver(function_resolver=resolve)


class EmulatorApp:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        validate_responses = runtime.config.validate_responses
        middlewares: list[Any] = [
            ErrorEnvelope,
            TableRoutingMiddleware,
            functools.partial(AuthMiddleware, tenancy=runtime.tenancy),
            functools.partial(FaultMiddleware, faults=runtime.faults, events=runtime.store.events,
                              scheduled=runtime.scheduled_rules, fire_due=runtime.fire_due_rules),
            FastRequestValidationMiddleware,
        ]
        if runtime.shard is not None:  # a shard of a cluster: its own tenants only, cluster-wide control calls
            middlewares.insert(3, functools.partial(ShardGuard, runtime=runtime))
        if validate_responses:
            middlewares.append(ResponseValidationMiddleware)
        self.api = ConnexionMiddleware(Dispatcher(runtime), middlewares=middlewares)
        with _packaged_specs():
            self.api.add_api(spec.load_spec(spec.VENDOR), resolver=_resolver(), validate_responses=validate_responses,
                             strict_validation=False)
            self.api.add_api(spec.load_spec(spec.ADMIN), base_path=spec.ADMIN_BASE_PATH, resolver=_resolver(),
                             validate_responses=validate_responses)
        self.site = SiteGuard.from_config(runtime.config)
        self.files = ErrorEnvelope(FileServer(runtime))
        self.docs = ErrorEnvelope(DocsApp())

        self.ui = ErrorEnvelope(Dashboard(runtime, max_streams=runtime.config.max_event_streams))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        refused = self.site.refusal(scope)
        if refused is not None:
            status, message, code = refused
            await send_error(send, status, message, code=code)
            return
        path: str = scope.get("path", "")
        limit = self.runtime.config.max_body_bytes
        length = header(scope, b"content-length")
        if length is not None and length.isdigit():
            if int(length) > limit:
                await send_error(send, 413, f"request body is larger than {limit} bytes", code="payload_too_large")
                return
            # (the HTTP parser delivers exactly the declared length: nothing more to count)
        elif declares_body(scope):  # a body follows without a length (chunked): count it
            receive = limited_receive(receive, limit)
        if path.startswith("/v1/"):  # the vendor API: most requests
            await self.api(scope, receive, send)
        elif path.startswith("/_files/"):
            await self.files(scope, receive, send)
        elif is_dashboard_path(path):
            await self.ui(scope, receive, send)
        elif is_docs_path(path):
            await self.docs(scope, receive, send)
        else:
            await self.api(scope, receive, send)


def build_app(runtime: Runtime) -> ASGIApp:
    app: ASGIApp = EmulatorApp(runtime)
    if runtime.config.access_log:
        app = AccessLog(app)
    return app
