"""The ASGI application: connexion's routing and request validation around our own dispatcher.

Layers, outermost first (DESIGN.md section 3):

1. :class:`EmulatorApp` - a tiny path switch: presigned file URLs (``/_files/...``, no auth) and the
   Swagger UI (``/docs``) stay off the hot path; everything else enters the connexion stack.
2. :class:`ErrorEnvelope` - every exception (domain errors, connexion's validation problems,
   Starlette's 404/405, crashes) leaves as ``ErrorData`` with the right status.
3. connexion ``RoutingMiddleware`` - resolves the operationId from ``openapi.yaml`` (and
   ``admin.yaml`` under ``/_emulator``).
4. :class:`AuthMiddleware` - bearer token -> principal (401 before any validation), admin token.
5. connexion's request validation with compiled validators (:mod:`emulator.validation`), plus
   ``ResponseValidationMiddleware`` when enabled.
6. :class:`Dispatcher` - picks the handler by operationId, parses, renders JSON with orjson.

Connexion's default ``AsyncApp`` stack is not used: its per-request decorator layer costs most of
the throughput (measured in BENCHMARKS.md).
"""

from __future__ import annotations

import functools
import logging
import traceback
from typing import Any
from urllib.parse import parse_qsl

import orjson
from connexion.exceptions import ProblemException
from connexion.middleware import ConnexionMiddleware
from connexion.middleware.response_validation import ResponseValidationMiddleware
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from starlette.exceptions import HTTPException

from emulator import defects
from emulator.api import handler_for
from emulator.api.request import Request
from emulator.config import Config
from emulator.errors import ApiError, InvalidRequest, NotFound, PayloadTooLarge, Unauthenticated, render_error
from emulator.faults import FaultMiddleware
from emulator.runtime import ADMIN_SPEC_PATH, SPEC_PATH, Runtime, load_spec
from emulator.validation import PARSED_BODY, FastRequestValidationMiddleware, validator_map

log = logging.getLogger("emulator")
ROUTING = "connexion_routing"
PRINCIPAL = "emulator_principal"
JSON_HEADERS = [(b"content-type", b"application/json")]


