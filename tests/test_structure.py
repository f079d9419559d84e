"""Structural rules of ARCHITECTURE.md: every operation has a handler, layers run one way, no module is
in an import cycle, time and randomness stay injected, no test code in production paths."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import grimp
import numpy as np
import pytest

from emulator import spec
from emulator.api import handler_for
from tests.pyast import parse as parse_ast

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
TENANT_ACCESS_ALLOWED = ("emulator/runtime/",)


def test_only_the_unit_of_work_hands_out_tenants() -> None:
    offenders = []
    for path in sorted(EMULATOR.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(TENANT_ACCESS_ALLOWED) or rel.startswith("emulator/store/"):
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if TENANT_ACCESS.search(line):
                offenders.append(f"{rel}:{lineno}: {line.strip()}")
    assert offenders == []


def test_the_tenant_access_rule_sees_a_direct_access() -> None:
    assert TENANT_ACCESS.search("state = req.runtime.store.get(project)")
    assert not TENANT_ACCESS.search("with runtime.unit_of_work(project, write=False) as (tenant, ctx):")


# The simulated model's numbers are the same on every CPU (emulator/compute/README.md, "Portable numbers"):
# emulator/compute uses IEEE-exact operations only (one rounding each, the same everywhere) and takes exp and
# log from emulator/compute/portable.py. numpy's and libm's transcendental functions, pow, BLAS products and
# the random distributions built on them round differently on different CPUs.
EXACT_UFUNCS = frozenset({
    "abs", "absolute", "fabs", "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "negative",
    "positive", "sqrt", "square", "reciprocal", "maximum", "minimum", "fmax", "fmin", "rint", "floor", "ceil",
    "trunc", "sign", "signbit", "copysign", "nextafter", "spacing", "ldexp", "frexp", "modf", "fmod", "remainder",
    "mod", "divmod", "isfinite", "isinf", "isnan", "isnat", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "bitwise_invert", "invert", "bitwise_count", "left_shift", "right_shift",
    "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm", "conj", "conjugate", "heaviside"})
INEXACT_NUMPY = frozenset({"dot", "vdot", "inner", "einsum", "tensordot", "linalg", "fft", "polynomial", "polyval",
                           "polyfit", "interp", "sinc", "i0", "emath", "logspace", "geomspace", "convolve",
                           "correlate", "cov", "corrcoef", "kaiser", "hanning", "hamming", "blackman", "bartlett"})
EXACT_MATH = frozenset({"isfinite", "isnan", "isinf", "ceil", "floor", "trunc", "sqrt", "isqrt", "fabs", "copysign",
                        "ldexp", "frexp", "fmod", "modf", "nextafter", "ulp", "fsum", "prod", "gcd", "lcm", "comb",
                        "perm", "factorial", "isclose", "inf", "nan"})
# Methods that compute with libm or BLAS: array products, and every random distribution but the uniform ones.
INEXACT_METHODS = frozenset({"dot", "power", "__pow__", "__rpow__", "__ipow__"} | {
    m for m in dir(np.random.Generator) if not m.startswith("_")} - {
    "random", "integers", "uniform", "bytes", "choice", "permutation", "permuted", "shuffle", "spawn",
    "bit_generator"})


def inexact_operations(source: str, name: str) -> list[str]:
    """Where ``source`` computes a float by something other than an IEEE-exact operation."""
    found = []

    def note(node: ast.AST, what: str) -> None:
        found.append(f"{name}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(parse_ast(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in (
                "np", "numpy", "math"):
            module, attr = node.value.id, node.attr
            if module == "math":
                if attr not in EXACT_MATH:
                    note(node, f"math.{attr}")
            elif attr in INEXACT_NUMPY or (isinstance(getattr(np, attr, None), np.ufunc) and attr not in EXACT_UFUNCS):
                note(node, f"np.{attr}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            note(node, "@ (a matrix product)")
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.Pow):
            operands = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            if not all(isinstance(o, ast.Constant) and type(o.value) is int for o in operands):
                note(node, "** (pow; portable.power_int, or x * x)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pow":
            note(node, "pow()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in INEXACT_METHODS:
            note(node, f".{node.func.attr}()")
        elif isinstance(node, ast.ImportFrom) and node.module in ("numpy", "math"):
            allowed = EXACT_MATH if node.module == "math" else EXACT_UFUNCS
            found.extend(f"{name}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                         if a.name not in allowed)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in ("scipy", "numexpr", "numba", "torch", "cmath"):
                    note(node, f"import {module}")
            if isinstance(node, ast.Import):
                found.extend(f"{name}:{node.lineno}: import {a.name} as {a.asname}" for a in node.names
                             if a.name in ("numpy", "math") and a.asname not in (None, "np"))
    return found


def test_the_simulated_model_computes_with_ieee_exact_operations_only() -> None:
    offenders = []
    for path in sorted((EMULATOR / "compute").rglob("*.py")):
        offenders += inexact_operations(path.read_text(), path.relative_to(ROOT).as_posix())
    assert offenders == [], "use emulator/compute/portable.py (emulator/compute/README.md, 'Portable numbers')"


def test_the_exact_operations_rule_sees_what_it_forbids() -> None:
    bad = """
