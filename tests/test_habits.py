"""How the suite is run (issue 38, item 10): bare ``pytest`` at the root runs what ``make unit`` runs, and
``make test`` runs the tests in parallel with the contract suite alongside, printing the slowest tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _collected(cmd: list[str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    proc = subprocess.run([*cmd, "--collect-only", "-q", "-p", "no:xdist"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_bare_pytest_at_the_root_collects_what_make_unit_runs(request: pytest.FixtureRequest,
                                                             deselected: list[str]) -> None:
    """The console script puts its own directory first on sys.path, not the working directory as ``python -m
    pytest`` does: the tests' imports of tests.* and bench.* need pyproject's ``pythonpath``. When this run
    collected the whole suite (make test, make unit), it is the comparison: one collection fewer."""
    bare = _collected([str(Path(sys.executable).with_name("pytest"))])
    args = {(Path(request.config.invocation_params.dir) / a).resolve() for a in request.config.args}
    whole = args <= {ROOT / "tests"} and not request.config.option.keyword
    if whole:
        ran = [item.nodeid for item in request.session.items] + deselected
    else:
        ran = _collected([sys.executable, "-m", "pytest"])
    assert len(bare) > 900 and sorted(bare) == sorted(ran) and len(set(bare)) == len(bare)


def test_make_test_runs_the_tests_in_parallel_and_the_contract_suite_alongside() -> None:
    make = (ROOT / "Makefile").read_text()
    recipe = make[make.index("\ntest: "):].split("\n\n", 1)[0]
    assert "-m pytest -q $(PYTEST_PARALLEL)" in recipe and "-m contract_tests --report reports/contract" in recipe
    assert recipe.index("wait $$contract") < recipe.index("-m pytest -q -m alone"), "alone: after the others"
    # every Python it starts keeps a bytecode cache whatever the shell says (the Makefile says why)
    assert recipe.count("$(TEST_ENV) $(BIN)/python") == recipe.count("$(BIN)/python") == 3, recipe
    assert re.search(r"^TEST_ENV := env -u PYTHONDONTWRITEBYTECODE$", make, re.M)
    assert re.search(r'^PYTEST_PARALLEL := -n \$\(TEST_JOBS\) --dist loadfile --no-loadscope-reorder -m "not alone"$',
                     make, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^addopts = ".*--durations=10.*"$', pyproject, re.M), "every run prints its ten slowest tests"
