"""The pytest plugin and ``emulate()`` (issue 24): the emulator in a user's own test suite and notebooks.

Each case runs pytest (or Python) in a subprocess from a temporary directory, as a user's suite would run:
the plugin comes in through its ``pytest11`` entry point (the package is installed in this environment),
with ``-W error`` so that a warning leaking from the emulator into the user's tests fails them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from emulator.testing import EmulatorError, EmulatorServer, emulate

ROOT = Path(__file__).resolve().parent.parent


PAGE = "pytest-and-notebooks.md"


def readme_block(heading: str) -> str:
    """The first block under ``heading`` of docs/pytest-and-notebooks.md, a Python one."""
    from tests.doc_blocks import block

    found = block(PAGE, heading, 0)
    assert found.lang == "python", found
    return found.body


def run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "PYTEST_"))}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)


def pytest_in(tmp_path: Path, files: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return run(["-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", *args], tmp_path, timeout)


def test_readme_pytest_example_passes_as_written(tmp_path: Path) -> None:
    proc = pytest_in(tmp_path, {"test_my_client.py": readme_block("pytest: the `together_emulator` fixture")})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout and "warning" not in proc.stdout.lower(), proc.stdout[-2000:]


def test_readme_notebook_example_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "notebook.py").write_text(readme_block("A script or a notebook: `emulate()`"))
    proc = run(["-W", "error", "notebook.py"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()[-2:]  # (the SDK prints its progress before)
    assert lines[0].endswith("2026-01-01 00:00:00+00:00"), lines  # the tenant's own manual clock
    assert lines[1].startswith("MODEL_RESOURCES_STATUS_STOP"), lines  # the idle hour stopped the resource


ISOLATION = '''
import os
import httpx
import pytest

def make(emu):
    r = httpx.post(f"{emu.url}/v1/rl/model-resources", headers=emu.headers,
                   json={"base_model": "Qwen/Qwen3.8-27B"}).json()
    return r

@pytest.mark.together_emulator(seed=7, profile="realistic")
def test_one(together_emulator):
    assert os.environ["TOGETHER_API_KEY"] == together_emulator.api_key
    assert os.environ["TOGETHER_BASE_URL"] == together_emulator.url
    r = make(together_emulator)
    print("ID", r["id"])
    together_emulator.clock.advance(3600)
    assert together_emulator.clock.now().isoformat() == "2026-01-01T01:00:00+00:00"
    assert together_emulator.state()["clock"]["mode"] == "manual"

def test_two_sees_nothing_of_test_one(together_emulator):
    assert together_emulator.clock.now().isoformat() == "2026-01-01T00:00:00+00:00"
    listed = httpx.get(f"{together_emulator.url}/v1/rl/model-resources", headers=together_emulator.headers).json()
    assert listed["data"] == []
    assert together_emulator.faults() == []

@pytest.mark.parametrize("together_emulator", [{"faults": {"name": "down", "match": {"operation_id": "listModelResources"},
                                                          "effect": {"status": 503}}}], indirect=True)
def test_indirect_settings(together_emulator):
    got = httpx.get(f"{together_emulator.url}/v1/rl/model-resources", headers=together_emulator.headers)
    assert got.status_code == 503

@pytest.mark.together_emulator(scenario="two-sessions-step-40")
def test_scenario_in_the_tenant(together_emulator):
    listed = httpx.get(f"{together_emulator.url}/v1/rl/training-sessions", headers=together_emulator.headers).json()
    assert len(listed["data"]) == 2

@pytest.mark.together_emulator(sede=1)
def test_typo_in_settings(together_emulator):
    pass
'''


@pytest.mark.parametrize("mode", ["thread", "subprocess"])
def test_each_test_gets_its_own_tenant_clock_and_settings(tmp_path: Path, mode: str) -> None:
    proc = pytest_in(tmp_path, {"test_iso.py": ISOLATION}, "-s", f"--together-emulator-mode={mode}")
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert "4 passed" in proc.stdout and "1 error" in proc.stdout, proc.stdout[-4000:]
    assert "unknown settings ['sede']" in proc.stdout
    first = re.findall(r"ID (\S+)", proc.stdout)
    if mode == "subprocess":
        return
    again = pytest_in(tmp_path, {}, "-s", "-k", "test_one", f"--together-emulator-mode={mode}")
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.findall(r"ID (\S+)", again.stdout) == first  # the same test, the same tenant and seed: same ids


UNRELATED = '''
import sys

def test_nothing_of_the_emulator_is_loaded(request):
    assert request.config.pluginmanager.has_plugin("together_emulator")  # registered, and idle
    assert "emulator.testing" not in sys.modules and "connexion" not in sys.modules
'''

OWN_BASE_URL = '''
def pytest_addoption(parser):
    parser.addoption("--base-url", default="http://example.invalid")  # as pytest-base-url does
'''


def test_unrelated_suites_see_no_effect(tmp_path: Path) -> None:
    proc = pytest_in(tmp_path, {"test_plain.py": UNRELATED, "conftest.py": OWN_BASE_URL}, "--strict-markers",
                     "--base-url", "http://x")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout and "warning" not in proc.stdout.lower()


def test_url_mode_shares_a_running_emulator_between_runs(tmp_path: Path) -> None:
    with EmulatorServer("subprocess") as shared:
        files = {"test_shared.py": "def test_key(together_emulator):\n    print('KEY', together_emulator.api_key)\n"}
        keys = []
        for _ in range(2):
            proc = pytest_in(tmp_path, files, "-s", f"--together-emulator-url={shared.url}")
            assert proc.returncode == 0, proc.stdout[-3000:]
            keys += re.findall(r"KEY (\S+)", proc.stdout)
        assert len(keys) == 2 and keys[0] != keys[1]  # a per-run salt: two runs never share a tenant


def test_emulate_sets_and_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOGETHER_API_KEY", "the-users-own")
    monkeypatch.delenv("TOGETHER_BASE_URL", raising=False)
    with EmulatorServer() as server:
        with emulate(server=server, seed=3) as emu:
            assert os.environ["TOGETHER_API_KEY"] == emu.api_key and os.environ["TOGETHER_BASE_URL"] == server.url
            emu.clock.set("2026-05-01T00:00:00Z")
            assert emu.clock.now().month == 5
            made = httpx.post(f"{emu.url}/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                              headers=emu.headers)
            assert made.json()["created_at"].startswith("2026-05-01")
            with pytest.raises(EmulatorError, match="answered 400: the tenant's clock never moves backwards"):
                emu.clock.set("2026-01-01T00:00:00Z")
        assert os.environ["TOGETHER_API_KEY"] == "the-users-own" and "TOGETHER_BASE_URL" not in os.environ
        # The tenant was forgotten with the block: its own clock too.
        assert server._call("adminGetClock", "GET", "/_emulator/clock", tenant=emu.api_key)["scope"] == "global"
