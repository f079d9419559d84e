"""Frozen server configuration, built from CLI flags and ``EMULATOR_*`` environment variables.

Every option can be given as ``--flag`` or as ``EMULATOR_FLAG`` (flags win). Bad values fail loudly
at start-up rather than at the first request.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

from emulator.clock import MODES, parse_rfc3339


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
    tokens_file: str | None = None
    admin_token: str | None = None
    validate_responses: bool = False
    state_file: str | None = None
    faults_file: str | None = None
    scenario: str | None = None
    record_file: str | None = None
    defects: tuple[str, ...] = field(default_factory=tuple)
    max_body_bytes: int = 64 * 1024 * 1024
    log_level: str = "warning"

    def __post_init__(self) -> None:
        if self.clock not in MODES:
            raise ConfigError(f"--clock must be one of {', '.join(MODES)}")
        if not self.speed > 0:
            raise ConfigError("--speed must be > 0")
        if not 0 <= self.port <= 65535:
            raise ConfigError("--port must be 0-65535")
        if self.profile not in ("instant", "realistic"):
            raise ConfigError("--profile must be 'instant' or 'realistic'")
        if self.defects:  # TEST-ONLY contract defects: refuse names that would silently do nothing
            from emulator.defects import unknown
            if bad := unknown(self.defects):
                raise ConfigError(f"unknown --defect {', '.join(bad)}; see emulator/defects.py")
        if self.max_body_bytes < 1024:
            raise ConfigError("--max-body-bytes must be at least 1024")
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


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--host", default=env("EMULATOR_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env("EMULATOR_PORT", "8765")),
                        help="0 picks a free port and prints the URL")
    parser.add_argument("--seed", type=int, default=int(env("EMULATOR_SEED", "0")),
                        help="seed for ids and simulated numbers")
    parser.add_argument("--clock", choices=MODES, default=env("EMULATOR_CLOCK", "system"))
    parser.add_argument("--speed", type=float, default=float(env("EMULATOR_SPEED", "1.0")),
                        help="virtual seconds per real second in system clock mode")
    parser.add_argument("--start-time", default=env("EMULATOR_START_TIME"),
                        help="RFC 3339 start of virtual time (manual clock default 2026-01-01T00:00:00Z)")
    parser.add_argument("--profile", choices=("instant", "realistic"), default=env("EMULATOR_PROFILE", "instant"))
    parser.add_argument("--profile-file", default=env("EMULATOR_PROFILE_FILE"),
                        help="YAML/JSON file overriding timing-profile durations")
    parser.add_argument("--tokens-file", default=env("EMULATOR_TOKENS_FILE"),
                        help="YAML/JSON mapping tokens to users and projects")
    parser.add_argument("--admin-token", default=env("EMULATOR_ADMIN_TOKEN"),
                        help="required on /_emulator/* when bound to a non-loopback address")
    parser.add_argument("--validate-responses", action="store_true",
                        default=env("EMULATOR_VALIDATE_RESPONSES", "") in ("1", "true"))
    parser.add_argument("--state-file", default=env("EMULATOR_STATE_FILE"),
                        help="keep state across restarts in this file (atomic writes)")
    parser.add_argument("--faults", dest="faults_file", default=env("EMULATOR_FAULTS"),
                        help="YAML/JSON file of fault rules")
    parser.add_argument("--scenario", default=env("EMULATOR_SCENARIO"), help="load a named fixture scenario")
    parser.add_argument("--record", dest="record_file", default=env("EMULATOR_RECORD"),
                        help="write every request and response as JSONL")
    parser.add_argument("--defect", dest="defects", action="append",
                        default=[d for d in env("EMULATOR_DEFECTS", "").split(",") if d],
                        help="TEST ONLY: inject a named contract defect (see emulator/defects.py)")
    parser.add_argument("--max-body-bytes", type=int, default=int(env("EMULATOR_MAX_BODY_BYTES", str(64 << 20))))
    parser.add_argument("--log-level", default=env("EMULATOR_LOG_LEVEL", "warning"))


def config_from_args(args: argparse.Namespace) -> Config:
    values: dict[str, Any] = {k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__}
    start = values.get("start_time")
    try:
        values["start_time"] = parse_rfc3339(start) if isinstance(start, str) else start
    except ValueError as exc:
        raise ConfigError(f"--start-time is not RFC 3339: {start!r}") from exc
    values["defects"] = tuple(values.get("defects") or ())
    return Config(**values)
