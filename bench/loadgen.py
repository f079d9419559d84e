"""The load generator: Debian's ``wrk`` (installed with apt-get by the bench when missing), or the
Python fallback ``bench.pyload`` when wrk cannot be had. Both print the same ``BENCH_JSON`` report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.stats import parse_marked_json, summarize, wrk_version

LUA = Path(__file__).resolve().parent / "lua"


def _apt_install(log: Any, package: str = "wrk") -> str | None:
    """Try ``apt-get install -y PACKAGE`` (then with ``apt-get update`` first). Returns an error or None."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    if os.geteuid() != 0:
        return f"not root, cannot apt-get install {package}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    last = ""
    for step in ([install], [["apt-get", "update", "-q"], install]):
        try:
            for cmd in step:
                log(f"  $ {' '.join(cmd)}")
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
                if done.returncode != 0:
                    said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]
                    last = f"{' '.join(cmd)}: {said[0]}"
                    break
            else:
                if shutil.which(package):
                    return None
        except (OSError, subprocess.TimeoutExpired) as exc:
            last = f"{exc}"
    return last or f"{package} still missing after apt-get install"


class LoadGen:
    def __init__(self, choice: str, workdir: Path, log: Any) -> None:
        self.workdir = workdir
        self.log = log
        self.kind = "python"
        self.label = ""
        wrk = shutil.which("wrk")
        reason = "forced with --loadgen python"
        if choice != "python":
            if wrk is None:
                log("wrk is not installed; installing Debian's wrk with apt-get")
                reason = _apt_install(log) or ""
                wrk = shutil.which("wrk")
            if wrk is not None:
                self.kind, self.wrk = "wrk", wrk
                version = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
                self.label = f"wrk {wrk_version(version.stdout + version.stderr) or '?'} (Debian)"
            elif choice == "wrk":
                raise SystemExit(f"bench: wrk requested but unavailable: {reason}")
        if self.kind == "python":
            self.label = f"python-asyncio fallback (bench/pyload.py; wrk unavailable: {reason})"
        self._scripts: dict[str, Path] = {}

    def _script(self, name: str) -> Path:
        path = self._scripts.get(name)
        if path is None:
            path = self.workdir / f"{name}.lua"
            path.write_text((LUA / "common.lua").read_text() + "\n" + (LUA / f"{name}.lua").read_text())
            self._scripts[name] = path
        return path

    def run(
        self,
        url: str,
        scenario: str,
        connections: int,
        duration: int,
        token: str,
        path: str = "/",
        ids_file: str | None = None,
        tenants: bool = False,
    ) -> dict[str, Any]:
        """One bounded run; ``scenario`` is ``static`` (GET ``path``), ``create_session`` or ``loop``.
        ``tenants``: in the loop, each connection is a tenant of its own (``TOKEN-<n>``)."""
        if self.kind == "wrk":
            threads = connections if scenario == "loop" else 1
            cmd = [
                self.wrk,
                f"-t{threads}",
                f"-c{connections}",
                f"-d{duration}s",
                "--timeout",
                "5s",
                "-s",
                str(self._script(scenario)),
            ]
            if scenario == "static":
                cmd += ["-H", f"Authorization: Bearer {token}", url + path]
            else:
                cmd += [url, "--", token] + ([ids_file] if ids_file else []) + (["per-connection"] if tenants else [])
        else:
            spec = {
                "url": url,
                "scenario": scenario,
                "connections": connections,
                "duration": duration,
                "token": token,
                "path": path,
                "ids_file": ids_file,
                "tenants": tenants,
            }
            spec_file = self.workdir / "pyload.json"
            spec_file.write_text(json.dumps(spec))
            cmd = [sys.executable, "-m", "bench.pyload", str(spec_file)]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=duration + 30,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        try:
            raw = parse_marked_json(done.stdout)
        except ValueError as exc:
            raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr[-800:]}") from exc
        out = summarize(raw)
        if scenario != "loop":
            out.pop("loops", None)
            out.pop("loops_per_s", None)
        return out
