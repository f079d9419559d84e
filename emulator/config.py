"""Frozen server configuration, built from CLI flags and ``EMULATOR_*`` environment variables.

Every option can be given as ``--flag`` or as ``EMULATOR_FLAG`` (flags win). Bad values fail loudly at
start-up, as one line naming the flag or variable, rather than at the first request.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from emulator.clock import MAX_SPEED, MODES, parse_rfc3339
from emulator.sharding import Shard

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
PROFILES = ("instant", "realistic")


SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8765
    seed: int = 0
    clock: str = "system"
    speed: float = 1.0
    start_time: float | None = None
    profile: str = "instant"
    profile_file: str | None = None
    limits_file: str | None = None
    tokens_file: str | None = None
    admin_token: str | None = None
    validate_responses: bool = False
    state_file: str | None = None
    faults_file: str | None = None
    scenario: str | None = None
    record_file: str | None = None
    record_canonical: bool = False      # with record_file: the same bytes for the same answers (fixtures/recordings)
    defects: tuple[str, ...] = field(default_factory=tuple)
    max_body_bytes: int = 64 * 1024 * 1024
    log_level: str = "warning"
    access_log: bool = False
    strict: bool = False                # refuse (400) what the real service accepts and ignores (documented)
    keep_alive_timeout: float = 5.0     # idle seconds before a keep-alive connection is closed
    header_timeout: float = 10.0        # seconds a client may take to send a request's line and headers
    body_timeout: float = 60.0          # seconds a client may pause while sending a request body
    request_timeout: float = 120.0      # seconds a whole request (line, headers, body) may take to arrive; then 408
    max_connections: int = 1000         # open connections; beyond it new requests answer 503
    max_header_bytes: int = 64 * 1024   # request line and headers; larger is 431
    send_timeout: float = 30.0          # seconds a response may wait for a client that reads nothing
    max_event_streams: int = 32         # dashboard event streams open at once; beyond it 429
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)  # Host names served besides the bind address
    shard: Shard | None = None          # this process serves only the tenants of this shard (emulator.sharding)
    balancer: str | None = None         # a shard's cluster front (HAProxy): control calls for every shard go there

    def __post_init__(self) -> None:
        if self.clock not in MODES:
            raise ConfigError(f"--clock must be one of {', '.join(MODES)}")
        if not (math.isfinite(self.speed) and 0 < self.speed <= MAX_SPEED):
            raise ConfigError(f"--speed must be > 0 and at most {MAX_SPEED:g}")
        if not 0 <= self.port <= 65535:
            raise ConfigError("--port must be 0-65535")
        if not SEED_MIN <= self.seed <= SEED_MAX:  # exported state carries it: JSON encoders take 64 bits
            raise ConfigError(f"--seed must be a 64-bit signed integer ({SEED_MIN} to {SEED_MAX})")
        if self.profile not in PROFILES:
            raise ConfigError(f"--profile must be one of {', '.join(PROFILES)}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        if self.max_body_bytes < 1024:
            raise ConfigError("--max-body-bytes must be at least 1024")
        for name in ("keep_alive_timeout", "header_timeout", "body_timeout", "request_timeout", "send_timeout"):
            if not 0 < getattr(self, name) <= 3600:
                raise ConfigError(f"--{name.replace('_', '-')} must be within (0, 3600] seconds")
        if self.max_connections < 1:
            raise ConfigError("--max-connections must be at least 1")
        if self.max_header_bytes < 1024:
            raise ConfigError("--max-header-bytes must be at least 1024")
        if self.max_event_streams < 1:
            raise ConfigError("--max-event-streams must be at least 1")
        for name in self.allowed_hosts:
            if not name or any(c in name for c in "/ \t@"):
                raise ConfigError(f"--allowed-hosts: {name!r} is not a host name (e.g. myhost.local or 10.0.0.5)")
        if self.balancer is not None:
            if self.shard is None:
                raise ConfigError("--balancer is the front of a sharded cluster: it needs --shard I/N")
            if not re.fullmatch(r"https?://[^/\s]+/?", self.balancer):
                raise ConfigError(f"--balancer must be the balancer's root URL (http://HOST:PORT), not {self.balancer!r}")
        if self.admin_token is not None and not self.admin_token.strip():
            raise ConfigError("--admin-token must not be empty")
        if self.record_canonical and not self.record_file:
            raise ConfigError("--record-canonical makes the --record file canonical: give --record FILE too")
        if not self.is_loopback and not self.admin_token:
            raise ConfigError(
                "binding to a non-loopback address exposes the control plane /_emulator/*; "
                "pass --admin-token TOKEN to protect it"
            )

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def load_data_file(path: str, what: str) -> Any:
    """A YAML or JSON file (by extension); every error names ``what`` and the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path}: cannot read it: {exc}") from exc
    try:
        if path.endswith(".json"):
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} {path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} {path}: not valid YAML{where}: {problem}") from exc


