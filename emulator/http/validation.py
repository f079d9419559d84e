"""The request-validation step: connexion builds each operation's checks from the specs, we run them.

Each refusal is an :class:`~emulator.errors.Invalid` with one sentence naming the field (``param`` = its path,
``lora_config.rank``). Beyond the schemas: a nesting bound, a repeated header parameter refused, UTF-8 headers
and queries. Private internals of connexion 3.3.0 (``tests/test_dependency_internals.py``; BENCHMARKS.md).
"""

from __future__ import annotations

import copy
import email.policy
import functools
import json
import re
from email.parser import BytesParser
from typing import Any

import jsonschema_rs
import orjson
from connexion.json_schema import Draft4RequestValidator
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.utils import is_null, is_nullable
from jsonschema import Draft4Validator, ValidationError

from emulator.bounds import MAX_JSON_DEPTH, MAX_STATE_DEPTH, depth_message, json_too_deep
from emulator.errors import Invalid, shorten
from emulator.http.asgi import (
    HEADERS,
    Scope,
    header,
    header_count,
    headers_of,
    query_pairs,
    text_header,
)
from emulator.http.call import Call

# JSON's own whitespace (RFC 8259 section 2): a body of only these is no body; bytes.strip() would also take
# \x0b and \x0c, which make a body that is not JSON (400), not an empty one.
JSON_WHITESPACE = b" \t\r\n"
_REQUIRED = re.compile(r"^'(.+)' is a required property$")
_UNBUILT = object()


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


class Checker:
    """One schema, compiled once: a Rust validator (jsonschema-rs) answers "valid?" on the hot path, and
    jsonschema's Draft 4 request validator (connexion's semantics) has the last word and the message
    when it says no. Schemas using a format that jsonschema checks (``date-time``...) use jsonschema
    only, so the verdicts never differ."""

    __slots__ = ("fast", "slow")

    def __init__(self, schema: dict[str, Any], slow: Any) -> None:
        self.slow = slow
        self.fast = None
        if not _checked_formats(schema):
            try:
                self.fast = jsonschema_rs.Draft4Validator(schema, validate_formats=False)
            except (ValueError, TypeError):  # a schema the Rust validator cannot compile: jsonschema alone
                self.fast = None

    def first_error(self, value: Any) -> ValidationError | None:
        if self.fast is not None and self.fast.is_valid(value):
            return None
        return next(iter(self.slow.iter_errors(value)), None)


def _checked_formats(schema: dict[str, Any]) -> bool:
    """Does any part of the schema reachable from its root (``$ref``s followed; connexion attaches all
    of ``components`` for them) use a format that jsonschema checks?"""
    seen: set[str] = set()

    def walk(node: Any, top: bool = False) -> bool:
        if isinstance(node, list):
            return any(walk(v) for v in node)
        if not isinstance(node, dict):
            return False
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in seen:
            seen.add(ref)
            target: Any = schema
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            if walk(target):
                return True
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt in Draft4Validator.FORMAT_CHECKER.checkers:
            return True
        return any(walk(v) for k, v in node.items() if not (top and k == "components") and k != "$ref")

    return walk(schema, top=True)


def _read_media_type(raw: bytes) -> str:
    """A ``Content-Type`` header's media type, lower case, read as :func:`~emulator.http.asgi.header` reads it."""
    return raw.decode("utf-8", "replace").partition(";")[0].strip().lower()


@functools.lru_cache(maxsize=256)  # (clients send one or two Content-Types; pure, so a hit is never stale)
def _media_type(raw: bytes) -> str:
    """:func:`_read_media_type` of a short header (a long one is read each time: the memo stays small)."""
    return _read_media_type(raw)


def _coerce(value: str, type_: str | None) -> Any:
    """connexion's query/header coercion: a value that does not convert stays a string (and fails
    validation with its own message)."""
    try:
        if type_ == "integer":
            return int(value)
        if type_ == "number":
            return float(value)
    except ValueError:
        return value
    if type_ == "boolean" and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


