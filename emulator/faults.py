"""Fault rules as data, and the middleware that applies them.

A rule (YAML/JSON, ``--faults FILE`` or ``POST /_emulator/faults``)::

    {"name": "gpu-outage",
     "match": {"operation_id": "createModelResources", "method": "POST", "path": "/v1/rl/*", "tenant": "TOKEN"},
     "trigger": {"first_n": 2} | {"nth": [1, 3]} | {"probability": 0.3} | {},      # {} = always
     "effect": {"status": 503, "code": "...", "message": "...", "retry_after": 2, "latency_ms": 50,
                "operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS",
                "resource_error": "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED",
                "session_error": "TRAINING_SESSION_ERROR_CODE_SESSION_FAILED",
                "queue_position": 4}}

Every ``match`` key is optional; ``path`` is a glob. ``status`` answers an ``ErrorData`` error (with
``Retry-After`` when given) instead of running the request; the state effects run the request and
then: fail the submitted operation with the code, put the resource or session (from the path, the
body's ``model_resources_id`` or the created object) into ERROR with the code, or hold a created
resource in the GPU queue at the given position. Probabilities are drawn from the seed. A request
carrying ``X-Emulator-Fault: <rule name>`` gets that rule's effect whatever its match and trigger.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import threading
from typing import Any

from emulator.errors import InvalidRequest, render_error

STATE_EFFECTS = ("operation_fails", "resource_error", "session_error", "queue_position")
EFFECT_KEYS = {"status", "code", "message", "retry_after", "latency_ms", *STATE_EFFECTS}
MATCH_KEYS = {"operation_id", "method", "path", "tenant"}
TRIGGER_KEYS = {"first_n", "nth", "probability"}


class FaultError(ValueError):
    pass


def validate_rule(rule: Any, index: int) -> dict[str, Any]:
    if not isinstance(rule, dict):
        raise FaultError(f"fault rule {index} must be an object")
    unknown = set(rule) - {"name", "match", "trigger", "effect"}
    if unknown:
        raise FaultError(f"fault rule {index}: unknown keys {sorted(unknown)}")
    match, trigger, effect = rule.get("match") or {}, rule.get("trigger") or {}, rule.get("effect")
    if not isinstance(match, dict) or set(match) - MATCH_KEYS:
        raise FaultError(f"fault rule {index}: match takes {sorted(MATCH_KEYS)}")
    if not isinstance(trigger, dict) or set(trigger) - TRIGGER_KEYS or len(trigger) > 1:
        raise FaultError(f"fault rule {index}: trigger is one of {sorted(TRIGGER_KEYS)} (or empty: always)")
    if "probability" in trigger and not 0 <= float(trigger["probability"]) <= 1:
        raise FaultError(f"fault rule {index}: probability must be within 0-1")
    if "nth" in trigger and not (isinstance(trigger["nth"], list) and all(isinstance(n, int) for n in trigger["nth"])):
        raise FaultError(f"fault rule {index}: nth must be a list of 1-based integers")
    if not isinstance(effect, dict) or not effect or set(effect) - EFFECT_KEYS:
        raise FaultError(f"fault rule {index}: effect needs some of {sorted(EFFECT_KEYS)}")
    if "status" in effect and not (isinstance(effect["status"], int) and 400 <= effect["status"] <= 599):
        raise FaultError(f"fault rule {index}: effect.status must be an HTTP error status 400-599")
    out = {"name": str(rule.get("name") or f"rule-{index}"), "match": match, "trigger": trigger, "effect": effect}
    return out


class FaultSet:
    """The active rules and their trigger counters (part of the runtime, resettable)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rules: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self, rules: Any) -> list[dict[str, Any]]:
        if isinstance(rules, dict) and "rules" in rules:
            rules = rules["rules"]
        if isinstance(rules, dict):
            rules = [rules]
        if not isinstance(rules, list):
            raise FaultError("faults must be a rule, a list of rules or {'rules': [...]}")
        start = len(self.rules)
        checked = [validate_rule(rule, start + i) for i, rule in enumerate(rules)]
        names = {r["name"] for r in self.rules}
        for rule in checked:
            if rule["name"] in names:
                raise FaultError(f"a fault rule named {rule['name']!r} already exists")
            names.add(rule["name"])
        with self._lock:
            self.rules.extend(checked)
        return checked

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.counts.clear()

    def remove(self, name: str) -> bool:
        """Drop the rule called ``name`` and its counter; False when there is none."""
        with self._lock:
            kept = [rule for rule in self.rules if rule["name"] != name]
            if len(kept) == len(self.rules):
                return False
            self.rules[:] = kept
            self.counts.pop(name, None)
            return True

    def describe(self) -> list[dict[str, Any]]:
        return [{**rule, "matched": self.counts.get(rule["name"], 0)} for rule in self.rules]

    def pick(self, operation_id: str | None, method: str, path: str, token: str | None,
             forced: str | None) -> dict[str, Any] | None:
        with self._lock:
            if forced:
                for rule in self.rules:
                    if rule["name"] == forced:
                        return rule
                raise InvalidRequest(f"X-Emulator-Fault names no fault rule {forced!r}", param="X-Emulator-Fault")
            for rule in self.rules:
                m = rule["match"]
                if "operation_id" in m and m["operation_id"] != operation_id:
                    continue
                if "method" in m and m["method"].upper() != method:
                    continue
                if "path" in m and not fnmatch.fnmatchcase(path, m["path"]):
                    continue
                if "tenant" in m and m["tenant"] != token:
                    continue
                n = self.counts.get(rule["name"], 0) + 1
                self.counts[rule["name"]] = n
                if self._fires(rule, n):
                    return rule
        return None

    def _fires(self, rule: dict[str, Any], n: int) -> bool:
        trigger = rule["trigger"]
        if "first_n" in trigger:
            return n <= int(trigger["first_n"])
        if "nth" in trigger:
            return n in trigger["nth"]
        if "probability" in trigger:
            digest = hashlib.sha256(f"{self.seed}:{rule['name']}:{n}".encode()).digest()
            return int.from_bytes(digest[:8], "big") / 2**64 < float(trigger["probability"])
        return True


