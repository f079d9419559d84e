"""Named scenarios: seed states built by replaying API calls (``fixtures/scenarios/NAME.yaml``).

A scenario is data: a description, the API token whose project it fills, optional clock settings
and fault rules, and a list of steps. A step calls one operation of ``openapi.yaml`` by its
operationId (``call``, ``path``, ``query``, ``body``, ``save``), advances the clock (``advance``),
or repeats nested steps (``repeat``, ``steps``). Strings like ``"{s1.id}"`` refer to saved answers.
Every request body and every answer is validated against the spec's schemas while loading, so a
scenario can never seed a state the real API could not produce.

Loaded with ``serve --scenario NAME`` (or ``--scenario path/to/file.yaml``) or
``POST /_emulator/scenarios/NAME``. The named scenarios ship inside the package (the top-level
``fixtures/``, found through :mod:`emulator.fixture_files`), so an installed emulator has them too.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson
import yaml
from connexion.json_schema import Draft4RequestValidator, Draft4ResponseValidator, resolve_refs

from emulator import fixture_files, spec
from emulator.api import handler_for
from emulator.api.request import Request
from emulator.config import ConfigError, load_data_file
from emulator.errors import ApiError
from emulator.faults import FaultError
from emulator.runtime import Runtime

_REF = re.compile(r"\{([A-Za-z_][\w-]*)((?:\.[\w-]+)+)\}")


class ScenarioError(ValueError):
    pass


def available() -> dict[str, str]:
    out = {}
    for name in fixture_files.names("scenarios"):
        path = fixture_files.named("scenarios", name)
        assert path is not None
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out[name] = str(doc.get("description", "")).strip()
    return out


class _Operations:
    """operationId -> (method, path template, request schema, 200 schema), from the resolved spec."""

    def __init__(self, spec: dict[str, Any]) -> None:
        resolved = resolve_refs(spec)
        self.ops: dict[str, tuple[str, str, Any, Any]] = {}
        for path, item in resolved["paths"].items():
            for method, op in item.items():
                if not isinstance(op, dict) or "operationId" not in op:
                    continue
                body = (((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {})
                ok = (((op.get("responses") or {}).get("200") or {}).get("content") or {}).get("application/json")
                self.ops[op["operationId"]] = (method.upper(), path, body.get("schema"), (ok or {}).get("schema"))


@functools.cache
def _operations() -> _Operations:
    return _Operations(spec.load_spec(spec.VENDOR))


def read(name: str) -> dict[str, Any]:
    """A named scenario, or a scenario file when ``name`` is a path to a YAML/JSON file."""
    named = fixture_files.named("scenarios", name)
    if named is not None:
        try:
            doc = yaml.safe_load(named.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ScenarioError(f"scenario {name}: not valid YAML: {exc}") from exc
    elif name.endswith((".yaml", ".yml", ".json")):
        try:
            doc = load_data_file(name, "scenario")
        except ConfigError as exc:
            raise ScenarioError(str(exc)) from exc
    else:
        raise ScenarioError(f"no scenario {name!r}; available: {', '.join(available())} (or a path to a .yaml file)")
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ScenarioError(f"scenario {name}: the document must be a mapping")
    return doc


def load(runtime: Runtime, name: str) -> dict[str, Any]:
    doc = read(name)
    token = str(doc.get("token") or "demo-key")
    principal = runtime.principal_for(token)
    if principal is None:
        raise ScenarioError(f"scenario token {token!r} is not in the tokens file")
    runtime.store.reset(principal.project)
    clock = doc.get("clock") or {}
    if clock:
        try:
            runtime.clock.configure(mode=clock.get("mode"), speed=clock.get("speed"))
        except ValueError as exc:
            raise ScenarioError(f"scenario {name}: clock: {exc}") from exc
    if doc.get("faults"):
        runtime.faults.clear()
        try:
            runtime.faults.load(doc["faults"])
        except FaultError as exc:
            raise ScenarioError(f"scenario {name}: {exc}") from exc
    ops = _operations()
    saved: dict[str, Any] = {}
    counter = [0]
    _run(runtime, ops, principal, doc.get("steps") or [], saved, counter, name)
    return {"scenario": name, "token": token, "saved": {k: v.get("id") for k, v in saved.items()
                                                         if isinstance(v, dict) and "id" in v}}


def _run(runtime: Runtime, ops: _Operations, principal: Any, steps: list[Any], saved: dict[str, Any],
         counter: list[int], name: str) -> None:
    for i, step in enumerate(steps):
        where = f"scenario {name} step {i + 1}"
        if not isinstance(step, dict):
            raise ScenarioError(f"{where}: a step is a mapping")
        if "advance" in step:
            try:
                runtime.clock.advance(float(step["advance"]))
            except (TypeError, ValueError) as exc:
                raise ScenarioError(f"{where}: advance: {exc}") from exc
        elif "repeat" in step:
            if not isinstance(step["repeat"], int) or not 0 <= step["repeat"] <= 10_000:
                raise ScenarioError(f"{where}: repeat must be an integer within 0-10000")
            for _ in range(step["repeat"]):
                _run(runtime, ops, principal, step.get("steps") or [], saved, counter, name)
        elif "call" in step:
            step = _substitute(step, saved, where)  # once, so the call and its effect see the same ids
            result = _call(runtime, ops, principal, step, counter, where)
            if step.get("effect"):
                # A fault effect (see emulator.faults) on what the call made.
                runtime.apply_fault_effect(principal, step["effect"], step["call"], step.get("path") or {},
                                           step.get("body"), result)
            if step.get("save"):
                saved[str(step["save"])] = result
        else:
            raise ScenarioError(f"{where}: a step needs one of call, advance, repeat")


def _substitute(value: Any, saved: dict[str, Any], where: str) -> Any:
    if isinstance(value, str):
        def ref(m: re.Match[str]) -> str:
            obj: Any = saved.get(m.group(1))
            for part in m.group(2).strip(".").split("."):
                if isinstance(obj, list) and part.isdigit():
                    obj = obj[int(part)]
                elif isinstance(obj, dict) and part in obj:
                    obj = obj[part]
                else:
                    raise ScenarioError(f"{where}: cannot resolve {m.group(0)}")
            return str(obj)

        return _REF.sub(ref, value)
    if isinstance(value, list):
        return [_substitute(v, saved, where) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, saved, where) for k, v in value.items()}
    return value


def _call(runtime: Runtime, ops: _Operations, principal: Any, step: dict[str, Any], counter: list[int],
          where: str) -> Any:
    operation_id = step["call"]
    if operation_id not in ops.ops:
        raise ScenarioError(f"{where}: no operation {operation_id!r} in openapi.yaml")
    method, _template, req_schema, resp_schema = ops.ops[operation_id]
    body = step.get("body")
    if body is not None and req_schema is not None:
        errors = sorted(Draft4RequestValidator(req_schema).iter_errors(body), key=str)
        if errors:
            raise ScenarioError(f"{where}: body does not match the {operation_id} request schema: {errors[0].message}")
    counter[0] += 1
    headers = {"idempotency-key": f"scenario-{counter[0]}"}
    query = {k: str(v) for k, v in (step.get("query") or {}).items()}
    request = Request(runtime, principal, operation_id, step.get("path") or {}, query, headers, body,
                      f"http://{runtime.config.host}:{runtime.config.port}", method)
    handler = handler_for(operation_id)
    assert handler is not None
    try:
        result = handler(request)
    except ApiError as exc:
        raise ScenarioError(f"{where}: {operation_id} answered {exc.status}: {exc.message}") from exc
    raw = result[1]  # handlers answer a dict, or JSON bytes they rendered once
    payload = orjson.loads(raw if isinstance(raw, bytes) else orjson.dumps(raw))
    if resp_schema is not None:
        errors = sorted(Draft4ResponseValidator(resp_schema).iter_errors(payload), key=str)
        if errors:
            raise ScenarioError(f"{where}: the answer of {operation_id} does not match its schema: {errors[0].message}")
    return payload


class Library:
    """The scenario library as the control plane sees it (:class:`emulator.runtime.ScenarioLibrary`)."""

    @staticmethod
    def available() -> dict[str, str]:
        return available()

    @staticmethod
    def load(runtime: Runtime, name: str) -> dict[str, Any]:
        return load(runtime, name)
