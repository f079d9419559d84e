"""The journal of ``--state-file`` (issues 25 and 26): a line is the size of its change, a refused request writes
nothing, every line is sealed and in sequence, a torn end is cut before the next append, and a write the disk
refuses is undone and answered 503, never half-kept. A property test holds the journal to memory: after any
sequence of requests, the file replays to exactly the state the server holds.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from emulator.store.persistence import StateFile, StateFileError, seal
from tests.conftest import make_client
from tests.full_disk import FullDisk
from tests.helpers import RL, ce_sample, create_resource, ready_resource, run_op, running_session, submit


def _runtime(path: Path, **config: Any) -> Runtime:
    return Runtime(Config(clock="manual", state_file=str(path), **config))


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def _line_sizes_after(path: Path, action: Any) -> list[int]:
    before = len(_lines(path))
    action()
    return [len(line) for line in _lines(path)[before:]]


def _export(runtime: Runtime) -> dict[str, Any]:
    doc = runtime.export_state()
    doc.pop("clock")
    return doc


# --- the size of a line --------------------------------------------------------------------------------

def _patch_line_bytes(tmp_path: Path, live_resources: int, grants: int) -> int:
    runtime = _runtime(tmp_path / f"state-{live_resources}.jsonl")
    with make_client(runtime) as client:
        s = running_session(client)
        for _ in range(live_resources - 1):
            create_resource(client)
        for _ in range(grants):
            assert client.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").status_code == 200
        sizes = _line_sizes_after(runtime.persistence.file.path, lambda: client.patch(
            f"{RL}/training-sessions/{s['id']}", json={"display_name": "renamed"}).raise_for_status())
    assert len(sizes) == 1, sizes
    return sizes[0]


def test_a_patch_journals_one_line_the_size_of_its_change_whatever_the_tenant_holds(tmp_path: Path) -> None:
    small = _patch_line_bytes(tmp_path, 10, 0)
    large = _patch_line_bytes(tmp_path, 1000, 1000)  # and 1,000 open upload URLs (payloads made, not uploaded)
    assert large <= 2 * small, (small, large)
    assert large < 4096, large  # the session and the clock; nothing of the other resources or of the URLs


def test_a_refused_request_writes_nothing(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path / "state.jsonl")
    path = runtime.persistence.file.path
    with make_client(runtime) as client:
        ready_resource(client)
        before = path.read_bytes()
        for _ in range(5):
            assert client.post(f"{RL}/model-resources", json={"base_model": "no/such-model"}).status_code == 400
        assert client.post(f"{RL}/training-sessions", json={"model_resources_id": "nope"}).status_code == 404
    assert path.read_bytes() == before


def test_a_read_writes_nothing_and_its_settling_is_journaled_with_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime = Runtime(Config(clock="manual", profile="realistic", state_file=str(path)))
    with make_client(runtime) as client:
        r = create_resource(client)
        client.post("/_emulator/clock/advance", json={"seconds": 600}).raise_for_status()
        before = path.read_bytes()
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"].endswith("READY")
        assert path.read_bytes() == before  # the read settled PENDING -> CREATING -> READY, and wrote nothing
        create_resource(client)
    restored = _runtime(path, profile="realistic")
    with make_client(restored) as client:
        assert client.get(f"{RL}/model-resources/{r['id']}").json()["status"].endswith("READY")


def _counting_file(runtime: Runtime) -> dict[str, int]:
    """Count what the journal appends (bytes) and how often it is rewritten whole (compactions)."""
    assert runtime.persistence is not None
    file = runtime.persistence.file
    tally = {"appended": 0, "compactions": 0}
    append, write_all = file.append, file.write_all

    def counted_append(change: dict[str, Any], *rest: Any) -> None:
        before = file.size
        append(change, *rest)
        tally["appended"] += file.size - before

    def counted_write_all(doc: dict[str, Any]) -> None:
        write_all(doc)
        tally["compactions"] += 1

    file.append, file.write_all = counted_append, counted_write_all  # type: ignore[method-assign]
    return tally


def _random_step(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    samples = [ce_sample(toks[:1], toks[1:]) for toks in ([rng.randrange(248_000) for _ in range(17)] for _ in range(4))]
    return [("forward-backward", {"samples": samples, "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}),
            ("optim-step", {"adam_params": {"learning_rate": 1e-3}}),
            ("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})]


def test_a_training_loop_journals_what_each_step_changed_not_the_model(tmp_path: Path) -> None:
    """Issue 39, item 1: the model grows with every step of random tokens (~600 trained entries a step here),
    yet a step's lines stay the size of its requests (they carry the calls, not the model, and a weights-sync
    names the model's step), the file is rewritten whole far less often than every step, and the restart
    replays the calls to the same bits: same state, same sampled tokens, same losses."""
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    tally = _counting_file(runtime)
    rng = random.Random(5)
    steps = 100  # (the model holds ~6k trained entries at step 10, ~60k at step 100)
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        per_step = []
        for step in range(1, steps + 1):
            before = tally["appended"]
            for kind, body in _random_step(rng):  # (each runs when the next request settles the session)
                assert submit(client, sid, kind, body).status_code == 200
            per_step.append(tally["appended"] - before)
            if step > 10:
                assert per_step[-1] <= 2 * per_step[9], f"step {step} appended {per_step[-1]} bytes, step 10 {per_step[9]}"
        assert client.get(f"{RL}/training-sessions/{sid}").json()["step"] == str(steps)
        assert tally["compactions"] <= steps // 20, tally
        held = orjson.dumps(_export(runtime))
        shutil.copy(path, tmp_path / "copy.jsonl")  # (as after kill -9: what the file holds now)
        after = [run_op(client, sid, kind, body)["output"] for kind, body in _next_ops()]
    restored = _runtime(tmp_path / "copy.jsonl")
    assert orjson.dumps(_export(restored)) == held
    with make_client(restored) as client:
        assert [run_op(client, sid, kind, body)["output"] for kind, body in _next_ops()] == after


def test_the_file_is_rewritten_once_replaying_its_lines_would_cost_enough_steps_of_the_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second compaction rule: lines of a few steps are small next to the model, but each would be
    replayed at the next start-up at the cost of an optim step of the whole model, so a restart stays bounded."""
    monkeypatch.setattr("emulator.store.persistence.REPLAY_FACTOR", 3)
    monkeypatch.setattr("emulator.store.persistence.REPLAY_MIN_WORK", 0)
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    tally = _counting_file(runtime)
    rng = random.Random(3)
    steps = 12
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        for _ in range(steps):
            for kind, body in _random_step(rng):
                run_op(client, sid, kind, body)
        held = orjson.dumps(_export(runtime))
    assert 2 <= tally["compactions"] <= steps // 3 + 1, tally  # every 3 or 4 steps: the model grows meanwhile
    assert orjson.dumps(_export(_runtime(path))) == held


