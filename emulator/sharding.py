"""Which shard of a cluster holds a tenant: the one function the emulator and its balancer both compute.

Emulates nothing of the real API (it is one service): this is how one emulator serves a whole team from
several processes (``together-rl-emulator cluster``, docs/cluster.md). Tenants never
share state, so each process (a *shard*) holds only the tenants whose project hashes to it, and HAProxy
in front sends every request of a tenant to that shard, computing the same function from the request:

    shard(project) = crc32(project as UTF-8) mod N

``crc32`` is the IEEE CRC-32 of zlib, PNG and Ethernet (HAProxy's ``crc32`` converter, Python's
``zlib.crc32``) and N the fixed number of shards. The project of a key is the tenancy's
(:mod:`emulator.tenancy`): ``proj_`` + the first 16 hex digits of the SHA-256 of the key by default,
or what ``--tokens-file`` says (HAProxy reads it from a map file generated from the tokens file).

Why not HAProxy's own consistent hashing: a hash ring moves a key to another server when its server is
down, and a tenant routed to a shard that does not hold its state would see it missing (or start a second
copy). The shard count is fixed for the life of the state files; a shard that is down makes its own
tenants wait (503 from the balancer, which the SDK retries) and moves nobody.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass

SHARD = re.compile(r"(\d+)/(\d+)")
MAX_SHARDS = 256


def shard_of(project: str, count: int) -> int:
    """The shard (0 .. count-1) that holds ``project``'s tenant."""
    return zlib.crc32(project.encode("utf-8")) % count


def default_project(api_key: str) -> str:
    """The project of an API key without ``--tokens-file`` (as :class:`emulator.tenancy.Tenancy` derives it)."""
    return "proj_" + hashlib.sha256(api_key.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Shard:
    """This process's place in a cluster: shard ``index`` of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the shard count must be 1-{MAX_SHARDS}, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"the shard index must be 0-{self.count - 1} (counting from 0), not {self.index}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``I/N``: shard I (from 0) of N."""
        match = SHARD.fullmatch(text.strip())
        if match is None:
            raise ValueError("expected I/N (shard I of N, counting from 0), e.g. 0/2")
        return cls(int(match.group(1)), int(match.group(2)))

    def owns(self, project: str) -> bool:
        return shard_of(project, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
