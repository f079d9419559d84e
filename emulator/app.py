"""The ASGI application, wired from the parts of :mod:`emulator.http` (nothing else lives here).

``EmulatorApp``: site guards, body size and a path switch; the vendor API and the control plane go to one
:class:`~emulator.http.pipeline.Pipeline` of steps. connexion loads the specs and builds the validators at
start-up; its ``AsyncApp`` and middleware stack are not used: their per-request layers cost most of the throughput.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

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
from emulator.http.auth import Auth
from emulator.http.dispatch import Dispatcher
from emulator.http.docs import DocsApp, is_docs_path
from emulator.http.errors import ErrorEnvelope
from emulator.http.faults import FaultRules
from emulator.http.files import FileServer
from emulator.http.pipeline import Pipeline
from emulator.http.routing import Router
from emulator.http.shards import ShardGuard
from emulator.http.site import SiteGuard
from emulator.http.validation import RequestValidation
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


def _pipeline(runtime: Runtime) -> Pipeline:
    """The request path, its routes and checks built from both specs by connexion."""
    validate_responses = runtime.config.validate_responses
    router, validation = Router(), RequestValidation()
    pipeline = Pipeline(router, Auth(runtime.tenancy), ShardGuard(runtime) if runtime.shard is not None else None,
                        FaultRules(runtime.faults, runtime.store.events, runtime.scheduled_rules,
                                   runtime.fire_due_rules),
                        validation, Dispatcher(runtime))
    if validate_responses:
        pipeline.responses = ResponseValidationMiddleware(pipeline.dispatch_validated)
    with _packaged_specs():
        for name, base_path, strict in ((spec.VENDOR, None, False), (spec.ADMIN, spec.ADMIN_BASE_PATH, False)):
            specification = Specification.load(spec.load_spec(name))
            base = specification.base_path if base_path is None else base_path
            options: dict[str, Any] = {"base_path": base, "resolver": _resolver(), "strict_validation": strict,
                                       "validate_responses": validate_responses}
            router.add_api(specification.raw["paths"], base)
            validation.add_api(specification, **options)
            if pipeline.responses is not None:
                pipeline.responses.add_api(specification, **options)
    return pipeline


class EmulatorApp:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.api = _pipeline(runtime)
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
