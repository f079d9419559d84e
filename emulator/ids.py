"""Seeded id factory.

Emulates: the real service's ids (UUIDs for resources, sessions, operations and checkpoints;
``shp-quant-...`` for shaping jobs; ``ml_...`` / ``rv_...`` for model-registry artifacts).
Ids are derived from (seed, tenant, counter) with SHA-256, so the same seed and the same requests
give the same ids, and the counter is part of exported state so a restored store never reuses one.
"""

from __future__ import annotations

import hashlib
import uuid

_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class IdFactory:
    __slots__ = ("seed", "scope", "counter")

    def __init__(self, seed: int, scope: str, counter: int = 0) -> None:
        self.seed = seed
        self.scope = scope
        self.counter = counter

    def _digest(self, kind: str) -> bytes:
        self.counter += 1
        return hashlib.sha256(f"{self.seed}:{self.scope}:{kind}:{self.counter}".encode()).digest()

    def uuid(self, kind: str = "") -> str:
        return str(uuid.UUID(bytes=self._digest(kind)[:16], version=4))

    def token(self, prefix: str, length: int = 21, kind: str = "") -> str:
        digest = self._digest(kind or prefix)
        n = int.from_bytes(digest, "big")
        chars = []
        for _ in range(length):
            n, r = divmod(n, len(_ALNUM))
            chars.append(_ALNUM[r])
        return prefix + "".join(chars)

    def int63(self, kind: str = "") -> int:
        return int.from_bytes(self._digest(kind)[:8], "big") >> 1
