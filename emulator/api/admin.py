"""Handlers of the control plane (``emulator/admin.yaml``, served under ``/_emulator``)."""

from __future__ import annotations

from emulator.api.request import Reply, Request
from emulator.clock import ClockError, parse_rfc3339
from emulator.errors import InvalidRequest, NotFound
from emulator.faults import FaultError
from emulator.store import snapshot


def admin_health(req: Request) -> Reply:
    return 200, {"status": "ok"}


def admin_get_clock(req: Request) -> Reply:
    return 200, req.runtime.clock.describe()


def admin_set_clock(req: Request) -> Reply:
    body = req.json()
    clock = req.runtime.clock
    try:
        clock.configure(mode=body.get("mode"), speed=body.get("speed"))
        if body.get("now"):
            clock.set_time(parse_rfc3339(body["now"]))
    except (ClockError, ValueError) as exc:
        raise InvalidRequest(str(exc)) from exc
    req.runtime.committed()
    return 200, clock.describe()


def admin_advance_clock(req: Request) -> Reply:
    try:
        req.runtime.clock.advance(float(req.json()["seconds"]))
    except ClockError as exc:
        raise InvalidRequest(str(exc), param="seconds") from exc
    req.runtime.committed()
    return 200, req.runtime.clock.describe()


def admin_reset(req: Request) -> Reply:
    body = req.json()
    tenant = body.get("tenant")
    project = req.runtime.project_for_token(tenant) if tenant else None
    if tenant and project is None:
        raise InvalidRequest("tenant is not a known token", param="tenant")
    req.runtime.store.reset(project, seed=body.get("seed"))
    req.runtime.committed()
    return 200, {"reset": project or "all"}


def admin_set_seed(req: Request) -> Reply:
    req.runtime.store.reset(None, seed=int(req.json()["seed"]))
    req.runtime.committed()
    return 200, {"seed": req.runtime.store.seed}


def admin_list_events(req: Request) -> Reply:
    tenant = req.query_str("tenant")
    project = req.runtime.project_for_token(tenant) if tenant else None
    req.runtime.settle_all()  # transitions that are due have happened by now
    events = req.runtime.store.events.since(req.query_int("since", 0), project, req.query_int("limit", 1000))
    return 200, {"data": events}


def admin_export_state(req: Request) -> Reply:
    return 200, snapshot.export_state(req.runtime)


def admin_import_state(req: Request) -> Reply:
    try:
        snapshot.import_state(req.runtime, req.json())
    except snapshot.StateError as exc:
        raise InvalidRequest(str(exc)) from exc
    req.runtime.committed()
    return 200, {"imported": True}


def admin_list_faults(req: Request) -> Reply:
    return 200, {"data": req.runtime.faults.describe()}


def admin_add_faults(req: Request) -> Reply:
    try:
        added = req.runtime.faults.load(req.body)
    except FaultError as exc:
        raise InvalidRequest(str(exc)) from exc
    return 200, {"data": added}


def admin_clear_faults(req: Request) -> Reply:
    req.runtime.faults.clear()
    return 200, {"data": []}


def admin_remove_fault(req: Request) -> Reply:
    name = req.path["name"]
    if not req.runtime.faults.remove(name):
        raise NotFound(f"no fault rule named {name!r}", param="name")
    return 200, {"data": req.runtime.faults.describe()}


def admin_list_scenarios(req: Request) -> Reply:
    from emulator import scenarios

    return 200, {"data": [{"name": k, "description": v} for k, v in scenarios.available().items()]}


def admin_load_scenario(req: Request) -> Reply:
    from emulator import scenarios

    name = req.path["name"]
    if name not in scenarios.available():
        raise NotFound(f"no scenario {name!r}; available: {', '.join(scenarios.available())}", param="name")
    try:
        result = scenarios.load(req.runtime, name)
    except (scenarios.ScenarioError, FaultError) as exc:
        raise InvalidRequest(str(exc)) from exc
    req.runtime.committed()
    return 200, result
