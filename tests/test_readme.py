"""Every code block of the docs site (docs/*.md) and of README.md is run by a test (issues 27 and 42), and the
expected output under a block is what it prints.

``COVERED`` names, for each block (its page, its heading and its place under it: tests/doc_blocks.py), the
test that runs it: most are here, a few live next to what they exercise (the TypeScript SDK, the pytest
plugin, the contract suite, the installed wheel). ``test_every_docs_block_is_run_by_a_test`` fails on a block
that no test claims and that is not marked ``<!-- not run: REASON -->``, and on a claim whose block or test
is gone, so a new snippet cannot slip in untested. README.md shows the quick start of the site's Getting
started page, and ``test_readme_shows_the_sites_blocks`` holds the two equal.

The commands run as written, with two substitutions only: a free port for 8765 (other processes on this
machine may hold it) and, for `record`, a local emulator for the real service (no network in tests).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.parity import fresh_emulator
from emulator.tools.testing import serve_in_thread
from tests.doc_blocks import Block, blocks, pages, section
from tests.doc_blocks import block as doc_block
from tests.pyast import parse as parse_ast

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # this environment's console scripts (together-rl-emulator, python3)
README_PAGE = "README.md"
START = "getting-started.md"
FAULTS = "faults-and-scenarios.md"


def block(heading: str, index: int, page: str = README_PAGE) -> Block:
    """A block of README.md, or of ``page``."""
    return doc_block(page, heading, index)


HERE = "tests/test_readme.py::"
SAME = HERE + "test_readme_shows_the_sites_blocks"
QUICK = HERE + "test_quick_start_runs_as_written_and_prints_what_readme_shows"
INSTALL = "tests/test_install.py::test_readme_install_block_installs_from_a_checkout"
WALK = "tests/test_new_user_path.py::test_the_new_user_path_walks_as_written"
CONTROL = "Control plane `/_emulator/*` (spec: `emulator/specs/admin.yaml`)"
CLOCK = "The clock: what is pending, the next transition, the auto clock and scheduled actions"
TIME = "Time in your tests: the auto clock, what is pending, and what happens when"
PARITY = "Is it faithful to your account?"
FIRST = "A first training loop"  # README's; the Getting started page calls the same blocks "Quick start"
#: (page, heading, index) -> the tests that run that block (several when a block's lines are run by several).
COVERED: dict[tuple[str, str, int], list[str]] = {
    (README_PAGE, "Install", 0): [SAME, INSTALL],
    (README_PAGE, "Quick start", 0): [HERE + "test_readme_make_commands_are_targets_of_the_makefile"],
    **{(README_PAGE, FIRST, i): [QUICK] for i in range(5)},
    (START, "Install", 0): [INSTALL],
    **{(START, "Quick start", i): [SAME] for i in range(5)},
    (START, "Examples", 0): [HERE + "test_examples_block_copies_and_runs_an_example",
                             "tests/test_install.py::test_installed_examples_copy_out_and_run"],
    (START, "Examples", 1): [HERE + "test_examples_block_copies_and_runs_an_example"],
    (START, "Command line", 0): ["tests/test_cli.py::test_ctrl_c_stops_within_a_second_with_a_dashboard_stream_open"],
    ("new-user-path.md", "1. Install", 0): ["tests/test_new_user_path.py::test_the_install_step_is_the_install_block",
                                            INSTALL],
    **{("new-user-path.md", h, i): [WALK] for h in ("2. A training loop", "3. A pytest test", "4. A replayed demo")
       for i in range(2)},
    ("sdk.md", "The TypeScript SDK", 0): ["tests/test_typescript_sdk.py::test_the_readme_typescript_snippet_runs"],
    ("pytest-and-notebooks.md", "pytest: the `together_emulator` fixture", 0): [
        "tests/test_pytest_plugin.py::test_readme_pytest_example_passes_as_written"],
    ("pytest-and-notebooks.md", "A script or a notebook: `emulate()`", 0): [
        "tests/test_pytest_plugin.py::test_readme_notebook_example_runs_as_written"],
    ("pytest-and-notebooks.md", TIME, 0): ["tests/test_plugin_clock.py::test_readme_time_example_passes_as_written"],
    ("pytest-and-notebooks.md", TIME, 1): [
        "tests/test_plugin_clock.py::test_a_wait_nothing_advances_fails_within_seconds_naming_the_transition_and_the_ways_out"],
    ("control-plane.md", CONTROL, 0): [HERE + "test_manual_clock_block_runs_pasted_as_written"],
    ("control-plane.md", CONTROL, 1): [HERE + "test_manual_clock_block_runs_pasted_as_written"],
    ("control-plane.md", CLOCK, 0): [HERE + "test_clock_block_runs_pasted_as_written"],
    ("control-plane.md", CLOCK, 1): [HERE + "test_clock_block_runs_pasted_as_written"],
    ("faults-and-scenarios.md", "Rehearse a bad day", 0): ["tests/test_fixtures.py::test_readme_fault_file_is_bad_day_yaml",
                                                           "tests/test_faults.py::test_readme_bad_day_rules_load"],
    ("faults-and-scenarios.md", "Rehearse a bad day", 1): [HERE + "test_bad_day_block_serves_the_fault_file"],
    ("faults-and-scenarios.md", "Named scenarios", 0): [HERE + "test_scenario_block_runs_pasted_as_written"],
    ("faults-and-scenarios.md", "Named scenarios", 1): [HERE + "test_scenario_block_runs_pasted_as_written"],
    ("record-and-replay.md", "Record a demo and replay it", 0): [HERE + "test_record_and_replay_block_commands_start"],
    ("record-and-replay.md", "Record a demo and replay it", 1): [
        "tests/test_install.py::test_installed_recording_at_run_time_replays_in_a_loop_with_pacing"],
    ("record-and-replay.md", PARITY, 0): [HERE + "test_parity_block_records_a_client_through_the_proxy_and_judges_it"],
    ("record-and-replay.md", PARITY, 1): [HERE + "test_parity_fixture_block_prints_what_readme_shows"],
    ("record-and-replay.md", PARITY, 2): [HERE + "test_parity_fixture_block_prints_what_readme_shows"],
    ("persistence.md", "Keep state across restarts", 0): [HERE + "test_state_file_block_keeps_the_state"],
    ("cluster.md", "One emulator for a team", 0): ["tests/test_cluster.py::test_the_readmes_cluster_commands_work_as_written"],
    ("cluster.md", "One emulator for a team", 1): ["tests/test_cluster.py::test_the_readmes_cluster_commands_work_as_written"],
    # Placeholders (URL, TOKEN): these run the same commands with them filled in, not the page's text ("~").
    ("contract-suite.md", "The contract suite", 0): [
        "~tests/test_contract_selftest.py::test_healthy_emulator_conforms",
        "~tests/test_install.py::test_installed_contract_suite_passes_against_it",
        "~tests/test_install.py::test_installed_contract_suite_runs_through_pytest",
        "~tests/test_stock_schemathesis.py::test_any_token_default_passes_as_documented_and_fails_the_auth_check_it_breaks"],
    ("contract-suite.md", "Stock Schemathesis", 0): [
        "tests/test_stock_schemathesis.py::test_stock_schemathesis_passes_as_the_readme_runs_it_on_random_seeds",
        "tests/test_stock_schemathesis.py::test_any_token_default_passes_as_documented_and_fails_the_auth_check_it_breaks"],
    ("contract-suite.md", "Stock Schemathesis", 1): [
        "tests/test_install.py::test_stock_schemathesis_runs_on_the_installed_spec_and_configuration"],
    ("fidelity.md", "Transport and errors", 0): [HERE + "test_limits_file_block_is_a_valid_limits_file"],
}


def unclaimed(found: list[Block], covered: dict[tuple[str, str, int], list[str]]) -> set[tuple[str, str, int]]:
    """The blocks that no test claims and that are not marked not run."""
    return {(b.page, b.heading, b.index) for b in found if b.not_run is None} - set(covered)


def test_every_docs_block_is_run_by_a_test() -> None:
    found = [b for page in pages() for b in blocks(page)]
    present = {(b.page, b.heading, b.index) for b in found if b.not_run is None}
    marked = {(b.page, b.heading, b.index) for b in found if b.not_run is not None}
    assert unclaimed(found, COVERED) == set(), (
        "blocks of the docs that no test runs (add the test, then the claim here; or mark the block "
        "<!-- not run: REASON --> on the line before its fence)")
    assert set(COVERED) - present == set(), "claims of blocks that are gone, moved or marked not run (renumber them)"
    assert all(len(b.not_run or "") >= 10 for b in found if b.not_run is not None), "a reason, in a few words"
    assert marked <= {(b.page, b.heading, b.index) for b in found if b.page == "api-surface.md"}, (
        "only the design notes' diagrams and their probe's record are not run", sorted(marked))
    for key, tests in COVERED.items():
        for test in tests:
            path, name = test.removeprefix("~").split("::")
            source = (ROOT / path).read_text()
            functions = {n.name: n for n in ast.walk(parse_ast(source)) if isinstance(n, ast.FunctionDef)}
            assert name in functions, f"{key}: {test} does not exist"
            if not test.startswith("~"):
                assert key[0] in source or "block(" in (ast.get_source_segment(source, functions[name]) or ""), (
                    f"{key}: {path} never reads {key[0]}")


def test_a_new_block_is_caught_unless_a_test_claims_it_or_it_is_marked(tmp_path: Path, monkeypatch) -> None:
    """The check above, on a page with one new block under a known heading, and one marked not run."""
    import tests.doc_blocks as doc_blocks

    (tmp_path / "docs").mkdir()
    page = (doc_blocks.DOCS / "persistence.md").read_text()
    page += "\n```sh\ntogether-rl-emulator serve --state-file other.json\n```\n"
    page += "\n<!-- not run: a diagram, for the eyes -->\n```text\nA -> B\n```\n"
    (tmp_path / "docs" / "persistence.md").write_text(page)
    monkeypatch.setattr(doc_blocks, "DOCS", tmp_path / "docs")
    found = doc_blocks.blocks("persistence.md")
    assert unclaimed(found, COVERED) == {("persistence.md", "Keep state across restarts", 1)}
    assert [b.not_run for b in found][-1] == "a diagram, for the eyes"


def test_readme_shows_the_sites_blocks() -> None:
    """README.md's install and quick start are the Getting started page's, block for block and byte for byte
    (the quick start test runs README's; this holds the site's the same)."""
    assert block("Install", 0).body == block("Install", 0, START).body
    readme = [b.body for b in blocks(README_PAGE) if b.heading == FIRST]
    assert readme == [b.body for b in blocks(START) if b.heading == "Quick start"] and len(readme) == 5
    assert block("1. Install", 0, "new-user-path.md").body == block("Install", 0, START).body


def test_readme_is_a_landing_page() -> None:
    """At most 200 lines (issue 42): what it is, install, the two commands, the quick start, links to the site."""
    text = (ROOT / README_PAGE).read_text()
    assert len(text.splitlines()) <= 200, len(text.splitlines())
    for page in pages()[1:]:
        if "/" not in page and page not in ("api-surface.md", "operation-ids.md", "index.md"):
            assert f"(docs/{page})" in text, f"README links to every page of the site: docs/{page}"


def test_readme_make_commands_are_targets_of_the_makefile() -> None:
    """README's two commands for a checkout, exactly `make serve` and `make test`, are the Makefile's targets
    (a dry run: `make test` is the whole suite, and `make serve` never ends)."""
    body = block("Quick start", 0).body
    assert [line.split("#")[0].split() for line in body.splitlines()] == [["make", "serve"], ["make", "test"]]
    for target in ("serve", "test"):
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             check=False)
        assert dry.returncode == 0 and "python -m " in dry.stdout, dry.stdout + dry.stderr


# --- helpers -----------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shell_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOGETHER_", "EMULATOR_", "PYTEST_"))}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra}


def bash(script: str, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a pasted block: bash, in ``cwd``, killing whatever it left running."""
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=shell_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def commands(body: str) -> list[list[str]]:
    """The block's command lines, split as a shell would, comments and a trailing & dropped."""
    return [shlex.split(line.split(" #")[0].rstrip().rstrip("&").rstrip()) for line in body.splitlines()
            if line.strip() and not line.startswith("#")]


