"""The top-level ``fixtures/`` (issue 31): every fixture loads by name and does what its file says, and
every recording is regenerated here and must match the committed bytes. (That the installed wheel
carries them and loads each by name: tests/test_install.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from emulator import fixture_files
from emulator.config import Config, ConfigError
from emulator.faults import FaultSet
from emulator.runtime import Runtime
from emulator.tools.recording import Recorder, RecordingApp, load_recording
from emulator.tools.replay import ReplayApp
from emulator.tools.server import build_server_app
from emulator.tools.testing import serve_app
from tests.conftest import make_client
from tests.helpers import RL, advance, assert_error
from tests.recordings import COMMAND, RECORDINGS, record

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def test_fixtures_come_from_the_top_level_directory() -> None:
    assert Path(str(fixture_files.root())) == FIXTURES
    assert not (ROOT / "emulator" / "fixtures").exists()  # no second copy kept by hand
    for kind in fixture_files.KINDS:
        assert fixture_files.names(kind), kind


def test_every_fixture_has_a_line_in_the_readme() -> None:
    readme = (FIXTURES / "README.md").read_text()
    sections = re.split(r"^## `(\w+)/`", readme, flags=re.M)[1:]
    rows = {kind: re.findall(r"^\| `([\w-]+)` \|", text, re.M) for kind, text in zip(sections[::2], sections[1::2])}
    assert rows == {kind: rows.get(kind) for kind in fixture_files.KINDS}  # a section for each kind
    for kind in fixture_files.KINDS:  # a line for each fixture, and none for a fixture that is not there
        assert sorted(rows[kind]) == fixture_files.names(kind), kind


def test_readme_fault_file_is_bad_day_yaml() -> None:
    """docs/faults-and-scenarios.md shows fixtures/faults/bad-day.yaml whole; the two must not drift apart."""
    from tests.doc_blocks import block, section

    assert "`fixtures/faults/bad-day.yaml`" in section("faults-and-scenarios.md", "Rehearse a bad day")
    assert block("faults-and-scenarios.md", "Rehearse a bad day", 0).body == \
        (FIXTURES / "faults" / "bad-day.yaml").read_text()


@pytest.mark.parametrize("name", fixture_files.names("faults"))
def test_fault_file_loads_by_name_and_by_path(name: str) -> None:
    path = FIXTURES / "faults" / f"{name}.yaml"
    by_name = Runtime(Config(clock="manual", faults_file=name)).faults.describe()
    by_path = Runtime(Config(clock="manual", faults_file=str(path))).faults.describe()
    assert by_name == by_path
    assert [r["name"] for r in by_name] == [r["name"] for r in yaml.safe_load(path.read_text())]


@pytest.mark.parametrize(("field", "flag"), [("faults_file", "--faults"), ("tokens_file", "--tokens-file")])
def test_a_mistyped_name_is_refused_naming_the_shipped_ones(field: str, flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        Runtime(Config(clock="manual", **{field: "bad-dya"}))
    message = str(info.value)
    assert message.startswith(f"{flag} bad-dya: no file 'bad-dya'") and "shipped:" in message


def test_replay_of_a_mistyped_name_is_one_line_and_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "emulator", "replay", "sdk-training-lop", "--port", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "together-rl-emulator: replay: no file 'sdk-training-lop', and no shipped recordings fixture of that name "
        f"(shipped: {', '.join(fixture_files.names('recordings'))})"]


def test_a_path_still_wins_when_it_is_not_a_plain_name(tmp_path: Path) -> None:
    own = tmp_path / "bad-day.yaml"  # the README's way: your own file, named like the shipped one
    own.write_text("- name: mine\n  effect: {status: 503}\n")
    assert [r["name"] for r in Runtime(Config(faults_file=str(own))).faults.describe()] == ["mine"]


def _picks(name: str, operation_id: str, method: str, n: int) -> list[str | None]:
    faults = FaultSet(seed=0)
    faults.load(yaml.safe_load((FIXTURES / "faults" / f"{name}.yaml").read_text()))
    return [(rule or {}).get("name") for rule in (faults.pick(operation_id, method, "/v1/rl/x", "k", None)
                                                  for _ in range(n))]


def test_flaky_network_fails_about_one_call_in_ten_and_slows_a_quarter_of_the_rest() -> None:
    picks = _picks("flaky-network", "getSession", "GET", 2000)
    failed = sum(p in ("gateway-timeout", "bad-gateway", "unavailable") for p in picks)
    slow = picks.count("slow")
    assert 150 <= failed <= 250, failed
    assert 0.2 <= slow / (len(picks) - failed) <= 0.3, slow
    assert _picks("flaky-network", "getSession", "GET", 2000) == picks  # seeded: the same calls every run


def test_nan_storm_fails_forward_backwards_5_to_12_and_about_one_in_ten_of_the_others() -> None:
    picks = _picks("nan-storm", "createForwardBackward", "POST", 1012)
    assert [i + 1 for i, p in enumerate(picks) if p == "storm"] == list(range(5, 13))
    assert 70 <= picks.count("aftershocks") <= 130


def test_nan_storm_through_the_api() -> None:
    runtime = Runtime(Config(clock="manual", faults_file="nan-storm"))
    sample = {"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]},
              "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                                 "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"}}}
    with make_client(runtime) as c:
        r = c.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
        s = c.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"]}).json()
        statuses = []
        for i in range(6):
            op = c.post(f"{RL}/training-sessions/{s['id']}/operations/forward-backward",
                        headers={"Idempotency-Key": str(i)},
                        json={"samples": [sample], "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}).json()
            done = c.get(f"{RL}/training-sessions/{s['id']}/operations/forward-backward/{op['id']}").json()
            statuses.append((done["status"], (done.get("error") or {}).get("code")))
    nan = ("TRAINING_OPERATION_STATUS_FAILED", "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS")
    assert statuses[4:] == [nan, nan]  # the storm
    expected = [nan if p else ("TRAINING_OPERATION_STATUS_COMPLETED", None)
                for p in _picks("nan-storm", "createForwardBackward", "POST", 4)]
    assert statuses[:4] == expected and nan not in expected[:1]  # before it, only seeded stragglers


def test_capacity_crunch_through_the_api() -> None:
    runtime = Runtime(Config(clock="manual", faults_file="capacity-crunch"))
    with make_client(runtime) as c:
        created = [c.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json() for _ in range(9)]
        got = [c.get(f"{RL}/model-resources/{r['id']}").json() for r in created]
        failed = [g for g in got if g["status"] == "MODEL_RESOURCES_STATUS_ERROR"]
        queued = [g for g in got if g["status"] == "MODEL_RESOURCES_STATUS_PENDING"]
        assert failed and queued and len(failed) + len(queued) == 9
        assert {g["error"]["code"] for g in failed} == {"MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT"}
        assert all(g["status_details"]["queue_position"] >= 12 for g in queued)
        advance(c, 3600)
        ready = queued[0]["id"]
        assert c.get(f"{RL}/model-resources/{ready}").json()["status"] == "MODEL_RESOURCES_STATUS_READY"
        codes = [c.post(f"{RL}/training-sessions", json={"model_resources_id": ready}).status_code for _ in range(5)]
        assert 429 in codes and 200 in codes


def test_team_tokens_share_one_project() -> None:
    runtime = Runtime(Config(clock="manual", tokens_file="team", scenario="about-to-expire"))
    build_server_app(runtime)  # loads the scenario, for demo-key: one of the team
    as_ = {who: {"Authorization": f"Bearer {who}-key"} for who in ("alice", "bob", "carol", "stranger")}
    with make_client(runtime, None) as c:
        seeded = [r["id"] for r in c.get(f"{RL}/model-resources", headers=as_["alice"]).json()["data"]]
        assert len(seeded) == 1
        mine = c.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}, headers=as_["alice"]).json()
        assert mine["created_by"] == "alice"
        bobs = c.get(f"{RL}/model-resources", headers=as_["bob"]).json()["data"]
        assert {r["id"] for r in bobs} == {mine["id"], *seeded}
        assert c.get(f"{RL}/model-resources", headers=as_["carol"]).json()["data"] == []
        assert_error(c.get(f"{RL}/model-resources/{mine['id']}", headers=as_["carol"]), 404)
        assert_error(c.get(f"{RL}/model-resources", headers=as_["stranger"]), 401)


# --- recordings ---------------------------------------------------------------------------------------

def test_every_recording_has_the_script_that_makes_it() -> None:
    assert set(fixture_files.names("recordings")) == set(RECORDINGS)


@pytest.mark.sdk
@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_recording_is_regenerated_byte_for_byte_and_replays(name: str, tmp_path: Path) -> None:
    committed = FIXTURES / "recordings" / f"{name}.jsonl"
    fresh = tmp_path / f"{name}.jsonl"
    live = record(name, fresh)
    if fresh.read_bytes() != committed.read_bytes():
        old, new = committed.read_text().splitlines(), fresh.read_text().splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        pytest.fail(f"fixtures/recordings/{name}.jsonl is not what the emulator records now (first difference "
                    f"at exchange {first + 1}; {len(old)} recorded, {len(new)} now). If the change is intended, "
                    f"re-record with {COMMAND}, read the diff and commit it.")
    # Replayed, the recording answers the same client, request for request, and it sees the same run.
    entries = load_recording(str(committed))
    replay = ReplayApp(entries)
    again = tmp_path / "replayed.jsonl"
    recorder = Recorder(str(again), lambda: 0.0, canonical=True)
    with serve_app(RecordingApp(replay, recorder)) as url:
        replayed = RECORDINGS[name].drive(url)
    recorder.close()
    report = replay.report()
    assert {k: report[k] for k in ("recorded", "answered", "unused", "unanswered", "unanswered_total")} == {
        "recorded": len(entries), "answered": len(entries), "unused": 0, "unanswered": [], "unanswered_total": 0}
    assert replayed == live
    # ...byte for byte: what the client sent and got back through the replay is the recording (but the time).
    assert [{**e, "at": None} for e in load_recording(str(again))] == [{**e, "at": None} for e in entries]


def test_recordings_redact_presigned_tokens_and_replay_the_files(tmp_path: Path) -> None:
    out = tmp_path / "plain.jsonl"
    runtime = Runtime(Config(clock="manual", seed=3, scenario="two-sessions-step-40"))
    recorder = Recorder(str(out), runtime.clock.now)
    app = RecordingApp(build_server_app(runtime), recorder)
    headers = {"Authorization": "Bearer demo-key", "User-Agent": "kept-when-not-canonical"}

    def download(url: str) -> list[bytes]:
        with httpx.Client(base_url=url, headers=headers) as c:
            ckpt = next(x["id"] for x in c.get(f"{RL}/checkpoints").json()["data"]
                        if x["type"] == "CHECKPOINT_TYPE_INFERENCE")
            files = c.get(f"{RL}/checkpoints/{ckpt}/download", params={"variant": "CHECKPOINT_VARIANT_ADAPTER"})
            urls = [f["url"] for f in files.json()["data"]]
            return [files.content] + [c.get(u).content for u in urls] + [c.get(urls[0]).content]

    with serve_app(app) as url:
        original = download(url)
        issued = re.findall(r"/_files/checkpoints/([^/]+)/", original[0].decode())
    recorder.close()
    text = out.read_text()
    assert issued and all(token not in text for token in issued)
    entries = load_recording(str(out))
    paths = [e["request"]["path"] for e in entries if e["request"]["path"].startswith("/_files/")]
    assert paths and all(p.startswith("/_files/checkpoints/redacted-token-1/") for p in paths)
    assert entries[0]["request"]["headers"]["user-agent"] == "kept-when-not-canonical"
    with serve_app(ReplayApp(entries)) as url:
        replayed = download(url)
    assert replayed[1:] == original[1:]  # the files, byte for byte, at the redacted URLs
    assert orjson.loads(replayed[0])["data"][0]["url"].startswith(f"{url}/_files/checkpoints/redacted-token-1/")


def test_a_shipped_fault_file_is_added_at_run_time_by_name() -> None:
    """POST /_emulator/faults {"fixture": NAME} adds a shipped file's rules, as --faults NAME does at start."""
    path = fixture_files.named("faults", "flaky-network")
    assert path is not None
    shipped = yaml.safe_load(path.read_text())
    rules = shipped["rules"] if isinstance(shipped, dict) and "rules" in shipped else shipped
    with make_client(Runtime(Config())) as client:
        added = client.post("/_emulator/faults", json={"fixture": "flaky-network"})
        assert added.status_code == 200, added.text
        assert [r["name"] for r in added.json()["data"]] == [r["name"] for r in rules]
        listed = client.get("/_emulator/faults").json()["data"]
        assert [r["name"] for r in listed] == [r["name"] for r in rules]
        for bad in ("no-such-file", "../../etc/passwd", 7):
            err = assert_error(client.post("/_emulator/faults", json={"fixture": bad}), 404)
            assert err["param"] == "fixture" and "bad-day" in err["message"], err
        assert len(client.get("/_emulator/faults").json()["data"]) == len(rules)  # a refused name added nothing
