"""One project's state: the :class:`Tenant` aggregate, its typed parts, and what each part saw change.

A tenant is what one project owns: records (a :class:`Table` per kind), timeline, idempotency keys, model
registry, GPU queue, session models and weights, output budget. Each part notes its own changes for the
``--state-file`` journal; with no journal nothing is noted (:attr:`ChangeLog.enabled` off).
"""

from __future__ import annotations

import heapq
import secrets
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from emulator.compute.bases import BaseModels
from emulator.ids import IdFactory
from emulator.jsontypes import Json
from emulator.store import records
from emulator.store.records import (
    Artifact,
    Checkpoint,
    File,
    LoraConfig,
    ModelResource,
    Operation,
    OperationStatus,
    Payload,
    Record,
    ResourceStatus,
    ScheduledAction,
    Session,
    ShapingJob,
    Unjournaled,
)

if TYPE_CHECKING:
    from emulator.compute import SessionModel, Weights

R = TypeVar("R")


class EventSink(Protocol):
    def transition(self, at: float, project: str, kind: str, obj_id: str, old: str | None, new: str,
                   extra: dict[str, Json] | None) -> None: ...


class ChangeLog:
    """What a tenant's parts share for its journal: ``enabled`` (a journal reads this tenant), ``noting``
    (session models handed out now may be changed: a write unit of work, or the timeline settling), and the
    tables by record type, where a record that changed is noted (:meth:`note`, called by the record itself)."""

    __slots__ = ("enabled", "noting", "tables")

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self.noting = False
        self.tables: dict[type, Table[Any]] = {}

    def note(self, record: Record) -> None:
        self.tables[type(record)].touched.add(record.id)

    def notes(self) -> ChangeLog | type[Unjournaled]:
        """What a unit of work of this tenant notes changed records in."""
        return self if self.enabled else Unjournaled


class OrderedIndex:
    """Ids in creation order; pages walk newest first from an ``after`` cursor."""

    __slots__ = ("_ids", "_pos")

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}

    def add(self, obj_id: str) -> None:
        self._pos[obj_id] = len(self._ids)
        self._ids.append(obj_id)

    def remove(self, obj_id: str) -> None:
        pos = self._pos.pop(obj_id, None)
        if pos is not None:
            del self._ids[pos]
            for i in range(pos, len(self._ids)):
                self._pos[self._ids[i]] = i

    def __len__(self) -> int:
        return len(self._ids)

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


