"""Named scenarios: seed states built by replaying API calls (``fixtures/scenarios/NAME.yaml``).

A scenario is data (token, clock, fault rules, steps calling operations by operationId); loading sends every
step through the emulator's own app in process, so it can never seed a state the real API could not produce.
Loaded with ``serve --scenario NAME|FILE`` or ``POST /_emulator/scenarios/NAME``, into a tenant if one is named.
"""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import yaml
from connexion.json_schema import Draft4RequestValidator, Draft4ResponseValidator, resolve_refs

from emulator import fixture_files, spec
from emulator.config import ConfigError, load_data_file
from emulator.errors import Unavailable
from emulator.http.asgi import ASGIApp, call_app
from emulator.http.faults import SCENARIO
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


class InProcessClient:
    """Requests to the emulator's app without a socket: the scenario loader's way in."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def call(self, method: str, path: str, *, token: str | None = None, body: Any = None,
                   query: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                   tenant: str | None = None) -> tuple[int, Any]:
        raw = b"" if body is None else orjson.dumps(body)
        sent = {"host": "scenario.localhost", "content-length": str(len(raw)), **(headers or {})}
        if tenant is not None:  # a control-plane call scoped to that tenant
            sent["x-emulator-tenant"] = tenant
        if body is not None:
            sent["content-type"] = "application/json"
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        admin = self.runtime.config.admin_token
        if admin and path.startswith("/_emulator"):
            sent["x-emulator-admin-token"] = admin
        query_string = urlencode(query or {}).encode()
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query_string,
                 "root_path": "", "headers": [(k.lower().encode(), v.encode()) for k, v in sent.items()],
                 "client": ("127.0.0.1", 0), "server": ("scenario.localhost", 80), SCENARIO: True}
        status, data = await call_app(self.app, scope, raw)
        return status, orjson.loads(data) if data else None


def _refused(where: str, what: str, status: int, answer: Any) -> Exception:
    error = (answer or {}).get("error") if isinstance(answer, dict) else None
    message = error.get("message") if isinstance(error, dict) else answer
    if status == 503 and isinstance(error, dict) and error.get("code") == Unavailable.code:
        # The state file took no write: the step changed nothing, and the load answers as that step did.
        return Unavailable(f"{where}: {what}: {message}")
    return ScenarioError(f"{where}: {what} answered {status}: {message}")


def token_of(doc: dict[str, Any]) -> str:
    """The API key whose tenant a scenario fills (``demo-key`` unless it names one)."""
    return str(doc.get("token") or "demo-key")


def token(name: str) -> str:
    return token_of(read(name))


async def load(client: InProcessClient, name: str, tenant: str | None = None) -> dict[str, Any]:
    """Reset the scenario's tenant (its state only) and replay the scenario into it. ``tenant``, an API key,
    replaces the scenario's own token and scopes its clock and fault rules to that tenant."""
    doc = read(name)
    token = tenant or token_of(doc)
    if client.runtime.principal_for(token) is None:
        raise ScenarioError(f"scenario token {token!r} is not in the tokens file")
    status, answer = await client.call("POST", "/_emulator/reset", body={"keep_settings": True}, tenant=token)
    if status != 200:
        raise _refused(f"scenario {name}", "the reset of its tenant", status, answer)
    clock = doc.get("clock") or {}
    if clock:
        wanted = {k: clock[k] for k in ("mode", "speed") if k in clock}
        status, answer = await client.call("POST", "/_emulator/clock", body=wanted, tenant=tenant)
        if status != 200:
            raise _refused(f"scenario {name}", "clock", status, answer)
    if doc.get("faults"):
        await client.call("DELETE", "/_emulator/faults", tenant=tenant)
        status, answer = await client.call("POST", "/_emulator/faults", body=doc["faults"], tenant=tenant)
        if status != 200:
            raise _refused(f"scenario {name}", "its fault rules", status, answer)
    run = _Run(client, _operations(), token, name, tenant)
    try:
        await run.steps(doc.get("steps") or [])
    finally:
        for rule in run.effect_rules:
            await client.call("DELETE", f"/_emulator/faults/{quote(rule, safe='')}", tenant=tenant)
    return {"scenario": name, "token": token, "saved": {k: v.get("id") for k, v in run.saved.items()
                                                         if isinstance(v, dict) and "id" in v}}