import scipy.special
import numpy as xp
from math import exp
from numpy import log1p
y = np.exp(x) + np.log(x) + math.log(v) + np.tanh(x) + np.power(x, 2) + np.logaddexp(x, x) + np.linalg.norm(x)
z = x ** 2 + 2.0 ** t + pow(b, t) + a @ b + a.dot(b) + rng.standard_normal(3) + np.matmul(a, b)
z **= 2
"""
    found = [line.split(": ", 1)[1] for line in inexact_operations(bad, "bad.py")]
    assert set(found) == {
        "import scipy.special", "import numpy as xp", "from math import exp", "from numpy import log1p", "np.exp",
        "np.log", "math.log", "np.tanh", "np.power", "np.logaddexp", "np.linalg", "** (pow; portable.power_int, or x * x)",
        "pow()", "@ (a matrix product)", ".dot()", ".standard_normal()", "np.matmul", ".power()"}, found
    good = """
import math
import numpy as np
from emulator.compute.portable import exp, log
y = exp(x - np.maximum.reduceat(x, o)) / np.add.reduceat(e, o) + math.sqrt(v) + np.sqrt(x) + x * x
n = 2**53 + v * v + math.isfinite(y) + np.ldexp(y, k) + rng.random(4) + np.clip(x, 0, 1)
"""
    assert inexact_operations(good, "good.py") == []


# --- operation kinds -----------------------------------------------------------------------------------

def _kind_spellings(name: str) -> list[re.Pattern[str]]:
    """How code can name an operation kind: its path segment (``custom-forward-backward``), its operationIds
    (``createCustomForwardBackward``) and their handler names (``create_custom_forward_backward``), an enum
    member (``CUSTOM_FORWARD_BACKWARD``), its snake case (``custom_forward_backward``). A one-word kind
    (``sample``) is a common word: only its quoted or path forms, enum member and operationIds count."""
    words = name.split("-")
    snake, camel = "_".join(words), "".join(w.title() for w in words)
    found = [rf"\b{snake.upper()}\b", rf"\b(create|get){camel}\b", rf"\b(create|get)_{snake}\b"]
    if len(words) > 1:
        found += [rf"(?<![\w-]){re.escape(name)}(?![\w-])", rf"\b{snake}\b"]
    else:
        found += [rf"[\"'/]{name}[\"'/]", rf"/{name}\b"]
    return [re.compile(p) for p in found]


def modules_naming(name: str, root: Path = EMULATOR) -> list[str]:
    """The modules of ``root`` that name the kind ``name`` in any spelling (a longer kind's name that contains
    it, ``custom-forward-backward`` in ``forward-backward``, does not count for the shorter)."""
    from emulator.domain.kinds import KINDS

    longer = [other for other in KINDS if other != name and name in other]
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        for other in longer:
            for pattern in _kind_spellings(other):
                text = pattern.sub("", text)
        if any(p.search(text) for p in _kind_spellings(name)):
            out.append(path.relative_to(root.parent).as_posix())
    return out


def test_a_kind_is_named_by_its_module_only() -> None:
    """ARCHITECTURE.md, "An operation kind is one module": a kind is one module of emulator/domain/kinds;
    nothing else in emulator/ names one (the registry finds the modules), so the next kind touches its module,
    openapi.yaml and its tests."""
    from emulator.domain.kinds import KINDS

    assert len(KINDS) == 7
    named = {name: modules_naming(name) for name in KINDS}
    assert named == {name: [f"emulator/domain/kinds/{name.replace('-', '_')}.py"] for name in KINDS}


def test_the_kind_count_sees_every_spelling(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = K.CUSTOM_FORWARD_BACKWARD\n")
    (tmp_path / "b.py").write_text("def get_custom_forward_backward(req): ...\n")
    (tmp_path / "c.py").write_text('path = "/operations/custom-forward-backward"\n')
    (tmp_path / "d.py").write_text('handler_for("createCustomForwardBackward")\n')
    (tmp_path / "e.py").write_text('if op.kind == "sample": ...\n')
    (tmp_path / "f.py").write_text("samples = body['samples']  # a sample of the batch; SAMPLE_KINDS\n")
    (tmp_path / "g.py").write_text("forward_backward_seconds_per_token = 1\n")
    here = tmp_path.name
    assert modules_naming("custom-forward-backward", tmp_path) == [f"{here}/{m}.py" for m in "abcd"]
    assert modules_naming("sample", tmp_path) == [f"{here}/e.py"]
    assert modules_naming("forward-backward", tmp_path) == []


def test_every_kind_is_served_under_its_own_name() -> None:
    """One name per operation across layers, for the kinds: ``create<Kind>`` and ``get<Kind>`` (the kind's
    name in camel case) are the operations of ``/operations/<name>``, served by ``api/operations.py``'s
    ``submit`` and ``get`` with that kind; every operation of those paths is a kind's."""
    from emulator.api import operations
    from emulator.domain.kinds import KINDS

    doc = spec.load_spec(spec.VENDOR)
    prefix = "/v1/rl/training-sessions/{session_id}/operations/"
    for name, kind in KINDS.items():
        camel = "".join(w.title() for w in name.split("-"))
        assert (kind.create, kind.get) == (f"create{camel}", f"get{camel}")
        assert doc["paths"][prefix + name]["post"]["operationId"] == kind.create
        assert doc["paths"][prefix + name + "/{operation_id}"]["get"]["operationId"] == kind.get
        for operation_id, serve in ((kind.create, operations.submit), (kind.get, operations.get)):
            handler = handler_for(operation_id)
            assert handler is not None and handler.func is serve and handler.keywords == {"kind": kind}  # type: ignore[attr-defined]
    served = {path.removeprefix(prefix).partition("/")[0] for path in doc["paths"] if path.startswith(prefix)}
    assert served == set(KINDS)


