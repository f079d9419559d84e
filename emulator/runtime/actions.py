"""Scheduled actions of the control plane (``/_emulator/clock/actions``), and the fault rules they add or remove.

Part of :class:`emulator.runtime.Runtime` (a mixin). An action is a record of its tenant; the two that change
fault rules reach the runtime through ``tenant.outbox`` as settling finds them due, and a unit of work the
journal refuses puts the rules back.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from emulator.bounds import later
from emulator.domain import actions
from emulator.domain.context import Principal
from emulator.errors import Invalid
from emulator.faults import FaultError, FaultSet, validate_rule
from emulator.runtime.units import ControlUnit, UnitOfWork
from emulator.store import Store, Tenant
from emulator.store.records import ActionKind, ScheduledAction
from emulator.tenant_clocks import TenantClocks


class ScheduledActions:
    """The runtime's scheduled actions (see the module docstring)."""

    lock: threading.RLock
    store: Store
    clocks: TenantClocks
    faults: FaultSet
    scheduled_rules: dict[str, float]
    unit: UnitOfWork | ControlUnit | None

    if TYPE_CHECKING:
        def unit_of_work(self, who: Principal | str, *, write: bool) -> UnitOfWork: ...

        def settle(self, project: str | None = None) -> None: ...

    def schedule_action(self, project: str, api_key: str, kind: Any, params: dict[str, Any], at: float | None,
                        delay: float | None) -> tuple[ScheduledAction, float]:
        """Schedule an action for the tenant (at ``at``, or ``delay`` seconds from its now): checked first
        (a fault rule as the fault set checks it, scoped to ``api_key``); journaled as a write. Returns the
        action and the tenant's now."""
        with self.lock, self.unit_of_work(Principal(user="", project=project, token=api_key), write=True) as (
                tenant, ctx):
            action = actions.check(tenant, kind, params)
            params = dict(params)
            if action is ActionKind.ADD_FAULT:
                params["rule"] = self._scheduled_rule(params["rule"], api_key)
            elif action is ActionKind.REMOVE_FAULT:
                params["tenant"] = api_key
            when = ctx.now if at is None and delay is None else at if at is not None else later(ctx.now, delay or 0.0)
            record = actions.schedule(tenant, ctx, action, when, params)
            now = ctx.now
            if action in (ActionKind.ADD_FAULT, ActionKind.REMOVE_FAULT):
                self._keeping_rules()
                self.scheduled_rules[project] = min(self.scheduled_rules.get(project, when), when)
        if when <= now:  # an action for now happens at once
            self.settle(project)
        return record, now

    def _scheduled_rule(self, rule: Any, api_key: str) -> dict[str, Any]:
        try:
            checked = validate_rule(rule, 0, self.faults.operations, self.faults.codes)
        except FaultError as exc:
            raise Invalid(f"rule: {exc}", param="rule", code="invalid_fault_rule") from exc
        if not isinstance(rule, dict) or not rule.get("name"):
            raise Invalid("rule.name: a scheduled rule needs a name (to be told apart, and removed)", param="rule.name")
        given = checked["match"].get("tenant")
        if given is not None and given != api_key:
            raise Invalid("rule.match.tenant names another tenant than the one the action is for", param="rule")
        return {**checked, "match": {**checked["match"], "tenant": api_key}}

    def list_actions(self, project: str) -> list[ScheduledAction]:
        with self.lock, self.unit_of_work(project, write=False) as (tenant, _ctx):
            return tenant.actions.ordered()

    def cancel_action(self, project: str, action_id: str) -> ScheduledAction:
        with self.lock, self.unit_of_work(Principal(user="", project=project), write=True) as (tenant, ctx):
            record = actions.cancel(tenant, ctx, action_id)
            self._keeping_rules()
            self._recount_rules([project])
            return record

    def _keeping_rules(self) -> None:
        """The fault rules and when scheduled ones fall due are about to change in the open unit of work: kept,
        to be put back if the journal refuses it."""
        unit = self.unit
        undo = unit.keeping() if isinstance(unit, UnitOfWork) else None
        if undo is not None:  # (settling as a unit opens is no part of its change: it has no Undo yet)
            undo.keep_faults()

    def carry_out(self, tenant: Tenant) -> None:
        """The fault-rule actions that settling found due (``tenant.outbox``): add or remove the rule, then
        finish the action (noted for the journal as settling notes its changes)."""
        self._keeping_rules()
        log = tenant.changes
        noting, log.noting = log.noting, log.enabled
        try:
            while tenant.outbox:
                record, at = tenant.outbox.pop(0)
                p: Mapping[str, Any] = record.params
                try:
                    if record.action == ActionKind.ADD_FAULT:
                        self.faults.load(p["rule"], tenant=p["rule"]["match"]["tenant"])
                        ok, result = True, f"fault rule {p['rule']['name']!r} added"
                    else:
                        ok = self.faults.remove(p["name"], p["tenant"])
                        result = (f"fault rule {p['name']!r} removed" if ok
                                  else f"no fault rule {p['name']!r} to remove")
                except FaultError as exc:
                    ok, result = False, str(exc)
                actions.finish(tenant, record, ok, result, at)
        finally:
            log.noting = noting
        self._recount_rules([tenant.project])

    def _recount_rules(self, projects: list[str]) -> None:
        """When each of ``projects`` next has a fault-rule action due (``scheduled_rules``)."""
        for p in projects:
            tenant = self.store.get(p)
            due = [a.at for a in tenant.actions.values() if a.status == "scheduled"
                   and a.action in (ActionKind.ADD_FAULT, ActionKind.REMOVE_FAULT)] if tenant is not None else []
            if due:
                self.scheduled_rules[p] = min(due)
            else:
                self.scheduled_rules.pop(p, None)

    def fire_due_rules(self, project: str) -> None:
        """Settle the tenant if a fault-rule action of it is due by its now (the fault-rule step calls this
        before it picks a rule for the tenant's request)."""
        at = self.scheduled_rules.get(project)
        if at is not None and self.clocks.now(project) >= at:
            self.settle(project)


def own_rules(tenant: Tenant, api_key: str) -> None:
    """A tenant document imported into the tenant of ``api_key``: the fault rules its scheduled actions will
    add or remove are that key's (a rule names the API key it matches)."""
    for a in tenant.actions.ordered():
        params: dict[str, Any] = dict(a.params)
        if a.status == "scheduled" and a.action == ActionKind.ADD_FAULT:
            rule = dict(params["rule"])
            params["rule"] = {**rule, "match": {**rule["match"], "tenant": api_key}}
        elif a.status == "scheduled" and a.action == ActionKind.REMOVE_FAULT:
            params["tenant"] = api_key
        else:
            continue
        tenant.actions.replace(msgspec.structs.replace(a, params=params))  # (a value is replaced, never edited)


__all__ = ["ScheduledActions", "own_rules"]
