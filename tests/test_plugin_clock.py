"""The pytest plugin and ``emulate()`` on the clock (issue 40): the auto clock, ``clock.next()``, ``run_until``,
``pending``, scheduled actions, shipped fault files by name, and a wait on a manual clock that fails in seconds
with one sentence instead of hanging.

The pytest cases run a user's test file in a subprocess (``tests.test_pytest_plugin.pytest_in``); the
``emulate()`` cases run here, in this process's main thread, where the stall guard's signal lands.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from emulator.testing import ClockStalled, EmulatorError, EmulatorServer, emulate
from tests.doc_blocks import block
from tests.test_pytest_plugin import PAGE, pytest_in, readme_block

TIME = "Time in your tests: the auto clock, what is pending, and what happens when"

STALLS = '''
import pytest
from together.post_training import ModelResourcesClient

@pytest.mark.together_emulator(profile="realistic", clock="manual")   # (a marker's clock beats the option)
def test_waits_on_a_manual_clock(together_emulator):
    ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B")   # the SDK waits for READY with no limit
'''

REALISTIC = '''
import pytest
from together.post_training import AdamParams, LossConfig, ModelResourcesClient

TOKENS = [1, 2, 3, 4, 5, 6, 7]
SAMPLE = {"model_input": {"chunks": [{"encoded_text": {"tokens": TOKENS[:-1]}}]},
          "loss_fn_inputs": {"target_tokens": {"data": TOKENS[1:], "dtype": "int64"},
                             "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}}}

def seconds(a, b):
    return (b - a).total_seconds()

@pytest.mark.together_emulator(profile="realistic", clock="auto")
def test_realistic_durations_in_no_wall_time(together_emulator):
    with ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B") as resources:   # default interval: 10 s
        r = resources.retrieve()
        assert seconds(r.created_at, r.updated_at) == 225                           # 45 s queue, 180 s CREATING
        session = resources.create_session(lora_config={"rank": 8})
        for _ in range(3):
            session.trainer.forward_backward(samples=[SAMPLE], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
        checkpoint = session.create_training_checkpoint()
        s = session.retrieve()
        assert seconds(s.created_at, checkpoint.created_at) == pytest.approx(20 + 3 * (0.5012 + 2) + 30.5, abs=1e-3)
        session.stop()

def test_the_option_picks_the_auto_clock(together_emulator):
    assert together_emulator.clock.describe()["mode"] == "auto"
'''

SHIPPED_FAULTS = '''
import pytest

@pytest.mark.together_emulator(faults="nan-storm")
def test_named_fault_file(together_emulator):
    assert [r["name"] for r in together_emulator.faults()] == ["storm", "aftershocks", "custom-loss-nan"]

@pytest.mark.together_emulator(faults="no-such-file")
def test_unknown_fault_file(together_emulator):
    pass
'''


def assert_stalled_within_seconds(out: str) -> None:
    """The stall test failed with the one sentence docs/pytest-and-notebooks.md shows, once the wait had lasted
    `stall_after` (2.5 s), and in seconds: without the guard the SDK's wait has no limit (the run's timeout)."""
    sentence = re.search(r"E +emulator\.testing\.ClockStalled: (.*)", out)
    assert sentence is not None, out[-4000:]
    text = sentence.group(1)
    assert re.fullmatch(
        r"together_emulator: the test waits on model_resources \S+ \(MODEL_RESOURCES_STATUS_PENDING\), but this "
        r"tenant's clock is manual and nothing advanced it for \d+\.\d s; the next transition, model_resources \S+ "
        r"to MODEL_RESOURCES_STATUS_CREATING, is due at 2026-01-01T00:00:45\.000Z \(45 s ahead\): advance the "
        r"clock \(together_emulator\.clock\.next\(\) or \.run_until\(\.\.\.\)\) or use the auto clock "
        r"\(@pytest\.mark\.together_emulator\(clock=\"auto\"\), or --together-emulator-clock=auto\)", text), text
    # The page shows the same sentence (its id and the seconds waited aside).
    shown = block(PAGE, TIME, 1).body.split("\n", 1)[0]
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert re.sub(uuid, "ID", re.sub(r"for \d+\.\d s", "for T s", shown)) == \
        "emulator.testing.ClockStalled: " + re.sub(uuid, "ID", re.sub(r"for \d+\.\d s", "for T s", text))
    waited = re.search(r"nothing advanced it for (\d+\.\d) s", text)
    assert waited is not None and float(waited.group(1)) >= 2.5, text  # not before stall_after
    # (The bound is the guard's, not the machine's speed: 5 s failed once at load 11, a hang takes the 120 s.)
    took = re.search(r"([\d.]+)s call +test_stall\.py::test_waits_on_a_manual_clock", out)
    assert took is not None and float(took.group(1)) < 30, out[-2000:]


# (Each pytest run costs seconds of start-up, so each runs several files. Were the stalled wait to hang,
# the run would time out: two minutes are ample for a failure due after 2.5 s.)

def test_a_wait_nothing_advances_fails_within_seconds_naming_the_transition_and_the_ways_out(tmp_path: Path) -> None:
    """In a thread (the default), with the auto-clock option, its marker, and a shipped fault file by name."""
    proc = pytest_in(tmp_path, {"test_stall.py": STALLS, "test_auto.py": REALISTIC, "test_faults.py": SHIPPED_FAULTS},
                     "--durations=0", "--durations-min=0", "--together-emulator-clock=auto", timeout=120)
    out = proc.stdout
    assert proc.returncode == 1 and "1 failed, 3 passed, 1 error" in out, out[-4000:] + proc.stderr[-2000:]
    assert_stalled_within_seconds(out)
    assert "ERROR test_faults.py::test_unknown_fault_file" in out
    assert "no shipped fault file 'no-such-file' (shipped: bad-day, capacity-crunch" in out


def test_readme_time_example_passes_as_written(tmp_path: Path) -> None:
    """With the emulator in a subprocess (the stall guard then asks over HTTP)."""
    proc = pytest_in(tmp_path, {"test_time.py": readme_block(TIME), "test_stall.py": STALLS}, "--durations=0",
                     "--durations-min=0", "--together-emulator-mode=subprocess", timeout=120)
    assert proc.returncode == 1 and "1 failed, 2 passed" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "FAILED test_stall.py::test_waits_on_a_manual_clock" in proc.stdout
    assert_stalled_within_seconds(proc.stdout)


# --- emulate(), in this process ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> EmulatorServer:
    with EmulatorServer() as running:
        yield running


def test_the_clock_api_moves_to_what_is_pending(server: EmulatorServer) -> None:
    import httpx

    with emulate(server=server, profile="realistic", set_env=False) as emu:
        api = httpx.Client(base_url=emu.url, headers=emu.headers)
        r = api.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
        assert [(p["kind"], p["to"], p["in_seconds"]) for p in emu.clock.pending()] == [
            ("model_resources", "MODEL_RESOURCES_STATUS_CREATING", 45.0)]
        crossed = emu.clock.next()
        assert [(e["id"], e["to"]) for e in crossed] == [(r["id"], "MODEL_RESOURCES_STATUS_CREATING")]
        assert emu.clock.now() == datetime(2026, 1, 1, 0, 0, 45, tzinfo=UTC)
        stop = emu.clock.schedule("stop_resource", id=r, delay=600)   # a dict with an id will do
        assert [a["id"] for a in emu.clock.actions()] == [stop["id"]]
        ready = emu.clock.run_until(r, "READY")
        assert [e["to"] for e in ready] == ["MODEL_RESOURCES_STATUS_READY"]
        with pytest.raises(EmulatorError, match="answered 400: until: .* within max_seconds=60 .*the next pending "
                                                "transition is action"):
            emu.clock.run_until(r, "STOPPED", max_seconds=60)
        assert emu.clock.cancel(stop["id"])["status"] == "cancelled"
        drained = emu.clock.run_until(max_seconds=7200)            # nothing named: until nothing is pending
        assert [e["to"].rsplit("_", 1)[-1] for e in drained] == ["STOPPING", "STOPPED"]
        assert emu.clock.pending() == [] and emu.clock.next() == []
        with pytest.raises(TypeError):
            emu.clock.run_until(r)                                   # a target needs a status or terminal=True
        api.close()


def test_emulate_auto_clock_and_a_stall_on_the_manual_clock(server: EmulatorServer) -> None:
    from together.post_training import ModelResourcesClient

    with emulate(server=server, profile="realistic", clock="auto"):
        with ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=5) as resources:
            r = resources.retrieve()
            assert (r.updated_at - r.created_at).total_seconds() == 225
    with emulate(server=server, profile="realistic", stall_after=0.5) as emu:
        with pytest.raises(ClockStalled, match=r"the test waits on model_resources .* advance the clock"):
            ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=5)
        assert emu.clock.now() == datetime(2026, 1, 1, tzinfo=UTC)   # nothing moved it


def test_one_stall_after_another_is_caught_each_time(server: EmulatorServer) -> None:
    """A guard that fired leaves its (inert) signal handler behind; the next guard takes it over."""
    import signal

    from together.post_training import ModelResourcesClient

    for _ in range(3):
        with emulate(server=server, profile="realistic", stall_after=0.3):
            with pytest.raises(ClockStalled):
                ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=5)
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL   # SIGUSR1 was free each time
