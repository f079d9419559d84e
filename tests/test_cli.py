"""The command line as a user meets it (issue 27): help, usage errors, every option documented, no
maintainer tools, and Ctrl+C that stops within a second with a dashboard stream open."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from emulator.__main__ import build_parser

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_bare_command_prints_help_and_exits_0() -> None:
    proc = cli()
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("usage: together-rl-emulator") and all(
        c in proc.stdout for c in ("serve", "replay", "record", "examples")), proc.stdout


@pytest.mark.parametrize(("command", "needed"), [("serve", []), ("replay", ["sdk-training-loop"]),
                                                 ("record", ["--upstream", "http://x", "--out", "o.jsonl"]),
                                                 ("examples", [])])
def test_an_unknown_flag_prints_the_subcommands_usage_and_one_sentence(command: str, needed: list[str]) -> None:
    proc = cli(command, *needed, "--no-such-flag")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"usage: together-rl-emulator {command} "), proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"together-rl-emulator {command}: ") and "--no-such-flag" in last, last
    assert f"Try `together-rl-emulator {command} --help`" in last


@pytest.mark.parametrize(("args", "says"), [
    (["serve", "--port", "abc"], "--port: 'abc' is not valid (expected a whole number)"),
    (["serve", "--seed", "1.5"], "--seed: '1.5' is not valid (expected a whole number)"),
    (["serve", "--speed", "fast"], "--speed: 'fast' is not valid (expected a number)"),
    (["replay", "sdk-training-loop", "--port", "abc"], "'abc' is not a port number (0 to 65535)"),
    (["record", "--upstream", "http://x", "--out", "o.jsonl", "--port", "70000"], "'70000' is not a port number"),
    (["record", "--out", "o.jsonl"], "the following arguments are required: --upstream"),
    (["cluster", "--workers", "two"], "'two' is not a number of shards (1 to "),
    (["cluster", "--workers", "0"], "'0' is not a number of shards (1 to "),
    (["cluster", "--port", "-1"], "'-1' is not a port number (0 to 65535)"),
    (["cluster", "--check-interval", "1s"], "'1s' is not a number of milliseconds"),
    (["cluster", "--restart-delay", "nan"], "'nan' is not a number of seconds"),
])
def test_errors_are_one_plain_sentence(args: list[str], says: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    message = [line for line in proc.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert len(message) == 1 and says.lower() in message[0].lower(), proc.stderr
    for python in ("invalid literal", "could not convert", "Traceback", "invalid _port value", "int()"):
        assert python not in proc.stderr, proc.stderr


def test_every_option_of_every_subcommand_is_documented() -> None:
    parser = build_parser()
    (subactions,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert set(subactions.choices) == {"serve", "replay", "record", "parity", "cluster", "examples"}
    for name, sub in subactions.choices.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        text = cli(name, "--help").stdout
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in text, (name, flag)


def test_maintainer_tools_are_not_in_the_user_cli(tmp_path: Path) -> None:
    proc = cli("coverage", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'coverage'" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written into the user's directory


def test_the_coverage_tool_writes_the_checkouts_file_from_anywhere(tmp_path: Path) -> None:
    from emulator.tools import coverage

    assert coverage.OUT == ROOT / "COVERAGE.md"
    before = coverage.OUT.read_text()
    proc = subprocess.run([sys.executable, "-m", "emulator.tools.coverage"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"wrote {coverage.OUT}", proc.stderr
    assert list(tmp_path.iterdir()) == [] and coverage.OUT.read_text() == before


def test_examples_lists_and_copies_without_overwriting(tmp_path: Path) -> None:
    listed = cli("examples")
    assert listed.returncode == 0
    for name in ("supervised", "rl_grpo", "rl_tinker", "bad_day"):
        assert f"  {name} " in listed.stdout, listed.stdout
    proc = cli("examples", "--copy", str(tmp_path / "ex"))
    assert proc.returncode == 0, proc.stderr
    for path in (ROOT / "examples").iterdir():
        assert (tmp_path / "ex" / path.name).read_bytes() == path.read_bytes()
    (tmp_path / "ex" / "supervised.py").write_text("# mine\n")
    again = cli("examples", "--copy", str(tmp_path / "ex"))
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "already there" in again.stderr and (tmp_path / "ex" / "supervised.py").read_text() == "# mine\n"


@pytest.mark.alone
def test_ctrl_c_stops_within_a_second_with_a_dashboard_stream_open() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "serve", "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
        url = line.rsplit(" ", 1)[1].strip()
        with httpx.Client(timeout=30) as client, client.stream("GET", f"{url}/_emulator/ui/api/stream") as stream:
            assert stream.status_code == 200
            next(stream.iter_bytes())  # the stream is open and has sent its first event
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=15)
            took = time.monotonic() - started
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 1.0, f"Ctrl+C took {took:.2f} s"
    assert proc.returncode == 0, err
    # What README's "Command line" shows, with this run's count of open connections.
    readme = (ROOT / "README.md").read_text()
    shown = readme[readme.index("## Command line"):].split("```text\n", 1)[1].split("```", 1)[0]
    said = [line for line in err.splitlines() if line]
    assert [re.sub(r"closing \d+ open", "closing N open", line) for line in said] == [
        re.sub(r"closing \d+ open", "closing N open", line) for line in shown.splitlines()], err
    assert "Traceback" not in err and "ERROR" not in err, err  # the stream ended; nothing was cut off
