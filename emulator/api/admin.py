"""Handlers of the control plane (``emulator/specs/admin.yaml``, served under ``/_emulator``).

Most calls can be scoped to one tenant (its API key in ``X-Emulator-Tenant`` or ``?tenant=``): its own clock
and profile, reset and seed, fault rules, events and state. Unscoped, a call acts on the global clock and
profile (which tenants without their own follow) or on the whole emulator.
"""

from __future__ import annotations

from typing import Any

from emulator import fixture_files
from emulator.api.request import Reply, Request
from emulator.clock import ClockError, parse_rfc3339, rfc3339
from emulator.config import ConfigError, load_data_file
from emulator.domain.upcoming import Upcoming
from emulator.errors import Invalid, NotFound
from emulator.faults import FaultError
from emulator.runtime import DEFAULT_RUN_SECONDS, RecordingSwitch, Runtime, ScenarioLibrary
from emulator.store import snapshot
from emulator.store.records import ScheduledAction

TENANT_HEADER = "x-emulator-tenant"
WARNING = "X-Emulator-Warning"


def _project(req: Request, token: str | None, param: str = "tenant") -> str | None:
    """The project of a tenant named by its API token (None: every tenant)."""
    if not token:
        return None
    project = req.runtime.tenancy.project_for_token(token)
    if project is None:
        raise Invalid(f"{param}: not a known API token", param=param)
    req.runtime.check_owner(project)  # a shard of a cluster acts for its own tenants only (421)
    return project


def _tenant(req: Request, body_too: bool = False) -> tuple[str, str] | None:
    """(API key, project) of the tenant the call is scoped to: ``X-Emulator-Tenant`` or ``?tenant=`` (and,
    for reset, the body's ``tenant``, its older form); None when the call is not scoped."""
    token = req.headers.get(TENANT_HEADER) or req.query_str("tenant")
    param = "X-Emulator-Tenant" if req.headers.get(TENANT_HEADER) else "tenant"
    if not token and body_too and req.json().get("tenant"):
        token = str(req.json()["tenant"])
    if not token:
        return None
    project = _project(req, token, param)
    assert project is not None
    return token, project


def admin_health(req: Request) -> Reply:
    """``ok``; ``degraded`` (503) while the state file refuses writes, naming why. No admin token needed."""
    persistence = req.runtime.persistence
    if persistence is None:
        return 200, {"status": "ok"}
    storage = persistence.status()
    return (200 if storage["ok"] else 503), {"status": "ok" if storage["ok"] else "degraded", "state_file": storage}


# --- the clock -------------------------------------------------------------------------------------------

def _at(value: Any, param: str = "now") -> float | None:
    if not value:
        return None
    try:
        return parse_rfc3339(str(value))
    except ValueError as exc:
        raise Invalid(f"{param}: not an RFC 3339 time: {exc}", param=param) from exc


def _set_clock(runtime: Runtime, project: str | None, body: dict[str, Any], where: str = "") -> None:
    at = _at(body.get("now"), f"{where}now")
    try:
        runtime.set_clock(project, mode=body.get("mode"), speed=body.get("speed"), now=at)
    except ClockError as exc:
        raise Invalid(f"{where.rstrip('.') + ': ' if where else ''}{exc}") from exc


def admin_get_clock(req: Request) -> Reply:
    tenant = _tenant(req)
    return 200, req.runtime.clocks.describe(tenant[1] if tenant else None)


def admin_set_clock(req: Request) -> Reply:
    tenant = _tenant(req)
    project = tenant[1] if tenant else None
    _set_clock(req.runtime, project, req.json())
    return 200, req.runtime.clocks.describe(project)


def admin_advance_clock(req: Request) -> Reply:
    tenant = _tenant(req)
    body = req.json()
    if ("to" in body) == ("seconds" in body):
        raise Invalid('give one of seconds (how far) or to ("next": the next pending transition)', param="to")
    if "to" in body:
        if body["to"] != "next":
            raise Invalid('to: "next" (the next pending transition)', param="to")
        project = _moving(req, tenant)
        _first, crossed = req.runtime.advance_to_next(project)
        return 200, {**req.runtime.clocks.describe(project), "crossed": crossed}
    seconds = float(body["seconds"])
    try:
        req.runtime.advance(tenant[1] if tenant else None, seconds)
    except ClockError as exc:
        raise Invalid(f"seconds: {exc}", param="seconds") from exc
    return 200, req.runtime.clocks.describe(tenant[1] if tenant else None)


