"""Handlers of the control plane (``emulator/specs/admin.yaml``, served under ``/_emulator``)."""

from __future__ import annotations

from emulator.api.request import Reply, Request
from emulator.clock import ClockError, parse_rfc3339
from emulator.errors import Invalid, NotFound
from emulator.faults import FaultError
from emulator.runtime import ScenarioLibrary
from emulator.store import snapshot


def _project(req: Request, token: str | None, param: str = "tenant") -> str | None:
    """The project of a tenant named by its API token (None: every tenant)."""
    if not token:
        return None
    project = req.runtime.tenancy.project_for_token(token)
    if project is None:
        raise Invalid(f"{param}: not a known API token", param=param)
    return project


def admin_health(req: Request) -> Reply:
    """``ok``; ``degraded`` (503) while the state file refuses writes, naming why."""
    persistence = req.runtime.persistence
    if persistence is None:
        return 200, {"status": "ok"}
    storage = persistence.status()
    return (200 if storage["ok"] else 503), {"status": "ok" if storage["ok"] else "degraded", "state_file": storage}


def admin_get_clock(req: Request) -> Reply:
    return 200, req.runtime.clock.describe()


def admin_set_clock(req: Request) -> Reply:
    body = req.json()
    clock = req.runtime.clock
    try:
        at = parse_rfc3339(body["now"]) if body.get("now") else None
    except ValueError as exc:
        raise Invalid(f"now: not an RFC 3339 time: {exc}", param="now") from exc
    try:
        clock.configure(mode=body.get("mode"), speed=body.get("speed"))
        if at is not None:
            clock.set_time(at)
    except ClockError as exc:
        raise Invalid(str(exc)) from exc
    req.runtime.clock_changed()
    return 200, clock.describe()


def admin_advance_clock(req: Request) -> Reply:
    try:
        req.runtime.clock.advance(float(req.json()["seconds"]))
    except ClockError as exc:
        raise Invalid(f"seconds: {exc}", param="seconds") from exc
    req.runtime.clock_changed()
    return 200, req.runtime.clock.describe()


def admin_reset(req: Request) -> Reply:
    body = req.json()
    project = _project(req, body.get("tenant"))
    req.runtime.reset(project, seed=body.get("seed"))
    return 200, {"reset": project or "all"}


def admin_set_seed(req: Request) -> Reply:
    seed = req.json().get("seed", req.runtime.config.seed)
    req.runtime.reset(None, seed=int(seed))
    return 200, {"seed": req.runtime.store.seed}


def admin_list_events(req: Request) -> Reply:
    project = _project(req, req.query_str("tenant"))
    req.runtime.settle()  # transitions that are due have happened by now
    events = req.runtime.store.events.since(req.query_int("since", 0), project, req.query_int("limit", 1000))
    return 200, {"data": events}


def admin_export_state(req: Request) -> Reply:
    return 200, req.runtime.export_state()


def admin_import_state(req: Request) -> Reply:
    try:
        req.runtime.import_state(req.body)
    except snapshot.StateError as exc:
        raise Invalid(f"state document refused: {exc}", code="invalid_state") from exc
    return 200, {"imported": True}


def admin_list_faults(req: Request) -> Reply:
    return 200, {"data": req.runtime.faults.describe()}


def admin_add_faults(req: Request) -> Reply:
    try:
        added = req.runtime.faults.load(req.body)
    except FaultError as exc:
        raise Invalid(str(exc), code="invalid_fault_rule") from exc
    return 200, {"data": added}


def admin_clear_faults(req: Request) -> Reply:
    req.runtime.faults.clear()
    return 200, {"data": []}


def admin_remove_fault(req: Request) -> Reply:
    name = req.path["name"]
    if not req.runtime.faults.remove(name):
        raise NotFound(f"no fault rule named {name!r}", param="name")
    return 200, {"data": req.runtime.faults.describe()}


def _scenarios(req: Request) -> ScenarioLibrary:
    library = req.runtime.scenarios
    if library is None:
        raise NotFound("this app was built without the scenario library", code="not_implemented")
    return library


def admin_list_scenarios(req: Request) -> Reply:
    return 200, {"data": [{"name": k, "description": v} for k, v in _scenarios(req).available().items()]}


async def admin_load_scenario(req: Request) -> Reply:
    library = _scenarios(req)
    name = req.path["name"]
    if name not in library.available():
        raise NotFound(f"no scenario {name!r}; available: {', '.join(library.available())}", param="name")
    try:
        result = await library.load(name)
    except ValueError as exc:
        raise Invalid(str(exc), code="invalid_scenario") from exc
    return 200, result