class ParamCheck:
    """One parameter of one operation: where to find it, how to coerce it, its compiled schema."""

    __slots__ = ("kind", "name", "key", "required", "nullable", "type", "item_type", "explode", "checker")

    def __init__(self, param: dict[str, Any]) -> None:
        schema = param.get("schema", {})
        self.kind = param["in"]
        self.name = param["name"]
        self.key = self.name.lower().encode("latin-1") if self.kind == "header" else self.name
        self.required = bool(param.get("required"))
        self.nullable = is_nullable(param)
        self.type = schema.get("type")
        self.item_type = (schema.get("items") or {}).get("type")
        self.explode = param.get("explode", param.get("style", "form") == "form")
        self.checker = Checker(schema, Draft4Validator(copy.deepcopy(schema),
                                                       format_checker=Draft4Validator.FORMAT_CHECKER))

    def check(self, scope: Scope, query: dict[str, list[str]], path: dict[str, str]) -> None:
        value: Any
        if self.kind == "query":
            values = query.get(self.name)
            if values is None:
                value = None
            elif self.type == "array":
                joined = ",".join(values) if self.explode else values[-1]
                # `status=` is how form style serializes an empty array (the SDK sends it for `status=[]`)
                value = [_coerce(v, self.item_type) for v in joined.split(",")] if joined else []
            else:
                value = _coerce(values[-1], self.type)
        elif self.kind == "path":
            value = path.get(self.name.replace("-", "_"))
        elif self.kind == "header":
            raw = text_header(scope, self.key, self.name)
            if raw is not None and header_count(scope, self.key) > 1:
                raise Invalid(f"{self.name}: the header was sent {header_count(scope, self.key)} times; "
                                     "send it once", param=self.name, code="duplicate_header")
            value = None if raw is None else _coerce(raw, self.type)
        else:  # cookies: none in the specs
            return
        if self.nullable and is_null(value):
            return
        if value is None:
            if self.required:
                raise Invalid(f"{self.name}: the {self.kind} parameter is required", param=self.name)
            return
        error = self.checker.first_error(value)
        if error is not None:
            raise Invalid(describe(error, prefix=self.name)[0], param=self.name)


def parse_query(scope: Scope) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in query_pairs(scope):
        out.setdefault(key, []).append(value)
    return out


