"""Presigned URLs: unguessable tokens that grant one kind of access to one object, for a while.

Emulates the object-store URLs of the real service (payload upload and download, checkpoint files):
the token is the only credential, like a presigned URL's signature. Tokens come from ``secrets``
(deliberately not from the seed: anyone who knows the seed and the ids could otherwise derive them),
expire after :data:`TTL_SECONDS` of virtual time, and upload tokens work once.

Differences from the real API: the lifetime of the real URLs is not documented; one hour is the common
default of S3-style presigned URLs [inferred].
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import asdict, dataclass
from typing import Any

TTL_SECONDS = 3600.0
KINDS = ("payload-upload", "payload-download", "checkpoint")


@dataclass(slots=True)
class Grant:
    project: str
    kind: str                 # one of KINDS
    object_id: str            # payload id, or checkpoint id
    expires_at: float
    variant: str | None = None
    used: bool = False        # upload grants work once


class GrantRefused(LookupError):
    """No grant for the token (``status`` 404), or an expired or used one (403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Presigned:
    def __init__(self) -> None:
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()
        self._prune_at = 1024

    def issue(self, project: str, kind: str, object_id: str, now: float, *, variant: str | None = None) -> str:
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._prune(now)
            self._grants[token] = Grant(project, kind, object_id, now + TTL_SECONDS, variant)
        return token

    def redeem(self, token: str, kinds: tuple[str, ...], now: float) -> Grant:
        """The grant behind ``token`` for one of ``kinds``; an upload grant is used up by this call."""
        with self._lock:
            grant = self._grants.get(token)
            if grant is None or grant.kind not in kinds:
                raise GrantRefused(404, "no such object (unknown or revoked URL)")
            if now >= grant.expires_at:
                raise GrantRefused(403, "this presigned URL has expired; request a new one")
            if grant.used:
                raise GrantRefused(403, "this upload URL was already used; request a new one")
            if grant.kind == "payload-upload":
                grant.used = True
            return grant

    def clear(self, project: str | None = None) -> None:
        with self._lock:
            if project is None:
                self._grants.clear()
            else:
                self._grants = {t: g for t, g in self._grants.items() if g.project != project}

    def _prune(self, now: float) -> None:
        # Amortised clean-up of expired and used grants, so a long-running server does not accumulate them.
        if len(self._grants) >= self._prune_at:
            self._grants = {t: g for t, g in self._grants.items() if g.expires_at > now and not g.used}
            self._prune_at = max(1024, 2 * len(self._grants))

    def export(self) -> dict[str, Any]:
        with self._lock:
            return {token: asdict(g) for token, g in self._grants.items()}

    def load(self, data: dict[str, Any]) -> None:
        with self._lock:
            self._grants = {token: Grant(**g) for token, g in data.items()}