class _Run:
    def __init__(self, client: InProcessClient, ops: _Operations, token: str, name: str,
                 tenant: str | None = None) -> None:
        self.client = client
        self.ops = ops
        self.token = token
        self.name = name
        self.tenant = tenant   # the control-plane calls' scope (None: global, the classic load)
        self.saved: dict[str, Any] = {}
        self.calls = 0
        self.effect_rules: list[str] = []

    async def steps(self, steps: list[Any]) -> None:
        for i, step in enumerate(steps):
            where = f"scenario {self.name} step {i + 1}"
            if not isinstance(step, dict):
                raise ScenarioError(f"{where}: a step is a mapping")
            if "advance" in step:
                try:
                    seconds = float(step["advance"])
                except (TypeError, ValueError) as exc:
                    raise ScenarioError(f"{where}: advance: {exc}") from exc
                status, answer = await self.client.call("POST", "/_emulator/clock/advance", body={"seconds": seconds},
                                                        tenant=self.tenant)
                if status != 200:
                    raise _refused(where, "advance", status, answer)
            elif "repeat" in step:
                if not isinstance(step["repeat"], int) or not 0 <= step["repeat"] <= 10_000:
                    raise ScenarioError(f"{where}: repeat must be an integer within 0-10000")
                for _ in range(step["repeat"]):
                    await self.steps(step.get("steps") or [])
            elif "call" in step:
                step = _substitute(step, self.saved, where)  # once, so the call and its effect see the same ids
                result = await self.call(step, where)
                if step.get("save"):
                    self.saved[str(step["save"])] = result
            else:
                raise ScenarioError(f"{where}: a step needs one of call, advance, repeat")

    async def call(self, step: dict[str, Any], where: str) -> Any:
        operation_id = step["call"]
        if operation_id not in self.ops.ops:
            raise ScenarioError(f"{where}: no operation {operation_id!r} in openapi.yaml")
        method, template, req_schema, resp_schema = self.ops.ops[operation_id]
        body = step.get("body")
        if body is not None and req_schema is not None:
            errors = sorted(Draft4RequestValidator(req_schema).iter_errors(body), key=str)
            if errors:
                raise ScenarioError(f"{where}: body does not match the {operation_id} request schema: "
                                    f"{errors[0].message}")
        path_params = step.get("path") or {}
        try:
            path = template.format(**{k: quote(str(v), safe="") for k, v in path_params.items()})
        except KeyError as exc:
            raise ScenarioError(f"{where}: {operation_id} needs the path parameter {exc}") from exc
        self.calls += 1
        headers = {"idempotency-key": f"scenario-{self.calls}"}
        if step.get("effect"):
            # The step's fault effect, through the fault rules: a rule that never fires by itself, named by the
            # X-Emulator-Fault header of this one call.
            rule = f"scenario:{self.name}:{self.calls}"
            status, answer = await self.client.call(
                "POST", "/_emulator/faults", body={"name": rule, "trigger": {"first_n": 0}, "effect": step["effect"]},
                tenant=self.tenant)
            if status != 200:
                raise _refused(where, "its effect", status, answer)
            self.effect_rules.append(rule)
            headers["x-emulator-fault"] = rule
        query = {k: str(v) for k, v in (step.get("query") or {}).items()}
        status, payload = await self.client.call(method, path, token=self.token, body=body, query=query,
                                                 headers=headers)
        if status != 200:
            raise _refused(where, operation_id, status, payload)
        if resp_schema is not None:
            errors = sorted(Draft4ResponseValidator(resp_schema).iter_errors(payload), key=str)
            if errors:
                raise ScenarioError(f"{where}: the answer of {operation_id} does not match its schema: "
                                    f"{errors[0].message}")
        return payload


class Library:
    """The scenario library as the control plane sees it (:class:`emulator.runtime.ScenarioLibrary`)."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.client = InProcessClient(app, runtime)
        # project -> the scenario loaded into it last and the ids it saved: the dashboard's label for the tenant,
        # while any of those objects is still there (a reset, or another load, ends it)
        self.loaded: dict[str, tuple[str, frozenset[str]]] = {}

    @staticmethod
    def available() -> dict[str, str]:
        return available()

    async def load(self, name: str, tenant: str | None = None) -> dict[str, Any]:
        result = await load(self.client, name, tenant)
        project = self.client.runtime.tenancy.project_for_token(result["token"])
        if project is not None:
            self.loaded[project] = (name, frozenset(result["saved"].values()))
        return result
