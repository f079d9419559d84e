"""Small helpers shared by the domain modules: status changes, lookups, list pages."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from emulator.domain.lifecycle import check_edge
from emulator.errors import InvalidRequest, NotFound
from emulator.store import OrderedIndex, TenantState

KIND_NAMES = {"ModelResource": "model_resources", "Session": "training_session", "Operation": "operation",
              "ShapingJob": "shaping_job"}


def transition(state: TenantState, record: Any, new: StrEnum, at: float, **extra: Any) -> None:
    """Move ``record`` to ``new`` along a documented edge, stamping ``updated_at`` and the timeline."""
    old_value = record.status
    check_edge(old_value, new)
    value = new._value_  # a plain attribute; ``.value`` is a property, and this is the hottest status write
    record.status = value
    record.updated_at = max(at, record.created_at)
    state.log(at, KIND_NAMES[type(record).__name__], record.id, old_value, value, **extra)


# Kinds whose request body is read only to run the operation (its samples: 100-200 bytes per token). Once
# the operation has finished the body goes, or a long training loop would keep every batch it ever sent
# for the life of the state (and write it to --state-file). Idempotency compares the body's hash, which
# stays; a sample's prompts stay, the dashboard shows them.
INPUT_ONLY_KINDS = frozenset({"forward-backward", "custom-forward-backward"})


def release_inputs(state: TenantState, op: Any) -> None:
    """Drop what a finished operation no longer needs: its body if nothing reads it any more (see
    ``INPUT_ONLY_KINDS``), and the bytes of the uploaded payload it was read from. The SDK uploads every
    body over 0.5 MiB, once per call; kept, those bytes grew a long loop by a batch per step. The
    operation's body already holds what was read from them."""
    if op.kind in INPUT_ONLY_KINDS:
        op.body = {}
    if op.payload_id is not None:
        payload = state.payloads.get(op.payload_id)
        if payload is not None and payload.data is not None:
            payload.data = None
            payload.released_by = op.id


def lookup(table: dict[str, Any], obj_id: str, what: str, param: str) -> Any:
    record = table.get(obj_id)
    if record is None:
        raise NotFound(f"{what} {obj_id!r} not found", param=param)
    return record


def page(index: OrderedIndex, table: dict[str, Any], after: str | None, limit: int,
         keep: Any = None) -> tuple[list[Any], bool]:
    """One page of records newest first; an unknown ``after`` cursor is a 400."""
    result = index.page(after, limit, None if keep is None else (lambda i: keep(table[i])))
    if result is None:
        raise InvalidRequest(f"cursor 'after' {after!r} does not name an item of this list", param="after")
    ids, has_more = result
    return [table[i] for i in ids], has_more


def error_detail(code: str, message: str, at: float) -> dict[str, Any]:
    return {"code": code, "message": message, "occurred_at": at}


def page_ids(ids: list[str], table: dict[str, Any], after: str | None, limit: int, keep: Any) -> tuple[list[Any], bool]:
    """:func:`page` over a short id list in creation order (e.g. one resource's sessions)."""
    if after is None:
        start = len(ids) - 1
    elif after in ids:
        start = ids.index(after) - 1
    else:
        raise InvalidRequest(f"cursor 'after' {after!r} does not name an item of this list", param="after")
    out: list[Any] = []
    for i in range(start, -1, -1):
        record = table[ids[i]]
        if keep(record):
            if len(out) == limit:
                return out, True
            out.append(record)
    return out, False
