"""MkDocs hook: the site's reference pages, generated from the two specs at build time.

``openapi.yaml`` (the contract) and ``emulator/specs/admin.yaml`` (the control plane) become
``reference/api.md`` and ``reference/admin.md``: every operation with its parameters, request body and
responses, then every component schema with its fields, types, bounds, enums and defaults. Nothing is
copied by hand, so the reference cannot drift from the specs; tests/test_docs.py checks the pages name
every operation and schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("get", "put", "post", "patch", "delete", "head", "options")

#: (page under reference/, spec file under the root, the page's title, one line on what it is)
SPECS = [
    ("api", "openapi.yaml", "The API (openapi.yaml)",
     "The contract: Together AI's RL / post-training API as the emulator serves it and the contract suite "
     "checks it. Swagger UI of the same spec: `/docs` on a running emulator."),
    ("admin", "emulator/specs/admin.yaml", "The control plane (admin.yaml)",
     "The emulator's own `/_emulator/*` calls: clock, faults, scenarios, state, recording. Swagger UI of the "
     "same spec: `/docs/admin/` on a running emulator. The prose: [the control plane and "
     "time](../control-plane.md)."),
]


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, spec, title, intro in SPECS:
        text = render(yaml.safe_load((ROOT / spec).read_text()), title, intro, spec)
        files.append(File.generated(config, f"reference/{name}.md", content=text))
    files.append(File.generated(config, "reference/index.md", content=index()))
    return files


def index() -> str:
    lines = ["# Reference", "",
             "Generated from the specs when the site is built (`docs/hooks/reference.py`), so it always says what "
             "the specs say.", ""]
    for name, _spec, title, intro in SPECS:
        lines += [f"- [{title}]({name}.md): {intro}", ""]
    return "\n".join(lines)


# --- rendering ------------------------------------------------------------------------------------------------

def cell(text: Any) -> str:
    """One table cell: a single line, pipes escaped."""
    if text is None:
        return ""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(value: Any) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif value is None:
        value = "null"
    elif not isinstance(value, str):
        value = json.dumps(value)
    return "`" + str(value).replace("`", "'").replace("|", "\\|") + "`"


class Spec:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self.lookup(node["$ref"])
        return node

    def lookup(self, ref: str) -> Any:
        node: Any = self.doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return node

    def type_of(self, schema: Any) -> str:
        """A schema's type in one cell: a link for a named schema, item types for arrays, bounds and enums."""
        if not isinstance(schema, dict):
            return ""
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            return f"[{name}](#schema-{name.lower()})"
        for key in ("allOf", "oneOf", "anyOf"):
            if key in schema:
                sep = {"allOf": " and ", "oneOf": " or ", "anyOf": " or "}[key]
                return sep.join(self.type_of(s) for s in schema[key])
        kind = schema.get("type", "any")
        if kind == "array":
            kind = f"array of {self.type_of(schema.get('items', {}))}"
        elif kind == "object" and "additionalProperties" in schema and not schema.get("properties"):
            extra = schema["additionalProperties"]
            kind = "object" if extra is True else f"map of {self.type_of(extra) if extra else 'nothing'}"
        if "format" in schema:
            kind += f" ({schema['format']})"
        notes = []
        if "enum" in schema:
            notes.append("one of " + ", ".join(code(v) for v in schema["enum"]))
        for key, label in (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">"),
                           ("exclusiveMaximum", "<"), ("minLength", "length >="), ("maxLength", "length <="),
                           ("minItems", "items >="), ("maxItems", "items <=")):
            if key in schema and not isinstance(schema[key], bool):
                notes.append(f"{label} {schema[key]}")
        if "pattern" in schema:
            notes.append(f"pattern {code(schema['pattern'])}")
        if schema.get("nullable"):
            notes.append("nullable")
        return kind + (": " + "; ".join(notes) if notes else "")

    def fields(self, schema: Any, prefix: str = "", depth: int = 0) -> list[str]:
        """Table rows of an object's properties; inline objects nest as ``parent.child`` rows."""
        schema = schema if isinstance(schema, dict) else {}
        rows = []
        required = set(schema.get("required", []))
        for name, prop in (schema.get("properties") or {}).items():
            default = code(prop["default"]) if isinstance(prop, dict) and "default" in prop else ""
            rows.append(f"| `{prefix}{name}` | {cell(self.type_of(prop))} | {'yes' if name in required else ''} | "
                        f"{default} | {cell(prop.get('description') if isinstance(prop, dict) else '')} |")
            inner = prop.get("items", prop) if isinstance(prop, dict) else {}
            if isinstance(inner, dict) and "$ref" not in inner and inner.get("properties") and depth < 3:
                rows += self.fields(inner, f"{prefix}{name}{'[]' if inner is not prop else ''}.", depth + 1)
        for key in ("allOf", "oneOf", "anyOf"):
            for part in schema.get(key, []):
                if isinstance(part, dict) and "$ref" not in part:
                    rows += self.fields(part, prefix, depth + 1)
        return rows