class Table(Generic[R]):
    """One kind of record: by id, in creation order when the API lists it, and what a journal must write.

    A record notes its own changes here (:meth:`emulator.store.records.Record.__setattr__`, through the unit of
    work's :class:`ChangeLog`), and the table notes the records added and removed: so whichever way a record is
    reached (``get``, ``[]``, ``values()``...), a change to it is written. A record that the table calls
    :meth:`final` no longer changes through the domain's rules (the journal then keeps no hash of it).
    """

    def __init__(self, name: str, record_type: type[R], log: ChangeLog, *, listed: bool,
                 final: Callable[[R], bool]) -> None:
        self.name = name
        self.record_type = record_type
        self._rows: dict[str, R] = {}
        # The dict's own get, bound once (it shadows the methods below, which say what it does): a lookup by
        # id is the commonest store call, and a Python method around it costs several times the lookup.
        self.get = self.read = self._rows.get  # type: ignore[method-assign, assignment]
        self.peek = self._rows.__getitem__  # type: ignore[method-assign, assignment]
        self._index = OrderedIndex() if listed else None
        self._log = log
        self._final = final
        self.touched: set[str] = set()     # added, or changed (the record notes itself: Record.__setattr__)
        self.removed: set[str] = set()
        log.tables[record_type] = self

    def __copy__(self) -> Table[R]:
        # (a copy would keep get/read/peek bound to this table's rows: refused, not silently shared)
        raise TypeError("a Table is not copied: its get, read and peek are bound to its own rows")

    def __deepcopy__(self, memo: dict[int, Any]) -> Table[R]:
        return self.__copy__()

    def get(self, obj_id: Any) -> R | None:
        return self._rows.get(obj_id)

    def __getitem__(self, obj_id: str) -> R:
        return self._rows[obj_id]

    def peek(self, obj_id: str) -> R:
        """A record, for reading only (nothing is noted); KeyError when there is none."""
        return self._rows[obj_id]

    def read(self, obj_id: Any) -> R | None:
        """A record or None, for reading only (nothing is noted)."""
        return self._rows.get(obj_id)

    def __contains__(self, obj_id: object) -> bool:
        return obj_id in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[str]:
        """Every id (as a dict iterates its keys), for reading only."""
        return iter(self._rows)

    def values(self) -> Iterator[R]:
        """Every record, for reading only (nothing is noted)."""
        return iter(self._rows.values())

    def ids(self) -> list[str]:
        """Ids in creation order (for reading only)."""
        return self._index.ids() if self._index is not None else list(self._rows)

    def ordered(self) -> list[R]:
        """Records in creation order (for reading only)."""
        rows = self._rows
        return [rows[i] for i in self._index.ids()] if self._index is not None else list(rows.values())

    def add(self, record: R) -> R:
        obj_id = record.id  # type: ignore[attr-defined]
        self._rows[obj_id] = record
        if self._index is not None:
            self._index.add(obj_id)
        if self._log.enabled:
            self.touched.add(obj_id)
            self.removed.discard(obj_id)
        return record

    def replace(self, record: R) -> None:
        """Put ``record`` in the place of the record with its id (a new value of it: a tenant being built)."""
        obj_id = record.id  # type: ignore[attr-defined]
        if obj_id not in self._rows:
            raise KeyError(obj_id)
        self._rows[obj_id] = record
        if self._log.enabled:
            self.touched.add(obj_id)

    def remove(self, obj_id: str) -> None:
        if self._rows.pop(obj_id, None) is None:
            return
        if self._index is not None:
            self._index.remove(obj_id)
        if self._log.enabled:
            self.touched.discard(obj_id)
            self.removed.add(obj_id)

    def final(self, record: R) -> bool:
        return self._final(record)

    def page(self, after: str | None, limit: int, keep: Callable[[R], bool] | None = None
             ) -> tuple[list[R], bool] | None:
        """A page newest first (see :meth:`OrderedIndex.page`), for reading only; None: unknown cursor."""
        assert self._index is not None, f"{self.name} is not listed"
        rows = self._rows
        result = self._index.page(after, limit, None if keep is None else (lambda i: keep(rows[i])))
        if result is None:
            return None
        ids, has_more = result
        return [rows[i] for i in ids], has_more

    def drain(self) -> tuple[set[str], set[str]]:
        """(touched, removed) since the last drain; the journal writes them."""
        out = (self.touched, self.removed)
        self.touched, self.removed = set(), set()
        return out


class TimelineEvent(StrEnum):
    """What the timeline can hold: ``<kind>.<what happens>``; :attr:`table` is the table of the record."""

    RESOURCE_DEQUEUE = "resource.dequeue"
    RESOURCE_READY = "resource.ready"
    RESOURCE_EXPIRE = "resource.expire"
    RESOURCE_STOPPED = "resource.stopped"
    SESSION_RUNNING = "session.running"
    SESSION_STOPPED = "session.stopped"
    OPERATION_START = "operation.start"
    OPERATION_COMPLETE = "operation.complete"
    SHAPING_PHASE = "shaping.phase"
    SHAPING_CANCELLED = "shaping.cancelled"
    ACTION_RUN = "action.run"

    @property
    def table(self) -> str:
        return EVENT_TABLES[self.value.partition(".")[0]]


