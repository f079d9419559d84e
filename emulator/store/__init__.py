"""Tenant-scoped state: a :class:`~emulator.store.tenant.Tenant` per project in one
:class:`~emulator.store.memory.Store`, its export and import (:mod:`~emulator.store.snapshot`) and its
journal (:mod:`~emulator.store.persistence`). The domain changes a tenant only inside a unit of work
(``Runtime.unit_of_work``); nothing above the store assumes one process beyond that.
"""

from emulator.store.memory import EventLog, Store
from emulator.store.tenant import OrderedIndex, Table, Tenant, TimelineEvent

__all__ = ["EventLog", "OrderedIndex", "Store", "Table", "Tenant", "TimelineEvent"]
