"""The installed package works without the source tree (issues 10, 24 and 31).

Builds the wheel, installs it into a fresh virtual environment, and from an unrelated directory runs
the two console scripts: the emulator serves (specs, the dashboard's assets and every fixture of the
top-level ``fixtures/``, loaded by name, come from the installed package) and a short contract run
passes against it; a user's own test file using the ``together_emulator`` fixture passes (issue 24), and
the contract suite runs through plain pytest (``pytest --pyargs contract_tests``, ``pytest -p
contract_tests.plugin``). Offline: the wheel is built without build
isolation, and the fresh environment finds the third-party dependencies in this environment's
site-packages through a ``.pth`` line (a ``.pth`` file in a directory added that way is not processed,
so this checkout's own editable install stays invisible, which the test checks).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

import emulator
from emulator import fixture_files

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(cmd: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


# What a build of the checkout leaves behind, or a run of it: never part of a wheel.
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".hypothesis",
                                     "reports", ".state", ".*_cache", "out")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the checkout: setuptools builds in the source tree (build/), whose leftovers
    (a file since deleted) would reach the wheel, and two builds at once (pytest-xdist) would share it."""
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "checkout"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", out, source], cwd=out)
    (built,) = out.glob("together_rl_emulator-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    # Without a pip of its own (ensurepip's install of one took 3-4 CPU seconds of this module's ~55): this
    # environment's pip installs the wheel into it (`--python`), as the environment's own would.
    _run([sys.executable, "-m", "venv", "--without-pip", env_dir], cwd=env_dir.parent)
    py = env_dir / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--quiet", "--no-deps", "--no-index", wheel],
         cwd=env_dir.parent)
    purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=env_dir.parent).stdout.strip())
    (purelib / "_offline_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return env_dir


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An unrelated working directory: nothing of the source tree is reachable from it."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def _fixtures(kind: str) -> list[str]:
    """The names of one kind of fixture, read from the source tree."""
    ext = fixture_files.KINDS[kind]
    return sorted(p.name.removesuffix(ext) for p in (ROOT / "fixtures" / kind).glob(f"*{ext}"))


def test_wheel_carries_every_file_it_needs(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    needed = {"emulator/specs/admin.yaml", "emulator/ui/static/index.html", "emulator/tools/haproxy.cfg.tmpl",
              "emulator/ui/static/vendor/uPlot.iife.min.js", "emulator/ui/static/vendor/LICENSE",
              "contract_tests/pytest.ini"}
    # pyproject.toml lists the packages: every module of the source tree must be in the wheel.
    needed |= {p.relative_to(ROOT).as_posix() for top in ("emulator", "contract_tests")
               for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts}
    # The example clients ship as emulator/examples/ (together-rl-emulator examples --copy), byte for byte.
    for path in (ROOT / "examples").iterdir():
        if path.suffix in (".py", ".md"):
            assert archive.read(f"emulator/examples/{path.name}") == path.read_bytes(), path.name
    assert needed <= names, needed - names
    # The top-level fixtures/ is the one source: the wheel carries every file of it, byte for byte.
    fixtures = {p.relative_to(ROOT / "fixtures").as_posix(): p for p in (ROOT / "fixtures").rglob("*") if p.is_file()}
    assert {"README.md", "faults/bad-day.yaml", "scenarios/two-sessions-step-40.yaml",
            "recordings/sdk-training-loop.jsonl", "tokens/team.yaml", "parity/api-tour.jsonl",
            "parity/altered-status-code.jsonl"} <= set(fixtures)
    for rel, path in fixtures.items():
        assert archive.read(f"emulator/fixtures/{rel}") == path.read_bytes(), rel
    assert any(re.fullmatch(r"together_rl_emulator-[^/]+\.dist-info/licenses/LICENSE", n) for n in names)
    assert {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith(".dist-info")} == {
        "emulator", "contract_tests"}  # no generic top-level package such as bench
    # The root's contract files, mapped into the packages by the build (pyproject.toml), byte for byte; the
    # mapped packages carry those files only (they map the repository's root).
    shipped = {"emulator/contract/openapi.yaml": "openapi.yaml", "contract_tests/contract/openapi.yaml": "openapi.yaml",
               "contract_tests/contract/schemathesis.toml": "schemathesis.toml"}
    for name, source in shipped.items():
        assert archive.read(name) == (ROOT / source).read_bytes(), name
    assert {n for n in names if n.startswith(("emulator/contract/", "contract_tests/contract/"))} == set(shipped)
    assert not {n for n in names if n.endswith(("openapi.yaml", "schemathesis.toml"))} - set(shipped)


def test_installed_server_and_suite_read_the_contract_from_the_wheel(venv: Path, served: str, elsewhere: Path) -> None:
    """Both read the root's openapi.yaml as the wheel carries it, not a checkout's file: the emulator serves it
    and the contract suite loads it (``CONTRACT_SPEC`` unset)."""
    code = ("from emulator import spec; from contract_tests import spec as c; "
            "print(spec.spec_file(spec.VENDOR)); print(c.spec_path()); print(c.shipped('schemathesis.toml')); "
            "print(len(c.operations()), len(spec.operation_ids()))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONTRACT_SPEC")}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *paths, counts = proc.stdout.splitlines()
    for path, source in zip(paths, ("openapi.yaml", "openapi.yaml", "schemathesis.toml")):
        assert str(venv) in path and str(ROOT) not in path, path
        assert Path(path).read_bytes() == (ROOT / source).read_bytes(), path
    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    operations = [op for item in contract["paths"].values() for op in item.values() if "operationId" in op]
    assert counts.split() == [str(len(operations))] * 2
    served_spec = httpx.get(f"{served}/openapi.json", timeout=30).json()
    assert served_spec["info"] == contract["info"] and list(served_spec["paths"]) == list(contract["paths"])


def test_installed_package_is_not_the_source_tree(venv: Path, elsewhere: Path) -> None:
    out = _run([venv / "bin" / "python", "-c", "import emulator, contract_tests; print(emulator.__file__); "
                "print(contract_tests.__file__); print(emulator.__version__)"], cwd=elsewhere).stdout.split()
    assert all(str(venv) in path and str(ROOT) not in path for path in out[:2]), out
    assert out[2] == emulator.__version__


def test_console_scripts_print_their_version(venv: Path, elsewhere: Path) -> None:
    for script in ("together-rl-emulator", "together-rl-contract"):
        out = _run([venv / "bin" / script, "--version"], cwd=elsewhere).stdout.strip()
        assert out == f"{script} {emulator.__version__}"


@contextmanager
def _installed(venv: Path, cwd: Path, *commands: list[str]) -> Iterator[list[str]]:
    """Start ``together-rl-emulator COMMAND...`` once per command, all at once (each start takes a second
    or two of imports); yields their URLs, and stops them."""
    procs = [subprocess.Popen([str(venv / "bin" / "together-rl-emulator"), *cmd, "--port", "0"], cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    try:
        urls = []
        for cmd, proc in zip(commands, procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "listening on" not in line:
                proc.kill()
                raise AssertionError(f"{cmd}: {line}{proc.stderr.read() if proc.stderr else ''}")
            urls.append(line.rsplit(" ", 1)[1].strip())
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)


@pytest.fixture
def served(venv: Path, elsewhere: Path) -> Iterator[str]:
    with _installed(venv, elsewhere, ["serve", "--clock", "manual"]) as (url,):
        yield url


def test_installed_emulator_serves_from_an_unrelated_directory(served: str) -> None:
    with httpx.Client(base_url=served, timeout=30) as c:
        assert c.get("/_emulator/health").json() == {"status": "ok"}
        names = {s["name"] for s in c.get("/_emulator/scenarios").json()["data"]}
        assert "two-sessions-step-40" in names
        assert c.post("/_emulator/scenarios/empty-project").status_code == 200
        assert c.get("/openapi.json").json()["openapi"] == "3.0.3"
        assert c.get("/docs/").status_code == 200
        assert c.get("/_emulator/ui/static/vendor/uPlot.iife.min.js").status_code == 200
        r = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                   headers={"Authorization": "Bearer any-key"})
        assert r.status_code == 200, r.text
        # The Files API's upload form (multipart, parsed by the request validation) from the wheel too.
        up = c.post("/v1/files", files={"purpose": (None, "calibration"), "file_name": (None, "c.jsonl")},
                    headers={"Authorization": "Bearer any-key"})
        assert up.status_code == 302 and up.headers["location"].startswith(served + "/_files/uploads/"), up.text


def test_installed_cluster_prints_its_configuration_and_runs_behind_haproxy(venv: Path, elsewhere: Path) -> None:
    """The HAProxy template ships; with HAProxy on PATH, a cluster of the installed package serves (issue 28)."""
    import shutil

    proc = _run([venv / "bin" / "together-rl-emulator", "cluster", "--print-config", "--shard-address",
                 "127.0.0.1:9001", "--shard-address", "127.0.0.1:9002"], cwd=elsewhere)
    assert "backend shard1" in proc.stdout and "crc32,mod(2)" in proc.stdout
    if shutil.which("haproxy") is None:
        pytest.skip("HAProxy is not installed (apt-get install haproxy; .ci/run does): the cluster is not started")
    with _installed(venv, elsewhere, ["cluster", "--workers", "2", "--check-interval", "200"]) as (url,):
        for key in ("any-key", "other-key"):
            r = httpx.post(f"{url}/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                           headers={"Authorization": f"Bearer {key}"}, timeout=30)
            assert r.status_code == 200 and r.headers["x-emulator-shard"] in ("0", "1"), r.text
        assert len(httpx.get(f"{url}/_emulator/ui/api/tenants", timeout=30).json()["data"]) == 2


def _resource_ids(url: str, token: str) -> list[str]:
    resp = httpx.get(f"{url}/v1/rl/model-resources", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    return [r["id"] for r in resp.json()["data"]]


def test_installed_emulator_loads_every_scenario_fault_file_and_tokens_file_by_name(venv: Path,
                                                                                     elsewhere: Path) -> None:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    scenarios, faults, tokens = _fixtures("scenarios"), _fixtures("faults"), _fixtures("tokens")
    assert scenarios and faults and tokens
    commands = ([["serve", "--clock", "manual", "--scenario", n] for n in scenarios]
                + [["serve", "--faults", n] for n in faults] + [["serve", "--tokens-file", n] for n in tokens])
    with _installed(venv, elsewhere, *commands) as urls:
        by_command = dict(zip(map(tuple, commands), urls))
        for name in scenarios:
            # The same seed and the same file seed the same ids as in this checkout.
            runtime = Runtime(Config(clock="manual", scenario=name))
            build_server_app(runtime)
            principal = runtime.principal_for("demo-key")
            assert principal is not None
            state = runtime.store.get(principal.project)
            expected = sorted(state.resources.ids()) if state is not None else []
            url = by_command[("serve", "--clock", "manual", "--scenario", name)]
            assert sorted(_resource_ids(url, "demo-key")) == expected, name
        for name in faults:
            rules = yaml.safe_load((ROOT / "fixtures" / "faults" / f"{name}.yaml").read_text())
            listed = httpx.get(f"{by_command[('serve', '--faults', name)]}/_emulator/faults", timeout=30).json()
            assert [r["name"] for r in listed["data"]] == [r["name"] for r in rules], name
        for name in tokens:
            url = by_command[("serve", "--tokens-file", name)]
            listed_tokens = yaml.safe_load((ROOT / "fixtures" / "tokens" / f"{name}.yaml").read_text())["tokens"]
            for token in listed_tokens:
                _resource_ids(url, token)
            refused = httpx.get(f"{url}/v1/rl/model-resources", headers={"Authorization": "Bearer not-listed"})
            assert refused.status_code == 401, name


def test_installed_emulator_replays_every_recording_by_name(venv: Path, elsewhere: Path) -> None:
    from tests.recordings import RECORDINGS

    names = _fixtures("recordings")
    assert names and set(names) == set(RECORDINGS)
    with _installed(venv, elsewhere, *(["replay", n] for n in names)) as urls:
        for name, url in zip(names, urls):
            RECORDINGS[name].drive(url)  # the recording's own client, against the replay
            report = httpx.get(f"{url}/_emulator/replay", timeout=30).json()
            assert report["unanswered"] == [] and report["unused"] == 0 and report["answered"] > 0, report


def test_installed_parity_judges_every_shipped_recording_by_name(venv: Path, elsewhere: Path) -> None:
    """`together-rl-emulator parity NAME` from the wheel: the SDK's loop the emulator made is faithful, an altered
    recording shows its alteration and exits 1; the reports land in the user's directory. (Every shipped one
    is judged in tests/test_parity.py; here, that the wheel carries and finds them.)"""
    from tests.recordings import ALTERED, PARITY

    names = _fixtures("parity")
    assert set(names) == set(PARITY) | set(ALTERED)
    exe = venv / "bin" / "together-rl-emulator"
    out = _run([exe, "parity", "sdk-training-loop", "--report", "mine"], cwd=elsewhere).stdout
    assert "verdict: FAITHFUL; report: mine/summary.md" in out, out
    assert {p.name for p in (elsewhere / "mine").iterdir()} == {"summary.json", "summary.md", "junit.xml"}
    proc = subprocess.run([str(exe), "parity", "altered-missing-field"], cwd=elsewhere, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 1 and "getSession response_schema body.step" in proc.stdout, proc.stdout + proc.stderr
    assert (elsewhere / "reports" / "parity" / "junit.xml").is_file()


def _docs_block(page: str, heading: str, after: str) -> str:
    """The first ```sh block under ``heading`` of docs/``page`` after the paragraph that starts with ``after``."""
    from tests.doc_blocks import section

    text = section(page, heading)
    rest = text[text.index("\n" + after):]
    return rest.split("```sh\n", 1)[1].split("```", 1)[0]


def test_installed_recording_at_run_time_replays_in_a_loop_with_pacing(served: str, venv: Path,
                                                                       elsewhere: Path) -> None:
    """Record at run time from the installed server, then replay with the installed `replay --loop --pace`."""
    help_text = _run([venv / "bin" / "together-rl-emulator", "replay", "--help"], cwd=elsewhere).stdout
    assert "--loop" in help_text and "--pace SPEED" in help_text and "--admin-token" in help_text
    assert "--match {strict,loose}" in help_text

    def client(url: str) -> list[int]:
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer k"}, timeout=30) as c:
            made = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
            return [made.status_code, c.get(f"/v1/rl/model-resources/{made.json()['id']}").status_code]

    # The page's block, as written but for the address: start, the client, stop, download, then replay.
    block = _docs_block("record-and-replay.md", "Record a demo and replay it", "Record at run time")
    start, stop, download, replay = [line.split("  #")[0].strip() for line in block.strip().splitlines()]
    here = served.removeprefix("http://")

    def shell(line: str) -> str:
        return _run(["bash", "-c", line.replace("localhost:8765", here)], cwd=elsewhere).stdout

    assert '"recording":true' in shell(start)
    assert client(served) == [200, 200]
    assert '"exchanges":2' in shell(stop)
    shell(download)
    assert len((elsewhere / "demo.jsonl").read_text().splitlines()) == 2
    assert replay.split()[:2] == ["together-rl-emulator", "replay"] and "--port" in replay
    args = replay.split()[2:]
    args = args[:args.index("--port")] + args[args.index("--port") + 2:]  # (_installed picks a free port)
    assert args == ["demo.jsonl", "--loop", "--pace", "5"]
    with _installed(venv, elsewhere, ["replay", *args], ["replay", "demo.jsonl", "--match", "loose"]) as (url, loose):
        assert client(url) == [200, 200] and client(url) == [200, 200]  # twice: the loop starts over
        report = httpx.get(f"{url}/_emulator/replay", timeout=30).json()
        assert report["rewinds"] == 1 and report["pace"] == 5 and report["unanswered_total"] == 0
        assert httpx.get(f"{url}/docs/", timeout=30).status_code == 200
        # Strict (the default) matches the body too, and says which field differs; loose does not look at it.
        other = {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True}
        refused = httpx.post(f"{url}/v1/rl/model-resources", json=other, headers={"Authorization": "Bearer k"})
        assert refused.status_code == 404 and ("the body differs from recorded #1 (the same method, path and query): "
                                               "body.lora_enabled: sent true, recorded (absent)"
                                               in refused.json()["error"]["message"]), refused.text
        answered = httpx.post(f"{loose}/v1/rl/model-resources", json=other, headers={"Authorization": "Bearer k"})
        assert answered.status_code == 200 and httpx.get(f"{loose}/_emulator/replay").json()["match"] == "loose"


def test_installed_contract_suite_passes_against_it(served: str, venv: Path, elsewhere: Path) -> None:
    proc = _run([venv / "bin" / "together-rl-contract", "--base-url", served, "--token", "contract-key",
                 "--second-token", "contract-key-2", "--report", elsewhere / "report", "--max-examples", "2",
                 "--no-coverage-phase", "--seed", "1", "-k", "test_scenarios or test_unknown_ids_are_404"],
                cwd=elsewhere, timeout=600)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-3000:]
    assert (elsewhere / "report" / "summary.md").exists()


def test_stock_schemathesis_runs_on_the_installed_spec_and_configuration(served: str, venv: Path,
                                                                       elsewhere: Path) -> None:
    """docs/contract-suite.md's pip-user command: the two files found through `together-rl-contract --path`."""
    where = {name: Path(_run([venv / "bin" / "together-rl-contract", "--path", name], cwd=elsewhere).stdout.strip())
             for name in ("openapi.yaml", "schemathesis.toml")}
    for name, path in where.items():
        assert str(venv) in str(path) and path.read_bytes() == (ROOT / name).read_bytes(), path
    # `st` is a console script of the dependency; the fresh environment sees the package, not the script.
    st = "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'st'; sys.exit(schemathesis())"
    proc = _run([venv / "bin" / "python", "-c", st, "--no-color", "--config-file", where["schemathesis.toml"], "run",
                 where["openapi.yaml"], "--url", served, "-H", "Authorization: Bearer any-key", "--phases", "examples",
                 "--seed", "1"], cwd=elsewhere)
    assert f"Configuration:    {where['schemathesis.toml']}" in proc.stdout and " passed" in proc.stdout, proc.stdout


def test_contract_suite_without_its_extra_says_which_extra_and_exits_2(elsewhere: Path) -> None:
    # Simulates a plain `pip install together-rl-emulator` without [contract]: schemathesis cannot import.
    code = ("import sys; sys.modules['schemathesis'] = None; from contract_tests.__main__ import main; "
            "sys.exit(main(['--base-url', 'http://127.0.0.1:9', '--token', 't']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "contract extra" in lines[0] and "schemathesis" in lines[0], lines
    assert "together-rl-emulator[" not in lines[0]  # not on the index: a name pip install cannot find
    assert "Traceback" not in proc.stderr


USER_TEST = """
import httpx
import pytest


def test_my_client(together_emulator):
    with httpx.Client(base_url=together_emulator.url, headers=together_emulator.headers) as api:
        made = api.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
        assert made.status_code == 200, made.text
    assert together_emulator.clock.advance(60).isoformat() == "2026-01-01T00:01:00+00:00"


def test_the_plugin_is_the_installed_one():
    import emulator.pytest_plugin
    assert "{venv}" in emulator.pytest_plugin.__file__


@pytest.mark.together_emulator(profile="realistic", clock="auto")
def test_the_auto_clock_and_scheduled_actions(together_emulator):
    with httpx.Client(base_url=together_emulator.url, headers=together_emulator.headers) as api:
        rid = api.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()["id"]
        ready = api.get(f"/v1/rl/model-resources/{rid}").json()
    assert (ready["status"], ready["updated_at"]) == ("MODEL_RESOURCES_STATUS_READY", "2026-01-01T00:03:45.000Z")
    together_emulator.clock.schedule("stop_resource", id=rid, delay=10)
    assert [p["kind"] for p in together_emulator.clock.pending()][0] == "action"
    assert together_emulator.clock.run_until(rid, "STOPPED")[-1]["at"] == "2026-01-01T00:04:25.000Z"
"""


def test_installed_plugin_runs_a_users_own_test_file(venv: Path, elsewhere: Path) -> None:
    (elsewhere / "test_mine.py").write_text(USER_TEST.replace("{venv}", str(venv)))
    for mode in ("thread", "subprocess"):
        proc = _run([venv / "bin" / "python", "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider",
                     f"--together-emulator-mode={mode}", "test_mine.py"], cwd=elsewhere)
        assert "3 passed" in proc.stdout and "warning" not in proc.stdout.lower(), proc.stdout[-3000:]


@pytest.mark.parametrize("how", [["--pyargs", "contract_tests"], ["-p", "contract_tests.plugin", "--pyargs",
                                                                   "contract_tests.test_lifecycle"]])
def test_installed_contract_suite_runs_through_pytest(served: str, venv: Path, elsewhere: Path,
                                                      how: list[str]) -> None:
    proc = _run([venv / "bin" / "python", "-m", "pytest", *how, "--base-url", served, "--token", "pytest-key",
                 "--report", elsewhere / "report", "--max-examples", "2", "--no-coverage-phase", "--seed", "1",
                 "-k", "unknown_ids_are_404", "-p", "no:cacheprovider"], cwd=elsewhere, timeout=600)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-3000:]
    assert "contract suite: target " + served in proc.stdout
    assert "**Verdict: CONFORMS**" in (elsewhere / "report" / "summary.md").read_text()


def test_readme_install_block_installs_from_a_checkout(tmp_path: Path) -> None:
    """The "Install" block of docs/getting-started.md (README.md shows the same), run as written from a fresh directory with the checkout's path put in. pip
    builds the package as the block makes it (isolated, with setuptools from the package index, which setup
    may reach) but installs no dependencies: the fresh environment sees this one's, as above."""
    from tests.doc_blocks import block

    body = block("getting-started.md", "Install", 0).body
    assert body.count("/path/to/checkout") == 2 and "together-rl-emulator[" not in body
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_DEPS="1", PIP_QUIET="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    script = body.replace("/path/to/checkout", str(ROOT))
    proc = subprocess.run(["bash", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fresh = tmp_path / ".venv"
    purelib = Path(_run([fresh / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp_path).stdout.strip())
    (purelib / "_offline_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    out = _run([fresh / "bin" / "together-rl-emulator", "--version"], cwd=tmp_path).stdout.strip()
    assert out == f"together-rl-emulator {emulator.__version__}"
    where = _run([fresh / "bin" / "python", "-c", "import emulator; print(emulator.__file__)"], cwd=tmp_path).stdout
    assert str(fresh) in where and str(ROOT) not in where, where  # a real install, not the editable one
    listed = _run([fresh / "bin" / "together-rl-emulator", "examples"], cwd=tmp_path).stdout
    assert "rl_grpo" in listed and "bad_day" in listed


def test_installed_examples_copy_out_and_run(venv: Path, elsewhere: Path) -> None:
    """What a pip user does with the examples: copy them out of the installed package, run one against the
    installed server. The copies are the repository's files, byte for byte."""
    copied = _run([venv / "bin" / "together-rl-emulator", "examples", "--copy", "my-examples"], cwd=elsewhere)
    assert copied.stdout.startswith("copied 5 files to my-examples")
    for path in (ROOT / "examples").iterdir():
        if path.suffix in (".py", ".md"):
            assert (elsewhere / "my-examples" / path.name).read_bytes() == path.read_bytes(), path.name
    with _installed(venv, elsewhere, ["serve", "--clock", "manual"]) as (url,):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "PYTHONPATH"))}
        proc = subprocess.run([str(venv / "bin" / "python"), "my-examples/supervised.py", "--steps", "4"], cwd=elsewhere,
                              env={**env, "TOGETHER_BASE_URL": url}, capture_output=True, text=True, timeout=300,
                              check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    losses = [float(line.split()[1]) for line in proc.stdout.splitlines() if re.match(r"^\s+\d+\s", line)]
    assert len(losses) == 4 and losses == sorted(losses, reverse=True), proc.stdout
