"""Lifecycle rules of the RL API as data, and small checks that each judge one property.

This is a deliberate *copy* of the documented lifecycles (docs/api-surface.md C.1-C.3 and the shaping
statuses of A.7), not an import from ``emulator.domain.lifecycle``: the suite must judge any
implementation, and must not share a bug with the emulator it tests.

Every check is a plain function that raises :class:`ContractViolation` with a message that names
the broken behaviour (the self-test greps for those names), or returns quietly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any


class ContractViolation(AssertionError):
    """The target broke a documented rule. ``check`` names the rule (a column of the report)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"[{check}] {message}")
        self.check = check
        self.message = message


# --- the documented lifecycles ----------------------------------------------------------------------

R = "MODEL_RESOURCES_STATUS_"
S = "TRAINING_SESSION_STATUS_"
OP = "TRAINING_OPERATION_STATUS_"

RESOURCE_EDGES: dict[str, frozenset[str]] = {
    R + "PENDING": frozenset({R + "CREATING", R + "STOPPING", R + "ERROR"}),
    R + "CREATING": frozenset({R + "READY", R + "STOPPING", R + "ERROR"}),
    R + "READY": frozenset({R + "STOPPING", R + "ERROR"}),
    R + "STOPPING": frozenset({R + "STOPPED"}),
    R + "STOPPED": frozenset(),
    R + "ERROR": frozenset(),
}
SESSION_EDGES: dict[str, frozenset[str]] = {
    # UNSPECIFIED is the protobuf zero value: "not known yet", so anything may follow it.
    S + "UNSPECIFIED": frozenset({S + "CREATING", S + "RUNNING", S + "STOPPING", S + "STOPPED", S + "EXPIRED",
                                  S + "ERROR"}),
    S + "CREATING": frozenset({S + "RUNNING", S + "STOPPING", S + "EXPIRED", S + "ERROR"}),
    S + "RUNNING": frozenset({S + "STOPPING", S + "EXPIRED", S + "ERROR"}),
    S + "STOPPING": frozenset({S + "STOPPED"}),
    S + "STOPPED": frozenset(),
    S + "EXPIRED": frozenset(),
    S + "ERROR": frozenset(),
}
OPERATION_EDGES: dict[str, frozenset[str]] = {
    OP + "UNSPECIFIED": frozenset({OP + "PENDING", OP + "RUNNING", OP + "COMPLETED", OP + "FAILED"}),
    OP + "PENDING": frozenset({OP + "RUNNING", OP + "FAILED"}),
    OP + "RUNNING": frozenset({OP + "COMPLETED", OP + "FAILED"}),
    OP + "COMPLETED": frozenset(),
    OP + "FAILED": frozenset(),
}
SHAPING_EDGES: dict[str, frozenset[str]] = {
    "pending": frozenset({"queued", "cancel_requested", "error", "user_error"}),
    "queued": frozenset({"running", "cancel_requested", "error", "user_error"}),
    "running": frozenset({"completed", "cancel_requested", "error", "user_error"}),
    "cancel_requested": frozenset({"cancelled"}),
    "completed": frozenset(),
    "cancelled": frozenset(),
    "error": frozenset(),
    "user_error": frozenset(),
}

TABLES: dict[str, dict[str, frozenset[str]]] = {
    "model resource": RESOURCE_EDGES,
    "training session": SESSION_EDGES,
    "operation": OPERATION_EDGES,
    "shaping job": SHAPING_EDGES,
}

TERMINAL: dict[str, frozenset[str]] = {kind: frozenset(s for s, nxt in table.items() if not nxt)
                                       for kind, table in TABLES.items()}
# What a resource reads as once a stop was accepted, and a session once its stop was accepted.
RESOURCE_STOPPED_OR_STOPPING = frozenset({R + "STOPPING", R + "STOPPED"})
SESSION_STOPPED_OR_STOPPING = frozenset({S + "STOPPING", S + "STOPPED"})
SESSION_INACTIVE = frozenset({S + "STOPPED", S + "EXPIRED", S + "ERROR"})
OPERATION_DONE = TERMINAL["operation"]
# Statuses a session reaches once the stop has fully settled (or was overtaken by a failure).
SESSION_AFTER_STOP = frozenset({S + "STOPPING", S + "STOPPED", S + "EXPIRED", S + "ERROR"})


