"""Checks of the OpenAPI document itself (openapi.yaml).

- it is a valid OpenAPI 3.0.x document;
- it declares exactly the 43 (method, path, operationId, tag) rows of docs/operation-ids.md;
- every `example` / `default` validates against its schema (OpenAPI 3.0 semantics, $refs resolved);
- every operation has the ErrorData error responses, bearer auth, a summary and a description;
- the conventions the emulator and the SDK rely on (Idempotency-Key, body-less POSTs, int64 encoding,
  comma-separated list filters written as strings, links) hold;
- the vendor's own defaults and W&B field lengths (docs/api-surface.md, section G) stand in it, with their
  source, and are the values the emulator uses (emulator/defaults.py).

The checkers are plain functions returning lists of problems, so the self-tests at the bottom can prove
that they reject deliberately broken copies of the document.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT4

ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = ROOT / "openapi.yaml"
OPERATION_IDS_DOC = ROOT / "docs" / "operation-ids.md"
SPEC_URI = "urn:together-rl-emulator:openapi"

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ELLIPSIS_PREFIX = "/v1/rl/training-sessions/{session_id}"
INT64_PATTERN = "^-?[0-9]+$"

SUBMIT_OPERATIONS = {
    "createForwardBackward", "createCustomForwardBackward", "createOptimStep", "createWeightsSync",
    "createSample", "createInferenceCheckpoint", "createTrainingCheckpoint",
}
BODYLESS_POSTS = {
    "stopModelResources", "stopSession", "createInferenceCheckpoint", "createTrainingCheckpoint",
    "createPayloadUploadUrl", "createPayloadDownloadUrl", "cancelShapingJob", "preprocessFile",
}
# The one request body that is not JSON: the Files API's upload form, as the SDK sends it; and its two successes
# that are not a JSON 200: the upload's 302 (to the presigned URL) and a file's bytes.
FORM_BODIES = {"uploadFile": "multipart/form-data"}
NON_JSON_SUCCESS = {"uploadFile": ("302", "application/json"), "getFileContent": ("200", "application/octet-stream")}
LIST_FILTERS = {("listModelResources", "status"), ("listSessions", "status")}
# The Files API's schemas (SDK: together.types.file_*), whose integers are plain JSON numbers.
FILES_SCHEMAS = {"FileResponse", "FileValidationReport"}


# ----------------------------------------------------------------------------------------------- loading
def load_spec() -> dict:
    with SPEC_PATH.open() as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def spec() -> dict:
    return load_spec()


def parse_operation_table(text: str) -> set[tuple[str, str, str, str]]:
    """(METHOD, path, operationId, tag) rows of the markdown table in docs/operation-ids.md."""
    rows = set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        _, method, path, op_id, tag = cells[:5]
        if path.startswith("..."):
            path = ELLIPSIS_PREFIX + path[3:]
            # rows 12-13 write `.../{session_id}/operations/...` although `...` already ends in {session_id}
            path = path.replace("{session_id}/{session_id}", "{session_id}")
        rows.add((method.upper(), path, op_id, tag))
    return rows


def iter_operations(spec: dict) -> Iterator[tuple[str, str, dict, dict]]:
    """(path, method, path item, operation) for every operation."""
    for path, item in spec["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                yield path, method, item, item[method]


def resolve(spec: dict, node: Any) -> Any:
    """Follow local `$ref`s until a non-reference node is reached."""
    seen = set()
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if ref in seen or not ref.startswith("#/"):
            raise ValueError(f"unresolvable reference {ref}")
        seen.add(ref)
        target: Any = spec
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def operation_parameters(spec: dict, item: dict, operation: dict) -> dict[tuple[str, str], dict]:
    params = {}
    for raw in list(item.get("parameters", [])) + list(operation.get("parameters", [])):
        p = resolve(spec, raw)
        params[(p["in"], p["name"])] = p
    return params


# ----------------------------------------------------------------------------------------------- examples
def _esc(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _walk_schema(schema: Any, ptr: str) -> Iterator[tuple[str, str, Any]]:
    """(schema pointer, value pointer, value) for each example/default inside a schema object."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return
    for key in ("example", "default"):
        if key in schema:
            yield ptr, f"{ptr}/{key}", schema[key]
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk_schema(sub, f"{ptr}/properties/{_esc(name)}")
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            yield from _walk_schema(schema[key], f"{ptr}/{key}")
    for key in ("allOf", "oneOf", "anyOf"):
        for i, sub in enumerate(schema.get(key) or []):
            yield from _walk_schema(sub, f"{ptr}/{key}/{i}")


