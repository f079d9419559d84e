"""The implementation under test: its URL and tokens, what it offers, and (optionally) the emulator
process the suite started itself.

Against an emulator with a control plane the suite keeps to its own tenants (the main and the second
token): each gets a virtual clock of its own (``/_emulator/clock`` with ``X-Emulator-Tenant``), so the
suite's waits never move the time of anyone else sharing the emulator, and at the end the suite stops
the resources it created and resets its tenants (unless ``--keep-state``).
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

PREFERRED_MODEL = "Qwen/Qwen3.8-27B"
LAUNCH_TOKEN = "contract-tenant-a"
LAUNCH_SECOND_TOKEN = "contract-tenant-b"
READY_LINE = "listening on "


# The first line of a reproduction that names the token as $CONTRACT_TOKEN (a comment: pasted whole, it runs).
EXPORT_NOTE = "# export CONTRACT_TOKEN=... first: the API token of this run (--token), left out of reports"


class TargetError(RuntimeError):
    pass


def why_unreachable(exc: BaseException) -> str:
    """A failed connection in a few words ("Connection refused", "no answer within 30 s"), not the HTTP
    library's nest of exceptions: the operating system's reason, found down the chain of causes."""
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    seen: BaseException | None = exc
    while seen is not None:
        for arg in (seen, *getattr(seen, "args", ())):
            if isinstance(arg, OSError) and arg.strerror:
                return str(arg.strerror)
            reason = getattr(arg, "reason", None)
            if isinstance(reason, OSError) and reason.strerror:
                return str(reason.strerror)
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host name"
    if "Connection refused" in text:
        return "Connection refused"
    return type(exc).__name__


# Where long waits report progress (set by the plugin to a line on the terminal); None: silent.
PROGRESS: list[Callable[[str], None]] = []


def progress(message: str) -> None:
    for report in PROGRESS:
        report(message)


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
    tenant_clocks: list[str] = field(default_factory=list)   # tokens whose own clock the suite moves
    created: list[tuple[str, str]] = field(default_factory=list)  # (token, model resource id) the suite made
    http: requests.Session = field(default_factory=requests.Session, repr=False)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def admin_headers(self) -> dict[str, str]:
        return {"X-Emulator-Admin-Token": self.admin_token} if self.admin_token else {}

    def describe(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "control_plane": self.control_plane, "launched": self.launched,
                "open_tokens": self.open_tokens, "allow_create_resources": self.allow_create,
                "second_tenant": self.second_token is not None, "base_model": self.base_model,
                "tenant_clocks": len(self.tenant_clocks)}

    def tokens(self) -> list[str]:
        return [t for t in (self.token, self.second_token) if t]

    # --- probing --------------------------------------------------------------------------------

    def probe(self, allow_create: bool | None) -> None:
        self.control_plane = self._has_control_plane()
        self.open_tokens = self._accepts_any_token()
        if self.second_token is None and self.open_tokens:
            self.second_token = f"contract-tenant-{uuid.uuid4().hex[:12]}"
        self.allow_create = self.control_plane if allow_create is None else allow_create
        self.base_model = self._pick_model()
        if self.control_plane:
            self._claim_clocks()

    def _has_control_plane(self) -> bool:
        # Not /health: it answers without the admin token, which every other control-plane call needs.
        try:
            resp = self.http.get(f"{self.base_url}/_emulator/clock", headers=self.admin_headers(), timeout=10)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def _claim_clocks(self) -> None:
        """Give each of the suite's tenants a clock of its own (an emulator that cannot scope its clock to a
        tenant answers with its global clock: then the suite moves that one, as it always did)."""
        for token in self.tokens():
            try:
                resp = self.http.post(f"{self.base_url}/_emulator/clock", json={},
                                      headers={**self.admin_headers(), "X-Emulator-Tenant": token}, timeout=30)
                scoped = resp.status_code == 200 and resp.json().get("scope") == "tenant"
            except (requests.RequestException, ValueError, AttributeError):
                scoped = False
            if not scoped:
                self.tenant_clocks = []
                return
            self.tenant_clocks.append(token)

    def _accepts_any_token(self) -> bool:
        probe = f"contract-probe-{uuid.uuid4().hex}"
        try:
            resp = self.http.get(f"{self.base_url}/v1/rl/supported-models",
                                 headers={"Authorization": f"Bearer {probe}"}, timeout=30)
        except requests.RequestException as exc:
            raise TargetError(f"cannot reach {self.base_url} ({why_unreachable(exc)}); check the URL and that "
                              "the server is running") from None
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
        """Move the suite's tenants' clocks (each its own), or the global clock of an emulator without them."""
        tokens: list[str | None] = list(self.tenant_clocks) or [None]
        for token in tokens:
            headers = {**self.admin_headers(), **({"X-Emulator-Tenant": token} if token else {})}
            resp = self.http.post(f"{self.base_url}/_emulator/clock/advance", json={"seconds": seconds},
                                  headers=headers, timeout=30)
            if resp.status_code != 200:
                raise TargetError(f"POST /_emulator/clock/advance answered {resp.status_code}: {resp.text[:200]}")

    def clean_up(self, keep_state: bool) -> list[str]:
        """Stop the model resources the suite created that are still active (any target); against an
        emulator, also reset the suite's tenants, which forgets their state and their own clocks. Returns
        what could not be cleaned up."""
        problems: list[str] = []
        if self.launched:  # the emulator the suite started goes with everything in it
            return problems
        for token, rid in self.created:
            auth = {"Authorization": f"Bearer {token}"}
            try:
                got = self.http.get(f"{self.base_url}/v1/rl/model-resources/{rid}", headers=auth, timeout=30)
                status = str(got.json().get("status", "")) if got.status_code == 200 else ""
                if status.endswith(("PENDING", "CREATING", "READY")):
                    stop = self.http.post(f"{self.base_url}/v1/rl/model-resources/{rid}/stop",
                                          params={"force": "true"}, headers=auth, timeout=30)
                    if stop.status_code != 200:
                        problems.append(f"model resource {rid}: stop answered {stop.status_code}")
            except (requests.RequestException, ValueError, AttributeError) as exc:
                problems.append(f"model resource {rid}: {exc}")
        if self.control_plane and not keep_state:
            for token in self.tokens():
                headers = {**self.admin_headers(), "X-Emulator-Tenant": token}
                try:
                    resp = self.http.post(f"{self.base_url}/_emulator/reset", json={}, headers=headers, timeout=30)
                    if resp.status_code != 200:
                        problems.append(f"reset of a tenant answered {resp.status_code}")
                except requests.RequestException as exc:
                    problems.append(f"reset of a tenant: {exc}")
        return problems

    def remember(self, token: str, resource_id: str) -> None:
        """A model resource the suite created (stopped at the end if it is still active)."""
        self.created.append((token, resource_id))

    def curl(self, method: str, url: str, headers: dict[str, str], body: Any = None) -> str:
        """A shell command that sends the same request. The token is ``$CONTRACT_TOKEN`` unless the suite
        started the emulator itself (a report never carries a real credential), and a first line, a comment,
        says to export it: pasted whole, the command runs once the variable is set."""
        parts = ["curl", "-X", method, shlex.quote(url)]
        hidden = False
        for name, value in headers.items():
            if name.lower() == "authorization" and not self.launched:
                parts += ["-H", '"Authorization: Bearer $CONTRACT_TOKEN"']
                hidden = True
            else:
                parts += ["-H", shlex.quote(f"{name}: {value}")]
        if body is not None:
            parts += ["-d", shlex.quote(json.dumps(body, separators=(",", ":")))]
        return (EXPORT_NOTE + "\n" if hidden else "") + " ".join(parts)

    def pass_time(self, seconds: float) -> None:
        """Let time pass on the target: advance its clock when it has one, else sleep."""
        if self.control_plane:
            self.advance(seconds)
        else:
            time.sleep(min(seconds, 2.0))