def _moving(req: Request, tenant: tuple[str, str] | None) -> str | None:
    """The tenant whose time a move to the next transition moves (None: the global clock's tenants)."""
    if tenant is None and req.runtime.shard is not None:
        raise Invalid("in a cluster, name the tenant (X-Emulator-Tenant): each shard's global clock would go to "
                      "its own next transition", param="tenant")
    return tenant[1] if tenant else None


def _upcoming(u: Upcoming, now: float, project: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"at": rfc3339(u.at), "in_seconds": round(u.at - now, 3), "kind": u.kind, "id": u.id,
                           "event": u.event, "from": u.old, "to": u.new}
    if u.detail:
        out["detail"] = u.detail
    if project is not None:
        out["project"] = project
    return out


def admin_get_pending(req: Request) -> Reply:
    """Every scheduled transition in virtual-time order; scoped, with what the tenant's client waits on."""
    tenant = _tenant(req)
    project = tenant[1] if tenant else None
    now, pending = req.runtime.pending(project)
    out: dict[str, Any] = {**req.runtime.clocks.describe(project),
                           "data": [_upcoming(u, now, None if tenant else p) for p, u in pending]}
    if tenant is not None:
        waiting = req.runtime.waiting(tenant[1])
        if waiting is not None and waiting["next"] is not None:
            waiting["next"] = _upcoming(waiting["next"], now)
        out["waiting"] = waiting
    return 200, out


def admin_run_clock(req: Request) -> Reply:
    """Through the pending transitions in order until a condition holds (or nothing is pending)."""
    tenant = _tenant(req)
    body = req.json()
    project = _moving(req, tenant)
    until = body.get("until")
    condition = None
    if until is not None:
        if not isinstance(until, dict) or not isinstance(until.get("id"), str):
            raise Invalid("until: {id, status} or {id, terminal: true}", param="until")
        if ("status" in until) == bool(until.get("terminal")):
            raise Invalid("until: give one of status (the status to reach) or terminal: true", param="until")
        condition = (until["id"], None if until.get("terminal") else str(until["status"]))
    max_seconds = float(body.get("max_seconds", DEFAULT_RUN_SECONDS))
    crossed = req.runtime.run(project, condition, max_seconds)
    return 200, {**req.runtime.clocks.describe(project), "crossed": crossed}


# --- scheduled actions -----------------------------------------------------------------------------------

def _action(a: ScheduledAction) -> dict[str, Any]:
    return {"id": a.id, "action": a.action, "at": rfc3339(a.at), "status": a.status, "params": a.params,
            "created_at": rfc3339(a.created_at), "updated_at": rfc3339(a.updated_at), "result": a.result}


def _scoped(req: Request, what: str) -> tuple[str, str]:
    tenant = _tenant(req)
    if tenant is None:
        raise Invalid(f"{what} belongs to a tenant: name it (X-Emulator-Tenant or ?tenant=)", param="tenant")
    return tenant


def admin_schedule_action(req: Request) -> Reply:
    api_key, project = _scoped(req, "a scheduled action")
    body = dict(req.json())
    kind = body.pop("action", None)
    at, delay = _at(body.pop("at", None), "at"), body.pop("delay", None)
    if at is not None and delay is not None:
        raise Invalid("give at (a virtual time) or delay (seconds from now), not both", param="delay")
    action, _now = req.runtime.schedule_action(project, api_key, kind, body, at,
                                               None if delay is None else float(delay))
    return 200, _action(action)


def admin_list_actions(req: Request) -> Reply:
    _api_key, project = _scoped(req, "a scheduled action")
    return 200, {"data": [_action(a) for a in req.runtime.list_actions(project)]}


def admin_cancel_action(req: Request) -> Reply:
    _api_key, project = _scoped(req, "a scheduled action")
    return 200, _action(req.runtime.cancel_action(project, req.path["id"]))


def admin_drop_clock(req: Request) -> Reply:
    tenant = _tenant(req)
    if tenant is None:
        raise Invalid("name the tenant whose own clock goes (X-Emulator-Tenant or ?tenant=); the global "
                      "clock cannot be removed", param="tenant")
    try:
        req.runtime.drop_clock(tenant[1])
    except ClockError as exc:
        raise Invalid(str(exc)) from exc
    return 200, req.runtime.clocks.describe(tenant[1])


# --- timing profiles -------------------------------------------------------------------------------------

