"""Fault rules as data: their format, validation, matching and triggers (applied by emulator.http.faults).

Emulates the real service's failures on demand: a rule (``--faults FILE`` or ``POST /_emulator/faults``)
matches requests and either answers an ``ErrorData`` status or runs the request and then fails an operation,
a resource or a session, or holds a resource in the GPU queue. Probabilities are drawn from the seed.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Collection, Mapping
from typing import Any

from emulator.errors import Invalid
from emulator.ids import derive_int

STATE_EFFECTS = ("operation_fails", "resource_error", "session_error", "queue_position")
EFFECT_KEYS = frozenset({"status", "code", "message", "retry_after", "latency_ms", *STATE_EFFECTS})
MATCH_KEYS = frozenset({"operation_id", "method", "path", "tenant"})
TRIGGER_KEYS = frozenset({"first_n", "nth", "probability"})
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
MAX_LATENCY_MS = 600_000


class FaultError(ValueError):
    pass


# FaultSet.save(): the rules, and the requests each matched and fired on, by (tenant, name).
SavedFaults = tuple[list[dict[str, Any]], dict[tuple[str | None, str], int], dict[tuple[str | None, str], int]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_rule(rule: Any, index: int, operations: Collection[str] = (),
                  codes: Mapping[str, Collection[str]] | None = None) -> dict[str, Any]:
    """A checked copy of one rule. ``operations`` and ``codes`` (effect key -> allowed error codes), when
    given, refuse names that would never match or codes the API does not have."""
    if not isinstance(rule, dict):
        raise FaultError(f"fault rule {index + 1} must be an object")
    name = rule.get("name")
    where = f"fault rule {name!r}" if name else f"fault rule {index + 1}"
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise FaultError(f"{where}: name must be a non-empty string")
    unknown = set(rule) - {"name", "match", "trigger", "effect"}
    if unknown:
        raise FaultError(f"{where}: unknown keys {sorted(unknown)}")
    match, trigger, effect = rule.get("match") or {}, rule.get("trigger") or {}, rule.get("effect")
    if not isinstance(match, dict) or set(match) - MATCH_KEYS:
        raise FaultError(f"{where}: match takes {sorted(MATCH_KEYS)}")
    for key, value in match.items():
        if not isinstance(value, str) or not value:
            raise FaultError(f"{where}: match.{key} must be a non-empty string")
    if operations and "operation_id" in match and match["operation_id"] not in operations:
        raise FaultError(f"{where}: match.operation_id {match['operation_id']!r} is not an operation of "
                         "openapi.yaml")
    if "method" in match and match["method"].upper() not in METHODS:
        raise FaultError(f"{where}: match.method must be one of {sorted(METHODS)}")
    if not isinstance(trigger, dict) or set(trigger) - TRIGGER_KEYS or len(trigger) > 1:
        raise FaultError(f"{where}: trigger is one of {sorted(TRIGGER_KEYS)} (or empty: always)")
    if "first_n" in trigger and not (_is_int(trigger["first_n"]) and trigger["first_n"] >= 0):
        raise FaultError(f"{where}: first_n must be an integer >= 0")
    if "probability" in trigger and not (_is_number(trigger["probability"]) and 0 <= trigger["probability"] <= 1):
        raise FaultError(f"{where}: probability must be a number within 0-1")
    if "nth" in trigger and not (isinstance(trigger["nth"], list)
                                 and all(_is_int(n) and n >= 1 for n in trigger["nth"])):
        raise FaultError(f"{where}: nth must be a list of 1-based integers")
    if not isinstance(effect, dict) or not effect or set(effect) - EFFECT_KEYS:
        raise FaultError(f"{where}: effect needs some of {sorted(EFFECT_KEYS)}")
    if "status" in effect and not (_is_int(effect["status"]) and 400 <= effect["status"] <= 599):
        raise FaultError(f"{where}: effect.status must be an HTTP error status 400-599")
    for key in ("code", "message"):
        if key in effect and not isinstance(effect[key], str):
            raise FaultError(f"{where}: effect.{key} must be a string")
    if "retry_after" in effect and not (_is_number(effect["retry_after"]) and effect["retry_after"] >= 0):
        raise FaultError(f"{where}: effect.retry_after must be a number of seconds >= 0")
    if "latency_ms" in effect and not (_is_number(effect["latency_ms"]) and 0 <= effect["latency_ms"] <= MAX_LATENCY_MS):
        raise FaultError(f"{where}: effect.latency_ms must be within 0-{MAX_LATENCY_MS}")
    if "queue_position" in effect and not (_is_int(effect["queue_position"]) and 1 <= effect["queue_position"] <= 10_000):
        raise FaultError(f"{where}: effect.queue_position must be an integer within 1-10000")
    for key, allowed in (codes or {}).items():
        if key in effect and effect[key] not in allowed:
            raise FaultError(f"{where}: effect.{key} {effect[key]!r} is not one of {', '.join(sorted(allowed))}")
    return {"name": str(name or f"rule-{index + 1}"), "match": match, "trigger": trigger, "effect": effect}


def _key(rule: dict[str, Any]) -> tuple[str | None, str]:
    """Rule names are unique per tenant (``match.tenant``); rules of no tenant share one namespace."""
    return rule["match"].get("tenant"), rule["name"]


class FaultSet:
    """The active rules and their trigger counters (part of the runtime, resettable)."""

    def __init__(self, seed: int = 0, operations: Collection[str] = (),
                 codes: Mapping[str, Collection[str]] | None = None) -> None:
        self.seed = seed
        self.operations = frozenset(operations)
        self.codes = dict(codes or {})
        self.rules: list[dict[str, Any]] = []
        self.counts: dict[tuple[str | None, str], int] = {}   # requests matched, by (tenant, name)
        self.fired: dict[tuple[str | None, str], int] = {}    # of those (or forced), the ones it acted on
        self._lock = threading.Lock()

    def load(self, rules: Any, tenant: str | None = None, *, replace: list[str] | None = None
             ) -> list[dict[str, Any]]:
        """Add rules (one, a list, or ``{"rules": [...]}``); all or none: one bad rule adds nothing. With
        ``tenant`` (an API key) every rule is scoped to it: ``match.tenant`` is set, and may not name another.
        A rule whose name is taken is refused, unless ``replace`` is given (a fixture loaded again): the rule
        of that name (in the same scope) is replaced, counters and all, and its name appended to ``replace``."""
        if isinstance(rules, dict) and "rules" in rules:
            rules = rules["rules"]
        if isinstance(rules, dict):
            rules = [rules]
        if not isinstance(rules, list):
            raise FaultError("faults must be a rule, a list of rules or {'rules': [...]}")
        with self._lock:
            start = len(self.rules)
            checked = [validate_rule(rule, start + i, self.operations, self.codes) for i, rule in enumerate(rules)]
            if tenant is not None:
                for rule in checked:
                    given = rule["match"].get("tenant")
                    if given is not None and given != tenant:
                        raise FaultError(f"fault rule {rule['name']!r}: match.tenant names another tenant than "
                                         "the one these rules are added for")
                    rule["match"] = {**rule["match"], "tenant": tenant}
            names = {_key(r) for r in self.rules}
            new: set[tuple[str | None, str]] = set()
            for rule in checked:
                if _key(rule) in new or (_key(rule) in names and replace is None):
                    raise FaultError(f"a fault rule named {rule['name']!r} already exists"
                                     + (" for this tenant" if _key(rule)[0] else ""))
                new.add(_key(rule))
            if replace is not None:
                replace.extend(rule["name"] for rule in self.rules if _key(rule) in new)
                self.rules[:] = [rule for rule in self.rules if _key(rule) not in new]
                for key in new:
                    self.counts.pop(key, None)
                    self.fired.pop(key, None)
            self.rules.extend(checked)
        return checked

    def clear(self, tenant: str | None = None) -> None:
        """Remove every rule, or (``tenant``) every rule scoped to that API key."""
        with self._lock:
            if tenant is None:
                self.rules.clear()
                self.counts.clear()
                self.fired.clear()
            else:
                self.rules[:] = [rule for rule in self.rules if rule["match"].get("tenant") != tenant]
                self.counts = {k: n for k, n in self.counts.items() if k[0] != tenant}
                self.fired = {k: n for k, n in self.fired.items() if k[0] != tenant}

    def tenant_keys(self) -> set[str]:
        """The API keys that rules are scoped to."""
        with self._lock:
            return {rule["match"]["tenant"] for rule in self.rules if rule["match"].get("tenant") is not None}

    def restart(self, tenants: Collection[str] | None = None) -> list[str]:
        """Restart the counters of every rule (``tenants``: of the rules scoped to those API keys), as if no
        request had been matched yet: a ``first_n`` or ``nth`` trigger counts from 1 again and a probability
        draws the same sequence again. Returns the names of the rules whose counters restarted."""
        with self._lock:
            keys = {_key(rule) for rule in self.rules if tenants is None or rule["match"].get("tenant") in tenants}
            for key in keys:
                self.counts.pop(key, None)
                self.fired.pop(key, None)
            return [rule["name"] for rule in self.rules if _key(rule) in keys]

    def remove(self, name: str, tenant: str | None = None) -> bool:
        """Drop the rules called ``name`` (with ``tenant``: only that tenant's) and their counters; False when
        there is none."""
        with self._lock:
            gone = [rule for rule in self.rules
                    if rule["name"] == name and (tenant is None or rule["match"].get("tenant") == tenant)]
            if not gone:
                return False
            self.rules[:] = [rule for rule in self.rules if not any(rule is g for g in gone)]
            for rule in gone:
                self.counts.pop(_key(rule), None)
                self.fired.pop(_key(rule), None)
            return True

    def describe(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Every rule with how many requests it matched and how many times it fired (acted: its trigger
        chose the request, or the request named it in ``X-Emulator-Fault``), or (``tenant``) the rules scoped
        to that API key. A ``first_n: 1`` rule matched by 41 requests has fired once."""
        with self._lock:
            return [{**rule, "matched": self.counts.get(_key(rule), 0), "fired": self.fired.get(_key(rule), 0)}
                    for rule in self.rules if tenant is None or rule["match"].get("tenant") == tenant]

    def save(self) -> SavedFaults:
        """The rules and their counters, for :meth:`put_back` (a change the journal refused is undone)."""
        with self._lock:
            return list(self.rules), dict(self.counts), dict(self.fired)

    def put_back(self, saved: SavedFaults) -> None:
        with self._lock:
            self.rules[:] = saved[0]
            self.counts, self.fired = dict(saved[1]), dict(saved[2])

    def give_back(self, taken: list[tuple[str, tuple[str | None, str]]]) -> None:
        """Undo what :meth:`pick` counted for a request that was then refused (the disk would not keep it): a
        ``first_n`` trigger it used is there for the next request."""
        with self._lock:
            for what, key in taken:
                counters = self.counts if what == "matched" else self.fired
                n = counters.get(key, 0) - 1
                if n > 0:
                    counters[key] = n
                else:
                    counters.pop(key, None)

    def pick(self, operation_id: str | None, method: str, path: str, token: str | None,
             forced: str | None, taken: list[tuple[str, tuple[str | None, str]]] | None = None
             ) -> dict[str, Any] | None:
        """The rule that acts on this request, if any, counting the requests each rule matched. ``taken``
        collects what was counted, for :meth:`give_back`."""
        with self._lock:
            if forced:
                # The caller's own rule of that name first, then a rule of no tenant; never another tenant's.
                named = [rule for rule in self.rules if rule["name"] == forced
                         and rule["match"].get("tenant") in (token, None)]
                named.sort(key=lambda rule: rule["match"].get("tenant") is None)
                if named:
                    self._fire(named[0], taken)
                    return named[0]
                raise Invalid(f"X-Emulator-Fault names no fault rule {forced!r}", param="X-Emulator-Fault")
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
                key = _key(rule)
                n = self.counts.get(key, 0) + 1
                self.counts[key] = n
                if taken is not None:
                    taken.append(("matched", key))
                if self._fires(rule, n):
                    self._fire(rule, taken)
                    return rule
        return None

    def _fire(self, rule: dict[str, Any], taken: list[tuple[str, tuple[str | None, str]]] | None) -> None:
        key = _key(rule)
        self.fired[key] = self.fired.get(key, 0) + 1
        if taken is not None:
            taken.append(("fired", key))

    def _fires(self, rule: dict[str, Any], n: int) -> bool:
        trigger = rule["trigger"]
        if "first_n" in trigger:
            return n <= int(trigger["first_n"])
        if "nth" in trigger:
            return n in trigger["nth"]
        if "probability" in trigger:
            return derive_int(self.seed, rule["name"], n, bits=64) / 2**64 < float(trigger["probability"])
        return True