@contextmanager
def started(args: list[str], cwd: Path) -> Iterator[str]:
    """``together-rl-emulator ...`` as README writes it, on a free port; yields its URL, stops it with Ctrl+C."""
    assert args[0] == "together-rl-emulator", args
    args = list(args[1:])
    if "--port" in args:
        args[args.index("--port") + 1] = "0"
    else:
        args += ["--port", "0"]
    proc = subprocess.Popen([str(BIN / "together-rl-emulator"), *args], cwd=cwd, env=shell_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, f"{args}: {line}{proc.stderr.read() if proc.stderr else ''}"
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


SDK_LINE = re.compile(r"^\[(model-resources|session):[0-9a-f-]{36}\] ")


def normalise_sdk(line: str) -> str:
    """The SDK's progress lines carry ids and times that vary: compare their shape."""
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", line)
    return re.sub(r"\d+\.\d+s\b", "Ts", line)


def assert_shows(expected: str, actual: str, drop_sdk: bool = False) -> None:
    """``actual`` is ``expected``, line for line; a line ``...`` stands for any lines."""
    got = [line for line in actual.splitlines() if not (drop_sdk and SDK_LINE.match(line))]
    want = expected.splitlines()
    pattern = "".join("(?:.*\n)*?" if w == "..." else re.escape(normalise_sdk(w)) + "\n" for w in want)
    text = "".join(normalise_sdk(g) + "\n" for g in got)
    assert re.fullmatch(pattern, text), f"README shows:\n{expected}\nbut it printed:\n{actual}"


# --- the blocks ----------------------------------------------------------------------------------------------

def test_quick_start_runs_as_written_and_prints_what_readme_shows(tmp_path: Path) -> None:
    (serve,) = commands(block(FIRST, 0).body)
    assert serve == ["together-rl-emulator", "serve"]
    port = free_port()
    proc = subprocess.Popen([str(BIN / "together-rl-emulator"), "serve", "--port", str(port)], cwd=tmp_path,
                            env=shell_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        shown = block(FIRST, 1).body
        banner = "".join(proc.stdout.readline() for _ in shown.splitlines())
        assert banner == shown.replace("8765", str(port))
        script = block(FIRST, 3).body
        assert script.startswith("# quickstart.py")
        (tmp_path / "quickstart.py").write_text(script)
        shell = block(FIRST, 2).body
        assert "python quickstart.py" in shell and "export TOGETHER_BASE_URL=http://127.0.0.1:8765" in shell
        run = bash(shell.replace("8765", str(port)), tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert_shows(block(FIRST, 4).body, run.stdout)
        sessions = httpx.get(f"http://127.0.0.1:{port}/v1/rl/training-sessions",
                             headers={"Authorization": "Bearer any-key"}, timeout=30).json()["data"]
        assert [s["display_name"] for s in sessions] == ["quick-start"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def test_quick_start_stops_on_its_third_step_under_bad_day_as_readme_says(tmp_path: Path) -> None:
    text = " ".join(section(START, "Quick start").split())
    assert "this script stops at its third step with `OperationFailedError: ... NON_FINITE_LOSS`" in text
    (tmp_path / "quickstart.py").write_text(block(FIRST, 3).body)
    with serve_in_thread(Config(clock="manual", faults_file="bad-day")) as (url, runtime):
        # Only nan-loss: the other rules of the file make the run slow (Retry-After), not different.
        for rule in ("gpu-queue", "overloaded", "flaky", "provisioning-failed"):
            assert httpx.delete(f"{url}/_emulator/faults/{rule}", timeout=30).status_code in (200, 204)
        run = bash("python quickstart.py", tmp_path, TOGETHER_BASE_URL=url, TOGETHER_API_KEY="any-key")
    assert run.returncode == 1
    steps = [line for line in run.stdout.splitlines() if line.startswith("step")]
    assert [s.split()[1] for s in steps] == ["1", "2"], run.stdout
    assert "OperationFailedError" in run.stderr and "NON_FINITE_LOSS" in run.stderr, run.stderr[-2000:]
    # What the page says to do: remove the rule first.
    remove = re.search(r"\(`(curl -X DELETE localhost:8765/_emulator/faults/nan-loss)`\)", text)
    assert remove is not None


def test_examples_block_copies_and_runs_an_example(tmp_path: Path) -> None:
    with serve_in_thread(Config()) as (url, _runtime):
        run = bash(block("Examples", 0, START).body, tmp_path, TOGETHER_BASE_URL=url, TOGETHER_API_KEY="any-key")
    assert run.returncode == 0, run.stdout + run.stderr
    assert_shows(block("Examples", 1, START).body, run.stdout, drop_sdk=True)
    assert sorted(p.name for p in (tmp_path / "my-examples").iterdir()) == sorted(
        p.name for p in (ROOT / "examples").iterdir() if p.suffix in (".py", ".md"))


def test_manual_clock_block_runs_pasted_as_written(tmp_path: Path) -> None:
    body = block(CONTROL, 0, "control-plane.md").body
    assert body.splitlines()[1].startswith("until curl -sf localhost:8765/_emulator/health")
    port = free_port()
    script = body.replace("together-rl-emulator serve ", f"together-rl-emulator serve --port {port} ", 1)
    run = bash(script.replace("localhost:8765", f"localhost:{port}"), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == block(CONTROL, 1, "control-plane.md").body
    log = (tmp_path / "emulator.log").read_text()
    assert log.startswith("Together RL emulator listening on") and log.rstrip().endswith("together-rl-emulator: stopped"), log


def test_clock_block_runs_pasted_as_written(tmp_path: Path) -> None:
    body = block(CLOCK, 0, "control-plane.md").body
    assert body.splitlines()[1].startswith("until curl -sf localhost:8765/_emulator/health")
    port = free_port()
    script = body.replace("together-rl-emulator serve ", f"together-rl-emulator serve --port {port} ", 1)
    run = bash(script.replace("localhost:8765", f"localhost:{port}"), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == block(CLOCK, 1, "control-plane.md").body


def test_bad_day_block_serves_the_fault_file(tmp_path: Path) -> None:
    (serve,) = commands(block("Rehearse a bad day", 1, FAULTS).body)
    rules = yaml.safe_load(block("Rehearse a bad day", 0, FAULTS).body)
    with started(serve, tmp_path) as url:
        listed = httpx.get(f"{url}/_emulator/faults", timeout=30).json()["data"]
    assert [r["name"] for r in listed] == [r["name"] for r in rules]


def test_scenario_block_runs_pasted_as_written(tmp_path: Path) -> None:
    body = block("Named scenarios", 0, FAULTS).body
    assert "--scenario about-to-expire" in body and body.splitlines()[1].startswith("until curl -sf")
    port = free_port()
    script = body.replace("together-rl-emulator serve ", f"together-rl-emulator serve --port {port} ", 1)
    run = bash(script.replace("localhost:8765", f"localhost:{port}"), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == block("Named scenarios", 1, FAULTS).body  # the same seed: the same id
    assert (tmp_path / "emulator.log").read_text().startswith("Together RL emulator listening on")


def test_record_and_replay_block_commands_start(tmp_path: Path) -> None:
    replay_shipped, serve_recording, replay_file, record = commands(block("Record a demo and replay it", 0, "record-and-replay.md").body)
    with started(replay_shipped, tmp_path) as url:
        assert httpx.get(f"{url}/_emulator/replay", timeout=30).json()["recorded"] > 0
    with started(serve_recording, tmp_path) as url:
        r = httpx.post(f"{url}/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                       headers={"Authorization": "Bearer k"}, timeout=30)
        assert r.status_code == 200
    assert (tmp_path / "demo.jsonl").read_text().count("\n") == 1
    assert "python-httpx" not in (tmp_path / "demo.jsonl").read_text()  # canonical: no client self-description
    with started(replay_file, tmp_path) as url:
        again = httpx.post(f"{url}/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                           headers={"Authorization": "Bearer k"}, timeout=30)
        assert again.status_code == 200 and again.json()["id"] == r.json()["id"]
    assert record[record.index("--upstream") + 1] == "https://api.together.ai"
    with serve_in_thread(Config()) as (upstream, _runtime):
        record[record.index("--upstream") + 1] = upstream  # not the real service: no network in tests
        with started(record, tmp_path) as url:
            assert httpx.get(f"{url}/v1/rl/supported-models", headers={"Authorization": "Bearer k"},
                             timeout=30).status_code == 200
    assert '"/v1/rl/supported-models"' in (tmp_path / "real.jsonl").read_text()


def test_state_file_block_keeps_the_state(tmp_path: Path) -> None:
    (serve,) = commands(block("Keep state across restarts", 0, "persistence.md").body)
    with started(serve, tmp_path) as url:
        made = httpx.post(f"{url}/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                          headers={"Authorization": "Bearer k"}, timeout=30).json()
    assert (tmp_path / ".state" / "emulator.json").is_file()
    with started(serve, tmp_path) as url:
        kept = httpx.get(f"{url}/v1/rl/model-resources/{made['id']}", headers={"Authorization": "Bearer k"},
                         timeout=30)
        assert kept.status_code == 200


def test_limits_file_block_is_a_valid_limits_file(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(block("Transport and errors", 0, "fidelity.md").body)
    runtime = Runtime(Config(limits_file=str(path)))
    assert runtime.limits != Runtime(Config()).limits  # MiniMax-M3 holds 3 LoRA sessions there, not 2


def test_parity_block_records_a_client_through_the_proxy_and_judges_it(tmp_path: Path) -> None:
    """The three commands, the real service played by a local emulator: the quick start's script through the
    proxy, then the verdict, which for an emulator behind the proxy must be FAITHFUL."""
    body = block(PARITY, 0, "record-and-replay.md").body
    record, client, judge = body.splitlines()
    record_args = commands(record)[0]
    assert record_args[record_args.index("--upstream") + 1] == "https://api.together.ai"
    assert record.rstrip().split("  #")[0].endswith("&") and "--port 8766" in record
    (tmp_path / "quickstart.py").write_text(block(FIRST, 3).body)
    key = "sk-a-real-looking-key-0123456789"
    with fresh_emulator() as upstream:
        record_args[record_args.index("--upstream") + 1] = upstream  # not the real service: no network in tests
        with started(record_args, tmp_path) as proxy:
            run = bash(client.replace("http://127.0.0.1:8766", proxy), tmp_path, TOGETHER_API_KEY=key)
            assert run.returncode == 0, run.stdout + run.stderr
            assert "1 2 3 4 -> [5, 6, 7]" in run.stdout
    recording = (tmp_path / "mine.jsonl").read_text()
    assert key not in recording and recording.count("\n") > 40
    verdict = bash(judge, tmp_path)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert verdict.stdout.splitlines()[-1] == ("verdict: FAITHFUL; report: parity-report/summary.md (summary.json, "
                                               "junit.xml)")
    summary = (tmp_path / "parity-report" / "summary.md").read_text()
    assert summary.startswith("# Parity report\n\n**Verdict: FAITHFUL**") and key not in summary


def test_parity_fixture_block_prints_what_readme_shows(tmp_path: Path) -> None:
    run = bash(block(PARITY, 1, "record-and-replay.md").body, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr  # it differs: by design, one alteration
    assert_shows(block(PARITY, 2, "record-and-replay.md").body, run.stdout)
