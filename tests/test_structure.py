"""Structural rules of ARCHITECTURE.md: every operation has a handler, layers run one way, no module is
in an import cycle, time and randomness stay injected, no test code in production paths."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from emulator import spec
from emulator.api import handler_for

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "emulator"
ALLOWED_TIME = {"emulator/clock.py"}
# Wall-clock reads, the stdlib's global random source, numpy's global (unseeded) random state.
TIME_CALLS = re.compile(r"\btime\.time\(|datetime\.now\(|datetime\.utcnow\(|\bimport random\b|(?<![\w.])random\.\w+\("
                        r"|np\.random\.(rand|randn|randint|random|seed|choice|shuffle|normal|uniform|default_rng\(\))")


def test_every_spec_operation_has_a_handler() -> None:
    ids = spec.operation_ids(spec.VENDOR) + spec.operation_ids(spec.ADMIN)
    assert len(set(ids)) >= 37 + 9
    missing = [op for op in ids if handler_for(op) is None]
    assert missing == []


def test_every_handler_is_the_handler_of_a_spec_operation() -> None:
    """The other direction: a public function of a handler module that no operation names is a handler
    nobody can reach (or a helper that should be private)."""
    from emulator.api import _BY_SNAKE, _snake

    ids = {_snake(op) for op in spec.operation_ids(spec.VENDOR) + spec.operation_ids(spec.ADMIN)}
    assert sorted(set(_BY_SNAKE) - ids) == []


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout, or no git on PATH ({exc}): the files in git cannot be listed")
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def test_every_file_is_in_the_repository_once() -> None:
    """One source per file (issue 38): the wheel maps the root's openapi.yaml and schemathesis.toml, fixtures/ and
    examples/ into the packages (pyproject.toml), so no copy of any file is kept in git."""
    by_content: dict[bytes, list[str]] = {}
    for path in _tracked_files():
        if path.is_file() and path.stat().st_size:
            by_content.setdefault(hashlib.sha256(path.read_bytes()).digest(), []).append(path.relative_to(ROOT).as_posix())
    assert [names for names in by_content.values() if len(names) > 1] == []
    copies = [p.relative_to(ROOT).as_posix() for p in _tracked_files() if p.name in ("openapi.yaml", "schemathesis.toml")]
    assert sorted(copies) == ["openapi.yaml", "schemathesis.toml"], "the contract lives at the root only"


def test_the_code_reads_the_roots_contract_in_a_checkout() -> None:
    from contract_tests import spec as contract_spec

    assert spec.spec_text(spec.VENDOR) == (ROOT / "openapi.yaml").read_text(encoding="utf-8")
    assert contract_spec.spec_path() == ROOT / "openapi.yaml" or "CONTRACT_SPEC" in os.environ
    assert contract_spec.shipped("schemathesis.toml") == ROOT / "schemathesis.toml"


def test_no_wall_clock_or_global_random_outside_clock() -> None:
    offenders = []
    for path in sorted(EMULATOR.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED_TIME:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if TIME_CALLS.search(line) and not line.lstrip().startswith("#"):
                offenders.append(f"{rel}:{lineno}: {line.strip()}")
    assert offenders == []


def test_domain_does_not_import_http_layers() -> None:
    offenders = []
    for path in sorted((EMULATOR / "domain").rglob("*.py")):
        text = path.read_text()
        for banned in ("emulator.api", "emulator.app", "emulator.http", "emulator.runtime", "starlette",
                       "connexion", "uvicorn"):
            if re.search(rf"^\s*(from|import) {re.escape(banned)}\b", text, re.M):
                offenders.append(f"{path.name} imports {banned}")
    assert offenders == []


def test_domain_imports_only_at_module_level() -> None:
    offenders = []
    for path in sorted((EMULATOR / "domain").rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"^\s+(from \S+ import|import) ", line):
                offenders.append(f"{path.name}:{lineno}: {line.strip()}")
    assert offenders == []


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_module_of_the_emulator_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("emulator", include_external_packages=False)
    modules = set(graph.modules)
    assert _cycles(graph, modules) == []


def test_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph, {"p.a", "p.b", "p.c"}) == [["p.a", "p.b"]]


def test_no_production_module_knows_the_test_defects() -> None:
    # Only the option that switches the wrapper on (config, CLI) may name them; the wrapper is a tool.
    allowed = {"emulator/config.py", "emulator/__main__.py"}
    offenders = [path.relative_to(ROOT).as_posix() for path in sorted(EMULATOR.rglob("*.py"))
                 if not path.relative_to(ROOT).as_posix().startswith("emulator/tools/")
                 and path.relative_to(ROOT).as_posix() not in allowed and "defect" in path.read_text().lower()]
    assert offenders == []


def test_import_linter_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_coverage_md_is_current() -> None:
    from emulator.tools import coverage

    assert (ROOT / "COVERAGE.md").read_text() == coverage.render(), "run: make coverage"


# Store methods that hand out a tenant: only the runtime's unit of work (and the store's own journal and
# import) may call them; handlers, files, the dashboard and tools reach a tenant through a unit of work.
TENANT_ACCESS = re.compile(r"\bstore\.(open|get|put|new_tenant|drop)\(|\._tenants\b")
TENANT_ACCESS_ALLOWED = {"emulator/runtime.py"}


def test_only_the_unit_of_work_hands_out_tenants() -> None:
    offenders = []
    for path in sorted(EMULATOR.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in TENANT_ACCESS_ALLOWED or rel.startswith("emulator/store/"):
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if TENANT_ACCESS.search(line):
                offenders.append(f"{rel}:{lineno}: {line.strip()}")
    assert offenders == []


def test_the_tenant_access_rule_sees_a_direct_access() -> None:
    assert TENANT_ACCESS.search("state = req.runtime.store.get(project)")
    assert not TENANT_ACCESS.search("with runtime.unit_of_work(project, write=False) as (tenant, ctx):")