def test_no_module_is_in_an_import_cycle_through_the_kinds_registry() -> None:
    """The registry imports the kinds' modules by discovery, which the import graph does not see: with those
    edges added, no module is in a cycle (a kind importing the queue that runs it would be)."""
    from emulator.domain import kinds

    graph = grimp.build_graph("emulator", include_external_packages=False)
    for module in kinds.MODULES:
        graph.add_import(importer="emulator.domain.kinds", imported=module)
    assert _cycles(graph, set(graph.modules)) == []


STRICT = ("emulator/domain", "emulator/compute")  # the domain (with its operation kinds) and the simulated model


def test_mypy_strict_passes_on_the_domain_and_the_model() -> None:
    """Typed requests and records are held by the type checker where they are used (issue 38, item 2); the
    modules they import are checked by ``make lint`` without --strict."""
    mypy = Path(sys.executable).with_name("mypy")
    proc = subprocess.run([str(mypy), "--strict", "--follow-imports=silent", "--no-error-summary", *STRICT],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_untyped_json_stays_out_of_the_domain_the_model_and_the_store() -> None:
    """Issue 38, item 2: ``dict[str, Any]`` in emulator/domain, compute and store falls by at least 80% from the
    138 it was (61 + 14 + 63); what is left reads JSON not yet typed (a state document or journal line before
    it is built, a limits or profile file, a model's state). A new untyped dict needs a reason, and this bound."""
    found = [f"{path.relative_to(ROOT).as_posix()}:{n}" for part in ("domain", "compute", "store")
             for path in sorted((EMULATOR / part).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) for _ in range(line.count("dict[str, Any]"))]
    assert len(found) <= 138 // 5, found


# --- module docstrings -------------------------------------------------------------------------------------

MAX_DOCSTRING_LINES = 5  # the guide: what a module emulates and where it differs, "at most about five lines"


def long_module_docstrings(root: Path = EMULATOR) -> list[str]:
    """The modules of ``root`` (packages' ``__init__.py`` included) whose docstring is missing or longer than
    :data:`MAX_DOCSTRING_LINES` lines, as ``path (N lines)``. What a module's docstring cannot hold goes to
    its package's README.md, "Module notes" (issue 38, item 9)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        doc = ast.get_docstring(parse_ast(path.read_text(encoding="utf-8")), clean=True)
        lines = len(doc.splitlines()) if doc else 0
        if not doc or lines > MAX_DOCSTRING_LINES:
            out.append(f"{path.relative_to(root.parent).as_posix()} ({lines} lines)")
    return out


def test_every_module_has_a_docstring_of_at_most_five_lines() -> None:
    assert long_module_docstrings() == [], "module docstrings missing or over five lines; move the rest to the " \
                                           "package README's Module notes"


def test_the_docstring_check_sees_a_long_or_missing_docstring(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package."""\n')
    (pkg / "short.py").write_text('"""One line.\n\nTwo.\nThree.\nFour.\n"""\nx = 1\n')
    (pkg / "long.py").write_text('"""One line.\n\n' + "".join(f"Line {i}.\n" for i in range(3, 8)) + '"""\n')
    (pkg / "none.py").write_text("x = 1\n")
    assert long_module_docstrings(pkg) == ["pkg/long.py (7 lines)", "pkg/none.py (0 lines)"]


STEP_MODULES = ("routing", "auth", "shards", "faults", "validation", "dispatch")


def test_the_request_path_is_one_pipeline_of_plain_steps() -> None:
    """The vendor API and the control plane cross one ASGI entry (``http/pipeline.py``): the steps are plain
    methods, not ASGI apps, and what they learn stays out of the scope (response validation off)."""
    import asyncio

    import orjson

    from bench.inproc import call
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    asgi = []
    for name in STEP_MODULES:
        tree = parse_ast((EMULATOR / "http" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if [a.arg for a in node.args.args] == ["self", "scope", "receive", "send"]:
                    asgi.append(f"http/{name}.py::{node.name}")
    assert asgi == [], f"ASGI apps among the request path's steps: {asgi}"

    scopes = []
    app = build_server_app(Runtime(Config(clock="manual")))

    async def watched(scope, receive, send):  # type: ignore[no-untyped-def]
        scopes.append(scope)
        await app(scope, receive, send)

    async def calls() -> list[int]:
        status, raw = await call(watched, "POST", "/v1/rl/model-resources",
                                 {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True})
        rid = orjson.loads(raw)["id"]
        return [status, (await call(watched, "GET", f"/v1/rl/model-resources/{rid}"))[0],
                (await call(watched, "GET", "/v1/rl/model-resources?limit=2"))[0]]

    assert asyncio.run(calls()) == [200, 200, 200]
    assert [sorted(s.get("extensions", {})) for s in scopes] == [[], [], []]
