"""Small helpers shared by the domain modules: status changes, lookups, list pages, released inputs."""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

from emulator.domain.kinds import KINDS
from emulator.errors import Invalid, NotFound
from emulator.store import Table, Tenant
from emulator.store.records import Malformed, check_edge

_set = msgspec.Struct.__setattr__

T = TypeVar("T")
KIND_NAMES = MappingProxyType({"ModelResource": "model_resources", "Session": "training_session", "Operation": "operation",
              "ShapingJob": "shaping_job"})


def transition(tenant: Tenant, record: Any, new: StrEnum, at: float, **extra: Any) -> None:
    """Move ``record`` to ``new`` along a documented edge, stamping ``updated_at`` and the event log."""
    old_value = record.status
    check_edge(old_value, new)
    value = new._value_  # a plain attribute; ``.value`` is a property, and this is the hottest status write
    record.status = value  # (noted for the unit of work, or refused outside one)
    _set(record, "updated_at", max(at, record.created_at))  # (the same record, already noted: no second note)
    # (the event log's own call, as Tenant.log makes it, without a keyword dict per status change)
    tenant.events.transition(at, tenant.project, KIND_NAMES[type(record).__name__], record.id, old_value, value,
                             extra or None)


def release_inputs(tenant: Tenant, op: Any) -> None:
    """Drop what a finished operation no longer needs: its body if its kind reads it only to run
    (``Kind.keeps_request``), and the bytes of the uploaded payload it was read from. The SDK uploads every
    body over 0.5 MiB, once per call; kept, those bytes grew a long loop by a batch per step. The
    operation's body already holds what was read from them."""
    if not KINDS[op.kind].keeps_request or isinstance(op.body, Malformed):
        op.body = None
    if op.payload_id is not None:
        payload = tenant.payloads.get(op.payload_id)
        if payload is not None and payload.blob is not None:
            payload.blob = None  # (the blob directory's next sweep deletes the bytes)
            payload.released_by = op.id


def lookup(table: Table[T], obj_id: str, what: str, param: str) -> T:
    record = table.get(obj_id)
    if record is None:
        raise NotFound(f"{what} {obj_id!r} not found", param=param)
    return record


def _unknown_cursor(after: str | None) -> Invalid:
    return Invalid(f"cursor 'after' {after!r} does not name an item of this list", param="after")


def page(table: Table[Any], after: str | None, limit: int, keep: Any = None) -> tuple[list[Any], bool]:
    """One page of records newest first; an unknown ``after`` cursor is refused."""
    result = table.page(after, limit, keep)
    if result is None:
        raise _unknown_cursor(after)
    return result


def page_ids(ids: list[str], table: Table[Any], after: str | None, limit: int, keep: Any) -> tuple[list[Any], bool]:
    """:func:`page` over a short id list in creation order (e.g. one resource's sessions)."""
    if after is None:
        start = len(ids) - 1
    elif after in ids:
        start = ids.index(after) - 1
    else:
        raise _unknown_cursor(after)
    out: list[Any] = []
    for i in range(start, -1, -1):
        record = table.get(ids[i])
        if record is not None and keep(record):
            if len(out) == limit:
                return out, True
            out.append(record)
    return out, False