EVENT_TABLES: Mapping[str, str] = MappingProxyType({"resource": "resources", "session": "sessions",
                                                     "operation": "operations", "shaping": "shaping_jobs",
                                                     "action": "actions"})

Entry = tuple[float, int, str, str]  # (when, sequence number: ties run in scheduling order, event, record id)


class Timeline:
    """The transitions due later, in time order (a heap); notes what it gained and what became done."""

    __slots__ = ("heap", "seq", "_log", "added", "done")

    def __init__(self, log: ChangeLog) -> None:
        self.heap: list[Entry] = []
        self.seq = 0
        self._log = log
        self.added: dict[int, Entry] = {}   # scheduled since the last drain, and not done yet
        self.done: list[int] = []           # sequence numbers of entries the journal holds that are done

    def schedule(self, at: float, event: TimelineEvent, obj_id: str) -> None:
        self.seq += 1
        entry = (at, self.seq, event._value_, obj_id)
        heapq.heappush(self.heap, entry)
        if self._log.enabled:
            self.added[self.seq] = entry

    def pop_due(self, now: float) -> Entry | None:
        heap = self.heap
        if heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._log.enabled and self.added.pop(entry[1], None) is None:
                self.done.append(entry[1])
            return entry
        return None

    def load(self, entries: list[Entry], seq: int) -> None:
        self.heap = list(entries)
        heapq.heapify(self.heap)
        self.seq = max(seq, max((e[1] for e in entries), default=0))

    def entries(self) -> list[Entry]:
        return sorted(self.heap)

    def __len__(self) -> int:
        return len(self.heap)

    def drain(self) -> tuple[list[Entry], list[int]]:
        out = (sorted(self.added.values()), self.done)
        self.added, self.done = {}, []
        return out


class KeyedLog(Generic[R]):
    """A mapping that notes its new and dropped keys (idempotency keys, the model registry)."""

    __slots__ = ("_items", "_log", "added", "dropped")

    def __init__(self, log: ChangeLog) -> None:
        self._items: dict[Any, R] = {}
        self._log = log
        self.added: set[Any] = set()
        self.dropped: set[Any] = set()

    def get(self, key: Any) -> R | None:
        return self._items.get(key)

    def __getitem__(self, key: Any) -> R:
        return self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> Iterator[tuple[Any, R]]:
        return iter(self._items.items())

    def put(self, key: Any, value: R) -> None:
        self._items[key] = value
        if self._log.enabled:
            self.added.add(key)
            self.dropped.discard(key)

    def drop(self, key: Any) -> None:
        if self._items.pop(key, None) is not None and self._log.enabled:
            self.added.discard(key)
            self.dropped.add(key)

    def load(self, items: Mapping[Any, R]) -> None:
        self._items = dict(items)

    def drain(self) -> tuple[dict[Any, R], set[Any]]:
        out = ({k: self._items[k] for k in self.added if k in self._items}, self.dropped)
        self.added, self.dropped = set(), set()
        return out


