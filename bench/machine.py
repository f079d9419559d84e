"""What the numbers were measured on: cores, CPU model, memory, OS and the versions that matter."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

PACKAGES = ("uvicorn", "starlette", "connexion", "orjson", "uvloop", "httptools", "jsonschema")


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _os() -> str:
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, Any]:
    wrk = shutil.which("wrk")
    wrk_v = None
    if wrk:
        out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
        wrk_v = (
            (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else None
        )
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpuinfo(),
        "mem_gib": _mem_gib(),
        "os": _os(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": {pkg: _version(pkg) for pkg in PACKAGES},
        "wrk": wrk_v,
    }
