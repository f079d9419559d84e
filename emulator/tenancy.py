"""Tenancy: which user and project an API key stands for, and the admin token kept apart from them.

By default every token is its own user in its own project (ids from the SHA-256 of its UTF-8 bytes, stable
across restarts and wherever the token came from); ``--tokens-file`` lists tokens and can put several users in
one project. The admin token opens the control plane only, never the vendor API.
"""

from __future__ import annotations

import hashlib
import hmac
import threading

from emulator import fixture_files
from emulator.config import ConfigError, load_data_file
from emulator.domain.context import Principal

# The principals of default tokens are cached (hashing a token costs more than the lookup); the cache is
# bounded in bytes, not entries, because a token's length is the client's choice (up to --max-header-bytes).
CACHE_BYTES = 16 << 20
ENTRY_OVERHEAD = 400  # a Principal, its two ids and the dict slot, measured with sys.getsizeof


class Tenancy:
    def __init__(self, tokens: dict[str, Principal] | None = None, admin_token: str | None = None,
                 cache_bytes: int = CACHE_BYTES) -> None:
        self._tokens = tokens
        self._admin_token = admin_token
        self._principals: dict[str, Principal] = {}
        self._cached_bytes = 0
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, tokens_file: str | None, admin_token: str | None) -> Tenancy:
        if not tokens_file:
            return cls(None, admin_token)
        try:  # a shipped tokens file by name (fixtures/tokens/NAME.yaml), or a path
            path = fixture_files.resolve("tokens", tokens_file)
        except LookupError as exc:
            raise ConfigError(f"--tokens-file {tokens_file}: {exc}") from exc
        return cls(load_tokens(path), admin_token)

    def principal_for(self, token: str) -> Principal | None:
        """The caller behind an API key, or None when the key is refused."""
        if self._admin_token and self.is_admin(token):
            return None
        if self._tokens is not None:
            return self._tokens.get(token)
        principal = self._principals.get(token)
        if principal is None:
            digest = hashlib.sha256(token.encode()).hexdigest()[:16]
            principal = Principal(user=f"user_{digest}", project=f"proj_{digest}", token=token)
            size = len(token) + ENTRY_OVERHEAD
            with self._lock:
                if token not in self._principals:
                    # Oldest first out: a stream of distinct tokens must not grow memory.
                    while self._principals and self._cached_bytes + size > self._cache_bytes:
                        old = next(iter(self._principals))
                        del self._principals[old]
                        self._cached_bytes -= len(old) + ENTRY_OVERHEAD
                    if size <= self._cache_bytes:
                        self._principals[token] = principal
                        self._cached_bytes += size
        return principal

    @property
    def keys(self) -> list[str] | None:
        """The API keys of the tokens file, in its order; None when every key is a tenant of its own."""
        return None if self._tokens is None else list(self._tokens)

    @property
    def cached_bytes(self) -> int:
        """What the principal cache holds, as it counts it (for tests and the reliability figures)."""
        return self._cached_bytes

    def project_for_token(self, token: str) -> str | None:
        principal = self.principal_for(token)
        return principal.project if principal else None

    @property
    def admin_required(self) -> bool:
        return bool(self._admin_token)

    def is_admin(self, token: str | None) -> bool:
        expected = self._admin_token
        return bool(expected and token and hmac.compare_digest(token.encode(), expected.encode()))


def load_tokens(path: str) -> dict[str, Principal]:
    data = load_data_file(path, "--tokens-file") or {}
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, dict):
        raise ConfigError(f"--tokens-file {path} must map 'tokens' to {{TOKEN: {{user, project}}}}")
    out = {}
    for token, who in tokens.items():
        if not isinstance(who, dict) or not who.get("user") or not who.get("project"):
            raise ConfigError(f"--tokens-file {path}: token entries need 'user' and 'project'")
        out[str(token)] = Principal(user=str(who["user"]), project=str(who["project"]), token=str(token))
    return out