async def send_json(send: Any, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw = list(JSON_HEADERS)
    raw.append((b"content-length", str(len(body)).encode()))
    for name, value in (headers or {}).items():
        raw.append((name.lower().encode(), value.encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Any) -> bytes:
    """The whole body; its size limit is enforced once, by ``EmulatorApp``'s receive channel."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def lifespan(receive: Any, send: Any) -> None:
    """Acknowledge ASGI start-up and shutdown; nothing needs doing at either."""
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def base_url(scope: dict[str, Any]) -> str:
    host = header(scope, b"host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


class ErrorEnvelope:
    def __init__(self, app: Any, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime
        self._counter = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the one place every error is rendered
            if started:
                raise
            status, body, headers = self.translate(exc)
            if self.runtime.defects:  # TEST-ONLY contract defects (emulator/defects.py)
                status, body = defects.on_error(self.runtime, scope, exc, status, body)
            await send_json(send, status, body, headers)

    def translate(self, exc: Exception) -> tuple[int, bytes, dict[str, str]]:
        if isinstance(exc, ApiError):
            return exc.status, orjson.dumps(exc.body()), exc.headers
        if isinstance(exc, UnicodeDecodeError):  # connexion decodes JSON bodies as UTF-8 before we see them
            return 400, render_error(400, f"request body is not valid UTF-8: {exc.reason}"), {}
        if isinstance(exc, ProblemException):
            message = str(exc.detail or exc.title or "request rejected")
            return exc.status, render_error(exc.status, message), {}
        if isinstance(exc, HTTPException):
            message = exc.detail if isinstance(exc.detail, str) else "request rejected"
            if exc.status_code == 404:
                message = "no such endpoint"
            elif exc.status_code == 405:
                message = "method not allowed on this endpoint"
            return exc.status_code, render_error(exc.status_code, message), dict(exc.headers or {})
        self._counter += 1
        request_id = f"req_{self._counter:08d}"
        log.error("unhandled error (%s): %s", request_id, "".join(traceback.format_exception(exc)))
        return 500, render_error(500, f"internal error in the emulator (request id {request_id}); "
                                      "this is a bug, please report it", code="internal_error"), {}


class AuthMiddleware:
    """Bearer token -> principal on every vendor operation; admin token on ``/_emulator``."""

    def __init__(self, app: Any, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        operation_id = scope.get("extensions", {}).get(ROUTING, {}).get("operation_id")
        if operation_id is not None:
            if operation_id.startswith("admin"):
                self._check_admin(scope)
            else:
                scope["extensions"][PRINCIPAL] = self._principal(scope)
        await self.app(scope, receive, send)

    def _principal(self, scope: dict[str, Any]) -> Any:
        auth = header(scope, b"authorization")
        if not auth:
            raise Unauthenticated("missing Authorization header; send 'Authorization: Bearer <api key>'")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("malformed Authorization header; expected 'Bearer <api key>'")
        principal = self.runtime.principal_for(token)
        if principal is None:
            raise Unauthenticated("invalid API key")
        return principal

    def _check_admin(self, scope: dict[str, Any]) -> None:
        expected = self.runtime.config.admin_token
        if not expected:
            return
        given = header(scope, b"x-emulator-admin-token")
        if given is None:
            auth = header(scope, b"authorization") or ""
            given = auth.partition(" ")[2].strip()
        if given != expected:
            raise Unauthenticated("the control plane needs the admin token (X-Emulator-Admin-Token header)",
                                  code="invalid_admin_token")


class Dispatcher:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        extensions = scope.get("extensions", {})
        operation_id = extensions.get(ROUTING, {}).get("operation_id")
        if operation_id is None:
            raise NotFound(f"no endpoint {scope['method']} {scope['path']}", code="unknown_endpoint")
        handler = handler_for(operation_id)
        if handler is None:
            raise NotFound(f"operation {operation_id} is not implemented", code="not_implemented")
        if PARSED_BODY in extensions:  # request validation already parsed it
            body = extensions[PARSED_BODY]
        else:
            raw = await read_body(receive)
            body = None
            if raw.strip():
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        raw_query = scope.get("query_string", b"")
        query = dict(parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)) if raw_query else {}
        request = Request(self.runtime, extensions.get(PRINCIPAL), operation_id, scope.get("path_params", {}),
                          query, headers, body, base_url(scope))
        if self.runtime.defects:  # TEST-ONLY contract defects (emulator/defects.py)
            defects.on_request(self.runtime, request)
        result = handler(request)
        status, payload = result[0], result[1]
        effect = extensions.get("emulator_fault")
        if effect is not None and status < 400 and request.principal is not None:
            self.runtime.apply_fault_effect(request.principal, request.base_url, effect, operation_id, request.path,
                                            body, payload)
        if self.runtime.defects:  # TEST-ONLY contract defects (emulator/defects.py)
            status, payload = defects.on_response(self.runtime, request, status, payload)
        extra = result[2] if len(result) > 2 else None  # type: ignore[misc]
        if isinstance(payload, (bytes, bytearray)):
            await send_json(send, status, bytes(payload), extra)
        else:
            await send_json(send, status, orjson.dumps(payload), extra)


def _limited(receive: Any, limit: int) -> Any:
    """A receive channel that refuses bodies over ``limit`` bytes (chunked uploads have no length)."""
    seen = 0

    async def receive_() -> Any:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        return message

    return receive_


def _not_found_app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    return send_json(send, 404, render_error(404, "no such endpoint"))


def _resolver() -> Resolver:
    def resolve(operation_id: str) -> Any:
        handler = handler_for(operation_id)
        if handler is None:
            raise ImportError(f"no handler for operationId {operation_id}")
        return handler

    return Resolver(function_resolver=resolve)


class EmulatorApp:
    """Outermost ASGI app."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        config = runtime.config
        middlewares: list[Any] = [
            functools.partial(ErrorEnvelope, runtime=runtime),
            RoutingMiddleware,
            functools.partial(AuthMiddleware, runtime=runtime),
            functools.partial(FaultMiddleware, runtime=runtime),
            FastRequestValidationMiddleware,
        ]
        if config.validate_responses:
            middlewares.append(ResponseValidationMiddleware)
        self.api = ConnexionMiddleware(Dispatcher(runtime), middlewares=middlewares,
                                       specification_dir=str(SPEC_PATH.parent))
        self.api.add_api(load_spec(SPEC_PATH), resolver=_resolver(), validate_responses=config.validate_responses,
                         strict_validation=False, validator_map=validator_map())
        self.api.add_api(load_spec(ADMIN_SPEC_PATH), base_path="/_emulator", resolver=_resolver(),
                         validate_responses=config.validate_responses, validator_map=validator_map())
        self._docs: ConnexionMiddleware | None = None
        from emulator.files import FileServer

        self.files = FileServer(runtime)
        from emulator.ui import Dashboard

        self.ui = ErrorEnvelope(Dashboard(runtime), runtime)  # the dashboard, /_emulator/ui (emulator/ui/)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path: str = scope.get("path", "")
        limit = self.runtime.config.max_body_bytes
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await send_json(send, 413, render_error(413, f"request body is larger than {limit} bytes",
                                                    code="payload_too_large"))
            return
        receive = _limited(receive, limit)
        if path.startswith("/_files/"):
            await self.files(scope, receive, send)
        elif path == "/_emulator/ui" or path.startswith("/_emulator/ui/"):
            await self.ui(scope, receive, send)
        elif path.startswith("/docs") or path == "/openapi.json":
            await self.docs()(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    def docs(self) -> ConnexionMiddleware:
        """Swagger UI for the spec, built on first use to keep start-up fast."""
        if self._docs is None:
            docs = ConnexionMiddleware(_not_found_app, middlewares=[SwaggerUIMiddleware],
                                       specification_dir=str(SPEC_PATH.parent))
            docs.add_api(load_spec(SPEC_PATH), resolver=_resolver(), base_path="",
                         swagger_ui_options=SwaggerUIOptions(swagger_ui_path="/docs", spec_path="/openapi.json"))
            self._docs = docs
        return self._docs



def build_app(config: Config | None = None, runtime: Runtime | None = None) -> EmulatorApp:
    if runtime is None:
        runtime = Runtime(config or Config())
    app = EmulatorApp(runtime)
    if runtime.config.scenario:
        from emulator import scenarios
        from emulator.config import ConfigError

        try:
            scenarios.load(runtime, runtime.config.scenario)
        except (scenarios.ScenarioError, ValueError) as exc:
            raise ConfigError(f"--scenario {runtime.config.scenario}: {exc}") from exc
    return app


def build_server_app(runtime: Runtime) -> Any:
    """The app a server runs: :func:`build_app`, wrapped by the recorder under ``--record``."""
    app: Any = build_app(runtime=runtime)
    if runtime.config.record_file:
        from emulator.recording import Recorder, RecordingApp

        app = RecordingApp(app, Recorder(runtime.config.record_file, runtime.clock.now))
    return app