def check_state_path(path: str | None) -> None:
    """A --state-file whose directory cannot be (a file stands where a directory must be), said as such
    rather than as the operating system's "File exists" when its directories are created."""
    if not path:
        return
    for parent in Path(path).parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--state-file {path}: {parent} is a file, not a directory; give a path in a "
                                  "directory (missing directories are created)")
            return


# --- command line and environment -------------------------------------------------------------------

def port_argument(text: str) -> int:
    """argparse's type for the ports of the tools' subcommands (replay, record, cluster): one plain sentence
    when it is not one (serve's own --port goes through the options table below)."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _start_time(text: str) -> float:
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise ValueError("expected an RFC 3339 time such as 2026-01-01T00:00:00Z") from None


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A choice, checked where the value was read, so the error names the flag or the variable it came from."""
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text
    return convert


def _shard(text: str) -> Shard:
    return Shard.parse(text)


def _defects(text: str) -> tuple[str, ...]:
    return tuple(d for d in text.split(",") if d)


def _hosts(text: str) -> tuple[str, ...]:
    return tuple(h.strip().lower() for h in text.split(",") if h.strip())


# (field, flag, converter, help). Flags default to None, so a value from the environment or the
# Config default is used only when the flag is absent; conversions happen in config_from_args, where
# an error can name where the bad value came from.
OPTIONS: tuple[tuple[str, str, Callable[[str], Any] | None, str], ...] = (
    ("host", "--host", None, "bind address (default 127.0.0.1; other addresses need --admin-token)"),
    ("port", "--port", _int, "TCP port (default 8765); 0 picks a free port and prints the URL"),
    ("seed", "--seed", _int, "seed for ids and simulated numbers (default 0)"),
    ("clock", "--clock", _one_of(MODES), "system (real time x --speed), manual (moves only through /_emulator/clock) or "
                               "auto (manual, and it jumps to what a client polls for: see docs/control-plane.md)"),
    ("speed", "--speed", _float, f"virtual seconds per real second with --clock system (default 1, at most "
                                 f"{MAX_SPEED:g})"),
    ("start_time", "--start-time", _start_time, "RFC 3339 start of virtual time (manual and auto clock default "
                                                "2026-01-01T00:00:00Z)"),
    ("profile", "--profile", _one_of(PROFILES), "timing of every transition: instant (default) or realistic"),
    ("profile_file", "--profile-file", None, "YAML/JSON file overriding timing-profile durations"),
    ("limits_file", "--limits-file", None, "YAML/JSON file overriding the session caps and other limits the "
                                           "emulator infers (see emulator/domain/limits.py)"),
    ("tokens_file", "--tokens-file", None, "YAML/JSON file mapping tokens to users and projects, or the name of "
                                           "a shipped one (fixtures/tokens)"),
    ("admin_token", "--admin-token", None, "required on /_emulator/* (mandatory when --host is not loopback)"),
    ("state_file", "--state-file", None, "keep state across restarts in this file (a journal; parent "
                                         "directories are created)"),
    ("faults_file", "--faults", None, "YAML/JSON file of fault rules, or the name of a shipped one "
                                      "(fixtures/faults)"),
    ("scenario", "--scenario", None, "load a named scenario (fixtures/scenarios) or a scenario YAML file at start-up"),
    ("record_file", "--record", None, "write every request and response to this JSONL file"),
    ("max_body_bytes", "--max-body-bytes", _int, "largest request body accepted (default 64 MiB); larger is 413"),
    ("log_level", "--log-level", _one_of(LOG_LEVELS), f"server log level: {', '.join(LOG_LEVELS)} (default warning)"),
    ("keep_alive_timeout", "--keep-alive-timeout", _float, "seconds an idle keep-alive connection stays open "
                                                           "(default 5)"),
    ("header_timeout", "--header-timeout", _float, "seconds a client may take to send request line and headers "
                                                   "(default 10); slower connections are closed"),
    ("body_timeout", "--body-timeout", _float, "seconds a client may pause while sending a body (default 60)"),
    ("request_timeout", "--request-timeout", _float, "seconds a whole request, body included, may take to arrive "
                                                     "(default 120); later is answered 408 and the connection "
                                                     "closed"),
    ("max_connections", "--max-connections", _int, "open connections served at once (default 1000); beyond it "
                                                   "new requests answer 503"),
    ("max_header_bytes", "--max-header-bytes", _int, "largest request line plus headers (default 64 KiB); larger "
                                                     "is 431"),
    ("send_timeout", "--send-timeout", _float, "seconds a response may wait for a client that reads none of it "
                                               "(default 30); then the connection is dropped"),
    ("max_event_streams", "--max-event-streams", _int, "dashboard event streams open at once (default 32); "
                                                       "beyond it 429"),
    ("allowed_hosts", "--allowed-hosts", _hosts, "comma-separated Host names served besides the bind address "
                                                 "and loopback names (DNS-rebinding guard; '*' allows any)"),
    ("shard", "--shard", _shard, "I/N: serve only the tenants of shard I of N (a cluster behind HAProxy; requests "
                                 "for other tenants answer 421); give each shard its own --state-file"),
    ("balancer", "--balancer", None, "with --shard: the cluster's front URL, through which control-plane calls for "
                                     "the whole cluster (reset, the clock, the dashboard's tenant list) reach every "
                                     "shard"),
)
FLAGS = (
    ("validate_responses", "--validate-responses", "validate every response against openapi.yaml (on in tests)"),
    ("access_log", "--access-log", "print one line per request: method, path, operation, status, duration, "
                                   "tenant, fault, warnings"),
    ("record_canonical", "--record-canonical", "with --record: a canonical recording (the server's address, "
                                               "client headers and random Idempotency-Keys left out), byte for "
                                               "byte the same for the same client, seed and manual clock"),
    ("strict", "--strict", "refuse with 400 the fields the real service accepts and ignores (by default they are "
                           "dropped with an X-Emulator-Warning header)"),
)


