"""Cross-site guards: which Host the server answers to, which Origin may call it, what a write must declare.

Without an admin token a page on another site could drive the control plane from the user's browser. So:
Host must name this server (403 ``host_not_allowed``), a browser's Origin must be its own (403
``cross_origin_refused``), a write with a body must be JSON or multipart (415; [inferred]: undocumented).
"""

from __future__ import annotations

import ipaddress
from types import MappingProxyType
from urllib.parse import urlsplit

from emulator.config import Config
from emulator.http.asgi import HEADERS, Scope, declares_body, headers_of

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = MappingProxyType({"http": 80, "https": 443})
_VERDICTS_KEPT = 256


def allowed_host_names(host: str, allowed_hosts: tuple[str, ...] = ()) -> frozenset[str] | None:
    """The host names (lower case, no port) a server bound to ``host`` answers to; None when any is."""
    extra = {name.strip("[]").rstrip(".").lower() for name in allowed_hosts}
    if "*" in extra:
        return None
    bind = host.strip("[]").lower()
    if bind in WILDCARD_BINDS and not extra:
        return None
    names = set(LOOPBACK_NAMES) | extra
    if bind not in WILDCARD_BINDS:
        names.add(bind)
    return frozenset(names)


def split_host(value: str) -> tuple[str, int | None]:
    """``Host`` header -> (lower-case name without brackets or trailing dot, port or None)."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):  # [v6]:port
        end = value.find("]")
        name, rest = (value[1:end], value[end + 1:]) if end > 0 else (value, "")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif value.count(":") == 1:
        name, _, raw_port = value.partition(":")
        if raw_port.isdigit():
            port = int(raw_port)
    else:
        name = value
    return name.rstrip("."), port


def _name_allowed(name: str, allowed: frozenset[str]) -> bool:
    if name in allowed or name.endswith(".localhost"):  # *.localhost never leaves the machine (RFC 6761)
        return True
    try:
        return ipaddress.ip_address(name).is_loopback and bool(allowed & LOOPBACK_NAMES)
    except ValueError:
        return False


class SiteGuard:
    def __init__(self, host: str, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.allowed = allowed_host_names(host, allowed_hosts)
        self._hosts: dict[bytes, bool] = {}  # Host header -> allowed (clients repeat one or two)
        self._types: dict[bytes, bool] = {}  # Content-Type of a write -> JSON or a form

    @classmethod
    def from_config(cls, config: Config) -> SiteGuard:
        extra = config.allowed_hosts
        if config.balancer and allowed_host_names(config.host, extra) is not None:
            extra = (*extra, split_host(urlsplit(config.balancer).netloc)[0])
        return cls(config.host, extra)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(status, message, code) when the request must be refused, else None."""
        headers = scope.get(HEADERS) or headers_of(scope)
        raw_host = headers.get(b"host")
        if raw_host is not None and self.allowed is not None:
            ok = self._hosts.get(raw_host)
            if ok is None:
                ok = _name_allowed(split_host(_text(raw_host))[0], self.allowed)
                if len(self._hosts) < _VERDICTS_KEPT:
                    self._hosts[raw_host] = ok
            if not ok:
                return (403, f"Host {_text(raw_host)[:100]!r} does not name this server (DNS-rebinding guard); "
                             "serve it with --allowed-hosts", "host_not_allowed")
        raw_origin = headers.get(b"origin")
        if raw_origin is not None and not same_origin(_text(raw_origin),
                                                      None if raw_host is None else _text(raw_host)):
            return (403, f"cross-origin request refused: Origin {_text(raw_origin)[:100]!r} is not this server's "
                         "own; the emulator answers its own dashboard and non-browser clients only",
                    "cross_origin_refused")
        if scope["method"] in WRITE_METHODS and declares_body(scope) and not scope["path"].startswith("/_files/"):
            raw_type = headers.get(b"content-type")
            ok = self._types.get(raw_type) if raw_type is not None else False
            if ok is None:
                content_type = _text(raw_type)  # type: ignore[arg-type]  # (None: False above)
                ok = is_json(content_type) or is_form(content_type)
                if len(self._types) < _VERDICTS_KEPT:
                    self._types[raw_type] = ok  # type: ignore[index]
            if not ok:
                shown = "none" if raw_type is None else _text(raw_type)
                return (415, f"a request body must be JSON: send Content-Type: application/json (got "
                             f"{shown[:100]!r})", "unsupported_media_type")
        return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")  # (as asgi.header reads every header)


def is_json(content_type: str) -> bool:
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def is_form(content_type: str) -> bool:
    return content_type.partition(";")[0].strip().lower() == "multipart/form-data"


def same_origin(origin: str, host: str | None) -> bool:
    if host is None or origin.strip().lower() == "null":
        return False
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False
    name, port = split_host(host)
    default = DEFAULT_PORTS[parts.scheme]  # a Host without a port is on its scheme's default (or behind a proxy)
    return parts.hostname.rstrip(".") == name and (origin_port or default) == (port or default)