class Models:
    """Each session's simulated model and the weights its generator samples from.

    ``live``: the model a session trains (built on its first operation); ``published``: the weights its
    generator applies (version, weights); ``staged``: weights published in the background, applied by the
    next sample. Weights are immutable snapshots, replaced, never edited; a model's ``version`` moves when
    it changes. ``files``: checkpoint files generated once (derived, not journaled).
    """

    __slots__ = ("live", "published", "staged", "files", "bases", "_log", "touched", "weights_touched")

    def __init__(self, log: ChangeLog, bases: BaseModels) -> None:
        self.bases = bases                      # the runtime's base models (compute.BaseModels), shared
        self.live: dict[str, SessionModel] = {}
        self.published: dict[str, tuple[int, Weights]] = {}
        self.staged: dict[str, tuple[int, Weights]] = {}
        self.files: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
        self._log = log
        self.touched: set[str] = set()          # sessions whose model may have changed
        self.weights_touched: set[str] = set()  # sessions whose published or staged weights changed

    def model(self, session_id: str) -> SessionModel | None:
        model = self.live.get(session_id)
        if model is not None and self._log.noting:
            self.touched.add(session_id)
        return model

    def put_model(self, session_id: str, model: SessionModel) -> None:
        self.live[session_id] = model
        if self._log.enabled:
            self.touched.add(session_id)

    def publish(self, session_id: str, version: int, weights: Weights) -> None:
        self.published[session_id] = (version, weights)
        self._weights_changed(session_id)

    def stage(self, session_id: str, version: int, weights: Weights) -> None:
        self.staged[session_id] = (version, weights)
        self._weights_changed(session_id)

    def discard_staged(self, session_id: str) -> None:
        """Forget weights still staged (a newer publish has overtaken them)."""
        if self.staged.pop(session_id, None) is not None:
            self._weights_changed(session_id)

    def apply_staged(self, session_id: str) -> tuple[int, Weights] | None:
        """Make the staged weights the published ones; returns them (None when nothing was staged)."""
        staged = self.staged.pop(session_id, None)
        if staged is not None:
            self.published[session_id] = staged
            self._weights_changed(session_id)
        return staged

    def _weights_changed(self, session_id: str) -> None:
        if self._log.enabled:
            self.weights_touched.add(session_id)

    def drain(self) -> tuple[set[str], set[str]]:
        out = (self.touched, self.weights_touched)
        self.touched, self.weights_touched = set(), set()
        return out


@dataclass(slots=True)
class OutputBudget:
    """The large operation outputs a tenant still keeps, oldest first (operation id, JSON bytes), and their
    total; None until the domain first needs it (then built from the operations). Derived: not journaled."""

    kept: deque[tuple[str, int]] | None = None
    total: int = 0


def _operation_final(op: Operation) -> bool:
    return records.is_terminal(op.status, OperationStatus)


def _payload_final(p: Payload) -> bool:
    return p.released_by is not None  # uploaded bytes stay until an operation has read them


def _never_final(record: Any) -> bool:
    # Resources and sessions: a stopped session can still be renamed (PATCH), a stopped resource keeps
    # being counted; shaping jobs are few. Their journal memo is a hash, which costs little.
    return False


def _action_final(action: ScheduledAction) -> bool:
    return action.status != records.ActionStatus.SCHEDULED


def _always_final(record: Any) -> bool:
    return True  # checkpoints never change once made


