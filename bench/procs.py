"""Server processes the bench starts and always stops (by their own pid): the emulator, the ceiling,
the filled emulator. Output goes to files in the run's work directory."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
URL = re.compile(r"listening on (http://\S+)")
_LIVE: list[Server] = []


class Server:
    def __init__(
        self,
        name: str,
        args: list[str],
        workdir: Path,
        timeout: float = 60.0,
        ready_path: str | None = "/_emulator/health",
    ) -> None:
        self.name = name
        self.out = workdir / f"{name}.out"
        self.err = workdir / f"{name}.err"
        self.started = time.perf_counter()
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *args],
                stdout=out,
                stderr=err,
                cwd=str(ROOT),
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        _LIVE.append(self)
        self.url = self._wait_url(timeout)
        if ready_path:
            self._wait_ready(ready_path, timeout)

    def _wait_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = URL.search(self.out.read_text())
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.005)
        self.stop()
        raise RuntimeError(f"{self.name} did not start: {self.err.read_text()[-1500:]}")

    def _wait_ready(self, path: str, timeout: float) -> None:
        """The banner is printed once the socket is bound; uvicorn listens a moment later."""
        parts = urlsplit(self.url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=2)
            try:
                conn.request("GET", path)
                conn.getresponse().read()
                self.ready_at = time.perf_counter()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.002)
            finally:
                conn.close()
        self.stop()
        raise RuntimeError(f"{self.name} never answered {path}: {self.err.read_text()[-1500:]}")

    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self in _LIVE:
            _LIVE.remove(self)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (resolution: one clock tick, 10 ms)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (/proc/stat, busy states only)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU used by the bench and its finished (waited-for) children: servers, wrk, fillers."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
