"""Presigned URLs: signed tokens that grant one kind of access to one object, for a while.

Emulates the real service's object-store URLs (payloads, checkpoint files, Files API uploads): the token is the
only credential; unknown, forged or foreign is 404, expired 403. Differs: the real lifetime is undocumented;
one hour, the common S3 default [inferred]. Nothing is stored per URL (an HMAC under the state's secret).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

TTL_SECONDS = 3600.0
KINDS = MappingProxyType({"payload-upload": "u", "payload-download": "d", "checkpoint": "c", "file-upload": "f"})
_KIND_OF_CODE = MappingProxyType({code: kind for kind, code in KINDS.items()})
_MAC_BYTES = 16


@dataclass(frozen=True, slots=True)
class Grant:
    project: str
    epoch: str                # the tenant incarnation the URL was issued in
    kind: str                 # one of KINDS
    object_id: str            # payload id, or checkpoint id
    expires_at: float
    variant: str | None = None


class GrantRefused(LookupError):
    """No valid grant behind the token (``status`` 404), or an expired one (403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Presigner:
    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret or secrets.token_hex(32)
        self._key = bytes.fromhex(self.secret) if _is_hex(self.secret) else self.secret.encode()

    def issue(self, project: str, epoch: str, kind: str, object_id: str, now: float, *,
              variant: str | None = None) -> str:
        # Expiry in whole milliseconds: the token is text, and the same text must verify after a restart.
        expires_ms = int(round((now + TTL_SECONDS) * 1000))
        claim = "|".join((project, epoch, KINDS[kind], object_id, str(expires_ms), variant or "")).encode()
        return f"{_b64(claim)}.{_b64(self._mac(claim))}"

    def redeem(self, token: str, kinds: tuple[str, ...], now: float | Callable[[str], float]) -> Grant:
        """The grant a token carries, if it is genuine, for one of ``kinds`` and not expired. ``now`` may be a
        function of the grant's project (a tenant may have a clock of its own)."""
        claim_text, _, mac_text = token.partition(".")
        try:
            claim, mac = _unb64(claim_text), _unb64(mac_text)
        except (ValueError, UnicodeError):
            raise GrantRefused(404, "no such object (unknown or revoked URL)") from None
        if not hmac.compare_digest(mac, self._mac(claim)):
            raise GrantRefused(404, "no such object (unknown or revoked URL)")
        project, epoch, code, object_id, expires_ms, variant = claim.decode().split("|")
        kind = _KIND_OF_CODE[code]
        if kind not in kinds:
            raise GrantRefused(404, "no such object (unknown or revoked URL)")
        expires_at = int(expires_ms) / 1000
        if (now(project) if callable(now) else now) >= expires_at:
            raise GrantRefused(403, "this presigned URL has expired; request a new one")
        return Grant(project, epoch, kind, object_id, expires_at, variant or None)

    def _mac(self, claim: bytes) -> bytes:
        return hmac.new(self._key, claim, hashlib.sha256).digest()[:_MAC_BYTES]


def claimed_project(token: str) -> str | None:
    """The project a token names, unverified (the claim is readable: a sharded cluster's balancer routes a
    URL by it, and a shard that gets another shard's URL says so rather than "unknown")."""
    try:
        return _unb64(token.partition(".")[0]).decode().split("|", 1)[0] or None
    except (ValueError, UnicodeError):
        return None


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return len(text) >= 32
