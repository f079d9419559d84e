"""The example clients of examples/ (issue 27), run as a user runs them: ``python examples/NAME.py`` in a
subprocess against an emulator the test starts (``serve``'s defaults: seed 0, instant profile; the manual
clock, on which the SDK needs no waiting), with ``TOGETHER_BASE_URL`` pointing at it.

Each test checks what the example claims: the loss falls, the reward rises by a margin, the bad day is
survived with the NaN steps skipped; and that examples/README.md quotes the last line each one prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from emulator.config import Config
from emulator.tools.testing import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.sdk


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    with serve_in_thread(Config(clock="manual")) as (url, _runtime):
        yield url


def run_example(name: str, url: str, *args: str, key: str = "examples-key", cwd: Path = ROOT,
                timeout: float = 180) -> list[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TOGETHER_")},
           "TOGETHER_BASE_URL": url, "TOGETHER_API_KEY": key}
    proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", str(EXAMPLES / f"{name}.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stdout.splitlines() if not line.startswith("[")]  # the SDK's progress lines


def table(lines: list[str], first_column: str = "step") -> list[list[str]]:
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    rows = []
    for line in lines[start + 1:]:
        cells = line.split()
        if not line.startswith(" ") or not cells or not cells[0].isdigit():  # rows are right-aligned
            break
        rows.append(cells)
    return rows


def readme_says(name: str) -> str:
    """The 'ends with' cell of examples/README.md's row for ``name``."""
    for line in (EXAMPLES / "README.md").read_text().splitlines():
        if line.startswith(f"| `{name}.py` |"):
            return line.rstrip(" |").rsplit("|", 1)[1].strip().strip("`")
    raise AssertionError(f"examples/README.md has no row for {name}.py")


def session_names(url: str, key: str) -> list[str]:
    r = httpx.get(f"{url}/v1/rl/training-sessions", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return [s.get("display_name", "") for s in r.json()["data"]]


def test_every_example_has_a_test_and_a_readme_row() -> None:
    tested = {n.removeprefix("test_").split("_loss")[0].split("_reward")[0].split("_survives")[0]
              for n in globals() if n.startswith("test_")}
    for path in EXAMPLES.glob("*.py"):
        assert path.stem in tested, f"examples/{path.name} has no test here"
        readme_says(path.stem)


def test_supervised_loss_falls_step_by_step(emulator_url: str, tmp_path: Path) -> None:
    lines = run_example("supervised", emulator_url, "--plot", str(tmp_path / "loss.png"), key="sft-key")
    losses = [float(row[1]) for row in table(lines)]
    assert len(losses) == 20
    assert all(b < a for a, b in zip(losses, losses[1:])), losses  # every step lowers it
    assert losses[-1] < losses[0] / 1000
    assert lines[-2] == readme_says("supervised")
    assert "3 of 3 answers right" in readme_says("supervised")
    assert session_names(emulator_url, "sft-key") == ["sft-three-answers"]
    assert_plotted(lines, tmp_path / "loss.png")


def assert_plotted(lines: list[str], png: Path) -> None:
    pytest.importorskip("matplotlib", reason="the test extra installs matplotlib; this environment lacks it")
    assert lines[-1] == f"wrote {png}" and png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name", ["supervised", "rl_grpo", "rl_tinker"])
def test_without_matplotlib_an_example_says_it_draws_nothing(emulator_url: str, tmp_path: Path, name: str) -> None:
    """matplotlib is optional: without it, --plot is one line saying so, and the run succeeds."""
    png = tmp_path / "curve.png"
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"sys.argv = [{name!r}, '--steps', '2', '--plot', {str(png)!r}]; "
            f"runpy.run_path({str(EXAMPLES / (name + '.py'))!r}, run_name='__main__')")
    env = {**os.environ, "TOGETHER_BASE_URL": emulator_url, "TOGETHER_API_KEY": f"no-plot-{name}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == f"not drawing {png}: matplotlib is not installed (pip install matplotlib)"
    assert not png.exists()


def _rewards(lines: list[str]) -> list[float]:
    return [float(row[1]) for row in table(lines)]


def test_rl_grpo_reward_rises(emulator_url: str, tmp_path: Path) -> None:
    lines = run_example("rl_grpo", emulator_url, "--plot", str(tmp_path / "reward.png"), key="grpo-key")
    assert_plotted(lines, tmp_path / "reward.png")
    lines = lines[:-1]
    rewards = _rewards(lines)
    assert len(rewards) == 20
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.2, rewards
    assert lines[-1] == readme_says("rl_grpo")
    assert session_names(emulator_url, "grpo-key") == ["grpo-even-tokens"]


def test_rl_tinker_reward_rises(emulator_url: str, tmp_path: Path) -> None:
    lines = run_example("rl_tinker", emulator_url, "--plot", str(tmp_path / "reward.png"), key="tinker-key")
    assert_plotted(lines, tmp_path / "reward.png")
    lines = lines[:-1]
    rewards = _rewards(lines)
    assert len(rewards) == 20
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards
    assert lines[-1] == readme_says("rl_tinker")


def test_examples_are_deterministic(emulator_url: str) -> None:
    """The same example against the same seed prints the same numbers (in a fresh tenant)."""
    a = run_example("rl_grpo", emulator_url, "--steps", "3", key="det-a")
    b = run_example("rl_grpo", emulator_url, "--steps", "3", key="det-b")
    assert table(a) == table(b) and table(a)


@pytest.mark.slow
def test_bad_day_survives_the_readmes_fault_file() -> None:
    # The system clock, as `serve --faults bad-day` runs: the SDK really waits out Retry-After. --speed 20 only
    # shortens the GPU queue's virtual seconds.
    with serve_in_thread(Config(faults_file="bad-day", speed=20.0)) as (url, runtime):
        lines = run_example("bad_day", url, key="bad-day-key")
        fired = {e["rule"] for e in runtime.store.events.since(0, None, 10_000) if e.get("type") == "fault"}
        # A reset restarts the rules' counters: the same demo again, step for step (issue 42, item 4).
        httpx.post(f"{url}/_emulator/reset", timeout=30).raise_for_status()
        again = run_example("bad_day", url, key="bad-day-key")
        httpx.delete(f"{url}/_emulator/faults", timeout=30).raise_for_status()
        calm = run_example("bad_day", url, "--steps", "2", key="bad-day-key")
    assert "(the SDK retried 2 answers 429" in lines[0], lines[0]
    steps = [[r[0], r[1], r[-1]] for r in table(lines)]   # (the seconds column is wall time)
    assert [[r[0], r[1], r[-1]] for r in table(again)] == steps, again
    assert again[-1].rsplit(";", 1)[0] == lines[-1].rsplit(";", 1)[0], again
    # With no fault rules there was nothing to retry, and it does not say there was.
    assert calm[0].startswith("resource and session up after") and "retried" not in calm[0], calm[0]
    rows = table(lines)
    assert [r[0] for r in rows if r[1] == "nan"] == ["2", "5", "8"], rows
    assert all(r[-1] == "ok" for r in rows if r[1] != "nan"), "\n".join(lines)
    assert lines[-1].startswith(readme_says("bad_day").removesuffix("..."))
    assert {"gpu-queue", "overloaded", "nan-loss"} <= fired, fired
    losses = [float(r[1]) for r in rows if r[1] != "nan"]
    assert losses == sorted(losses, reverse=True) and len(losses) == 7
