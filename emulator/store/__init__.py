"""Tenant-scoped state. One interface (:class:`~emulator.store.memory.Store`) so that a shared
backend could later serve several emulator processes; nothing above it assumes one process
beyond ``transaction(project)``.
"""

from emulator.store.memory import EventLog, OrderedIndex, Store, TenantState

__all__ = ["EventLog", "OrderedIndex", "Store", "TenantState"]