FIELDS_HEAD = ["| field | type | required | default | description |", "| --- | --- | --- | --- | --- |"]


def render(doc: dict[str, Any], title: str, intro: str, source: str) -> str:
    spec = Spec(doc)
    info = doc.get("info", {})
    out = [f"# {title}", "", intro, "",
           f"Generated from `{source}` (OpenAPI {doc.get('openapi')}, `{info.get('title')}` version "
           f"{info.get('version')}) when the site is built.", ""]
    # admin.yaml's paths are relative to its server, /_emulator: show the whole path a client sends.
    servers = doc.get("servers") or [{}]
    prefix = servers[0].get("url", "") if servers[0].get("url", "").startswith("/") else ""
    ops: list[tuple[str, str, str, dict[str, Any], list[Any]]] = []
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["Operations"])[0]
                ops.append((tag, method, prefix.rstrip("/") + path, op,
                            item.get("parameters", []) + op.get("parameters", [])))
    tags = [t["name"] for t in doc.get("tags", [])] or []
    for tag, *_ in ops:
        if tag not in tags:
            tags.append(tag)
    descriptions = {t["name"]: t.get("description", "") for t in doc.get("tags", [])}
    out += ["## Operations", "", "| operation | method and path | summary |", "| --- | --- | --- |"]
    for tag in tags:
        for t, method, path, op, _ in ops:
            if t == tag:
                out.append(f"| [{op['operationId']}](#op-{op['operationId'].lower()}) | "
                           f"`{method.upper()} {path}` | {cell(op.get('summary'))} |")
    out.append("")
    for tag in tags:
        out += [f"## {tag}", ""]
        if descriptions.get(tag):
            out += [descriptions[tag].strip(), ""]
        for t, method, path, op, params in ops:
            if t == tag:
                out += operation(spec, method, path, op, params)
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### {name} {{#schema-{name.lower()}}}", ""]
            if schema.get("description"):
                out += [schema["description"].strip(), ""]
            rows = spec.fields(schema)
            if rows:
                out += FIELDS_HEAD + rows + [""]
            else:
                out += [f"Type: {spec.type_of({k: v for k, v in schema.items() if k != 'description'})}.", ""]
    return "\n".join(out) + "\n"


def operation(spec: Spec, method: str, path: str, op: dict[str, Any], params: list[Any]) -> list[str]:
    out = [f"### {op['operationId']} {{#op-{op['operationId'].lower()}}}", "", f"`{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary'].strip()}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    if params:
        out += ["Parameters:", "", "| name | in | type | required | default | description |",
                "| --- | --- | --- | --- | --- | --- |"]
        for raw in params:
            p = spec.resolve(raw)
            schema = p.get("schema", {})
            default = code(schema["default"]) if isinstance(schema, dict) and "default" in schema else ""
            out.append(f"| `{p['name']}` | {p['in']} | {cell(spec.type_of(schema))} | "
                       f"{'yes' if p.get('required') else ''} | {default} | {cell(p.get('description'))} |")
        out.append("")
    if "requestBody" in op:
        body = spec.resolve(op["requestBody"])
        for media, content in body.get("content", {}).items():
            schema = content.get("schema", {})
            required = "required" if body.get("required") else "optional"
            out += [f"Request body ({required}, `{media}`): {spec.type_of(schema)}", ""]
            if isinstance(schema, dict) and "$ref" not in schema and spec.fields(schema):
                out += FIELDS_HEAD + spec.fields(schema) + [""]
    out += ["Responses:", "", "| status | description | body |", "| --- | --- | --- |"]
    for status, raw in op.get("responses", {}).items():
        response = spec.resolve(raw)
        bodies = [spec.type_of(c.get("schema", {})) for c in (response.get("content") or {}).values()]
        out.append(f"| {status} | {cell(response.get('description'))} | {cell(', '.join(bodies))} |")
    out.append("")
    return out
