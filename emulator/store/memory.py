"""In-memory store: a :class:`TenantState` per project behind one lock each.

Lists are served from :class:`OrderedIndex` (creation order plus a position map), so a page costs
O(limit) without filters, whatever the total count. Due status transitions sit in a per-tenant
heap (the timeline) that the domain settles on every access: status is computed from the clock
when read, with no background thread.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emulator.clock import rfc3339
from emulator.ids import IdFactory
from emulator.store.presigned import Presigned
from emulator.store.records import Checkpoint, ModelResource, Operation, Payload, Session, ShapingJob

if TYPE_CHECKING:
    from emulator.compute import SessionModel, Weights


class OrderedIndex:
    """Ids in creation order; pages walk newest first from an ``after`` cursor."""

    __slots__ = ("_ids", "_pos")

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}

    def add(self, obj_id: str) -> None:
        self._pos[obj_id] = len(self._ids)
        self._ids.append(obj_id)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, obj_id: object) -> bool:
        return obj_id in self._pos

    def ids(self) -> list[str]:
        return list(self._ids)

    def page(self, after: str | None, limit: int, keep: Callable[[str], bool] | None = None
             ) -> tuple[list[str], bool] | None:
        """Up to ``limit`` ids newest first, starting after ``after``; None if the cursor is unknown.

        Returns (ids, has_more). Without a filter this touches ``limit + 1`` ids.
        """
        if after is None:
            start = len(self._ids) - 1
        else:
            pos = self._pos.get(after)
            if pos is None:
                return None
            start = pos - 1
        out: list[str] = []
        i = start
        while i >= 0:
            obj_id = self._ids[i]
            i -= 1
            if keep is None or keep(obj_id):
                if len(out) == limit:
                    return out, True
                out.append(obj_id)
        return out, False


class EventLog:
    """The timeline of transitions, requests and faults, for ``GET /_emulator/events``.

    Transitions are kept as compact tuples and rendered only when read: the log is the largest
    per-object cost of an idle session otherwise.
    """

    def __init__(self, maxlen: int = 50_000) -> None:
        self._events: deque[tuple[Any, ...]] = deque(maxlen=maxlen)
        self._seq = 0
        self._lock = threading.Lock()

    def append(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            self._events.append((self._seq, event.get("tenant"), event))

    def transition(self, at: float, tenant: str, kind: str, obj_id: str, old: str | None, new: str,
                   extra: dict[str, Any] | None) -> None:
        with self._lock:
            self._seq += 1
            self._events.append((self._seq, tenant, at, kind, obj_id, old, new, extra))

    @staticmethod
    def _render(entry: tuple[Any, ...]) -> dict[str, Any]:
        if len(entry) == 3:
            return {**entry[2], "seq": entry[0]}
        seq, tenant, at, kind, obj_id, old, new, extra = entry
        return {"type": "transition", "at": rfc3339(at), "tenant": tenant, "kind": kind, "id": obj_id,
                "from": old, "to": new, **(extra or {}), "seq": seq}

    def since(self, seq: int = 0, tenant: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        with self._lock:
            picked = [e for e in self._events if e[0] > seq and (tenant is None or e[1] == tenant)][:limit]
        return [self._render(e) for e in picked]

    def clear(self, tenant: str | None = None) -> None:
        with self._lock:
            if tenant is None:
                self._events.clear()
            else:
                kept = [e for e in self._events if e[1] != tenant]
                self._events.clear()
                self._events.extend(kept)


RENDER_CACHE_SIZE = 4096


class TenantState:
    """Everything one project owns. Mutated only inside ``Store.transaction``."""

    def __init__(self, project: str, seed: int, events: EventLog) -> None:
        self.project = project
        self.ids = IdFactory(seed, project)
        self.events = events
        self.resources: dict[str, ModelResource] = {}
        self.sessions: dict[str, Session] = {}
        self.operations: dict[str, Operation] = {}
        self.checkpoints: dict[str, Checkpoint] = {}
        self.payloads: dict[str, Payload] = {}
        self.shaping_jobs: dict[str, ShapingJob] = {}
        self.registry: dict[str, dict[str, Any]] = {}     # model registry: ml_ id -> artifact info
        self.resource_index = OrderedIndex()
        self.session_index = OrderedIndex()
        self.checkpoint_index = OrderedIndex()
        self.shaping_index = OrderedIndex()
        self.idempotency: dict[tuple[str, str, str], str] = {}
        self.timeline: list[tuple[float, int, str, str]] = []
        self._timeline_seq = 0
        # Compute objects (not records): live models, published weights (key: session id, or
        # "<session id>:pending" for a deferred publish), checkpoint files generated once.
        self.models: dict[str, SessionModel] = {}
        self.published: dict[str, tuple[int, Weights]] = {}
        self.file_cache: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
        # Records rendered as JSON, by id: (the version they were rendered at, the bytes); bounded.
        self.rendered: dict[str, tuple[tuple[Any, ...], bytes]] = {}
        self.gpu_queue_tail: dict[str, float] = {}        # when the last queued resource leaves, per GPU type
        self.gpu_queue: dict[str, list[str]] = {}         # PENDING resource ids in queue order, per GPU type
        self.lora_configs: dict[tuple[Any, ...], dict[str, Any]] = {}  # interned, shared by sessions
        # Large operation outputs still kept, oldest first: (operation id, JSON bytes), and their total.
        # None until the domain first needs them (then built from the operations, e.g. after an import).
        self.kept_outputs: deque[tuple[str, int]] | None = None
        self.kept_output_bytes = 0
        # Final records that changed again (an output released), for a journal writing this tenant.
        self.reopened: set[str] = set()
        self.journaled = False

    def reopen(self, obj_id: str) -> None:
        """A record that could no longer change did (an operation's output was released): a journal of this
        tenant must write it again. Without a journal there is nothing to remember."""
        if self.journaled:
            self.reopened.add(obj_id)

    def schedule(self, at: float, event: str, obj_id: str) -> None:
        self._timeline_seq += 1
        heapq.heappush(self.timeline, (at, self._timeline_seq, event, obj_id))

    def pop_due(self, now: float) -> tuple[float, str, str] | None:
        if self.timeline and self.timeline[0][0] <= now:
            at, _, event, obj_id = heapq.heappop(self.timeline)
            return at, event, obj_id
        return None

    def remember_rendering(self, obj_id: str, version: tuple[Any, ...], data: bytes) -> None:
        if obj_id not in self.rendered and len(self.rendered) >= RENDER_CACHE_SIZE:
            del self.rendered[next(iter(self.rendered))]  # the oldest entry: polled records come back soon
        self.rendered[obj_id] = (version, data)

    def log(self, at: float, kind: str, obj_id: str, old: str | None, new: str, **extra: Any) -> None:
        self.events.transition(at, self.project, kind, obj_id, old, new, extra or None)


class Transaction:
    """A context manager class rather than a generator: it runs on every request."""

    __slots__ = ("store", "project", "write", "lock")

    def __init__(self, store: Store, project: str, write: bool) -> None:
        self.store = store
        self.project = project
        self.write = write
        self.lock: threading.RLock | None = None

    def __enter__(self) -> TenantState:
        store = self.store
        if not self.write and self.project not in store._tenants:
            return TenantState(self.project, store.seed, store.events)
        state = store._tenant(self.project)
        self.lock = store._locks[self.project]
        self.lock.acquire()
        return state

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            if self.write:
                self.store._dirty.add(self.project)
            self.lock.release()
            self.lock = None


class Store:
    """Every tenant's state, one lock per tenant; what changed since the last :meth:`take_dirty`."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.events = EventLog()
        self.presigned = Presigned()
        self._tenants: dict[str, TenantState] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._global = threading.Lock()
        self._dirty: set[str] = set()      # projects changed since the last persisted write
        self._reset_all = False            # everything was reset since the last persisted write

    def _tenant(self, project: str) -> TenantState:
        state = self._tenants.get(project)
        if state is None:
            with self._global:
                state = self._tenants.get(project)
                if state is None:
                    state = TenantState(project, self.seed, self.events)
                    self._locks[project] = threading.RLock()
                    self._tenants[project] = state
        return state

    def get(self, project: str) -> TenantState | None:
        return self._tenants.get(project)

    def transaction(self, project: str, *, write: bool = True) -> Transaction:
        """The tenant's state under its lock (``with store.transaction(p) as state``). A read
        (``write=False``) of a project that has no state yet sees an empty state that is not kept, so
        reads with new tokens never create tenants."""
        return Transaction(self, project, write)

    def projects(self) -> list[str]:
        return list(self._tenants)

    def put(self, state: TenantState) -> None:
        """Install a tenant's state built elsewhere (state import)."""
        with self._global:
            self._tenants[state.project] = state
            self._locks.setdefault(state.project, threading.RLock())
            self._dirty.add(state.project)

    def reset(self, project: str | None = None, seed: int | None = None) -> None:
        with self._global:
            if seed is not None:
                self.seed = seed
            if project is None:
                self._tenants.clear()
                self._locks.clear()
                self.events.clear()
                self.presigned.clear()
                self._reset_all = True
                self._dirty.clear()
            else:
                self._tenants.pop(project, None)
                self._locks.pop(project, None)
                self.events.clear(project)
                self.presigned.clear(project)
                self._dirty.add(project)

    def take_dirty(self) -> tuple[bool, set[str]]:
        """(everything reset?, projects changed) since the last call; the persistence layer writes them."""
        with self._global:
            out = (self._reset_all, self._dirty)
            self._reset_all, self._dirty = False, set()
        return out