def _closure(table: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for start in table:
        seen: set[str] = set()
        todo = list(table[start])
        while todo:
            nxt = todo.pop()
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(table.get(nxt, ()))
        out[start] = frozenset(seen)
    return out


REACHABLE: dict[str, dict[str, frozenset[str]]] = {kind: _closure(t) for kind, t in TABLES.items()}


def is_reachable(kind: str, old: str, new: str) -> bool:
    """True when ``new`` can follow ``old`` along documented edges (observations may skip states)."""
    if old == new:
        return True
    return new in REACHABLE[kind].get(old, frozenset())


# --- checks: one job each ---------------------------------------------------------------------------

def check_known_status(kind: str, obj_id: str, status: Any) -> None:
    if status not in TABLES[kind]:
        raise ContractViolation("status_known", f"{kind} {obj_id} has status {status!r}, which is not one of the "
                                f"documented statuses {sorted(TABLES[kind])}")


def check_transition(kind: str, obj_id: str, old: str, new: str) -> None:
    """Statuses move only along documented edges; terminal states never revert."""
    check_known_status(kind, obj_id, new)
    if old in TERMINAL[kind] and new != old:
        raise ContractViolation("terminal_never_reverts", f"status went backwards: {kind} {obj_id} was in the "
                                f"terminal status {old} and later read as {new}")
    if not is_reachable(kind, old, new):
        raise ContractViolation("status_edges", f"status went backwards: {kind} {obj_id} moved {old} -> {new}, "
                                "which is not along the documented lifecycle edges")


def check_failed_operation_error(obj_id: str, obj: Mapping[str, Any]) -> None:
    """An operation read as FAILED says why: "poll the matching GET until COMPLETED (with ``output``) or FAILED
    (with ``error``)" (every operation envelope of openapi.yaml); ``error`` is an ``OperationError``, so it names
    a ``code`` or a ``message`` at least."""
    if obj.get("status") != OP + "FAILED":
        return
    error = obj.get("error")
    if not isinstance(error, Mapping) or not (error.get("code") or error.get("message")):
        raise ContractViolation("failed_operation_error", f"operation {obj_id} is FAILED without an error (no code "
                                f"nor message saying why): error={error!r}")


def parse_time(value: Any, what: str) -> datetime:
    if not isinstance(value, str):
        raise ContractViolation("timestamps", f"{what} is {value!r}, not an RFC 3339 string")
    try:
        return datetime.fromisoformat(value)  # Python 3.11+ reads the trailing Z
    except ValueError as exc:
        raise ContractViolation("timestamps", f"{what} is {value!r}, not an RFC 3339 date-time") from exc


def check_timestamps(kind: str, obj: Mapping[str, Any]) -> None:
    """``updated_at >= created_at`` on every object that has both."""
    if "created_at" not in obj or "updated_at" not in obj:
        return
    created = parse_time(obj["created_at"], f"{kind} {obj.get('id')} created_at")
    updated = parse_time(obj["updated_at"], f"{kind} {obj.get('id')} updated_at")
    if updated < created:
        raise ContractViolation("updated_at_after_created_at", f"{kind} {obj.get('id')}: updated_at "
                                f"{obj['updated_at']} is before created_at {obj['created_at']}")


def check_updated_at_monotonic(kind: str, obj_id: str, previous: datetime | None, value: Any) -> datetime:
    """``updated_at`` never moves back between two reads of one object; returns the parsed value."""
    updated = parse_time(value, f"{kind} {obj_id} updated_at")
    if previous is not None and updated < previous:
        raise ContractViolation("updated_at_never_decreases", f"{kind} {obj_id}: updated_at went back from "
                                f"{previous.isoformat()} to {value}")
    return updated


def check_updated_at_covers_events(kind: str, obj: Mapping[str, Any]) -> None:
    """An event is a change of its object: ``updated_at`` is never before the newest event (a shaping job gains
    events while it stays ``running``, and its ``updated_at`` moves with each)."""
    events = obj.get("events")
    if not isinstance(events, list) or "updated_at" not in obj:
        return
    stamps = [e["created_at"] for e in events if isinstance(e, dict) and e.get("created_at") is not None]
    if not stamps:
        return
    updated = parse_time(obj["updated_at"], f"{kind} {obj.get('id')} updated_at")
    newest = max(stamps, key=lambda s: parse_time(s, f"{kind} {obj.get('id')} event created_at"))
    if parse_time(newest, "event") > updated:
        raise ContractViolation("updated_at_moves", f"updated_at did not move: {kind} {obj.get('id')} "
                                f"({obj.get('status')}) has an event of {newest}, yet its updated_at is still "
                                f"{obj['updated_at']}")


def same_instant(a: Any, b: Any) -> bool:
    try:
        return datetime.fromisoformat(str(a)) == datetime.fromisoformat(str(b))
    except ValueError:
        return a == b


def check_queue_position(obj_id: str, obj: Mapping[str, Any]) -> None:
    """``status_details.queue_position`` is a position (>= 1) shown only while the resource waits: "present only
    while waiting for GPUs" (a PENDING resource)."""
    details = obj.get("status_details")
    position = details.get("queue_position") if isinstance(details, dict) else None
    if position is None:
        return
    if isinstance(position, bool) or not isinstance(position, int) or position < 1:
        raise ContractViolation("queue_position", f"model resource {obj_id}: queue_position {position!r} is not a "
                                "position (an integer >= 1)")
    if obj.get("status") != R + "PENDING":
        raise ContractViolation("queue_position", f"model resource {obj_id} shows queue_position {position} while "
                                f"{obj.get('status')}; it is present only while PENDING (waiting for GPUs)")


def as_int64(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ContractViolation("int64_strings", f"{what} is {value!r}, not an int64") from exc


def check_step_not_decreasing(what: str, previous: int | None, current: int) -> None:
    """``step`` (and the versions that share its counter) never go back."""
    if previous is not None and current < previous:
        raise ContractViolation("step_never_decreases", f"step decreased: {what} went from {previous} to "
                                f"{current}")


def check_error_envelope(status_code: int, body: Any, where: str) -> None:
    """Every non-2xx body is ``ErrorData``: ``{"error": {"message": str, "type": str, "param"?, "code"?}}``."""
    problem = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        problem = "has no 'error' object"
    else:
        err = body["error"]
        if not isinstance(err.get("message"), str):
            problem = "has no string error.message"
        elif not isinstance(err.get("type"), str):
            problem = "has no string error.type"
        elif err.get("param") is not None and not isinstance(err["param"], str):
            problem = "has a non-string error.param"
        elif err.get("code") is not None and not isinstance(err["code"], str):
            problem = "has a non-string error.code"
    if problem:
        raise ContractViolation("error_envelope", f"error body is not ErrorData: the {status_code} answer to "
                                f"{where} {problem}: {str(body)[:300]}")


def check_status_code(expected: Iterable[int], actual: int, where: str, body: Any, rule: str, check: str) -> None:
    expected = tuple(expected)
    if actual not in expected:
        raise ContractViolation(check, f"{rule}: {where} answered {actual}, expected "
                                f"{' or '.join(map(str, expected))}: {str(body)[:300]}")


def check_walk_once(list_name: str, pages: list[list[str]], expected: Iterable[str] | None = None) -> None:
    """Cursor pagination walks every item exactly once: no repeats, and (when known) no gaps."""
    seen: dict[str, int] = {}
    for number, page in enumerate(pages):
        for item in page:
            if item in seen:
                raise ContractViolation("pagination_exactly_once", f"pagination repeats an item: {list_name} item "
                                        f"{item} appears on page {seen[item] + 1} and again on page {number + 1}")
            seen[item] = number
    if expected is not None:
        missing = [i for i in expected if i not in seen]
        if missing:
            raise ContractViolation("pagination_exactly_once", f"pagination skips items: walking {list_name} "
                                    f"never returned {missing[:5]} ({len(missing)} missing)")


def check_filter(list_name: str, field: str, allowed: Iterable[str], items: Sequence[Mapping[str, Any]]) -> None:
    allowed = frozenset(allowed)
    wrong = [(i.get("id"), i.get(field)) for i in items if i.get(field) not in allowed]
    if wrong:
        raise ContractViolation("list_filters", f"list filter ignored: {list_name} filtered on {field} in "
                                f"{sorted(allowed)} returned {wrong[:3]}")