def iter_examples(spec: dict) -> Iterator[tuple[str, str, Any]]:
    """Every example and default: component schemas (recursively), parameters and media types."""
    def walk(node: Any, ptr: str) -> Iterator[tuple[str, str, Any]]:
        if isinstance(node, dict):
            if "schema" in node and isinstance(node["schema"], dict):  # parameter or media type object
                if "example" in node:
                    yield f"{ptr}/schema", f"{ptr}/example", node["example"]
                for name, ex in (node.get("examples") or {}).items():
                    ex = resolve(spec, ex)
                    if isinstance(ex, dict) and "value" in ex:
                        yield f"{ptr}/schema", f"{ptr}/examples/{_esc(name)}/value", ex["value"]
                yield from _walk_schema(node["schema"], f"{ptr}/schema")
            for key, value in node.items():
                if key in ("schema", "example", "examples"):
                    continue
                if ptr == "/components" and key == "schemas":
                    for name, sub in value.items():
                        yield from _walk_schema(sub, f"/components/schemas/{_esc(name)}")
                    continue
                yield from walk(value, f"{ptr}/{_esc(key)}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{ptr}/{i}")

    yield from walk(spec, "")


def example_errors(spec: dict) -> list[str]:
    problems = []
    registry = Registry().with_resource(SPEC_URI, Resource.from_contents(spec, default_specification=DRAFT4))
    for schema_ptr, value_ptr, value in iter_examples(spec):
        validator = OAS30Validator({"$ref": f"{SPEC_URI}#{schema_ptr}"}, registry=registry,
                                   format_checker=oas30_format_checker)
        for err in validator.iter_errors(value):
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            problems.append(f"{value_ptr}: at {where}: {err.message}")
    return problems


def missing_object_examples(spec: dict) -> list[str]:
    return [name for name, schema in spec["components"]["schemas"].items()
            if schema.get("type") == "object" and "example" not in schema]


# ------------------------------------------------------------------------------------------- other checkers
def error_response_problems(spec: dict) -> list[str]:
    problems = []
    error_ref = "#/components/schemas/ErrorData"

    def is_error_data(resp: Any) -> bool:
        resp = resolve(spec, resp)
        schema = (resp.get("content") or {}).get("application/json", {}).get("schema", {})
        schema = resolve(spec, schema) if schema.get("$ref", error_ref) != error_ref else schema
        # (an ErrorData extended with fields of its own: the Files API's 409 adds file_id)
        return schema.get("$ref") == error_ref or {"$ref": error_ref} in schema.get("allOf", [])

    for path, _method, _item, op in iter_operations(spec):
        op_id = op.get("operationId")
        responses = op.get("responses", {})
        expected = ["default", "400", "401"]
        if "{" in path:
            expected.append("404")
        if op_id in ("createSession", "getSupportedModels"):  # the cap; the vendor's spec declares one on the catalog
            expected.append("429")
        if op_id == "createShapingJob":
            expected.append("402")
        for code in expected:
            if code not in responses:
                problems.append(f"{op_id}: no {code} response")
            elif not is_error_data(responses[code]):
                problems.append(f"{op_id}: {code} response is not application/json ErrorData")
        for code, resp in responses.items():
            if code != "default" and not code.startswith(("2", "3")) and not is_error_data(resp):
                problems.append(f"{op_id}: {code} response is not ErrorData")
        success, media = NON_JSON_SUCCESS.get(op_id, ("200", "application/json"))
        ok = resolve(spec, responses.get(success, {}))
        if not (ok.get("content") or {}).get(media, {}).get("schema"):
            problems.append(f"{op_id}: {success} response has no {media} schema")
    return problems


