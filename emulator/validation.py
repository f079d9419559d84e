"""Request validation with connexion's validators, minus their per-request set-up cost.

connexion builds a new ``Draft4Validator`` (after deep-copying the schema) for every parameter
and body of every request. Here the validators are compiled once per schema, JSON bodies are
parsed once with orjson (the parsed body is handed to the dispatcher), and operations that cannot
fail validation (no body, no query or header parameters, only unconstrained string path
parameters, which the router already guarantees) skip it entirely. The verdicts are the same as
connexion's; only the cost differs (BENCHMARKS.md).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from connexion.exceptions import BadRequestProblem
from connexion.json_schema import Draft4RequestValidator
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.utils import is_null, is_nullable
from connexion.validators import VALIDATOR_MAP, JSONRequestBodyValidator, ParameterValidator
from jsonschema import Draft4Validator, ValidationError

PARSED_BODY = "emulator_body"


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


class CachedParameterValidator(ParameterValidator):
    @staticmethod
    def validate_parameter(parameter_type: str, value: Any, param: dict[str, Any], param_name: Any = None) -> Any:
        if is_nullable(param) and is_null(value):
            return None
        if value is not None:
            validator = _PARAMS.get(param, lambda p: Draft4Validator(copy.deepcopy(p).get("schema", p),
                                                                     format_checker=Draft4Validator.FORMAT_CHECKER))
            try:
                validator.validate(value)
            except ValidationError as exception:
                return str(exception)
            return None
        if param.get("required"):
            return f"Missing {parameter_type} parameter '{param['name']}'"
        return None


class CachedJSONBodyValidator(JSONRequestBodyValidator):
    @property
    def _validator(self) -> Any:
        return _BODIES.get(self._schema, lambda s: Draft4RequestValidator(
            s, format_checker=Draft4Validator.FORMAT_CHECKER))

    async def _parse(self, stream: Any, scope: Any) -> Any:
        raw = b"".join([message async for message in stream])
        body = None
        if raw.strip():
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise BadRequestProblem(detail=f"request body is not valid JSON: {exc}") from exc
        scope.setdefault("extensions", {})[PARSED_BODY] = body
        return body


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


class FastRequestValidationOperation(RequestValidationOperation):
    """connexion's ``RequestValidationOperation.__call__`` with its per-request set-up hoisted to
    start-up: the parameter validator, URI parser and body schemas are built once per operation."""

    def __init__(self, next_app: Any, *, operation: Any, **kwargs: Any) -> None:
        super().__init__(next_app, operation=operation, **kwargs)
        self._skip = _trivial(operation)
        op = self._operation
        self._params = op.parameters
        self._parameter_validator = self._validator_map["parameter"](
            op.parameters, uri_parser=op._uri_parser_class(op.parameters, op.body_definition()),
            strict_validation=self.strict_validation, security_query_params=self.security_query_params)
        self._body_plans: dict[str, Any] = {}

    def _body_plan(self, mime_type: str) -> Any:
        plan = self._body_plans.get(mime_type)
        if plan is None:
            op = self._operation
            schema = op.body_schema(mime_type)
            body_validator = None
            if schema:
                try:
                    body_validator = self._validator_map["body"][mime_type]
                except KeyError:
                    body_validator = None
            plan = (schema, body_validator, op.request_body.get("required", False),
                    is_nullable(op.body_definition(mime_type)))
            self._body_plans[mime_type] = plan
        return plan

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._skip:
            await self.next_app(scope, receive, send)
            return
        if self._params:
            self._parameter_validator.validate(scope)
        mime_type, encoding = self.extract_content_type(scope["headers"])
        self.validate_mime_type(mime_type)
        schema, body_validator, required, nullable = self._body_plan(mime_type)
        if schema and body_validator is not None:
            validator = body_validator(schema=schema, required=required, nullable=nullable, encoding=encoding,
                                       strict_validation=self.strict_validation,
                                       uri_parser=self._parameter_validator.uri_parser)
            receive, scope = await validator.wrap_receive(receive, scope=scope)
        await self.next_app(scope, receive, send)


class FastRequestValidationAPI(RequestValidationAPI):
    def make_operation(self, operation: Any) -> RequestValidationOperation:
        return FastRequestValidationOperation(self.next_app, operation=operation,
                                              strict_validation=self.strict_validation,
                                              validator_map=self.validator_map)


class FastRequestValidationMiddleware(RequestValidationMiddleware):
    api_cls = FastRequestValidationAPI


def validator_map() -> dict[str, Any]:
    body = copy.copy(VALIDATOR_MAP["body"])
    body["*/*json"] = CachedJSONBodyValidator
    return {"parameter": CachedParameterValidator, "body": body}