def _set_profile(runtime: Runtime, project: str | None, body: Any, param: str = "profile") -> None:
    if not isinstance(body, dict):
        raise Invalid(f"{param}: an object {{profile, overrides}}", param=param)
    try:
        runtime.set_profile(project, body.get("profile"), body.get("overrides"))
    except ValueError as exc:
        raise Invalid(f"{param}: {exc}", param=param) from exc


def admin_get_profile(req: Request) -> Reply:
    tenant = _tenant(req)
    return 200, req.runtime.clocks.describe_profile(tenant[1] if tenant else None)


def admin_set_profile(req: Request) -> Reply:
    tenant = _tenant(req)
    project = tenant[1] if tenant else None
    _set_profile(req.runtime, project, req.json())
    return 200, req.runtime.clocks.describe_profile(project)


def admin_drop_profile(req: Request) -> Reply:
    tenant = _tenant(req)
    if tenant is None:
        raise Invalid("name the tenant whose own profile goes (X-Emulator-Tenant or ?tenant=)",
                      param="tenant")
    req.runtime.drop_profile(tenant[1])
    return 200, req.runtime.clocks.describe_profile(tenant[1])


# --- reset and seed --------------------------------------------------------------------------------------

def _reset(runtime: Runtime, project: str | None, seed: int | None, body: dict[str, Any]) -> list[str]:
    """Forget one tenant (its state, events, URLs, own clock, profile and seed; ``keep_settings``: its state
    only) or every tenant, then give the fresh tenant (or the global clock and profile) what the body asks
    for. Fault rules stay, with their counters restarted (the tenant's rules, or all): returns their names."""
    if body.get("clock") is not None and not isinstance(body["clock"], dict):
        raise Invalid("clock: an object {mode, speed, now}", param="clock")
    with runtime.control():  # one change: a clock or profile refused leaves the tenant as it was
        restarted = runtime.reset(project, seed, keep_settings=bool(body.get("keep_settings")) and project is not None)
        if body.get("clock") is not None:
            _set_clock(runtime, project, body["clock"], "clock.")
        if body.get("profile") is not None:
            _set_profile(runtime, project, body["profile"])
    return restarted


def admin_reset(req: Request) -> Reply:
    body = req.json()
    tenant = _tenant(req, body_too=True)
    project = tenant[1] if tenant else None
    seed = body.get("seed")
    restarted = _reset(req.runtime, project, None if seed is None else int(seed), body)
    return 200, {"reset": project or "all", "seed": req.runtime.store.seed_for(project) if project
                 else req.runtime.store.seed, "fault_counters_restarted": restarted}


def admin_set_seed(req: Request) -> Reply:
    tenant = _tenant(req)
    body = req.json()
    if tenant is not None:  # reset the tenant with its own seed (none: the global one)
        seed = body.get("seed")
        _reset(req.runtime, tenant[1], None if seed is None else int(seed), {})
        return 200, {"seed": req.runtime.store.seed_for(tenant[1])}
    _reset(req.runtime, None, int(body.get("seed", req.runtime.config.seed)), {})
    return 200, {"seed": req.runtime.store.seed}


# --- events and state ------------------------------------------------------------------------------------

def admin_list_events(req: Request) -> Reply:
    tenant = _tenant(req)
    project = tenant[1] if tenant else None
    if project is None or project in req.runtime.projects():
        req.runtime.settle(project)  # transitions that are due have happened by now
    events = req.runtime.store.events.since(req.query_int("since", 0), project, req.query_int("limit", 1000))
    return 200, {"data": events}


def admin_export_state(req: Request) -> Reply:
    tenant = _tenant(req)
    if tenant is None:
        return 200, req.runtime.export_state()
    return 200, req.runtime.export_tenant(tenant[1])


def admin_import_state(req: Request) -> Reply:
    tenant = _tenant(req)
    try:
        if tenant is None:
            req.runtime.import_state(req.body)
        else:
            req.runtime.import_tenant(tenant[1], req.body, api_key=tenant[0])
    except snapshot.StateError as exc:
        raise Invalid(f"state document refused: {exc}", code="invalid_state") from exc
    return 200, {"imported": True}


# --- fault rules -----------------------------------------------------------------------------------------

def admin_list_faults(req: Request) -> Reply:
    tenant = _tenant(req)
    return 200, {"data": req.runtime.faults.describe(tenant[0] if tenant else None)}