def parse_json_body(raw: bytes, depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body parsed once, refused (400) when it is not JSON or nests more than ``depth`` levels."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Invalid(f"request body is not valid JSON: {exc}", code="invalid_json") from exc
    if json_too_deep(raw, depth):
        raise Invalid(depth_message("the request body", depth), code="too_deep")
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


def parse_form(raw: bytes, content_type: str) -> dict[str, Any]:
    """A ``multipart/form-data`` body as {field: text} (a part that is not UTF-8 text stays bytes); a body that
    is not such a form is a 400."""
    if "boundary=" not in content_type:
        raise Invalid("a multipart/form-data body needs a boundary in its Content-Type", code="invalid_form")
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + raw)
    if not message.is_multipart():
        raise Invalid("the request body is not a multipart/form-data form", code="invalid_form")
    form: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise Invalid("a form part has no name", code="invalid_form")
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            data = b""
        try:
            form[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            form[name] = data
    return form


# orjson reads an integer outside [-2**63, 2**64) as a float, so a huge integer would be refused as "not of
# type 'integer'". Only a refused body with a run of 19 digits can hold one; it is read again exactly, and
# judged (and worded) on that reading. Every integer field of both specs' bodies is bounded within int64,
# which orjson reads exactly (test_spec.py checks openapi.yaml), so that reading never accepts a body that
# orjson's refused: it changes the words of the refusal only.
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _exact(raw: bytes, checker: Checker) -> tuple[Any, ValidationError | None]:
    try:
        body = json.loads(raw, parse_int=_parse_int)
    except ValueError:  # orjson read it, so it is JSON; stay with its reading
        body = orjson.loads(raw)
    return body, checker.first_error(body)


def _parse_int(text: str) -> int | float:
    # int() refuses more than 4300 digits (CVE-2020-10735); such a number is out of any bound either way
    return int(text) if len(text) <= 4300 else float(text)


class FastRequestValidationOperation(RequestValidationOperation):
    """connexion's ``RequestValidationOperation`` with its per-request set-up hoisted to start-up: the
    parameter validator, URI parser and body schemas are built once per operation."""

    def __init__(self, next_app: Any, *, operation: Any, **kwargs: Any) -> None:
        super().__init__(next_app, operation=operation, **kwargs)
        self.skip = _trivial(operation)
        op = self._operation
        self.params = [ParamCheck(p) for p in op.parameters]  # (read by the pipeline: none, no call)
        self.reads_body = bool(op.request_body)
        self._body_required = bool(op.request_body.get("required", False)) if op.request_body else False
        self._body_checkers: dict[str, Checker | None] = {}
        self._consumes = [c.lower() for c in op.consumes]
        # A state document holds request bodies a few levels down (see emulator.bounds).
        self._depth = MAX_STATE_DEPTH if op.operation_id == "adminImportState" else MAX_JSON_DEPTH

    def _mime_type(self, scope: Scope) -> str:
        """The body's media type, refused with 415 unless the operation consumes it."""
        raw = (scope.get(HEADERS) or headers_of(scope)).get(b"content-type")
        if raw is None:
            return self._consumes[0] if self._consumes else "application/octet-stream"
        mime_type = _media_type(raw) if len(raw) <= 128 else _read_media_type(raw)
        if mime_type not in self._consumes:
            self.validate_mime_type(mime_type)  # connexion's check: media ranges, and the 415 it raises
        return mime_type

    def _body_checker(self, mime_type: str) -> Checker | None:
        found = self._body_checkers.get(mime_type, _UNBUILT)
        if found is not _UNBUILT:
            return found  # type: ignore[return-value]
        schema = self._operation.body_schema(mime_type) or None
        self._body_checkers[mime_type] = None if schema is None else Checker(schema, Draft4RequestValidator(
            schema, format_checker=Draft4Validator.FORMAT_CHECKER))
        return self._body_checkers[mime_type]

    def check(self, call: Call, scope: Scope) -> None:
        """The parameters (the parsed query kept on ``call``); :meth:`check_body` checks the body (read by the
        pipeline), if :attr:`reads_body`."""
        if self.params:
            query = parse_query(scope)
            call.query = {k: v[-1] for k, v in query.items()}
            for check in self.params:
                check.check(scope, query, call.params)

    def check_body(self, call: Call, scope: Scope, raw: bytes) -> None:
        """Parse and check the body ``raw`` (all of it, read), kept on ``call``."""
        body = None
        if raw.strip(JSON_WHITESPACE):
            mime_type = self._mime_type(scope)
            if mime_type == "multipart/form-data":  # the Files API's upload form
                body = parse_form(raw, header(scope, b"content-type") or "")
            else:
                body = parse_json_body(raw, self._depth)
            # (_body_checker's memo and first_error's quick "valid", read here: two calls fewer per request)
            found = self._body_checkers.get(mime_type, _UNBUILT)
            checker: Checker | None = (self._body_checker(mime_type) if found is _UNBUILT
                                       else found)  # type: ignore[assignment]
            if checker is None:
                error = None
            else:
                fast = checker.fast
                error = None if fast is not None and fast.is_valid(body) else checker.first_error(body)
            if (error is not None and checker is not None and mime_type != "multipart/form-data"
                    and _LONG_NUMBER.search(raw)):
                body, error = _exact(raw, checker)
            if error is not None:
                message, param = describe(error)
                raise Invalid(message, param=param or None)
        elif self._body_required:
            raise Invalid("a JSON request body is required", code="missing_body")
        call.body, call.parsed = body, True


class FastRequestValidationAPI(RequestValidationAPI):
    def make_operation(self, operation: Any) -> RequestValidationOperation:
        return FastRequestValidationOperation(self.next_app, operation=operation,
                                              strict_validation=self.strict_validation,
                                              validator_map=self.validator_map)


class FastRequestValidationMiddleware(RequestValidationMiddleware):
    """connexion's middleware, kept to build the operations (``add_api``); never called."""

    api_cls = FastRequestValidationAPI


class RequestValidation:
    """The validation step: each operation's checks, found with one dictionary lookup per request."""

    def __init__(self) -> None:
        self.builder = FastRequestValidationMiddleware(None)  # type: ignore[arg-type]  # (no app: never called)
        # (the pipeline looks its operation up here itself: one call fewer per request)
        self.operations: dict[tuple[str, str | None], FastRequestValidationOperation] = {}

    def add_api(self, specification: Any, **kwargs: Any) -> None:
        """Build the checks of a connexion ``Specification``'s operations (``kwargs``: connexion's API options)."""
        api = self.builder.add_api(specification, **kwargs)
        for op_id, op in api.operations.items():
            if isinstance(op_id, str) and isinstance(op, FastRequestValidationOperation) and not op.skip:
                self.operations[(api.base_path, op_id)] = op

    def operation(self, base: str, op: str | None) -> FastRequestValidationOperation | None:
        """The checks of a request's operation; None when it has none (or cannot fail them)."""
        return self.operations.get((base, op))