def security_problems(spec: dict) -> list[str]:
    problems = []
    scheme = spec.get("components", {}).get("securitySchemes", {}).get("bearerAuth")
    if scheme != {**(scheme or {}), "type": "http", "scheme": "bearer"}:
        problems.append(f"components.securitySchemes.bearerAuth is not http bearer: {scheme!r}")
    if spec.get("security") != [{"bearerAuth": []}]:
        problems.append(f"global security is {spec.get('security')!r}, expected [{{bearerAuth: []}}]")
    for _path, _method, _item, op in iter_operations(spec):
        if "security" in op and op["security"] != [{"bearerAuth": []}]:
            problems.append(f"{op['operationId']} overrides security with {op['security']!r}")
    return problems


def ref_problems(spec: dict) -> list[str]:
    problems = []

    def walk(node: Any, ptr: str) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                try:
                    resolve(spec, {"$ref": node["$ref"]})
                except (KeyError, ValueError, TypeError):
                    problems.append(f"{ptr}: dangling $ref {node['$ref']}")
            for k, v in node.items():
                if k not in ("example", "default", "enum"):
                    walk(v, f"{ptr}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{ptr}/{i}")

    walk(spec, "")
    return problems


def _schema_nodes(spec: dict) -> Iterator[tuple[str, dict]]:
    def walk(schema: Any, ptr: str) -> Iterator[tuple[str, dict]]:
        if not isinstance(schema, dict) or "$ref" in schema:
            return
        yield ptr, schema
        for name, sub in (schema.get("properties") or {}).items():
            yield from walk(sub, f"{ptr}.{name}")
        for key in ("items", "additionalProperties", "not"):
            if isinstance(schema.get(key), dict):
                yield from walk(schema[key], f"{ptr}[{key}]")
        for key in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(schema.get(key) or []):
                yield from walk(sub, f"{ptr}[{key}{i}]")

    for name, schema in spec["components"]["schemas"].items():
        yield from walk(schema, name)


