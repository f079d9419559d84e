"""Request validation against the specs: connexion's routing metadata and schemas, our own execution.

connexion builds a new ``Draft4Validator`` (after deep-copying the schema) for every parameter and body
of every request, treats a chunked body (no ``Content-Length``) as missing and refuses an empty body even
where the spec says it is optional. Here the validators are compiled once per schema; bodies are read
whole (chunked or not, within the size limit of the outermost layer) and parsed once with orjson (the
parsed body is handed to the dispatcher); an empty body is accepted where ``requestBody.required`` is
false; and operations that cannot fail validation (no body, no query or header parameters, only
unconstrained string path parameters, which the router already guarantees) skip it entirely.

Every refusal is an :class:`~emulator.errors.InvalidRequest` with one sentence naming the field, e.g.
``limit: 0 is less than the minimum of 1`` with ``param`` set to ``limit`` (a body field's ``param`` is
its path, ``lora_config.rank``). Values quoted in messages are cut short.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
from connexion.json_schema import Draft4RequestValidator
from connexion.lifecycle import ConnexionRequest
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.utils import is_null, is_nullable
from connexion.validators import VALIDATOR_MAP, ParameterValidator
from jsonschema import Draft4Validator, ValidationError

from emulator.errors import InvalidRequest, shorten
from emulator.http.asgi import Message, Receive, Scope, Send, read_body

PARSED_BODY = "emulator_body"
_REQUIRED = re.compile(r"^'(.+)' is a required property$")


def describe(error: ValidationError, prefix: str = "") -> tuple[str, str]:
    """(message, param) for a jsonschema error: one sentence that names the field."""
    parts = [prefix] if prefix else []
    for part in error.absolute_path:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part}]"]
        else:
            parts.append(str(part))
    message = error.message
    if error.validator == "required" and (m := _REQUIRED.match(message)):
        parts.append(m.group(1))
        return f"{'.'.join(parts)}: this field is required", ".".join(parts)
    instance_repr = repr(error.instance)
    if len(instance_repr) > 80:  # the whole bad value may be huge: quote its start only
        message = message.replace(instance_repr, shorten(instance_repr, 60))
    param = ".".join(parts)
    return (f"{param}: {shorten(message, 300)}" if param else shorten(message, 300)), param


class _Compiled:
    """Compiled validators keyed by the identity of the (immutable, app-lifetime) schema dict."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, Any]] = {}

    def get(self, schema: Any, build: Any) -> Any:
        entry = self._by_id.get(id(schema))
        if entry is None or entry[0] is not schema:
            entry = (schema, build(schema))
            self._by_id[id(schema)] = entry
        return entry[1]


_PARAMS = _Compiled()
_BODIES = _Compiled()


def _param_validator(param: dict[str, Any]) -> Any:
    return Draft4Validator(copy.deepcopy(param).get("schema", param), format_checker=Draft4Validator.FORMAT_CHECKER)


def _body_validator(schema: dict[str, Any]) -> Any:
    return Draft4RequestValidator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)


class CachedParameterValidator(ParameterValidator):
    def validate_request(self, request: ConnexionRequest) -> None:
        sources = (("query", request.query_params.get), ("path", request.path_params.get),
                   ("header", request.headers.get), ("cookie", request.cookies.get))
        for kind, get in sources:
            for param in self.parameters.get(kind, []):
                name = param["name"]
                value = get(name.replace("-", "_") if kind == "path" else name)
                self._check(kind, name, value, param)

    @staticmethod
    def _check(kind: str, name: str, value: Any, param: dict[str, Any]) -> None:
        if is_nullable(param) and is_null(value):
            return
        if value is None:
            if param.get("required"):
                raise InvalidRequest(f"{name}: the {kind} parameter is required", param=name)
            return
        error = next(iter(_PARAMS.get(param, _param_validator).iter_errors(value)), None)
        if error is not None:
            raise InvalidRequest(describe(error, prefix=name)[0], param=name)


def _trivial(operation: Any) -> bool:
    if operation.request_body or operation.body_definition():
        return False
    for param in operation.parameters:
        schema = param.get("schema", {})
        if param.get("in") != "path" or schema.get("type") != "string":
            return False
        if set(schema) - {"type", "minLength", "description", "example"} or schema.get("minLength", 0) > 1:
            return False
    return True


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive channel that gives ``body`` once, then whatever ``receive`` gives (a disconnect)."""
    sent = False

    async def receive_() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_


class FastRequestValidationOperation(RequestValidationOperation):
    """connexion's ``RequestValidationOperation`` with its per-request set-up hoisted to start-up: the
    parameter validator, URI parser and body schemas are built once per operation."""

    def __init__(self, next_app: Any, *, operation: Any, **kwargs: Any) -> None:
        super().__init__(next_app, operation=operation, **kwargs)
        self._skip = _trivial(operation)
        op = self._operation
        self._params = op.parameters
        self._parameter_validator = self._validator_map["parameter"](
            op.parameters, uri_parser=op._uri_parser_class(op.parameters, op.body_definition()),
            strict_validation=self.strict_validation, security_query_params=self.security_query_params)
        self._has_body = bool(op.request_body)
        self._body_required = bool(op.request_body.get("required", False)) if op.request_body else False
        self._body_schemas: dict[str, Any] = {}

    def _body_schema(self, mime_type: str) -> Any:
        if mime_type not in self._body_schemas:
            self._body_schemas[mime_type] = self._operation.body_schema(mime_type) or None
        return self._body_schemas[mime_type]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._skip:
            await self.next_app(scope, receive, send)
            return
        if self._params:
            self._parameter_validator.validate(scope)
        if self._has_body:
            raw = await read_body(receive)
            body = None
            if raw.strip():
                mime_type, _encoding = self.extract_content_type(scope["headers"])
                self.validate_mime_type(mime_type)
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from exc
                schema = self._body_schema(mime_type)
                if schema:
                    error = next(iter(_BODIES.get(schema, _body_validator).iter_errors(body)), None)
                    if error is not None:
                        message, param = describe(error)
                        raise InvalidRequest(message, param=param or None)
            elif self._body_required:
                raise InvalidRequest("a JSON request body is required", code="missing_body")
            scope.setdefault("extensions", {})[PARSED_BODY] = body
            receive = _replay(raw, receive)
        await self.next_app(scope, receive, send)


class FastRequestValidationAPI(RequestValidationAPI):
    def make_operation(self, operation: Any) -> RequestValidationOperation:
        return FastRequestValidationOperation(self.next_app, operation=operation,
                                              strict_validation=self.strict_validation,
                                              validator_map=self.validator_map)


class FastRequestValidationMiddleware(RequestValidationMiddleware):
    api_cls = FastRequestValidationAPI


def validator_map() -> dict[str, Any]:
    return {"parameter": CachedParameterValidator, "body": copy.copy(VALIDATOR_MAP["body"])}