def test_a_model_that_replays_to_other_numbers_is_said_at_start_up(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A step's line carries a fingerprint of the weights it made: a replay that rounds otherwise (another
    numpy or CPU) goes on from the replayed weights, and start-up says where."""
    path = tmp_path / "state.jsonl"
    with make_client(_runtime(path)) as client:
        sid = running_session(client)["id"]
        for kind, body in _random_step(random.Random(1)):
            run_op(client, sid, kind, body)
    lines = _lines(path)
    number, line = next((n, orjson.loads(x)) for n, x in enumerate(lines, 1) if b'"update"' in x)
    del line["crc"]
    line["model_calls"][sid][-1]["update"]["check"][1] ^= 1
    lines[number - 1] = seal(line).rstrip(b"\n")
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level("WARNING", logger="emulator"):
        _runtime(path)
    assert f"line {number}: session {sid}'s model replays to other numbers at step 1" in caplog.text, caplog.text


def _next_ops() -> list[tuple[str, dict[str, Any]]]:
    """A sample (of tokens the trained model prefers) and a forward pass, to compare two runtimes by."""
    return [("sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [5, 6, 7]}}]}], "num_samples": 4,
                        "sampling_params": {"max_tokens": 8, "temperature": 1.0}}),
            ("forward-backward", {"samples": [ce_sample([5, 6, 7], [8, 9])], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
                                  "forward_only": True, "return_loss_fn_outputs": True})]


# --- integrity ------------------------------------------------------------------------------------------

def _journal_with_lines(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    with make_client(runtime) as client:
        for _ in range(n):
            create_resource(client)
    assert len(_lines(path)) == n + 1
    return path


def test_every_line_is_sealed_with_a_sequence_number_and_a_checksum(tmp_path: Path) -> None:
    path = _journal_with_lines(tmp_path)
    lines = _lines(path)
    seqs = [orjson.loads(line)["seq"] for line in lines]
    assert seqs == list(range(seqs[0], seqs[0] + len(lines)))
    assert all(line.endswith(b'"}') and b',"crc":"' in line for line in lines)


@pytest.mark.parametrize("damage", ["flip a byte", "delete a line", "swap two lines", "repeat a line"])
def test_a_tampered_journal_is_refused_and_left_untouched(tmp_path: Path, damage: str) -> None:
    path = _journal_with_lines(tmp_path)
    lines = _lines(path)
    if damage == "flip a byte":
        lines[2] = lines[2].replace(b"MODEL_RESOURCES_STATUS_PENDING", b"MODEL_RESOURCES_STATUS_READY!!", 1)
    elif damage == "delete a line":
        del lines[2]
    elif damage == "swap two lines":
        lines[2], lines[3] = lines[3], lines[2]
    else:
        lines.insert(3, lines[2])
    tampered = b"\n".join(lines) + b"\n"
    path.write_bytes(tampered)
    with pytest.raises(ConfigError, match="checksum|sequence number"):
        _runtime(path)
    assert path.read_bytes() == tampered


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path: Path) -> None:
    path = _journal_with_lines(tmp_path, 2)
    whole = path.read_bytes()
    torn_line = seal({"seq": 99, "project": "x"})[:25]
    path.write_bytes(whole + torn_line)  # a crash mid-write: that request was never answered
    runtime = _runtime(path)
    assert path.read_bytes() == whole  # cut at start-up, before anything is appended
    with make_client(runtime) as client:
        made = [create_resource(client)["id"] for _ in range(3)]
    restored = _runtime(path)  # loads: no fragment glued to a line
    with make_client(restored) as client:
        for rid in made:
            assert client.get(f"{RL}/model-resources/{rid}").status_code == 200


def _small_journal(tmp_path: Path) -> tuple[bytes, dict[str, Any]]:
    """A journal of three lines (a document, a resource made, the clock moved) and the state it holds."""
    path = tmp_path / "small.jsonl"
    runtime = _runtime(path)
    with make_client(runtime) as client:
        create_resource(client)
        client.post("/_emulator/clock/advance", json={"seconds": 5}).raise_for_status()
    data = path.read_bytes()
    assert data.count(b"\n") == 3
    doc = StateFile(path).load()
    assert doc is not None
    return data, doc


def test_every_single_bit_flip_loads_every_acknowledged_write_or_says_why_not(tmp_path: Path) -> None:
    """Issue 39, item 5: of every single-bit flip of a small journal, the one in the final newline loaded and
    cut the last acknowledged write without a word. A line that verifies against its checksum is whole,
    whatever became of its newline; any other flip refuses the file in a sentence naming the line, or is a
    torn end that start-up reports by line and bytes. None may load less than was acknowledged in silence."""
    data, held = _small_journal(tmp_path)
    path = tmp_path / "flipped.jsonl"
    outcomes: dict[str, int] = {}
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        file = StateFile(path)
        try:
            doc = file.load_bytes(bytes(flipped))
        except StateFileError as exc:
            assert re.search(r"line \d", str(exc)), (bit, str(exc))
            outcomes["refused"] = outcomes.get("refused", 0) + 1
            continue
        assert doc is not None
        if {k: doc.get(k) for k in held} == held:
            outcomes["loaded whole"] = outcomes.get("loaded whole", 0) + 1
            path.write_bytes(flipped)
            file.mend_end()
            again = StateFile(path).load()  # what start-up mended loads the same, and appends follow a newline
            assert again is not None and {k: again.get(k) for k in held} == held, bit
            assert path.read_bytes().endswith(b"\n"), bit
        else:
            assert any(re.search(r"line \d+ \(\d+ bytes\)", note) for note in file.notes), (bit, file.notes)
            outcomes["dropped, said"] = outcomes.get("dropped, said", 0) + 1
    assert outcomes.get("loaded whole", 0) > 0 and sum(outcomes.values()) == len(data) * 8, outcomes


def test_a_whole_last_line_with_a_damaged_newline_is_kept_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                   ) -> None:
    data, held = _small_journal(tmp_path)
    path = tmp_path / "state.jsonl"
    path.write_bytes(data[:-1] + b"\x0b")   # the final newline, one bit flipped
    with caplog.at_level("WARNING", logger="emulator"):
        runtime = _runtime(path)
    assert "line 3's newline is damaged" in caplog.text and "kept" in caplog.text, caplog.text
    assert path.read_bytes() == data
    with make_client(runtime) as client:
        assert len(client.get(f"{RL}/model-resources").json()["data"]) == 1
        create_resource(client)
    assert len(_lines(path)) == 4 and StateFile(path).load() is not None


def test_a_torn_last_line_is_dropped_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data, _ = _small_journal(tmp_path)
    path = tmp_path / "state.jsonl"
    whole = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    path.write_bytes(whole + data[len(whole):-10])  # the last line cut short: a crash mid-write
    with caplog.at_level("WARNING", logger="emulator"):
        _runtime(path)
    cut = len(data) - 10 - len(whole)
    assert f"line 3 ({cut} bytes) is cut short" in caplog.text, caplog.text
    assert path.read_bytes() == whole


# --- one writer per file ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _serve(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "emulator", "serve", "--port", "0", "--state-file", str(path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _listening(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
    return line.rsplit(" ", 1)[1].strip()


def test_a_second_server_on_one_state_file_is_refused_and_kill_9_frees_the_file(tmp_path: Path) -> None:
    """Issue 39, item 4: two servers on one file both acknowledged writes, and the restart refused the file. The
    second is refused now, in one sentence naming the file and the holder; the lock is the kernel's, so after
    kill -9 of the holder a new server starts with nothing to clean up."""
    path = tmp_path / "state.jsonl"
    first = _serve(path)
    try:
        url = _listening(first)
        made = httpx.post(f"{url}{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"},
                          headers={"Authorization": "Bearer test-token"}, timeout=30)
        assert made.status_code == 200, made.text
        second = _serve(path)
        try:
            _, err = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            pytest.fail("a second server on the same state file started")
        assert second.returncode != 0
        said = err.strip().splitlines()
        assert len(said) == 1 and str(path) in said[0] and f"process id {first.pid}" in said[0], err
        assert "Traceback" not in err
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        with make_client(_runtime(path)) as client:  # another process takes the file: nothing to clean up
            assert client.get(f"{RL}/model-resources/{made.json()['id']}").status_code == 200
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_one_process_may_open_its_own_state_file_again(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    with make_client(runtime) as client:
        rid = create_resource(client)["id"]
    with make_client(_runtime(path)) as client:  # (as the tests restore a file, with the first still alive)
        assert client.get(f"{RL}/model-resources/{rid}").status_code == 200


# --- a disk that refuses -----------------------------------------------------------------------------

def test_a_write_the_disk_refuses_is_undone_answered_503_and_never_half_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    disk = FullDisk()
    assert runtime.persistence is not None
    runtime.persistence.file.io = disk
    with make_client(runtime) as client:
        s = running_session(client)
        url = f"{RL}/training-sessions/{s['id']}/operations/forward-backward"
        body = {"samples": [ce_sample([1, 2, 3], [4, 5])], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}
        before = path.read_bytes()
        disk.full = True
        refused = client.post(url, json=body, headers={"Idempotency-Key": "K1"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "storage_unavailable"
        assert refused.headers["retry-after"]
        assert path.read_bytes() == before  # the half line was cut off again
        health = client.get("/_emulator/health")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        assert "No space left" in health.json()["state_file"]["error"]
        # Nothing of the refused request is kept in memory either: the session has no operation, and the key
        # is unused.
        assert client.get(f"{RL}/training-sessions/{s['id']}").json()["step"] == "0"
        disk.full = False
        first = client.post(url, json=body, headers={"Idempotency-Key": "K1"})
        assert first.status_code == 200
        op_id = first.json()["id"]
        assert client.get("/_emulator/health").json()["status"] == "ok"
    restored = _runtime(path)
    with make_client(restored) as client:
        again = client.post(url, json=body, headers={"Idempotency-Key": "K1"})
        assert again.json()["id"] == op_id  # the step ran once, before and after the restart


def test_a_control_plane_write_the_disk_refuses_is_undone_too(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    disk = FullDisk()
    assert runtime.persistence is not None
    runtime.persistence.file.io = disk
    with make_client(runtime) as client:
        r = ready_resource(client)
        disk.full = True
        assert client.post("/_emulator/reset", json={}).status_code == 503
        disk.full = False
        assert client.get(f"{RL}/model-resources/{r['id']}").status_code == 200  # the reset did not happen


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    where = tmp_path / "disk"
    where.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to make a small tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk_refuses_writes_cleanly_and_loses_nothing_acknowledged(small_disk: Path,
                                                                                tmp_path: Path) -> None:
    path = small_disk / "state.jsonl"
    limits = tmp_path / "limits.yaml"  # the metadata below grows past the default bound (16 KiB)
    limits.write_text("session_metadata_kib: 1024\n")
    runtime = _runtime(path, limits_file=str(limits))
    acknowledged: list[str] = []
    with make_client(runtime) as client:
        s = running_session(client)
        refused = 0
        for i in range(400):  # metadata of ~1 KB a write fills 256 KiB
            resp = client.patch(f"{RL}/training-sessions/{s['id']}", json={"metadata": {f"k{i}": "v" * 1000}})
            if resp.status_code == 200:
                acknowledged.append(f"k{i}")
            else:
                assert resp.status_code == 503, resp.text
                refused += 1
        assert refused, "the disk never filled"
        kept = client.get(f"{RL}/training-sessions/{s['id']}").json()["metadata"]
        assert sorted(kept) == sorted(acknowledged)  # memory holds exactly what was acknowledged
    restored = _runtime(path, limits_file=str(limits))
    with make_client(restored) as client:
        assert sorted(client.get(f"{RL}/training-sessions/{s['id']}").json()["metadata"]) == sorted(acknowledged)


def test_a_read_only_state_file_is_refused_at_start_up(small_disk: Path) -> None:
    path = small_disk / "state.jsonl"
    _runtime(path)  # creates it
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if remount.returncode != 0:
        pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
    with pytest.raises(ConfigError, match="cannot be written"):
        _runtime(path)


# --- URLs survive a restart ---------------------------------------------------------------------------

def test_a_download_url_issued_by_a_get_stays_valid_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    runtime = _runtime(path)
    with make_client(runtime) as client:
        s = running_session(client)
        sid = s["id"]
        done = run_op(client, sid, "inference-checkpoint", {})
        ckpt = done["output"]["checkpoint"]["id"]
        files = client.get(f"{RL}/checkpoints/{ckpt}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"}).json()["data"]
        size = len(path.read_bytes())
    assert len(path.read_bytes()) == size
    restored = _runtime(path)  # as after kill -9: nothing more was written
    with make_client(restored) as client:
        got = client.get(files[0]["url"].replace("http://127.0.0.1:8765", ""))
        assert got.status_code == 200 and len(got.content) == int(files[0]["size"])


def test_a_reset_tenant_honours_none_of_its_old_urls(client: TestClient) -> None:
    s = running_session(client)
    url = client.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()["upload_url"]
    client.post("/_emulator/reset", json={}).raise_for_status()
    running_session(client)  # the same seeded ids come back
    resp = client.put(url.replace("http://127.0.0.1:8765", ""), content=b"{}")
    assert resp.status_code == 404, resp.text


def test_a_forged_url_names_nothing(client: TestClient) -> None:
    s = running_session(client)
    url = client.post(f"{RL}/training-sessions/{s['id']}/payloads/upload-url").json()["upload_url"]
    token = url.rsplit("/", 1)[1]
    claim, mac = token.split(".")
    forged = claim + "." + ("A" if mac[0] != "A" else "B") + mac[1:]
    assert client.put(f"/_files/payloads/{forged}", content=b"{}").status_code == 404


# --- the journal is memory ---------------------------------------------------------------------------

ACTIONS = st.lists(st.sampled_from(["resource", "session", "fb", "step", "sync", "sample", "ckpt", "patch",
                                    "stop-session", "stop-resource", "advance", "read", "reset-one", "bad"]),
                   min_size=1, max_size=25)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_the_journal_replays_to_exactly_the_state_held_in_memory(tmp_path_factory: pytest.TempPathFactory,
                                                                  actions: list[str]) -> None:
    path = tmp_path_factory.mktemp("journal") / "state.jsonl"
    runtime = Runtime(Config(clock="manual", profile="realistic", state_file=str(path)))
    with make_client(runtime) as client:
        resources: list[str] = []
        sessions: list[str] = []
        for i, action in enumerate(actions):
            if action == "resource" or not resources:
                resources.append(create_resource(client)["id"])
            elif action == "session":
                resp = client.post(f"{RL}/training-sessions", json={"model_resources_id": resources[-1]})
                if resp.status_code == 200:
                    sessions.append(resp.json()["id"])
            elif action in ("fb", "step", "sync", "sample", "ckpt") and sessions:
                kind, body = {
                    "fb": ("forward-backward", {"samples": [ce_sample([1, 2, 3], [4, 5])],
                                                "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}),
                    "step": ("optim-step", {"adam_params": {"learning_rate": 1e-3}}),
                    "sync": ("weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_BACKGROUND_PUBLISH"}),
                    "sample": ("sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                                          "sampling_params": {"max_tokens": 3}}),
                    "ckpt": ("training-checkpoint", {}),
                }[action]
                client.post(f"{RL}/training-sessions/{sessions[-1]}/operations/{kind}", json=body,
                            headers={"Idempotency-Key": f"k{i % 3}"})
            elif action == "patch" and sessions:
                client.patch(f"{RL}/training-sessions/{sessions[0]}", json={"metadata": {"i": str(i)}})
            elif action == "stop-session" and sessions:
                client.post(f"{RL}/training-sessions/{sessions.pop(0)}/stop")
            elif action == "stop-resource":
                client.post(f"{RL}/model-resources/{resources[0]}/stop", params={"force": "true"})
            elif action == "advance":
                client.post("/_emulator/clock/advance", json={"seconds": 7 * (i + 1)})
            elif action == "read":
                client.get(f"{RL}/model-resources")
            elif action == "reset-one":
                client.post("/_emulator/reset", json={"tenant": "test-token"})
                resources, sessions = [], []
            else:
                client.post(f"{RL}/model-resources", json={"base_model": "nope"})
        held = _export(runtime)
    restored = Runtime(Config(clock="manual", profile="realistic", state_file=str(path)))
    assert _export(restored) == held


def test_kill_9_with_a_filling_disk_loses_no_acknowledged_write_and_keeps_no_refused_one() -> None:
    """bench.crash in small: three kill -9 runs of a server writing from three threads (on a small tmpfs where
    this process may mount one); what was acknowledged is there after each restart, what was refused is not."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bench.crash", "--runs", "3", "--seconds", "1.0"],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON "))
    got = orjson.loads(line.removeprefix("BENCH_JSON "))
    assert got["acked"] > 0
    assert (got["lost"], got["kept_refused"], got["not_loaded"]) == (0, 0, 0), got