# Variables whose names are not EMULATOR_<FIELD> (they follow the flag, not the field).
ENV_NAMES = MappingProxyType({"faults_file": "EMULATOR_FAULTS", "record_file": "EMULATOR_RECORD"})


def env_name(field_name: str) -> str:
    return ENV_NAMES.get(field_name, f"EMULATOR_{field_name.upper()}")


# Options with a fixed set of values show it in the usage (argparse's own choices would not see the variables).
CHOICES = MappingProxyType({"clock": MODES, "profile": PROFILES, "log_level": LOG_LEVELS})


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    for name, flag, _convert, help_text in OPTIONS:
        metavar = "{" + ",".join(CHOICES[name]) + "}" if name in CHOICES else None
        parser.add_argument(flag, dest=name, default=None, metavar=metavar,
                            help=f"{help_text} [env {env_name(name)}]")
    for name, flag, help_text in FLAGS:
        parser.add_argument(flag, dest=name, action="store_true", default=None,
                            help=f"{help_text} [env {env_name(name)}=1]")
    parser.add_argument("--defect", dest="defects", action="append", default=None,
                        help="TEST ONLY: inject a named contract defect (see emulator/tools/defects.py) "
                             "[env EMULATOR_DEFECTS=a,b]")


def config_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Config:
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, flag, convert, _help in OPTIONS:
        raw, source = getattr(args, name, None), flag
        if raw is None:
            var = env_name(name)
            raw, source = env.get(var), var
        if raw is None:
            continue
        try:
            values[name] = convert(raw) if convert else raw
        except ValueError as exc:
            raise ConfigError(f"{source}: {raw!r} is not valid ({exc})") from exc
    for name, _flag, _help in FLAGS:
        if getattr(args, name, None):
            values[name] = True
        elif (raw := env.get(env_name(name))) is not None:
            try:
                values[name] = _bool(raw)
            except ValueError as exc:
                raise ConfigError(f"{env_name(name)}: {raw!r} is not valid ({exc})") from exc
    defects = getattr(args, "defects", None)
    values["defects"] = tuple(defects) if defects else _defects(env.get("EMULATOR_DEFECTS", ""))
    try:
        return Config(**values)
    except ConfigError as exc:
        raise ConfigError(blame(str(exc), args, env)) from exc


def blame(message: str, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """A start-up error speaks of the flag (``--speed must be ...``); when the value came from the flag's
    variable instead, it names the variable and its value (``EMULATOR_SPEED='0' must be ...``)."""
    env = os.environ if environ is None else environ
    flag = re.match(r"--[a-z-]+", message)
    for name, option, _convert, _help in OPTIONS:
        if flag and option == flag.group() and getattr(args, name, None) is None:
            var = env_name(name)
            if var in env:
                rest = message[flag.end():]
                if rest.startswith(" " + env[var]):  # (``--limits-file PATH: ...`` names the value already)
                    rest = rest[len(env[var]) + 1:]
                return f"{var}={env[var]!r}" + rest
    return message
