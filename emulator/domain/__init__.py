"""Pure domain rules: state machines, validation of business rules, no HTTP and no I/O.

Functions take the tenant state, a :class:`~emulator.domain.context.Ctx` (the time ``now``, the
id factory, the caller) and plain request data; they mutate the state and return records, or raise
:mod:`emulator.errors` exceptions that one renderer maps to HTTP.
"""
