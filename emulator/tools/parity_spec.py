"""The contract judged on recorded traffic: each exchange of a recording against ``openapi.yaml``.

Per exchange: a declared status and a body matching the response schema (``enum_known``, ``fields_documented``);
across exchanges, documented lifecycles (:mod:`contract_tests.lifecycle`). A recording of the real service that
fails one shows spec drift. Not judged: control plane, docs, presigned URLs, the proxy's own answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import orjson

from contract_tests import lifecycle
from emulator.spec import VENDOR, load_spec
from emulator.tools.recording import decode_body

CHECKS = ("status_declared", "response_schema", "enum_known", "fields_documented", "lifecycle_order")
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
# What is not an operation of the vendor's API (see the module docstring).
NOT_API = ("/_emulator/", "/docs", "/openapi.json", "/_files/")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", re.I)
# Status prefixes of the lifecycles the contract documents (the shaping job's statuses are plain words).
_KINDS = (("MODEL_RESOURCES_STATUS_", "model resource"), ("TRAINING_SESSION_STATUS_", "training session"),
          ("TRAINING_OPERATION_STATUS_", "operation"))


@dataclass(frozen=True)
class Finding:
    """A place where the recorded answer and the contract disagree."""

    seq: int
    operation: str
    check: str
    field: str
    message: str
    request: str

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "operation": self.operation, "check": self.check, "field": self.field,
                "message": self.message, "request": self.request}


@dataclass
class Verdicts:
    """What the judge found: every finding, and how often each check passed per operation (the matrix)."""

    findings: list[Finding] = field(default_factory=list)
    passed: dict[str, dict[str, int]] = field(default_factory=dict)
    judged: int = 0
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, request, why)

    def count(self, operation: str, check: str) -> None:
        row = self.passed.setdefault(operation, {})
        row[check] = row.get(check, 0) + 1


def request_line(entry: dict[str, Any]) -> str:
    request = entry["request"]
    query = f"?{request['query']}" if request.get("query") else ""
    return f"#{entry.get('seq', '?')} {request['method']} {request['path']}{query}"


def json_body(part: dict[str, Any]) -> Any:
    """A recorded body parsed as JSON, or ``None`` when it is empty or not JSON."""
    data = decode_body(part.get("body") or {})
    if not data.strip():
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def media_type(headers: dict[str, str]) -> str:
    return (headers.get("content-type") or "").partition(";")[0].strip().lower()


def not_api(path: str) -> bool:
    return path.startswith(NOT_API) or path == "/"


# --- the contract ----------------------------------------------------------------------------------------------

class Contract:
    """The operations of a spec, matched by method and path, with their response schemas as JSON Schema."""

    def __init__(self, spec: dict[str, Any] | None = None) -> None:
        self.spec = spec if spec is not None else load_spec(VENDOR)
        self.routes: list[tuple[str, tuple[str, ...], str, dict[str, Any]]] = []
        for template, item in self.spec["paths"].items():
            for method, op in item.items():
                if method in HTTP_METHODS:
                    self.routes.append((method.upper(), tuple(template.strip("/").split("/")), op["operationId"], op))
        # A concrete segment outranks a template, segment by segment (``/estimate-cost`` before ``/{id}``).
        self.routes.sort(key=lambda r: tuple(seg.startswith("{") for seg in r[1]))
        self.tags = {op_id: (op.get("tags") or [""])[0] for _, _, op_id, op in self.routes}
        self._schemas: dict[tuple[str, str], dict[str, Any] | None] = {}

    def match(self, method: str, path: str) -> tuple[str, dict[str, Any], dict[str, str]] | None:
        """(operationId, operation, path parameters) of a request, or None."""
        segments = tuple(path.strip("/").split("/"))
        for route_method, template, op_id, op in self.routes:
            if route_method != method or len(template) != len(segments):
                continue
            params: dict[str, str] = {}
            for want, got in zip(template, segments):
                if want.startswith("{"):
                    if not got:
                        break
                    params[want[1:-1]] = got
                elif want != got:
                    break
            else:
                return op_id, op, params
        return None

    def response(self, op: dict[str, Any], status: int) -> tuple[str | None, dict[str, Any] | None]:
        """(the key that declares ``status``, or None; its response object, refs resolved)."""
        responses = op.get("responses", {})
        for key in (str(status), f"{str(status)[0]}XX", f"{str(status)[0]}xx"):
            if key in responses:
                return key, self._resolve(responses[key])
        if status >= 300 and "default" in responses:
            return "default", self._resolve(responses["default"])
        return None, None

    def _resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self._pointer(node["$ref"])
        return node

    def _pointer(self, ref: str) -> Any:
        node: Any = self.spec
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def schema(self, op_id: str, key: str) -> dict[str, Any] | None:
        """The JSON Schema (draft 4, refs inlined, ``nullable`` spelled out) of a response's JSON body."""
        if (op_id, key) not in self._schemas:
            self._schemas[(op_id, key)] = self._response_schema(op_id, key)
        return self._schemas[(op_id, key)]

    def _response_schema(self, op_id: str, key: str) -> dict[str, Any] | None:
        op = next(o for _, _, i, o in self.routes if i == op_id)
        response = self._resolve(op["responses"][key])
        content = (response or {}).get("content") or {}
        media = content.get("application/json")
        if media is None or "schema" not in media:
            return None
        return self._json_schema(media["schema"], ())

    def _json_schema(self, node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [self._json_schema(n, seen) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in seen:  # a recursive schema: accept anything below the second visit
                return {}
            return self._json_schema(self._pointer(ref), (*seen, ref))
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("example", "examples", "description", "discriminator", "xml", "externalDocs",
                       "readOnly", "writeOnly", "deprecated", "nullable"):
                continue
            if key in ("properties", "patternProperties"):
                out[key] = {k: self._json_schema(v, seen) for k, v in value.items()}
            else:
                out[key] = self._json_schema(value, seen)
        if node.get("nullable"):
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
            if isinstance(out.get("type"), str):
                out["type"] = [out["type"], "null"]
            elif "type" not in out:
                out = {"anyOf": [out, {"type": "null"}]}
        return out


def _is_datetime(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


def _format_checker() -> jsonschema.FormatChecker:
    """RFC 3339 date-times only (a checker of its own: jsonschema's needs an optional package for them)."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("date-time")(_is_datetime)
    return checker


# --- judging ---------------------------------------------------------------------------------------------------

def judge(entries: Iterable[dict[str, Any]], contract: Contract | None = None) -> Verdicts:
    """Every exchange against the contract, and the lifecycles across them."""
    contract = contract or Contract()
    verdicts = Verdicts()
    seen_status: dict[tuple[str, str], tuple[str, int]] = {}  # (kind, id) -> (last status, seq)
    for entry in entries:
        request, response = entry["request"], entry["response"]
        line = request_line(entry)
        if not_api(request["path"]):
            continue
        if entry.get("note"):
            verdicts.skipped.append((entry.get("seq", 0), line, entry["note"]))
            continue
        matched = contract.match(request["method"], request["path"])
        seq = int(entry.get("seq", 0))
        if matched is None:
            verdicts.findings.append(Finding(seq, f"(undocumented) {request['method']} {request['path']}",
                                             "status_declared", "request",
                                             "no operation of the contract has this method and path", line))
            continue
        op_id, op, _params = matched
        verdicts.judged += 1
        status = int(response["status"])
        key, declared = contract.response(op, status)

        def found(check: str, where: str, message: str, _op: str = op_id, _seq: int = seq, _line: str = line) -> None:
            verdicts.findings.append(Finding(_seq, _op, check, where, message, _line))

        if key is None:
            found("status_declared", "status",
                  f"status {status} is not declared (declared: {', '.join(sorted(op.get('responses', {})))})")
            continue
        verdicts.count(op_id, "status_declared")
        body = json_body(response)
        schema = contract.schema(op_id, key)
        if schema is None:
            continue
        if body is None:
            if media_type(response.get("headers", {})) != "application/json" or decode_body(response["body"]).strip():
                found("response_schema", "body", f"the answer is not the JSON that status {status} declares")
            continue
        errors = _schema_errors(schema, body)
        for check in ("response_schema", "enum_known"):
            mine = [e for e in errors if e[0] == check]
            for _, where, message in mine:
                found(check, where, message)
            if not mine:
                verdicts.count(op_id, check)
        undocumented = list(_undocumented(schema, body, "body"))
        for where in undocumented:
            found("fields_documented", where, f"{where} is not a field the contract documents here")
        if not undocumented:
            verdicts.count(op_id, "fields_documented")
        for kind, obj_id, value in _lifecycle_objects(body, contract.tags.get(op_id, "")):
            previous = seen_status.get((kind, obj_id))
            seen_status[(kind, obj_id)] = (value, seq)
            if previous is None or value not in lifecycle.TABLES[kind] or previous[0] not in lifecycle.TABLES[kind]:
                continue
            if lifecycle.is_reachable(kind, previous[0], value):
                verdicts.count(op_id, "lifecycle_order")
            else:
                found("lifecycle_order", _status_path(body, obj_id),
                      f"{kind} {obj_id} went from {previous[0]} (exchange #{previous[1]}) to {value}, which the "
                      "documented lifecycle does not allow")
    return verdicts


def _schema_errors(schema: dict[str, Any], body: Any) -> list[tuple[str, str, str]]:
    validator = jsonschema.Draft4Validator(schema, format_checker=_format_checker())
    out = []
    for error in validator.iter_errors(body):
        leaf = error
        if error.validator in ("anyOf", "oneOf") and error.context:
            leaf = jsonschema.exceptions.best_match(error.context) or error
        where = "body" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in leaf.absolute_path)
        if leaf.validator == "required":  # the field that is missing, not the object that misses it
            missing = re.match(r"'(.+)' is a required property", leaf.message)
            where += f".{missing.group(1)}" if missing else ""
        if leaf.validator == "enum":
            out.append(("enum_known", where, f"{where}: {_short(leaf.instance)} is not one of the documented values "
                                             f"({', '.join(str(v) for v in leaf.validator_value if v is not None)})"))
        else:
            out.append(("response_schema", where, f"{where}: {leaf.message[:300]}"))
    return out


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _branches(schema: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(schema, dict):
        return
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, ()):
            yield from _branches(sub)


def _undocumented(schema: Any, value: Any, where: str) -> Iterator[str]:
    """The fields of ``value`` that ``schema`` names nowhere (objects with named properties only; a free-form
    object or a map is not judged)."""
    branches = list(_branches(schema))
    if isinstance(value, dict):
        named: dict[str, list[Any]] = {}
        free: list[Any] = []
        closed = False
        for branch in branches:
            if "properties" in branch:
                closed = True
                for k, v in branch["properties"].items():
                    named.setdefault(k, []).append(v)
            if isinstance(branch.get("additionalProperties"), dict):
                free.append(branch["additionalProperties"])
            elif branch.get("additionalProperties") is True or (branch.get("type") == "object"
                                                                 and "properties" not in branch):
                return  # free-form
        if not closed and not free:
            return
        for k, v in value.items():
            if k in named:
                for sub in named[k]:
                    yield from _undocumented(sub, v, f"{where}.{k}")
            elif free:
                for sub in free:
                    yield from _undocumented(sub, v, f"{where}.{k}")
            else:
                yield f"{where}.{k}"
    elif isinstance(value, list):
        items = [b["items"] for b in branches if isinstance(b.get("items"), dict)]
        for i, v in enumerate(value):
            for sub in items:
                yield from _undocumented(sub, v, f"{where}[{i}]")


def _lifecycle_objects(body: Any, tag: str) -> Iterator[tuple[str, str, str]]:
    """(kind, id, status) of the objects an answer shows: the answer itself, or the items of a list."""
    candidates: list[Any] = body["data"] if isinstance(body, dict) and isinstance(body.get("data"), list) else [body]
    for obj in candidates:
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not isinstance(obj.get("status"), str):
            continue
        status = obj["status"]
        kind = next((k for prefix, k in _KINDS if status.startswith(prefix)), None)
        if kind is None and tag == "Shaping":
            kind = "shaping job"
        if kind is not None:
            yield kind, obj["id"], status


def _status_path(body: Any, obj_id: str) -> str:
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        for i, obj in enumerate(body["data"]):
            if isinstance(obj, dict) and obj.get("id") == obj_id:
                return f"body.data[{i}].status"
    return "body.status"
