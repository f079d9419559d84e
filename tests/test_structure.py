"""Structural rules of DESIGN.md: every operation has a handler, time and randomness stay injected."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from emulator.api import handler_for

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_TIME = {"emulator/clock.py", "emulator/testing.py"}
# Wall-clock reads, the stdlib's global random source, numpy's global (unseeded) random state.
TIME_CALLS = re.compile(r"\btime\.time\(|datetime\.now\(|datetime\.utcnow\(|\bimport random\b|(?<![\w.])random\.\w+\("
                        r"|np\.random\.(rand|randn|randint|random|seed|choice|shuffle|normal|uniform|default_rng\(\))")


def _operation_ids(path: Path) -> list[str]:
    spec = yaml.safe_load(path.read_text())
    return [op["operationId"] for item in spec["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op]


def test_every_spec_operation_has_a_handler() -> None:
    ids = _operation_ids(ROOT / "openapi.yaml") + _operation_ids(ROOT / "emulator" / "admin.yaml")
    assert len(set(ids)) >= 37 + 9
    missing = [op for op in ids if handler_for(op) is None]
    assert missing == []


def test_no_wall_clock_or_global_random_outside_clock() -> None:
    offenders = []
    for path in sorted((ROOT / "emulator").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED_TIME:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if TIME_CALLS.search(line) and not line.lstrip().startswith("#"):
                offenders.append(f"{rel}:{lineno}: {line.strip()}")
    assert offenders == []


def test_domain_does_not_import_http_layers() -> None:
    offenders = []
    for path in sorted((ROOT / "emulator" / "domain").rglob("*.py")):
        text = path.read_text()
        for banned in ("emulator.api", "emulator.app", "starlette", "connexion", "uvicorn"):
            if re.search(rf"^\s*(from|import) {re.escape(banned)}\b", text, re.M):
                offenders.append(f"{path.name} imports {banned}")
    assert offenders == []


def test_coverage_md_is_current() -> None:
    from emulator import coverage

    assert (ROOT / "COVERAGE.md").read_text() == coverage.render(), "run: python -m emulator coverage"
