"""Seeded ids and every other value derived from the seed.

Emulates the real service's ids (UUIDs for resources, sessions, operations, checkpoints; ``shp-quant-...``
shaping jobs; ``ml_...`` / ``rv_...`` registry artifacts). Everything derived from the seed goes through
:func:`derive`, so the same seed and requests give the same bytes; exported id counters are never reused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# A hex digit with its top two bits set to 10 (a UUID's variant digit), by its digit.
_VARIANT = MappingProxyType({d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"})


def _material(seed: int, *parts: object) -> bytes:
    return ":".join(map(str, (seed, *parts))).encode()


def derive(seed: int, *parts: object) -> bytes:
    """A 32-byte value determined by the seed and the parts (SHA-256 of ``seed:part:part...``)."""
    return hashlib.sha256(_material(seed, *parts)).digest()


def derive_int(seed: int, *parts: object, bits: int = 32) -> int:
    """:func:`derive` as an unsigned integer of ``bits`` bits (a multiple of 8)."""
    return int.from_bytes(derive(seed, *parts)[: bits // 8], "big")


class IdFactory:
    """Ids from the seed, the scope and a counter. ``taken``, when set, names ids in use: one of them is never
    handed out again (the counter moves on), whatever the counter a state document brought."""

    __slots__ = ("seed", "scope", "counter", "taken", "_prefixes")

    def __init__(self, seed: int, scope: str, counter: int = 0) -> None:
        self.seed = seed
        self.scope = scope
        self.counter = counter
        self.taken: Callable[[str], bool] | None = None
        self._prefixes: dict[str, Any] = {}

    def _hash(self, kind: str) -> Any:
        """The SHA-256 of ``derive(seed, scope, kind, counter)``, the counter moved on: the hash of the constant
        ``seed:scope:kind:`` prefix is kept per kind and copied, since building a new SHA-256 object costs more
        than hashing an id."""
        self.counter += 1
        prefix = self._prefixes.get(kind)
        if prefix is None:
            prefix = self._prefixes[kind] = hashlib.sha256(_material(self.seed, self.scope, kind, ""))
        h = prefix.copy()
        h.update(str(self.counter).encode())
        return h

    def _digest(self, kind: str) -> bytes:
        """``derive(seed, scope, kind, counter)``."""
        return self._hash(kind).digest()

    def uuid(self, kind: str = "") -> str:
        """What ``str(uuid.UUID(bytes=digest[:16], version=4))`` gives, formatted directly (it runs for
        every object created, and the uuid module's checks cost more than the hash), from the hash's hex."""
        while True:
            x = self._hash(kind).hexdigest()
            # version 4 (the 13th digit), RFC 4122 variant (the 17th digit's top two bits 10)
            made = f"{x[:8]}-{x[8:12]}-4{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"
            if self.taken is None or not self.taken(made):
                return made

    def token(self, prefix: str, length: int = 21, kind: str = "") -> str:
        made = self._token(prefix, length, kind)
        while self.taken is not None and self.taken(made):
            made = self._token(prefix, length, kind)
        return made

    def _token(self, prefix: str, length: int, kind: str) -> str:
        n = int.from_bytes(self._digest(kind or prefix), "big")
        chars = []
        for _ in range(length):
            n, r = divmod(n, len(_ALNUM))
            chars.append(_ALNUM[r])
        return prefix + "".join(chars)
