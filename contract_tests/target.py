"""The implementation under test: its URL and tokens, what it offers, and (optionally) the emulator
process the suite started itself."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

PREFERRED_MODEL = "Qwen/Qwen3.8-27B"
LAUNCH_TOKEN = "contract-tenant-a"
LAUNCH_SECOND_TOKEN = "contract-tenant-b"
READY_LINE = "listening on "


class TargetError(RuntimeError):
    pass


class EmulatorProcess:
    """``python -m emulator serve --port 0 ...`` in a subprocess; the URL is read from its first line."""

    def __init__(self, extra_args: list[str], tokens: dict[str, dict[str, str]] | None = None,
                 startup_timeout: float = 60.0) -> None:
        self.extra_args = list(extra_args)
        self.tokens = tokens
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.output: list[str] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="contract-emulator-")

    def start(self) -> str:
        cmd = [sys.executable, "-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0"]
        if self.tokens is not None and not any(a.startswith("--tokens-file") for a in self.extra_args):
            path = Path(self._tmp.name) / "tokens.json"
            path.write_text(json.dumps({"tokens": self.tokens}))
            cmd += ["--tokens-file", str(path)]
        cmd += self.extra_args
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=self._tmp.name)  # the emulator is found as a package, not by cwd
        atexit.register(self.stop)  # even when pytest is interrupted
        found = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                if len(self.output) > 2000:
                    del self.output[:1000]
                if self.url is None and READY_LINE in line:
                    self.url = line.split(READY_LINE, 1)[1].strip().split()[0]
                    found.set()
            found.set()

        threading.Thread(target=pump, name="emulator-output", daemon=True).start()
        found.wait(self.startup_timeout)
        if self.url is None:
            self.stop()
            raise TargetError("the emulator did not start: " + " | ".join(self.output[-20:]) +
                              f" (command: {' '.join(cmd)})")
        # The URL is printed once the port is bound; wait until the server answers.
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                requests.get(f"{self.url}/_emulator/health", timeout=2)
                break
            except requests.RequestException:
                if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                    self.stop()
                    raise TargetError("the emulator printed its URL but never answered: " +
                                      " | ".join(self.output[-20:])) from None
                time.sleep(0.05)
        return self.url

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._tmp.cleanup()


@dataclass
class Target:
    base_url: str
    token: str
    second_token: str | None = None
    admin_token: str | None = None
    launched: bool = False
    control_plane: bool = False
    open_tokens: bool = False           # any bearer token is accepted (the emulator's default mode)
    allow_create: bool = False
    base_model: str = PREFERRED_MODEL
    op_timeout: float = 600.0           # bound for an operation to finish (virtual s with a clock, else wall s)
    http: requests.Session = field(default_factory=requests.Session, repr=False)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def admin_headers(self) -> dict[str, str]:
        return {"X-Emulator-Admin-Token": self.admin_token} if self.admin_token else {}

    def describe(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "control_plane": self.control_plane, "launched": self.launched,
                "open_tokens": self.open_tokens, "allow_create_resources": self.allow_create,
                "second_tenant": self.second_token is not None, "base_model": self.base_model}

    # --- probing --------------------------------------------------------------------------------

    def probe(self, allow_create: bool | None) -> None:
        self.control_plane = self._has_control_plane()
        self.open_tokens = self._accepts_any_token()
        if self.second_token is None and self.open_tokens:
            self.second_token = f"contract-tenant-{uuid.uuid4().hex[:12]}"
        self.allow_create = self.control_plane if allow_create is None else allow_create
        self.base_model = self._pick_model()

    def _has_control_plane(self) -> bool:
        try:
            resp = self.http.get(f"{self.base_url}/_emulator/health", headers=self.admin_headers(), timeout=10)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def _accepts_any_token(self) -> bool:
        probe = f"contract-probe-{uuid.uuid4().hex}"
        try:
            resp = self.http.get(f"{self.base_url}/v1/rl/supported-models",
                                 headers={"Authorization": f"Bearer {probe}"}, timeout=30)
        except requests.RequestException as exc:
            raise TargetError(f"cannot reach {self.base_url}: {exc}") from exc
        return resp.status_code == 200

    def _pick_model(self) -> str:
        try:
            resp = self.http.get(f"{self.base_url}/v1/rl/supported-models", headers=self.auth, timeout=30)
            models = [m.get("base_model") for m in resp.json().get("data", []) if isinstance(m, dict)]
        except (requests.RequestException, ValueError, AttributeError):
            return PREFERRED_MODEL
        names = [m for m in models if isinstance(m, str)]
        if PREFERRED_MODEL in names or not names:
            return PREFERRED_MODEL
        return names[0]

    # --- the control plane (emulator only) -------------------------------------------------------

    def advance(self, seconds: float) -> None:
        resp = self.http.post(f"{self.base_url}/_emulator/clock/advance", json={"seconds": seconds},
                              headers=self.admin_headers(), timeout=30)
        if resp.status_code != 200:
            raise TargetError(f"POST /_emulator/clock/advance answered {resp.status_code}: {resp.text[:200]}")

    def pass_time(self, seconds: float) -> None:
        """Let time pass on the target: advance its clock when it has one, else sleep."""
        if self.control_plane:
            self.advance(seconds)
        else:
            time.sleep(min(seconds, 2.0))