class Tenant:
    """Everything one project owns. Changed only inside a unit of work (``Runtime.unit_of_work``)."""

    TABLES = ("resources", "sessions", "operations", "checkpoints", "payloads", "shaping_jobs", "files", "actions")

    def __init__(self, project: str, seed: int, events: EventSink, *, journaled: bool = False,
                 epoch: str | None = None, bases: BaseModels | None = None) -> None:
        self.project = project
        self.events = events
        self.changes = ChangeLog(journaled)
        log = self.changes
        self.ids = IdFactory(seed, project)
        # A random nonce of this incarnation of the tenant: presigned URLs are signed with it, so a URL of a
        # tenant that was reset names nothing, even though the seeded ids come back the same.
        self.epoch = epoch or secrets.token_hex(8)
        self.resources: Table[ModelResource] = Table("resources", ModelResource, log, listed=True,
                                                     final=_never_final)
        self.sessions: Table[Session] = Table("sessions", Session, log, listed=True, final=_never_final)
        self.operations: Table[Operation] = Table("operations", Operation, log, listed=False, final=_operation_final)
        self.checkpoints: Table[Checkpoint] = Table("checkpoints", Checkpoint, log, listed=True, final=_always_final)
        self.payloads: Table[Payload] = Table("payloads", Payload, log, listed=False, final=_payload_final)
        self.shaping_jobs: Table[ShapingJob] = Table("shaping_jobs", ShapingJob, log, listed=True,
                                                     final=_never_final)
        # The Files API's files (a shaping job's calibration dataset); their bytes live in the record.
        self.files: Table[File] = Table("files", File, log, listed=True, final=_never_final)
        # What the control plane scheduled for a virtual time (emulator.domain.actions), in scheduling order.
        self.actions: Table[ScheduledAction] = Table("actions", ScheduledAction, log, listed=True,
                                                     final=_action_final)
        self.timeline = Timeline(log)
        # (session id, operation kind, key) -> operation id
        self.idempotency: KeyedLog[str] = KeyedLog(log)
        # model registry: ml_ id -> artifact info (what checkpoints and shaping jobs registered)
        self.registry: KeyedLog[Artifact] = KeyedLog(log)
        self.gpu_queue_tail: dict[str, float] = {}   # when the last queued resource leaves, per GPU type
        # Derived from what is journaled, kept up to date by the domain and rebuilt when a tenant is built from a
        # document (:meth:`rebuild`), never written:
        self.gpu_queue: dict[str, list[str]] = {}    # PENDING resource ids in queue order, per GPU type
        self.sessions_of: dict[str, list[str]] = {}  # a resource's sessions, in creation order
        self.queues: dict[str, list[str]] = {}       # a session's unfinished operations, in submission order
        self.inflight: dict[str, int] = {}           # a resource's unfinished operations (of all its sessions)
        self.expiry_armed: set[str] = set()          # resources whose expiry event is in the timeline
        self.models = Models(log, bases if bases is not None else BaseModels())
        self.outputs = OutputBudget()
        # Each session's finished operations, oldest first, for the retention limit; None until the domain first
        # needs them (then built from the operations). Derived: not journaled.
        self.finished: dict[str, deque[str]] | None = None
        self.lora_configs: dict[LoraConfig, LoraConfig] = {}  # interned, shared by sessions (derived)
        # What settling asked of the services beyond the tenant (a scheduled fault rule to add or remove), for
        # the runtime to carry out right after: the domain reaches no service itself. Drained at once.
        self.outbox: list[tuple[ScheduledAction, float]] = []

    def rebuild(self) -> None:
        """The derived indexes, from the records and the timeline (a tenant just built from a document)."""
        self.gpu_queue, self.sessions_of, self.queues, self.inflight = {}, {}, {}, {}
        for r in self.resources.ordered():
            if r.status == ResourceStatus.PENDING:
                self.gpu_queue.setdefault(r.gpu_type, []).append(r.id)
        for s in self.sessions.ordered():
            self.sessions_of.setdefault(s.model_resources_id, []).append(s.id)
        for op in self.operations.values():  # (in submission order)
            if not records.is_terminal(op.status, OperationStatus):
                self.queues.setdefault(op.session_id, []).append(op.id)
                rid = self.sessions.peek(op.session_id).model_resources_id
                self.inflight[rid] = self.inflight.get(rid, 0) + 1
        self.expiry_armed = {obj_id for _at, _seq, event, obj_id in self.timeline.heap
                             if event == TimelineEvent.RESOURCE_EXPIRE}

    def log(self, at: float, kind: str, obj_id: str, old: str | None, new: str, **extra: Any) -> None:
        """A status change (or a creation, ``old`` None) for the event log, at its virtual time."""
        self.events.transition(at, self.project, kind, obj_id, old, new, extra or None)

    def table(self, name: str) -> Table[Any]:
        table: Table[Any] = getattr(self, name)
        return table

    def tables(self) -> Iterator[Table[Any]]:
        for name in self.TABLES:
            yield getattr(self, name)

    def forget_changes(self) -> None:
        """Drop what the parts noted (a journal just wrote the whole tenant)."""
        for table in self.tables():
            table.drain()
        self.timeline.drain()
        self.idempotency.drain()
        self.registry.drain()
        self.models.drain()