class FaultMiddleware:
    """Sits after auth (it needs the operationId and the caller) and before validation."""

    def __init__(self, app: Any, runtime: Any) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from emulator.app import PRINCIPAL, ROUTING, header, send_json

        faults: FaultSet = self.runtime.faults
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        forced = header(scope, b"x-emulator-fault")
        if not faults.rules and forced is None:  # the hot path: no rules, nothing to do
            await self.app(scope, receive, send)
            return
        extensions = scope.setdefault("extensions", {})
        operation_id = extensions.get(ROUTING, {}).get("operation_id")
        if operation_id is not None and operation_id.startswith("admin"):
            await self.app(scope, receive, send)
            return
        principal = extensions.get(PRINCIPAL)
        rule = faults.pick(operation_id, scope["method"], scope["path"], principal.token if principal else None,
                           forced)
        if rule is None:
            await self.app(scope, receive, send)
            return
        effect = rule["effect"]
        self.runtime.store.events.append({"type": "fault", "rule": rule["name"], "operation_id": operation_id,
                                          "path": scope["path"], "tenant": principal.project if principal else None})
        if effect.get("latency_ms"):
            await asyncio.sleep(float(effect["latency_ms"]) / 1000)
        if "status" in effect:
            status = int(effect["status"])
            headers = {}
            if effect.get("retry_after") is not None:
                headers["retry-after"] = str(effect["retry_after"])
            message = effect.get("message") or f"injected fault {rule['name']!r}"
            await send_json(send, status, render_error(status, message, code=effect.get("code")), headers)
            return
        if any(k in effect for k in STATE_EFFECTS):
            extensions["emulator_fault"] = effect
        await self.app(scope, receive, send)
