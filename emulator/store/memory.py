"""Every project's :class:`~emulator.store.tenant.Tenant`, the event log, the seed and the URL signer.

Tenants are created on their first write and never by a read (a read of an unknown project sees an empty
tenant that is not kept). Lists are served from each table's creation-order index, so a page costs
O(limit) without filters, whatever the total count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from emulator.clock import rfc3339
from emulator.compute.bases import BaseModels
from emulator.jsontypes import Json
from emulator.store.blobs import BlobStore
from emulator.store.presigned import Presigner
from emulator.store.records import BodyDecoder
from emulator.store.tenant import Tenant


@dataclass(frozen=True, slots=True)
class SavedStore:
    """What :meth:`Store.save` keeps."""

    tenants: dict[str, Tenant]
    seed: int
    seeds: dict[str, int]
    presigner: Presigner


class EventLog:
    """The timeline of transitions, requests and faults, for ``GET /_emulator/events`` and the dashboard.

    Transitions are kept as compact tuples and rendered only when read: the log is the largest
    per-object cost of an idle session otherwise. Bounded: the oldest entries go first.
    """

    def __init__(self, maxlen: int = 50_000) -> None:
        self._events: deque[tuple[Any, ...]] = deque(maxlen=maxlen)
        self._seq = 0

    @property
    def last_seq(self) -> int:
        return self._seq

    def mark(self) -> EventMark:
        """Where the log is now, for :meth:`rollback`."""
        return self._events, self._seq

    def rollback(self, mark: EventMark) -> None:
        """Forget what was logged since ``mark`` (what a unit of work the journal refused logged), and undo a
        :meth:`clear` since. Entries the cap pushed out meanwhile stay out."""
        events, seq = mark
        while events and events[-1][0] > seq:
            events.pop()
        self._events, self._seq = events, seq

    def discard(self, seq: int) -> None:
        """Forget one entry (a fault logged for a request that was then refused)."""
        events = self._events
        for i in range(len(events) - 1, -1, -1):
            if events[i][0] == seq:
                del events[i]
                return
            if events[i][0] < seq:
                return

    def append(self, event: dict[str, Json]) -> None:
        self._seq += 1
        self._events.append((self._seq, event.get("project"), event))

    def transition(self, at: float, project: str, kind: str, obj_id: str, old: str | None, new: str,
                   extra: dict[str, Json] | None) -> None:
        self._seq += 1
        self._events.append((self._seq, project, at, kind, obj_id, old, new, extra))

    @staticmethod
    def _render(entry: tuple[Any, ...]) -> dict[str, Json]:
        if len(entry) == 3:
            return {**entry[2], "seq": entry[0]}
        seq, project, at, kind, obj_id, old, new, extra = entry
        return {"type": "transition", "at": rfc3339(at), "project": project, "kind": kind, "id": obj_id,
                "from": old, "to": new, **(extra or {}), "seq": seq}

    def since(self, seq: int = 0, project: str | None = None, limit: int = 1000) -> list[dict[str, Json]]:
        """Events after ``seq`` (of one project, or all), oldest first, at most ``limit``. Walks back from the
        newest, so a reader that keeps up (the dashboard's stream) costs what is new, not the whole log."""
        picked: list[tuple[Any, ...]] = []
        for entry in reversed(self._events):
            if entry[0] <= seq:
                break
            if project is None or entry[1] == project:
                picked.append(entry)
        picked.reverse()
        return [self._render(e) for e in picked[:limit]]

    def clear(self, project: str | None = None) -> None:
        # A new deque, not the old one emptied: a unit of work's mark keeps the old, to put it back.
        events = self._events
        self._events = deque((e for e in events if project is not None and e[1] != project), maxlen=events.maxlen)


EventMark = tuple[deque[tuple[Any, ...]], int]   # EventLog.mark()


class Store:
    """Every project's tenant. ``journaled``: tenants note their changes for a journal (``--state-file``).
    ``blobs``: where uploaded bytes go (by default a temporary directory of this store's)."""

    def __init__(self, seed: int = 0, *, journaled: bool = False, blobs: BlobStore | None = None,
                 bodies: BodyDecoder | None = None) -> None:
        self.seed = seed
        self.journaled = journaled
        self.blobs = blobs if blobs is not None else BlobStore()
        self.bodies = bodies        # how a state document's operation bodies are read (the registry of kinds)
        self.bases = BaseModels()   # the base models every tenant's sessions share (this store's own)
        self.events = EventLog()
        self.presigner = Presigner()
        self._tenants: dict[str, Tenant] = {}
        self._seeds: dict[str, int] = {}   # tenants seeded apart from the global seed

    def seed_for(self, project: str) -> int:
        """The tenant's own seed (a reset of that tenant with a seed), else the global one."""
        return self._seeds.get(project, self.seed) if self._seeds else self.seed

    def new_tenant(self, project: str, epoch: str | None = None) -> Tenant:
        """A tenant that is not (yet) part of the store."""
        return Tenant(project, self.seed_for(project), self.events, journaled=self.journaled, epoch=epoch,
                      bases=self.bases)

    def get(self, project: str) -> Tenant | None:
        return self._tenants.get(project)

    def open(self, project: str) -> Tenant:
        """The project's tenant, created on first use."""
        tenant = self._tenants.get(project)
        if tenant is None:
            tenant = self._tenants[project] = self.new_tenant(project)
        return tenant

    def projects(self) -> list[str]:
        return list(self._tenants)

    def blob_names(self) -> set[str]:
        """Every blob a record names: what a sweep of the blob directory keeps."""
        names: set[str] = set()
        for tenant in self._tenants.values():
            for table in (tenant.files, tenant.payloads):
                names.update(record.blob for record in table.values() if record.blob is not None)
        return names

    def save(self) -> SavedStore:
        """Which tenants there are (the objects, not copies), the seeds, the URL signer and the event log's
        mark: what :meth:`reset`, :meth:`put` and :meth:`drop` change, for :meth:`put_back` (a change the
        journal refused). Changes inside a tenant are not in it: the journal reloads such a tenant; nor is
        the event log (:meth:`EventLog.mark`)."""
        return SavedStore(dict(self._tenants), self.seed, dict(self._seeds), self.presigner)

    def put_back(self, saved: SavedStore) -> None:
        self._tenants = dict(saved.tenants)
        self.seed, self._seeds, self.presigner = saved.seed, dict(saved.seeds), saved.presigner

    def put(self, tenant: Tenant) -> None:
        """Install a tenant built elsewhere (a state import, a journal's rollback)."""
        self._tenants[tenant.project] = tenant
        if tenant.ids.seed != self.seed:
            self._seeds[tenant.project] = tenant.ids.seed
        else:
            self._seeds.pop(tenant.project, None)

    def drop(self, project: str) -> None:
        """Remove a tenant without touching the event log (a journal undoing a change it could not write)."""
        self._tenants.pop(project, None)

    def reset(self, project: str | None = None, seed: int | None = None) -> Tenant | None:
        """Forget every tenant (``seed``: the new global seed), or one (``seed``: that tenant's own seed, and
        the tenant is created at once, so that a journal keeps the seed of an empty tenant; without it the
        tenant takes the global seed again). Returns the tenant so created."""
        if project is None:
            if seed is not None:
                self.seed = seed
            self._seeds.clear()
            self._tenants.clear()
            self.events.clear()
            return None
        self._tenants.pop(project, None)
        self.events.clear(project)
        self._seeds.pop(project, None)
        if seed is None:
            return None
        self._seeds[project] = seed
        return self.open(project)