def _shipped_faults(body: Any) -> Any:
    """``{"fixture": NAME}`` names a shipped fault file (``fixtures/faults``, as ``--faults NAME``): its rules.
    Only shipped names: a control-plane call never reads a path of the server's file system."""
    name = body["fixture"]
    path = fixture_files.named("faults", name) if isinstance(name, str) else None
    if path is None:
        raise NotFound(f"no shipped fault file {str(name)[:100]!r} (shipped: "
                       f"{', '.join(fixture_files.names('faults'))})", param="fixture")
    try:
        return load_data_file(str(path), "fault file")
    except ConfigError as exc:
        raise Invalid(str(exc), param="fixture") from exc


def _not_kept(req: Request, answer: dict[str, Any]) -> Reply:
    """Fault rules live in the process only (their counters move with every request): a state file does not
    keep them, and the answer says so (``persisted``: false, and a warning with a state file)."""
    answer["persisted"] = False
    if req.runtime.persistence is None:
        return 200, answer
    return 200, answer, {WARNING: "fault rules are not kept in the state file: a restart starts with the "
                                  "--faults rules only"}


def admin_add_faults(req: Request) -> Reply:
    tenant = _tenant(req)
    body = req.body
    # A fixture loaded again replaces its own rules (the demo starts over); rules given one by one keep
    # their names unique.
    replaced: list[str] | None = None
    if isinstance(body, dict) and set(body) == {"fixture"}:
        fixture, body, replaced = body["fixture"], _shipped_faults(body), []
    try:
        added = req.runtime.add_faults(body, tenant=tenant[0] if tenant else None, replace=replaced)
    except FaultError as exc:
        raise Invalid(str(exc), code="invalid_fault_rule") from exc
    answer: dict[str, Any] = {"data": added}
    if replaced is not None:
        answer["replaced"] = replaced
        if replaced:
            answer["message"] = (f"fixture {fixture!r} was loaded already: its rules {', '.join(replaced)} were "
                                 "replaced, their counters restarted")
    return _not_kept(req, answer)


def admin_clear_faults(req: Request) -> Reply:
    tenant = _tenant(req)
    req.runtime.clear_faults(tenant[0] if tenant else None)
    return _not_kept(req, {"data": []})


def admin_remove_fault(req: Request) -> Reply:
    tenant = _tenant(req)
    name = req.path["name"]
    if not req.runtime.remove_fault(name, tenant[0] if tenant else None):
        raise NotFound(f"no fault rule named {name!r}" + (" for this tenant" if tenant else ""), param="name")
    return _not_kept(req, {"data": req.runtime.faults.describe(tenant[0] if tenant else None)})


# --- scenarios -------------------------------------------------------------------------------------------

def _scenarios(req: Request) -> ScenarioLibrary:
    library = req.runtime.scenarios
    if library is None:
        raise NotFound("this app was built without the scenario library", code="not_implemented")
    return library


def admin_list_scenarios(req: Request) -> Reply:
    return 200, {"data": [{"name": k, "description": v} for k, v in _scenarios(req).available().items()]}


async def admin_load_scenario(req: Request) -> Reply:
    library = _scenarios(req)
    tenant = _tenant(req)
    name = req.path["name"]
    if name not in library.available():
        raise NotFound(f"no scenario {name!r}; available: {', '.join(library.available())}", param="name")
    try:
        result = await library.load(name, tenant[0] if tenant else None)
    except ValueError as exc:
        raise Invalid(str(exc), code="invalid_scenario") from exc
    return 200, result


# --- recording at run time -------------------------------------------------------------------------------

def _recording(req: Request) -> RecordingSwitch:
    control = req.runtime.recording
    if control is None:
        raise NotFound("this app was built without the recorder", code="not_implemented")
    return control


def admin_start_recording(req: Request) -> Reply:
    try:
        return 200, _recording(req).start(canonical=bool(req.json().get("canonical")))
    except ValueError as exc:
        raise Invalid(str(exc), code="recording_state") from exc


def admin_stop_recording(req: Request) -> Reply:
    try:
        return 200, _recording(req).stop()
    except ValueError as exc:
        raise Invalid(str(exc), code="recording_state") from exc


def admin_get_recording(req: Request) -> Reply:
    try:
        text = _recording(req).download()
    except ValueError as exc:
        raise Invalid(str(exc), code="recording_state") from exc
    return 200, text.encode("utf-8"), {"content-type": "application/x-ndjson"}