def referenced_schemas(spec: dict, roots: list[Any]) -> set[str]:
    """Names of component schemas reachable from the given nodes."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in seen:
                    seen.add(name)
                    stack.append(spec["components"]["schemas"][name])
            stack.extend(v for k, v in node.items() if k not in ("example", "default", "enum"))
        elif isinstance(node, list):
            stack.extend(node)
    return seen


# =============================================================================================== tests
def test_spec_is_valid_openapi(spec):
    validate(spec)


def test_declares_openapi_3_0(spec):
    assert isinstance(spec["openapi"], str)
    assert re.fullmatch(r"3\.0\.\d+", spec["openapi"]), spec["openapi"]


def test_servers_loopback_first(spec):
    urls = [s["url"] for s in spec["servers"]]
    assert urls[:2] == ["http://127.0.0.1:8765", "https://api.together.ai"]
    assert "emulator" in spec["servers"][0]["description"].lower()


def test_operation_table_parses_37_rows():
    rows = parse_operation_table(OPERATION_IDS_DOC.read_text())
    assert len(rows) == 43
    assert len({r[2] for r in rows}) == 43


def test_operations_match_operation_ids_doc(spec):
    expected = parse_operation_table(OPERATION_IDS_DOC.read_text())
    actual = {(method.upper(), path, op.get("operationId"), (op.get("tags") or [None])[0])
              for path, method, _item, op in iter_operations(spec)}
    missing = sorted(expected - actual)
    extra = sorted(actual - expected)
    assert not missing and not extra, f"missing from spec: {missing}\nnot in docs/operation-ids.md: {extra}"
    assert all(len(op.get("tags", [])) == 1 for _p, _m, _i, op in iter_operations(spec))


def test_every_operation_has_summary_and_description(spec):
    bad = [op["operationId"] for _p, _m, _i, op in iter_operations(spec)
           if len(op.get("summary", "")) < 5 or len(op.get("description", "")) < 20]
    assert not bad


def test_all_refs_resolve(spec):
    assert not ref_problems(spec)


def test_every_object_component_schema_has_an_example(spec):
    assert not missing_object_examples(spec)


def test_examples_validate_against_their_schemas(spec):
    found = list(iter_examples(spec))
    # sanity: the walk really reaches component, nested, parameter examples and defaults
    pointers = {value_ptr for _s, value_ptr, _v in found}
    assert "/components/schemas/Session/example" in pointers
    assert "/components/schemas/ErrorData/properties/error/example" in pointers
    assert "/components/parameters/IdempotencyKey/example" in pointers
    assert "/components/parameters/Limit/schema/default" in pointers
    assert len(found) > len(spec["components"]["schemas"])
    problems = example_errors(spec)
    assert not problems, "examples that do not validate:\n" + "\n".join(problems)


def test_every_operation_has_error_data_responses(spec):
    problems = error_response_problems(spec)
    assert not problems, "\n".join(problems)


def test_bearer_auth_everywhere(spec):
    problems = security_problems(spec)
    assert not problems, "\n".join(problems)


def test_error_data_shape(spec):
    ed = spec["components"]["schemas"]["ErrorData"]
    assert ed["required"] == ["error"]
    inner = ed["properties"]["error"]
    assert set(inner["required"]) == {"message", "type"}
    assert set(inner["properties"]) == {"message", "type", "param", "code"}
    for key in ("param", "code"):
        assert inner["properties"][key] == {**inner["properties"][key], "type": "string", "nullable": True}


def test_idempotency_key_exactly_on_operation_submits(spec):
    with_key = set()
    for _path, _method, item, op in iter_operations(spec):
        header = operation_parameters(spec, item, op).get(("header", "Idempotency-Key"))
        if header is None:
            continue
        with_key.add(op["operationId"])
        assert header["required"] is True
        assert header["schema"] == {**header["schema"], "type": "string", "minLength": 1, "maxLength": 255}
    assert with_key == SUBMIT_OPERATIONS


def test_bodyless_posts_do_not_require_a_body(spec):
    ops = {op["operationId"]: op for _p, _m, _i, op in iter_operations(spec)}
    for op_id in BODYLESS_POSTS:
        body = ops[op_id].get("requestBody")
        assert body is None or resolve(spec, body).get("required", False) is False, op_id


def test_request_bodies_are_json_and_open(spec):
    """Request schemas never forbid extra properties: the SDK sends extras such as `payload_id`."""
    roots = []
    for _p, _m, _i, op in iter_operations(spec):
        if "requestBody" in op:
            content = resolve(spec, op["requestBody"])["content"]
            assert set(content) == {FORM_BODIES.get(op["operationId"], "application/json")}, op["operationId"]
            roots.append(content)
    request_schemas = referenced_schemas(spec, roots)
    assert "OperationForwardBackwardParams" in request_schemas and "LoraConfigParam" in request_schemas
    closed = [ptr for ptr, node in _schema_nodes(spec)
              if ptr.split(".")[0].split("[")[0] in request_schemas
              and node.get("additionalProperties") is False]
    assert not closed


def test_int64_encoding(spec):
    """int64: `type: string, format: int64` + pattern in responses, string or integer in requests."""
    schemas = spec["components"]["schemas"]
    assert schemas["Int64Input"]["oneOf"][0] == {**schemas["Int64Input"]["oneOf"][0], "type": "integer",
                                                 "format": "int64"}
    assert schemas["Int64Input"]["oneOf"][1] == {"type": "string", "pattern": INT64_PATTERN}
    for ptr, node in _schema_nodes(spec):
        if ptr.split(".")[0] in FILES_SCHEMAS:  # not protobuf-mapped: int64 values are JSON numbers
            assert node.get("format") != "int64" or node.get("type") == "integer", ptr
        elif node.get("format") == "int64" and not ptr.startswith(("Int64Input", "NullableInt64Input")):
            assert node.get("type") == "string" and node.get("pattern") == INT64_PATTERN, ptr
    # spot checks of the int64 fields of docs/api-surface.md 0.1
    for name, field in [("Session", "step"), ("OptimStepResult", "step"),
                        ("WeightsSyncResult", "weights_version"), ("Checkpoint", "step"),
                        ("InferenceCheckpoint", "step"), ("TrainingCheckpoint", "step"),
                        ("CheckpointFile", "size"), ("PolicyState", "trainer_step"), ("LoraConfig", "seed")]:
        assert schemas[name]["properties"][field]["format"] == "int64", (name, field)
    assert schemas["SampledSequence"]["properties"]["tokens"]["items"]["format"] == "int64"
    int64_input = {"$ref": "#/components/schemas/Int64Input"}
    assert schemas["EncodedTextChunk"]["properties"]["tokens"]["items"] == int64_input
    assert schemas["SamplingParams"]["properties"]["seed"] == int64_input


INTEGER_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def integer_problems(spec: dict) -> list[str]:
    """Every integer declares its width and explicit bounds inside it. Schemathesis draws integers inside the
    width that `format` implies, but the server's validators ignore `format`: without the keywords a value
    past the width would be schema-valid to one and refused by the other. The widths come from the SDK: it
    types each int64 field `Union[str, int]` (the protobuf JSON mapping writes int64 as a string) and the
    others plain `int`, which that mapping writes only for 32-bit fields [inferred]."""
    problems = []
    nodes = list(_schema_nodes(spec))
    for _path, _method, item, op in iter_operations(spec):
        for (where, name), param in operation_parameters(spec, item, op).items():
            nodes.append((f"{op['operationId']} {where} {name}", param.get("schema", {})))
    for ptr, node in nodes:
        if node.get("type") != "integer":
            continue
        bounds = INTEGER_RANGES.get(node.get("format"))
        if bounds is None:
            problems.append(f"{ptr}: integer without format int32 or int64")
            continue
        low, high = node.get("minimum"), node.get("maximum")
        if not (isinstance(low, int) and isinstance(high, int) and bounds[0] <= low <= high <= bounds[1]):
            problems.append(f"{ptr}: bounds {low}..{high} not inside {node['format']}")
    return problems


def test_every_integer_has_a_width_and_bounds_inside_it(spec):
    assert integer_problems(spec) == []
    schemas = spec["components"]["schemas"]
    # the fields of issue 30: a huge integer there is out of bounds, not "not of type 'integer'"
    for name in ("TensorDataParam", "TensorData"):
        for field in ("shape", "sparse_col_indices", "sparse_crow_indices"):
            assert schemas[name]["properties"][field]["items"]["format"] == "int32", (name, field)
    broken = copy.deepcopy(spec)
    del broken["components"]["schemas"]["TensorDataParam"]["properties"]["shape"]["items"]["maximum"]
    broken["components"]["parameters"]["Limit"]["schema"]["format"] = "int64"
    broken["components"]["parameters"]["Limit"]["schema"]["maximum"] = 2**63
    assert sorted(integer_problems(broken)) == [
        "TensorDataParam.shape[items]: bounds 0..None not inside int32",
        *sorted(f"{op} query limit: bounds 1..{2**63} not inside int64"
                for op in ("listCheckpoints", "listModelResources", "listSessions")),
    ]


def test_timestamps_are_date_time(spec):
    for ptr, node in _schema_nodes(spec):
        leaf = ptr.rsplit(".", 1)[-1]
        if ptr == "FileResponse.created_at":  # the Files API answers Unix seconds (its docs and the SDK's int)
            assert node.get("type") == "integer", ptr
        elif leaf.endswith("_at"):
            assert node.get("type") == "string" and node.get("format") == "date-time", ptr


def test_list_filters_are_comma_lists_written_as_on_the_wire(spec):
    """The filters of several values take the SDK's comma format (`status=A,B`; `status=` for an empty list). No
    query parameter is an array: in form style `[]` and `[""]` are one request, `status=`, so a valid empty list
    and an invalid one could not be told apart (stock Schemathesis' ST201 on a random seed). Each is a string whose
    pattern (ECMA `$`: the end of the text) takes exactly the comma-joined lists of its statuses, none included;
    `x-comma-separated` says which list it is."""
    for _path, _method, item, op in iter_operations(spec):
        for (where, name), p in operation_parameters(spec, item, op).items():
            if where == "query":
                assert resolve(spec, p.get("schema", {})).get("type") != "array", (op["operationId"], name)
    statuses = {"listModelResources": resolve(spec, {"$ref": "#/components/schemas/ModelResourcesStatus"})["enum"],
                "listSessions": [s for s in resolve(spec, {"$ref": "#/components/schemas/SessionStatus"})["enum"]
                                 if s != "TRAINING_SESSION_STATUS_UNSPECIFIED"]}
    ops = {op["operationId"]: (item, op) for _p, _m, item, op in iter_operations(spec)}
    for op_id, name in LIST_FILTERS:
        param = operation_parameters(spec, *ops[op_id])[("query", name)]
        schema = param["schema"]
        assert schema["type"] == "string" and "style" not in param and "explode" not in param, param
        listed = param["x-comma-separated"]  # the list it is (tests/test_sdk_fidelity.py holds it to the SDK's)
        assert listed["type"] == "array" and sorted(resolve(spec, listed["items"])["enum"]) == sorted(statuses[op_id])
        # (none of these texts ends with a newline, where Python's `$` and ECMA's differ)
        takes = re.compile(schema["pattern"]).search
        valid = statuses[op_id]
        one = valid[0]
        for text in ["", *valid, ",".join(valid), f"{one},{one}", param["example"]]:
            assert takes(text), (op_id, text)
        for text in [f"{one},", f",{one}", f"{one},,{one}", f"{one} ", one.lower(), one[:-1], "x",
                     one.rsplit("_", 1)[0] + "_UNSPECIFIED", f"{one},{one}x"]:
            assert not takes(text), (op_id, text)
        assert f"`{name}=`" in param["description"] and "comma" in param["description"], param["description"]


def test_list_limits(spec):
    for _path, _method, item, op in iter_operations(spec):
        limit = operation_parameters(spec, item, op).get(("query", "limit"))
        if limit is not None:
            assert limit["schema"] == {"type": "integer", "format": "int32", "minimum": 1, "maximum": 100,
                                       "default": 20}


def test_links_point_at_real_operations_and_parameters(spec):
    ops = {op["operationId"]: (item, op) for _p, _m, item, op in iter_operations(spec)}
    link_count = 0
    for _path, _method, _item, op in iter_operations(spec):
        for _code, resp in op["responses"].items():
            for name, link in (resolve(spec, resp).get("links") or {}).items():
                link_count += 1
                assert link["operationId"] in ops, (op["operationId"], name)
                t_item, t_op = ops[link["operationId"]]
                names = {n for (_w, n) in operation_parameters(spec, t_item, t_op)}
                for param, expr in (link.get("parameters") or {}).items():
                    assert param.split(".")[-1] in names, (op["operationId"], name, param)
                    assert expr.startswith(("$response.body#/", "$request.path.")), expr
                if "requestBody" in link:
                    assert "requestBody" in t_op, (op["operationId"], name)
    assert link_count >= 20
    create_links = ops["createSession"][1]["responses"]["200"]["links"]
    assert SUBMIT_OPERATIONS <= {lk["operationId"] for lk in create_links.values()}


# ----------------------------------------------------------------------------------------- vendor defaults
# docs/api-surface.md, section G, written out here from that table (not from emulator/defaults.py):
# (schema, property, default).
SECTION_G_DEFAULTS = [
    *((schema, field, value) for schema in ("LoraConfigParam", "LoraConfig")
      for field, value in (("rank", 32), ("alpha", 64), ("dropout", 0.0), ("train_unembed", True))),
    ("SamplingParams", "max_tokens", 512), ("SamplingParams", "temperature", 1.0), ("SamplingParams", "top_p", 1.0),
    ("SamplingParams", "top_k", -1), ("OperationSampleParams", "num_samples", 1),
    ("AdamParams", "beta1", 0.9), ("AdamParams", "beta2", 0.95), ("AdamParams", "eps", 1e-8),
    ("AdamParams", "weight_decay", 0.0), ("AdamParams", "grad_clip_norm", 1.0),
    ("MuonParams", "momentum", 0.95), ("MuonParams", "newton_schulz_steps", 5), ("MuonParams", "weight_decay", 0.0),
    ("MuonParams", "grad_clip_norm", 1.0),
    ("GrpoLossParams", "clip_low_threshold", 0.8), ("GrpoLossParams", "clip_high_threshold", 1.2),
    ("GrpoLossParams", "beta", 0.0), ("GrpoLossParams", "agg_type", "GRPO_LOSS_AGGREGATION_TYPE_FIXED_HORIZON"),
    ("GrpoLossParams", "ratio_type", "GRPO_LOSS_RATIO_TYPE_TOKEN"),
    ("PpoLossParams", "clip_low_threshold", 0.8), ("PpoLossParams", "clip_high_threshold", 1.2),
    ("CispoLossParams", "clip_low_threshold", 0.0), ("CispoLossParams", "clip_high_threshold", 4.0),
    ("ComputeConfigParam", "num_generator_replicas", 1),
    ("ModelResourceCreateParams", "lora_enabled", True), ("ModelResourceEstimateCostParams", "lora_enabled", True),
]
# Fields the vendor's document gives no default: none may be stated.
NO_DEFAULT = [("SamplingParams", "stop"), ("SamplingParams", "seed"), ("AdamParams", "learning_rate"),
              ("MuonParams", "learning_rate")]
VENDOR_SOURCE = "together-typescript scripts/mock, 2026-08-19"
WANDB_LENGTHS = {"entity": 256, "group": 256, "project": 256, "run_id": 256, "run_name": 256, "url": 2048}


def _property(spec: dict, schema: str, field: str) -> dict:
    return resolve(spec, spec["components"]["schemas"][schema]["properties"][field])


@pytest.mark.parametrize(("schema", "field", "value"), SECTION_G_DEFAULTS)
def test_each_vendor_default_stands_in_the_spec_with_its_source(spec, schema, field, value):
    prop = _property(spec, schema, field)
    assert "default" in prop, f"{schema}.{field} states no default"
    assert prop["default"] == value and isinstance(prop["default"], bool) == isinstance(value, bool), prop["default"]
    described = prop.get("description", "") + spec["components"]["schemas"][schema].get("description", "")
    assert VENDOR_SOURCE in described, f"{schema}.{field}: the description does not name the default's source"


@pytest.mark.parametrize(("schema", "field"), NO_DEFAULT)
def test_fields_without_a_vendor_default_state_none(spec, schema, field):
    assert "default" not in _property(spec, schema, field)


@pytest.mark.parametrize("schema", ["WandbMetadata", "WandbMetadataParam"])
def test_wandb_field_lengths(spec, schema):
    props = spec["components"]["schemas"][schema]["properties"]
    assert {name: p.get("maxLength") for name, p in props.items()} == WANDB_LENGTHS


def test_the_emulator_uses_the_specs_defaults(spec):
    """emulator/defaults.py, which the simulated model, the domain and the catalog read, holds the spec's values."""
    from emulator import defaults

    tables = {"LoraConfigParam": defaults.LORA, "SamplingParams": defaults.SAMPLING, "AdamParams": defaults.ADAM,
              "MuonParams": defaults.MUON, "GrpoLossParams": defaults.GRPO, "PpoLossParams": defaults.PPO,
              "CispoLossParams": defaults.CISPO}
    stated = {(schema, field): value for schema, field, value in SECTION_G_DEFAULTS}
    for schema, table in tables.items():
        for field, value in table.items():
            assert _property(spec, schema, field)["default"] == value == stated[(schema, field)], (schema, field)
        assert set(table) == {f for s, f in stated if s == schema}, schema
    assert defaults.NUM_SAMPLES == _property(spec, "OperationSampleParams", "num_samples")["default"]
    assert defaults.MODEL_RESOURCE["num_generator_replicas"] == _property(
        spec, "ComputeConfigParam", "num_generator_replicas")["default"]
    assert defaults.MODEL_RESOURCE["lora_enabled"] == _property(
        spec, "ModelResourceCreateParams", "lora_enabled")["default"]


# =============================================================================================== self-tests
def test_self_test_example_check_rejects_broken_examples(spec):
    broken = copy.deepcopy(spec)
    schemas = broken["components"]["schemas"]
    schemas["Session"]["example"]["step"] = 3                        # int64 must be a string in responses
    del schemas["ModelResources"]["example"]["status"]                # required field missing
    schemas["Checkpoint"]["example"]["created_at"] = "yesterday"      # not a date-time
    schemas["SampleResult"]["example"]["sequences"][0]["stop_reason"] = "STOP_REASON_EOS"  # nested, bad enum
    broken["components"]["parameters"]["IdempotencyKey"]["example"] = ""  # minLength 1
    problems = "\n".join(example_errors(broken))
    for ptr in ("/components/schemas/Session/example", "/components/schemas/ModelResources/example",
                "/components/schemas/Checkpoint/example", "/components/schemas/SampleResult/example",
                "/components/parameters/IdempotencyKey/example"):
        assert ptr + ":" in problems, f"broken example at {ptr} was not reported:\n{problems}"
    assert not example_errors(spec)


def test_self_test_other_checkers_reject_broken_documents(spec):
    broken = copy.deepcopy(spec)
    get_session = broken["paths"]["/v1/rl/training-sessions/{session_id}"]["get"]
    del get_session["responses"]["default"]
    del get_session["responses"]["404"]
    del broken["paths"]["/v1/rl/supported-models"]["get"]["responses"]["429"]
    broken["paths"]["/v1/rl/checkpoints"]["get"]["security"] = []
    del broken["components"]["schemas"]["Meta"]["example"]
    assert {"getSession: no default response", "getSession: no 404 response",
            "getSupportedModels: no 429 response"} <= set(error_response_problems(broken))
    assert security_problems(broken) == ["listCheckpoints overrides security with []"]
    assert missing_object_examples(broken) == ["Meta"]
    broken["components"]["schemas"]["Session"]["properties"]["status"] = {"$ref": "#/components/schemas/Nope"}
    assert any("Nope" in p for p in ref_problems(broken))
    with pytest.raises(Unresolvable, match="Nope"):
        validate(broken)

    renamed = copy.deepcopy(spec)
    renamed["paths"]["/v1/rl/training-sessions"]["post"]["operationId"] = "createTrainingSession"
    expected = parse_operation_table(OPERATION_IDS_DOC.read_text())
    actual = {(m.upper(), p, op.get("operationId"), op["tags"][0])
              for p, m, _i, op in iter_operations(renamed)}
    assert expected - actual == {("POST", "/v1/rl/training-sessions", "createSession", "Sessions")}

    v3_1 = copy.deepcopy(spec)
    v3_1["openapi"] = "3.1.0"
    assert not re.fullmatch(r"3\.0\.\d+", v3_1["openapi"])


@pytest.mark.parametrize("name", ["openapi.yaml", "admin.yaml"])
def test_packaged_specs_pass_connexions_own_checks(name: str) -> None:
    """The emulator's start-up skips connexion's check of its packaged specs (emulator/app.py): this is it."""
    from connexion.spec import Specification

    from emulator import spec as packaged

    Specification.from_dict(packaged.load_spec(name))  # raises InvalidSpecification on a bad spec
    broken = packaged.load_spec(name)
    next(iter(broken["paths"].values()))["get" if name == "admin.yaml" else "post"]["responses"] = "nonsense"
    with pytest.raises(Exception, match="nonsense"):
        Specification.from_dict(broken)
